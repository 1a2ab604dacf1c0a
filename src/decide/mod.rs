//! The decisions of a reconcile, pure: what was observed and recorded goes in, the status,
//! the member steps, fences and releases come out (docs/design.md §2, §6).
//!
//! The rule of this folder: no `async`, no client, no module of `reconcile/`, `redis/` or
//! `runtime/` (`tests/tools/pure-check.sh` fails `make check` otherwise), so every decision is
//! table-tested without a control plane. `crate::reconcile` reads, calls these, persists and acts.
//!
//! Its surface: [`decision`] (one reconcile's whole decision: [`decide`]), [`plan`] (member-state transitions, one file per recorded state), [`status`],
//! [`kstatus`] (the conditions GitOps tools read), [`rollout`], [`resize`], [`serving_gate`],
//! [`failure_domains`], [`validate`], [`silences`],
//! [`observe`] (a pod and a probe as a `SlotObservation`), [`at_rest`] (when a cluster may rest).

pub(crate) mod at_rest;
pub(crate) mod children_report;
pub(crate) mod decision;
pub(crate) mod failure_domains;
pub(crate) mod kstatus;
pub mod observe;
pub mod plan;
pub mod resize;
pub(crate) mod rollout;
pub mod serving_gate;
pub mod silences;
pub mod status;
pub mod validate;

pub use children_report::ChildrenReport;
pub use decision::{Decision, Facts, Observation, decide};
