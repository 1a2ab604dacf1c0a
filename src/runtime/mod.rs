//! runtime

pub mod backoff;
pub mod clock_check;
pub mod events;
pub mod heap_trim;
pub mod http;
pub mod leader;
pub mod lease_owner;
pub mod metrics;
pub mod node_zones;
pub mod open_files;
pub mod recorder;
pub mod telemetry;
