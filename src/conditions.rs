//! Merging of standard `metav1.Condition`s: `lastTransitionTime` moves only when a
//! condition's status really flips, so an unchanged cluster produces an identical status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// A condition as computed by a reconcile, before the transition time is decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub type_: &'static str,
    pub status: bool,
    pub reason: &'static str,
    pub message: String,
}

/// Builds the new condition list: one entry per `desired`, in that order, each keeping the
/// old `lastTransitionTime` unless its status changed. `now` is truncated to seconds, the
/// precision the API server stores, so a later comparison sees exactly what was written.
pub fn merge(
    old: &[Condition],
    desired: &[Desired],
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let now = Time(Timestamp::from_second(now.as_second()).expect("seconds of a valid timestamp are valid"));
    desired
        .iter()
        .map(|d| {
            let status = if d.status { "True" } else { "False" }.to_owned();
            let last_transition_time = old
                .iter()
                .find(|c| c.type_ == d.type_ && c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            Condition {
                type_: d.type_.to_owned(),
                status,
                reason: d.reason.to_owned(),
                message: d.message.clone(),
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn desired(status: bool, reason: &'static str) -> Desired {
        Desired {
            type_: "Available",
            status,
            reason,
            message: "m".into(),
        }
    }

    #[test]
    fn new_condition_starts_now_truncated_to_seconds() {
        let now = Timestamp::from_millisecond(10_500).unwrap();
        let c = merge(&[], &[desired(true, "R")], Some(3), now);
        assert_eq!(c[0].last_transition_time, Time(at(10)));
        assert_eq!(c[0].status, "True");
        assert_eq!(c[0].observed_generation, Some(3));
    }

    #[test]
    fn unchanged_status_keeps_transition_time_even_if_reason_changes() {
        let first = merge(&[], &[desired(true, "A")], Some(1), at(10));
        let second = merge(&first, &[desired(true, "B")], Some(2), at(99));
        assert_eq!(second[0].last_transition_time, Time(at(10)));
        assert_eq!(second[0].reason, "B");
    }

    #[test]
    fn flipped_status_moves_transition_time() {
        let first = merge(&[], &[desired(true, "A")], Some(1), at(10));
        let second = merge(&first, &[desired(false, "A")], Some(1), at(99));
        assert_eq!(second[0].last_transition_time, Time(at(99)));
    }

    #[test]
    fn same_input_twice_is_identical() {
        let first = merge(&[], &[desired(true, "A")], Some(1), at(10));
        assert_eq!(merge(&first, &[desired(true, "A")], Some(1), at(50)), first);
    }
}
