//! Pure builders of the objects a RedlockCluster owns, and their names and labels.
//!
//! This folder is everything a cluster owns, pure: one builder per kind, the names and
//! hashes clients and the operator rely on, what the watch caches keep ([`trim`]) and index
//! ([`index`]), and the per-cluster memos ([`memo`], [`versions`], [`spec_hashes`]). The one
//! writer of these objects is `crate::reconcile::apply`.

pub mod index;
pub mod memo;
pub mod spec_hashes;
pub mod trim;
pub mod versions;

pub mod config;
pub mod endpoints;
pub mod hash;
pub mod ledger;
pub mod names;
pub mod network_policy;
pub mod pdb;
pub mod pod;
#[cfg(test)]
pub mod redis_conf_model;
pub mod secrets;
pub mod service;
