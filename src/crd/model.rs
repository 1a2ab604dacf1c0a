//! The Redlock vocabulary every layer shares, below all of them: it imports nothing of the
//! crate, so status, rollout, failure domains and the published endpoints can all use it
//! without depending on each other.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A member's place in the cluster: `0` to `N-1` (higher while a removed slot's hold runs
/// out). It names the member's pod, Service and address (`<cluster>-<slot>`) and keys what
/// is known and decided about it. Serialized, displayed and debug-printed as the bare
/// number, so messages that list slots (`members [2] ...`) read as they did when slots were
/// plain integers.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct Slot(i32);

impl Slot {
    pub const fn new(index: i32) -> Self {
        Slot(index)
    }

    /// The bare index, for counting and for the APIs that speak in numbers.
    pub const fn index(self) -> i32 {
        self.0
    }

    /// The slots of a cluster of `instances` members: `0` to `instances - 1`.
    pub fn all(instances: i32) -> impl DoubleEndedIterator<Item = Slot> + Clone {
        Slot::span(0, instances)
    }

    /// The slots from index `from` up to, not including, `to`.
    pub fn span(from: i32, to: i32) -> impl DoubleEndedIterator<Item = Slot> + Clone {
        (from..to).map(Slot)
    }

    /// Whether the slot is one of a cluster of `instances` members.
    pub const fn within(self, instances: i32) -> bool {
        self.0 < instances
    }
}

impl From<i32> for Slot {
    fn from(index: i32) -> Self {
        Slot(index)
    }
}

/// A slot compares with a bare index (`m.slot == 0`, `m.slot >= instances`).
impl PartialEq<i32> for Slot {
    fn eq(&self, index: &i32) -> bool {
        self.0 == *index
    }
}

impl PartialOrd<i32> for Slot {
    fn partial_cmp(&self, index: &i32) -> Option<std::cmp::Ordering> {
        self.0.partial_cmp(index)
    }
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::str::FromStr for Slot {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(Slot)
    }
}

/// Instances a client must lock: a strict majority of all N, whatever is up right now.
pub(crate) fn quorum(instances: i32) -> i32 {
    instances / 2 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_is_a_strict_majority() {
        for (n, q) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4), (99, 50)] {
            assert_eq!(quorum(n), q, "N={n}");
        }
    }
}
