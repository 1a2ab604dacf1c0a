//! redlock-operator: runs N independent Redis masters for Redlock clients and enforces the
//! Redlock "delayed restart" rule (see docs/design.md).

pub mod admin_connection;
pub mod apply;
pub mod backoff;
pub mod cache_trim;
pub mod children_memo;
pub mod cli;
pub mod clock;
pub mod clock_check;
pub mod clock_offset;
pub mod conditions;
pub mod context;
pub mod controller;
pub mod crd;
pub mod error;
pub mod events;
pub mod failure_domains;
#[cfg(test)]
pub mod fixtures;
pub mod hold;
pub mod hold_policy;
pub mod hold_timers;
pub mod http;
pub mod instance_index;
pub mod leader;
pub mod maintenance;
pub mod member_clock;
pub mod metrics;
pub mod model;
pub mod observe;
pub mod password_rotation;
pub mod plan;
pub mod plugin;
pub mod probe_connections;
pub mod reasons;
pub mod reconcile;
pub mod redis_admin;
pub mod resize;
pub mod resp;
pub mod resources;
pub mod rollout;
pub mod status;
pub mod telemetry;
pub mod tls_cas;
pub mod ttl_audit;
pub mod validate;
