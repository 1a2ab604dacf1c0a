//! The operator's own connections to its Redis processes, as the admin ACL user (I/O).
//!
//! The rule of this folder: everything the operator says to a Redis process goes through
//! [`admin::AdminAccess`] (probe, guarded release and fence, password changes, TTL sampling); the
//! pure side receives only what came back ([`crate::decide::observe::RedisInfo`],
//! [`crate::decide::observe::ProbeFailure`]) and never a connection.
//!
//! Its surface: [`admin`] (`AdminAccess`, `GuardedError`), [`probe_connections`] (connections
//! kept for probes), [`tls_cas`] (users' CAs). [`connection`] and [`resp`] are how `admin` talks:
//! one connection driven by its caller, RESP2 read in place.

pub mod admin;
pub(crate) mod connection;
pub mod probe_connections;
pub(crate) mod resp;
pub(crate) mod tls_cas;
