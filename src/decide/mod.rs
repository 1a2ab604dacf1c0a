//! decide

pub mod at_rest;
pub mod failure_domains;
pub mod observe;
pub mod plan;
pub mod resize;
pub mod rollout;
pub mod serving_gate;
pub mod silences;
pub mod status;
pub mod validate;
