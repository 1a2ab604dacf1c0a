//! Passwords and their rotations, pure (docs/design.md §8.7, §8.10, §8.11).
//!
//! The rule of this folder: what to do next in a rotation is decided from the records and what the
//! probes saw, with the clock as an argument; the Secrets themselves are built and read back in
//! `crate::children::secrets`, and the passwords are set by `crate::redis::admin`.
//!
//! Its surface: [`client_rotation`] (the client password while lock clients run),
//! [`admin_rotation`] (the operator's own), [`memo`] (the credentials last recovered from a
//! cluster's Secrets).

pub mod admin_rotation;
pub mod client_rotation;
pub(crate) mod memo;
