//! Releases sent ahead of their `Ready` status write (docs/design.md §2, "Releasing ahead of
//! the write"): which may go ahead ([`ending_recorded_holds`], pure), and those whose write has
//! not landed yet ([`Unrecorded`]), planned as the `Ready` records their decision made
//! ([`as_released`], pure) until a write puts them on record.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::jiff::Timestamp;

use crate::crd::model::Slot;
use crate::crd::{MemberState, MemberStatus};

/// The releases in `releases` that end a hold on record in `recorded` for the very process
/// they release: `Held` or `Lost` with a `heldUntil` and the same run id. Not a `Ready` record
/// released again (a crash between its write and its release: confirmed against the stored
/// object first), nor a process the record does not name (a replacement first seen after its
/// hold ran: its `Ready` record is the first to name it), nor a slot whose earlier process
/// outlived its pod and was never seen fenced (§9.5: its release carries a warning, and the
/// `Ready` record that keeps looking for that process must be on record first).
pub fn ending_recorded_holds(recorded: &[MemberStatus], releases: &[(Slot, String)]) -> Vec<(Slot, String)> {
    releases
        .iter()
        .filter(|(slot, run_id)| {
            recorded.iter().any(|m| {
                m.slot == *slot
                    && m.state.is_holding()
                    && m.held_until.is_some()
                    && m.run_id.as_deref() == Some(run_id.as_str())
                    && m.unstopped.as_ref().is_none_or(|u| u.fenced)
            })
        })
        .cloned()
        .collect()
}

/// A release that was answered (ahead of its status write, or after it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    pub slot: Slot,
    pub run_id: String,
    /// When the release was answered.
    pub at: Timestamp,
}

/// A release sent ahead whose status write did not land: the record it ended, exactly as it
/// was stored, and the `Ready` record the decision made for it.
#[derive(Debug, Clone, PartialEq)]
pub struct UnrecordedRelease {
    pub ended: MemberStatus,
    pub ready: MemberStatus,
}

/// For each of `released` (sent ahead), the stored record it ended and the record `planned`
/// for its slot, when that is the `Ready` record of the same process (it always is: a release
/// is planned with it).
pub fn unrecorded(
    stored: &[MemberStatus],
    planned: &[MemberStatus],
    released: &[Released],
) -> Vec<UnrecordedRelease> {
    released
        .iter()
        .filter_map(|r| {
            let of = |m: &&MemberStatus| m.slot == r.slot && m.run_id.as_deref() == Some(r.run_id.as_str());
            let ended = stored.iter().find(|m| of(m) && m.state.is_holding())?;
            let ready = planned.iter().find(|m| of(m) && m.state == MemberState::Ready)?;
            Some(UnrecordedRelease {
                ended: ended.clone(),
                ready: ready.clone(),
            })
        })
        .collect()
}

/// `members` with each record that is still exactly the one a release ended (its write refused
/// or failed) replaced by the `Ready` record the release's decision made: the process serves
/// clients, and every rule that reads a `Held` record as "seen fenced" (a pod that vanishes, a
/// process that outlived its pod) must see it serving. Any other record (a newer write, a new
/// process, a new hold of the same process) is left as it is.
pub fn as_released(members: &[MemberStatus], unrecorded: &[UnrecordedRelease]) -> Vec<MemberStatus> {
    members
        .iter()
        .map(|m| match unrecorded.iter().find(|u| u.ended == *m) {
            Some(u) => u.ready.clone(),
            None => m.clone(),
        })
        .collect()
}

/// Per cluster UID, what this leadership sent ahead of a status write that has not landed
/// (releases here, fences in `crate::hold::fence_ahead`). Only ever this leadership's: an operator
/// that loses its lease exits, and its successor times every hold again and re-fences what it
/// finds serving inside one (§2).
pub struct KeptUntilWritten<T> {
    by_uid: Mutex<HashMap<String, Vec<T>>>,
}

impl<T> Default for KeptUntilWritten<T> {
    fn default() -> Self {
        KeptUntilWritten {
            by_uid: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone> KeptUntilWritten<T> {
    /// Changes what is kept for `uid` (created empty if nothing is).
    pub fn update(&self, uid: &str, change: impl FnOnce(&mut Vec<T>)) {
        let mut by_uid = self
            .by_uid
            .lock()
            .expect("kept-until-written lock is never poisoned");
        change(by_uid.entry(uid.to_owned()).or_default());
    }

    pub fn of(&self, uid: &str) -> Vec<T> {
        self.by_uid
            .lock()
            .expect("kept-until-written lock is never poisoned")
            .get(uid)
            .cloned()
            .unwrap_or_default()
    }

    /// A status write planned from what is kept landed: it is on record now.
    pub fn recorded(&self, uid: &str) {
        self.by_uid
            .lock()
            .expect("kept-until-written lock is never poisoned")
            .remove(uid);
    }
}

/// The releases sent ahead whose status write has not landed.
pub type Unrecorded = KeptUntilWritten<UnrecordedRelease>;

/// Per cluster UID, the processes (slot, run id) whose release this leadership decided and has
/// not yet seen serving (`plan::Timing::owed_releases`): a `Ready` record of one found fenced is
/// a release still to send (it failed, or is on its way); any other `Ready` process found
/// fenced was fenced outside this process and is held in full (safety review 3, N1). Lost on
/// restart by design: a successor holds such a process in full, one hold for that member.
pub(crate) type OwedReleases = KeptUntilWritten<(Slot, String)>;

impl OwedReleases {
    /// Adds the releases a decision made.
    pub fn owe(&self, uid: &str, releases: &[(Slot, String)]) {
        if !releases.is_empty() {
            self.update(uid, |owed| {
                for r in releases {
                    if !owed.contains(r) {
                        owed.push(r.clone());
                    }
                }
            });
        }
    }

    /// Keeps for `uid` only `still_owed` (what the last observation did not settle).
    pub fn settle(&self, uid: &str, still_owed: Vec<(Slot, String)>) {
        if still_owed.is_empty() {
            self.recorded(uid);
        } else {
            self.update(uid, |owed| *owed = still_owed);
        }
    }
}

impl Unrecorded {
    /// Adds releases whose write did not land.
    pub fn keep(&self, uid: &str, released: Vec<UnrecordedRelease>) {
        if !released.is_empty() {
            self.update(uid, |kept| kept.extend(released));
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    use super::*;
    use crate::crd::UnstoppedProcess;

    fn member(slot: i32, state: MemberState, run: Option<&str>, until: Option<i64>) -> MemberStatus {
        MemberStatus {
            run_id: run.map(str::to_owned),
            held_until: until.map(|s| MicroTime(Timestamp::from_second(s).unwrap())),
            hold_started_at: until.map(|s| MicroTime(Timestamp::from_second(s - 30).unwrap())),
            ..MemberStatus::new(format!("locks-{slot}"), slot, state)
        }
    }

    fn unstopped(fenced: bool) -> Option<UnstoppedProcess> {
        Some(UnstoppedProcess {
            run_id: "u".into(),
            pod_ip: "10.0.0.9".into(),
            listener: None,
            fenced,
            ..Default::default()
        })
    }

    #[test]
    fn only_a_hold_recorded_for_the_released_process_may_be_released_ahead() {
        let recorded = [
            member(0, MemberState::Held, Some("a"), Some(100)),
            member(1, MemberState::Lost, Some("b"), Some(100)),
            // A replacement first seen after its hold: the record names the lost process.
            member(2, MemberState::Lost, Some("old"), Some(100)),
            // Released again after a crash between the Ready write and the release.
            member(3, MemberState::Ready, Some("d"), None),
            // No deadline on record: unknown means unsafe, never ahead.
            member(4, MemberState::Held, Some("e"), None),
            member(5, MemberState::Held, None, Some(100)),
            // An earlier process outlived its pod and was never seen fenced: write first.
            MemberStatus {
                unstopped: unstopped(false),
                ..member(6, MemberState::Held, Some("g"), Some(100))
            },
            // One seen fenced grants nothing: ahead.
            MemberStatus {
                unstopped: unstopped(true),
                ..member(7, MemberState::Held, Some("h"), Some(100))
            },
        ];
        let releases: Vec<(Slot, String)> = [
            (0, "a"),
            (1, "b"),
            (2, "new"),
            (3, "d"),
            (4, "e"),
            (5, "f"),
            (6, "g"),
            (7, "h"),
            (8, "i"),
        ]
        .into_iter()
        .map(|(s, r)| (Slot::new(s), r.to_owned()))
        .collect();
        assert_eq!(
            ending_recorded_holds(&recorded, &releases),
            vec![
                (Slot::new(0), "a".to_owned()),
                (Slot::new(1), "b".to_owned()),
                (Slot::new(7), "h".to_owned())
            ]
        );
        // A record of another slot never counts.
        assert!(ending_recorded_holds(&recorded[..1], &[(Slot::new(1), "a".to_owned())]).is_empty());
    }

    fn released(slot: i32, run: &str) -> Released {
        Released {
            slot: Slot::new(slot),
            run_id: run.into(),
            at: Timestamp::from_second(101).unwrap(),
        }
    }

    #[test]
    fn a_release_whose_write_did_not_land_is_planned_as_the_ready_record_it_made() {
        let stored = [
            MemberStatus {
                unstopped: unstopped(true),
                pod_ip: Some("10.0.0.1".into()),
                ..member(0, MemberState::Held, Some("a"), Some(100))
            },
            member(1, MemberState::Held, Some("b"), Some(100)),
            member(2, MemberState::Held, Some("c"), Some(100)),
        ];
        let ready = |slot, run| MemberStatus {
            since: Some(MicroTime(Timestamp::from_second(100).unwrap())),
            pod_ip: Some("10.0.0.1".into()),
            ..member(slot, MemberState::Ready, Some(run), None)
        };
        let planned = [
            ready(0, "a"),
            ready(1, "b"),
            member(2, MemberState::Held, Some("c"), Some(100)),
        ];
        // Slot 1's release was not sent ahead; slot 2 was not planned Ready: neither is kept.
        let pending = unrecorded(&stored, &planned, &[released(0, "a"), released(2, "c")]);
        assert_eq!(
            pending,
            vec![UnrecordedRelease {
                ended: stored[0].clone(),
                ready: planned[0].clone(),
            }]
        );
        // Planned from: the decision's own Ready record, verbatim (no vanished predecessor
        // carried over), while the stored record is still the one the release ended.
        let next = as_released(&stored, &pending);
        assert_eq!(next[0], planned[0]);
        assert_eq!(next[0].unstopped, None);
        assert_eq!(&next[1..], &stored[1..]);
        // A newer record of the same process (a new hold: maintenance, a clock jump) or of
        // another process is left as it is.
        let newer = [
            member(0, MemberState::Held, Some("a"), Some(160)),
            stored[1].clone(),
            stored[2].clone(),
        ];
        assert_eq!(as_released(&newer, &pending), newer.to_vec());
    }

    #[test]
    fn unrecorded_releases_are_kept_until_a_write_lands() {
        let u = Unrecorded::default();
        let r = |slot| UnrecordedRelease {
            ended: member(slot, MemberState::Held, Some("r"), Some(100)),
            ready: member(slot, MemberState::Ready, Some("r"), None),
        };
        u.keep("x", Vec::new());
        assert!(u.of("x").is_empty());
        u.keep("x", vec![r(0)]);
        u.keep("x", vec![r(1)]);
        assert_eq!(u.of("x"), vec![r(0), r(1)]);
        assert!(u.of("y").is_empty());
        u.recorded("x");
        assert!(u.of("x").is_empty());
    }
}
