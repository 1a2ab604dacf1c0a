//! Pure builders of the objects a RedlockCluster owns, and their names and labels.

pub mod names;
