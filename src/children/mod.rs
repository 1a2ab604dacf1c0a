//! Pure builders of the objects a RedlockCluster owns, and their names and labels.
//!
//! This folder is everything a cluster owns, pure: one builder per kind, the names and
//! hashes clients and the operator rely on, what the watch caches keep ([`trim`]) and index
//! ([`index`]), and the per-cluster memos ([`memo`], [`versions`], [`spec_hashes`]). Every
//! child applied in one pass is built by [`desired`], whose struct the apply step takes apart
//! field by field (a forgotten kind does not compile). The one writer of these objects is
//! `crate::reconcile::apply`.

pub(crate) mod index;
pub(crate) mod memo;
pub(crate) mod spec_hashes;
pub(crate) mod trim;
pub(crate) mod versions;

pub mod config;
pub(crate) mod desired;
pub(crate) mod endpoints;
pub mod hash;
pub(crate) mod ledger;
pub mod names;
pub(crate) mod network_policy;
pub(crate) mod pdb;
pub mod pod;
#[cfg(test)]
pub(crate) mod redis_conf_model;
pub mod secrets;
pub(crate) mod service;
