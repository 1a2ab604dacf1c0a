//! credentials

pub mod admin_rotation;
pub mod client_rotation;
pub mod memo;
