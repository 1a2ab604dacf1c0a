//! What the operator process runs beside its reconciles (I/O): leadership, metrics, events,
//! HTTP, logs, the clock check, and the process's own limits.
//!
//! The rule of this folder: a reconcile reads these services through its `Context`; none of them
//! decides about a cluster's members (that is `crate::decide` and `crate::hold`). The pure parts
//! of a service stay in its file beside it (`leader::decide`, `backoff`, `node_zones`), tested
//! there.
//!
//! Its surface: [`leader`] (`Leadership`, `Elector`), [`lease_owner`] (one leader per cluster
//! across Leases), [`metrics`], [`http`] (`/metrics`, `/healthz`, `/readyz`), [`events`] and
//! [`recorder`] (Kubernetes Events), [`backoff`], [`clock_check`] (`release_blocked`),
//! [`node_zones`], [`telemetry`], [`heap_trim`], [`open_files`].

pub(crate) mod backoff;
pub(crate) mod clock_check;
pub(crate) mod events;
pub(crate) mod heap_trim;
pub(crate) mod http;
pub(crate) mod leader;
pub(crate) mod lease_owner;
pub mod metrics;
pub(crate) mod node_zones;
pub mod open_files;
pub(crate) mod permissions;
pub(crate) mod recorder;
pub mod telemetry;
