//! Pure builders of the objects a RedlockCluster owns, and their names and labels.

pub mod config;
pub mod endpoints;
pub mod names;
pub mod pdb;
pub mod pod;
pub mod secrets;
pub mod service;
