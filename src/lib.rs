//! redlock-operator: runs N independent Redis masters for Redlock clients and enforces the
//! Redlock "delayed restart" rule (see docs/design.md).

pub mod children;
pub mod cli;
pub mod clock;
pub mod controller;
pub mod crd;
pub mod credentials;
pub mod decide;
pub mod error;
#[cfg(test)]
pub mod fixtures;
pub mod hold;
pub mod plugin;
pub mod reconcile;
pub mod redis;
pub mod runtime;
