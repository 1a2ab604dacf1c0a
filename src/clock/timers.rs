//! Deadlines this operator process has timed itself (docs/design.md §9.1).
//!
//! A recorded `heldUntil` or `lowersAt` was computed on *some* operator's wall clock: this
//! process's, a previous leader's (whose clock may have been 20 s slow), or this process's
//! before its clock was stepped. None of that may end a hold early. So a process ends a
//! running hold (or a pending maxLockTTL lowering) only once it has itself seen it run for its
//! full length, counted from when it first saw it, plus every forward step of its wall clock
//! since then. Recorded deadlines stay lower bounds too: the later of both wins.
//!
//! The cost is bounded: a leader change (or an operator restart) lengthens each hold running
//! at that moment by at most one hold; steady operation costs nothing (a hold this process
//! started ends exactly at its recorded time).
//!
//! Pure: [`ClusterTimers`] is a value; `decide` derives the next one, `reconcile` keeps it once
//! the status it belongs to is on record.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::clock::Reading;
use crate::crd::model::Slot;
use crate::hold::held_until;

/// What a timer times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TimerKey {
    /// The hold of a slot that started at this time (`holdStartedAt`): a restarted hold is a
    /// new timer.
    Hold { slot: Slot, started: Timestamp },
    /// The pending lowering of the maxLockTTL in force (`status.hold.lowersAt`).
    Lowering,
}

/// When this process first saw a deadline, on its own clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Anchor {
    seen: Timestamp,
    skipped: Duration,
}

/// The timers of one cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterTimers {
    anchors: BTreeMap<TimerKey, Anchor>,
}

impl ClusterTimers {
    pub const fn new() -> Self {
        Self {
            anchors: BTreeMap::new(),
        }
    }

    /// The earliest this process lets `key` end, for a deadline of `length`: `length` after it
    /// first saw it (now, if this is the first time), plus the wall clock's forward steps
    /// since then.
    pub fn earliest_end(&self, key: TimerKey, length: Duration, now: Reading) -> Timestamp {
        let a = self.anchors.get(&key).copied().unwrap_or(Anchor {
            seen: now.wall,
            skipped: now.skipped,
        });
        held_until(a.seen, length + now.skipped.saturating_sub(a.skipped))
    }

    /// Whether this process has timed `key` before (a deadline it did not see start is one it
    /// inherited: from another leader, or from before a restart).
    pub fn knows(&self, key: TimerKey) -> bool {
        self.anchors.contains_key(&key)
    }

    /// The timers for exactly `keys`: the known ones keep their anchor, new ones start `now`.
    pub fn next(&self, keys: impl IntoIterator<Item = TimerKey>, now: Reading) -> ClusterTimers {
        ClusterTimers {
            anchors: keys
                .into_iter()
                .map(|k| {
                    let a = self.anchors.get(&k).copied().unwrap_or(Anchor {
                        seen: now.wall,
                        skipped: now.skipped,
                    });
                    (k, a)
                })
                .collect(),
        }
    }

    /// These timers and those of `earlier` they do not have: what a reconcile whose status
    /// write did not land keeps (the holds it decided were first seen by this process then,
    /// and those on record still run). An anchor only says when this process first saw a
    /// deadline, so keeping more never shortens one.
    pub fn merged(mut self, earlier: &ClusterTimers) -> ClusterTimers {
        for (k, a) in &earlier.anchors {
            self.anchors.entry(*k).or_insert(*a);
        }
        self
    }

    /// These timers with `key` first seen at `seen` (replacing what was known of it).
    pub fn with_anchor(mut self, key: TimerKey, seen: Reading) -> ClusterTimers {
        self.anchors.insert(
            key,
            Anchor {
                seen: seen.wall,
                skipped: seen.skipped,
            },
        );
        self
    }

    pub fn len(&self) -> usize {
        self.anchors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.anchors.is_empty()
    }
}

/// Every cluster's timers, by cluster UID (a re-created cluster of the same name starts with
/// none: its holds are all inherited).
#[derive(Debug, Default)]
pub(crate) struct HoldTimers {
    clusters: Mutex<HashMap<String, ClusterTimers>>,
}

impl HoldTimers {
    pub fn get(&self, uid: &str) -> ClusterTimers {
        self.lock().get(uid).cloned().unwrap_or_default()
    }

    /// Keeps `timers` for the cluster, once the status they belong to is on record.
    pub fn keep(&self, uid: &str, timers: ClusterTimers) {
        let mut all = self.lock();
        if timers.is_empty() {
            all.remove(uid);
        } else {
            all.insert(uid.to_owned(), timers);
        }
    }

    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ClusterTimers>> {
        self.clusters.lock().expect("timer lock is never poisoned")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }
    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }
    fn at(s: i64, skipped: u64) -> Reading {
        Reading {
            wall: t(s),
            skipped: secs(skipped),
        }
    }
    const HOLD: Duration = Duration::from_secs(31);
    fn key(slot: i32) -> TimerKey {
        TimerKey::Hold {
            slot: Slot::new(slot),
            started: t(0),
        }
    }

    #[test]
    fn an_unseen_deadline_runs_in_full_from_now() {
        let timers = ClusterTimers::default();
        assert!(!timers.knows(key(1)));
        // A hold recorded (by a leader whose clock was 20 s behind) to end at t(11): this
        // process, at t(15), lets it end no earlier than t(46).
        assert_eq!(timers.earliest_end(key(1), HOLD, at(15, 0)), t(46));
    }

    #[test]
    fn a_known_deadline_keeps_its_anchor() {
        let timers = ClusterTimers::default().next([key(1)], at(15, 0));
        assert!(timers.knows(key(1)));
        assert_eq!(timers.earliest_end(key(1), HOLD, at(40, 0)), t(46));
        // Kept across the next reconcile; a key no longer in use is dropped.
        let timers = timers.next([key(1), key(2)], at(40, 0));
        assert_eq!(timers.earliest_end(key(1), HOLD, at(41, 0)), t(46));
        assert_eq!(timers.earliest_end(key(2), HOLD, at(41, 0)), t(71));
        let timers = timers.next([key(2)], at(41, 0));
        assert!(!timers.knows(key(1)));
        assert_eq!(timers.len(), 1);
    }

    #[test]
    fn merged_timers_keep_every_anchor_the_newer_first() {
        let earlier = ClusterTimers::default().next([key(1), key(2)], at(10, 0));
        let next = earlier.next([key(2), key(3)], at(20, 0));
        let merged = next.clone().merged(&earlier);
        assert_eq!(merged.len(), 3);
        assert_eq!(merged.earliest_end(key(1), HOLD, at(21, 0)), t(41));
        assert_eq!(merged.earliest_end(key(2), HOLD, at(21, 0)), t(41));
        assert_eq!(merged.earliest_end(key(3), HOLD, at(21, 0)), t(51));
        assert_eq!(ClusterTimers::default().merged(&next), next);
    }

    #[test]
    fn forward_steps_since_the_anchor_push_the_end_back() {
        let timers = ClusterTimers::default().next([key(1)], at(0, 5));
        // The wall clock stepped 20 s forward (skipped 5 -> 25): the end moves by 20 s.
        assert_eq!(timers.earliest_end(key(1), HOLD, at(30, 25)), t(51));
        // Steps before the anchor do not count.
        assert_eq!(timers.earliest_end(key(1), HOLD, at(30, 5)), t(31));
    }

    #[test]
    fn a_longer_length_lengthens_the_end() {
        let timers = ClusterTimers::default().next([TimerKey::Lowering], at(0, 0));
        assert_eq!(
            timers.earliest_end(TimerKey::Lowering, secs(61), at(10, 0)),
            t(61)
        );
    }

    #[test]
    fn real_time_between_anchor_and_end_is_never_less_than_the_length() {
        // Exhaustive over step patterns: monotonic time m (s), a wall clock that starts with
        // offset o and is stepped forward by f and back by b at chosen moments. A deadline
        // anchored at m=a ends when the wall clock reaches earliest_end: the real time elapsed
        // since the anchor is always >= HOLD.
        for o in [-20i64, 0, 20] {
            for (step_at, fwd, back) in [(5u64, 20u64, 0u64), (10, 0, 30), (3, 7, 7), (40, 60, 0)] {
                for anchor_m in [0u64, 4, 6, 12] {
                    let wall_at = |m: u64| -> (i64, u64) {
                        // (wall seconds, skipped seconds) at monotonic m
                        if m >= step_at {
                            (o + m as i64 + fwd as i64 - back as i64, fwd)
                        } else {
                            (o + m as i64, 0)
                        }
                    };
                    let (w, s) = wall_at(anchor_m);
                    let timers = ClusterTimers::default().next([key(0)], at(w, s));
                    let released = (anchor_m..anchor_m + 200).find(|&m| {
                        let (w, s) = wall_at(m);
                        timers.earliest_end(key(0), HOLD, at(w, s)) <= t(w)
                    });
                    let released = released.expect("ends within 200 s");
                    assert!(
                        released - anchor_m >= HOLD.as_secs(),
                        "o={o} step_at={step_at} fwd={fwd} back={back} anchor={anchor_m}: ended after {} s",
                        released - anchor_m
                    );
                }
            }
        }
    }

    #[test]
    fn the_store_keeps_per_cluster_and_forgets() {
        let store = HoldTimers::default();
        store.keep("a", ClusterTimers::default().next([key(1)], at(0, 0)));
        assert!(store.get("a").knows(key(1)));
        assert!(store.get("b").is_empty());
        store.keep("a", ClusterTimers::default());
        assert!(store.get("a").is_empty());
        store.keep("a", ClusterTimers::default().next([key(1)], at(0, 0)));
        store.forget("a");
        assert!(store.get("a").is_empty());
    }
}
