//! redis

pub mod admin;
pub mod connection;
pub mod probe_connections;
pub mod resp;
pub mod tls_cas;
