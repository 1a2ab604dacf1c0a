//! Pure builders of the objects a RedlockCluster owns, and their names and labels.

pub mod index;
pub mod memo;
pub mod spec_hashes;
pub mod trim;
pub mod versions;

pub mod config;
pub mod endpoints;
pub mod hash;
pub mod names;
pub mod network_policy;
pub mod pdb;
pub mod pod;
#[cfg(test)]
pub mod redis_conf_model;
pub mod secrets;
pub mod service;
