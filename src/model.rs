//! The Redlock vocabulary every layer shares, below all of them: it imports nothing of the
//! crate, so status, rollout, failure domains and the published endpoints can all use it
//! without depending on each other.

/// Instances a client must lock: a strict majority of all N, whatever is up right now.
pub fn quorum(instances: i32) -> i32 {
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
