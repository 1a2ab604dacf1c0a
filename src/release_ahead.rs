//! Releases sent ahead of their `Ready` status write (docs/design.md §2, "Releasing ahead of
//! the write"): which may go ahead ([`ending_recorded_holds`], pure), and those whose write has
//! not landed yet ([`Unrecorded`]), planned as the `Ready` records they are
//! ([`as_released`], pure) until a write puts them on record.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

use crate::crd::{MemberState, MemberStatus};
use crate::hold::floor_micros;
use crate::model::Slot;

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

/// `members` with each record that still holds a process released ahead (its write refused
/// or failed) replaced by the `Ready` record the release made it: the process serves clients,
/// and every rule that reads a `Held` record as "seen fenced" (a pod that vanishes, a process
/// that outlived its pod) must see it serving. A record no longer about that process (a newer
/// write, a new process) is left as it is.
pub fn as_released(members: &[MemberStatus], released: &[Released]) -> Vec<MemberStatus> {
    members
        .iter()
        .map(|m| {
            let r = released.iter().find(|r| {
                r.slot == m.slot && m.state.is_holding() && m.run_id.as_deref() == Some(r.run_id.as_str())
            });
            match r {
                Some(r) => MemberStatus {
                    state: MemberState::Ready,
                    held_until: None,
                    hold_started_at: None,
                    refused_since: None,
                    message: None,
                    since: Some(MicroTime(floor_micros(r.at))),
                    ..m.clone()
                },
                None => m.clone(),
            }
        })
        .collect()
}

/// Per cluster UID, the releases sent ahead whose status write has not landed. Only ever this
/// leadership's: an operator that loses its lease exits, and its successor times every hold
/// again and re-fences what it finds serving inside one (§2).
#[derive(Default)]
pub struct Unrecorded {
    by_uid: Mutex<HashMap<String, Vec<Released>>>,
}

impl Unrecorded {
    /// Adds releases whose write did not land.
    pub fn keep(&self, uid: &str, released: Vec<Released>) {
        if released.is_empty() {
            return;
        }
        self.by_uid
            .lock()
            .expect("release lock is never poisoned")
            .entry(uid.to_owned())
            .or_default()
            .extend(released);
    }

    pub fn of(&self, uid: &str) -> Vec<Released> {
        self.by_uid
            .lock()
            .expect("release lock is never poisoned")
            .get(uid)
            .cloned()
            .unwrap_or_default()
    }

    /// A status write planned from [`as_released`] records landed: they are on record now.
    pub fn recorded(&self, uid: &str) {
        self.by_uid
            .lock()
            .expect("release lock is never poisoned")
            .remove(uid);
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn a_release_whose_write_did_not_land_is_planned_as_the_ready_record_it_made() {
        let at = Timestamp::from_second(101).unwrap();
        let released = [
            Released {
                slot: Slot::new(0),
                run_id: "a".into(),
                at,
            },
            // Its record is about another process now: left as it is.
            Released {
                slot: Slot::new(1),
                run_id: "b".into(),
                at,
            },
        ];
        let members = [
            MemberStatus {
                unstopped: unstopped(false),
                pod_ip: Some("10.0.0.1".into()),
                ..member(0, MemberState::Held, Some("a"), Some(100))
            },
            member(1, MemberState::Held, Some("b2"), Some(130)),
            member(2, MemberState::Held, Some("c"), Some(100)),
        ];
        let planned = as_released(&members, &released);
        let m = &planned[0];
        assert_eq!(m.state, MemberState::Ready);
        assert_eq!(m.run_id.as_deref(), Some("a"));
        assert_eq!((m.held_until.as_ref(), m.hold_started_at.as_ref()), (None, None));
        assert_eq!(m.since.as_ref().unwrap().0, at);
        // Still looked for where it ran, as any released member's vanished predecessor.
        assert_eq!(m.unstopped, unstopped(false));
        assert_eq!(m.pod_ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(planned[1], members[1]);
        assert_eq!(planned[2], members[2]);
    }

    #[test]
    fn unrecorded_releases_are_kept_until_a_write_lands() {
        let u = Unrecorded::default();
        let r = |slot| Released {
            slot: Slot::new(slot),
            run_id: format!("r{slot}"),
            at: Timestamp::from_second(1).unwrap(),
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
