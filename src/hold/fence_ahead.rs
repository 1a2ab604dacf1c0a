//! Fences sent ahead of their status write (docs/design.md §6, "Fences ahead of the write"):
//! the fences of a decision whose write did not land ([`UnrecordedFence`], [`unrecorded`]),
//! planned as the records their decision made ([`as_fenced`], pure) until a write puts them
//! on record, and the processes they name ([`processes`]), which no rule releases meanwhile.
//!
//! A fence only ever shuts clients out, so it goes as soon as it is decided: a refused status
//! write (an admission policy, a 409 storm) or a watch cache that lags must not leave a
//! process serving inside a hold. What made the write come first was the rule "`Ready`, same
//! process, still fenced → released again" (a crash between a `Ready` write and its release):
//! planned from the stored record, it would undo a fence whose hold is not on record. So this
//! leadership remembers each such fence and
//!
//! - plans its slot from the record the fence's decision made, while the stored record is still
//!   exactly the one that decision was planned from ([`as_fenced`]): the hold runs from the
//!   fence, not from the stored record's end, and the next write that lands carries it;
//! - releases no process it fenced until a write that holds it has landed: the planner gets
//!   [`processes`] (`plan::Timing::fenced_unrecorded`), and a `Ready` record of such a process
//!   (the stored record was changed by someone else) is held in full instead of released again.
//!
//! Only ever this leadership's: an operator that loses its lease exits. A successor plans from
//! the stored records, as if the fence had never been sent (what a crash before the write did
//! before fences went ahead): it times every running hold again in full from when it first
//! sees it (§9.1), which covers a re-fence of a `Held` member, and re-fences what it finds
//! serving inside one. A fence ahead of its write can make no window longer than waiting for
//! the write did; it makes the one this leadership controls end at once.

use crate::crd::MemberStatus;
use crate::crd::model::Slot;
use crate::hold::release_ahead::KeptUntilWritten;

/// A fence sent ahead of a status write that did not land: the process it shut out, the
/// record its slot was planned from (`None`: no record), and the record the decision made.
#[derive(Debug, Clone, PartialEq)]
pub struct UnrecordedFence {
    pub slot: Slot,
    pub run_id: String,
    pub from: Option<MemberStatus>,
    /// `None` when the decision keeps no record of the slot.
    pub held: Option<MemberStatus>,
}

/// For each of `fences` (slot, run id) of a decision, the record its slot was planned from
/// (`planned_from`) and the record the decision made for it (`planned`).
pub fn unrecorded(
    planned_from: &[MemberStatus],
    planned: &[MemberStatus],
    fences: &[(Slot, String)],
) -> Vec<UnrecordedFence> {
    let of = |members: &[MemberStatus], slot: Slot| members.iter().find(|m| m.slot == slot).cloned();
    fences
        .iter()
        .map(|(slot, run_id)| UnrecordedFence {
            slot: *slot,
            run_id: run_id.clone(),
            from: of(planned_from, *slot),
            held: of(planned, *slot),
        })
        .collect()
}

/// `members` with each record that is still exactly the one a fence's decision was planned
/// from replaced by the record that decision made, in the order the fences were sent (a later
/// fence was planned from an earlier one's record). A slot the decision was planned without a
/// record of gets the decision's record if it still has none. Any other record (a newer write,
/// someone else's) is left as it is.
pub fn as_fenced(members: &[MemberStatus], fences: &[UnrecordedFence]) -> Vec<MemberStatus> {
    let mut members = members.to_vec();
    for f in fences {
        let Some(held) = &f.held else {
            continue;
        };
        match &f.from {
            Some(from) => {
                if let Some(m) = members.iter_mut().find(|m| *m == from) {
                    *m = held.clone();
                }
            }
            None if !members.iter().any(|m| m.slot == f.slot) => {
                members.push(held.clone());
                members.sort_by_key(|m| m.slot);
            }
            None => {}
        }
    }
    members
}

/// The processes (slot, run id) of `fences`: none of them is released until a write that holds
/// it lands.
pub fn processes(fences: &[UnrecordedFence]) -> Vec<(Slot, String)> {
    let mut all: Vec<(Slot, String)> = fences.iter().map(|f| (f.slot, f.run_id.clone())).collect();
    all.sort();
    all.dedup();
    all
}

/// Per cluster UID, the fences sent ahead whose status write has not landed.
pub type UnrecordedFences = KeptUntilWritten<UnrecordedFence>;

impl UnrecordedFences {
    /// Adds fences whose write did not land (after those kept before: [`as_fenced`] applies them
    /// in this order). A fence of the same process planned from a kept one's record (fenced
    /// again: let in once more while writes fail) takes that one's place with its own record,
    /// which [`as_fenced`] would have applied after it anyway: one entry per process, however
    /// long writes fail.
    pub fn keep(&self, uid: &str, fences: Vec<UnrecordedFence>) {
        if fences.is_empty() {
            return;
        }
        self.update(uid, |kept| {
            for f in fences {
                let earlier = kept.iter_mut().find(|e| {
                    e.slot == f.slot && e.run_id == f.run_id && e.held.is_some() && e.held == f.from
                });
                match earlier {
                    Some(e) => e.held = f.held,
                    None => kept.push(f),
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::crd::MemberState;

    fn member(slot: i32, state: MemberState, run: &str, until: Option<i64>) -> MemberStatus {
        MemberStatus {
            run_id: Some(run.to_owned()),
            held_until: until.map(|s| MicroTime(Timestamp::from_second(s).unwrap())),
            ..MemberStatus::new(format!("locks-{slot}"), slot, state)
        }
    }

    fn slot(s: i32) -> Slot {
        Slot::new(s)
    }

    #[test]
    fn a_fence_remembers_the_record_it_was_planned_from_and_the_one_it_made() {
        let from = [
            member(0, MemberState::Ready, "a", None),
            member(1, MemberState::Held, "b", Some(100)),
        ];
        let planned = [
            member(0, MemberState::Held, "a", Some(160)),
            member(1, MemberState::Held, "b", Some(170)),
            member(2, MemberState::Lost, "c", Some(170)),
        ];
        let fences = unrecorded(
            &from,
            &planned,
            &[
                (slot(0), "a".into()),
                (slot(2), "c".into()),
                (slot(3), "d".into()),
            ],
        );
        assert_eq!(
            fences,
            vec![
                UnrecordedFence {
                    slot: slot(0),
                    run_id: "a".into(),
                    from: Some(from[0].clone()),
                    held: Some(planned[0].clone()),
                },
                UnrecordedFence {
                    slot: slot(2),
                    run_id: "c".into(),
                    from: None,
                    held: Some(planned[2].clone()),
                },
                UnrecordedFence {
                    slot: slot(3),
                    run_id: "d".into(),
                    from: None,
                    held: None,
                },
            ]
        );
        assert_eq!(
            processes(&fences),
            vec![
                (slot(0), "a".into()),
                (slot(2), "c".into()),
                (slot(3), "d".into())
            ]
        );
    }

    #[test]
    fn a_fence_whose_write_did_not_land_is_planned_as_the_record_it_made() {
        // A clock jump fenced slot 0 (Ready -> Held); a re-fence restarted slot 1's hold; a
        // removed slot 3 without a record got one.
        let stored = [
            member(0, MemberState::Ready, "a", None),
            member(1, MemberState::Held, "b", Some(100)),
            member(2, MemberState::Ready, "c", None),
        ];
        let jumped = member(0, MemberState::Held, "a", Some(160));
        let refenced = member(1, MemberState::Held, "b", Some(170));
        let removed = member(3, MemberState::Held, "d", Some(170));
        let fences = vec![
            UnrecordedFence {
                slot: slot(0),
                run_id: "a".into(),
                from: Some(stored[0].clone()),
                held: Some(jumped.clone()),
            },
            UnrecordedFence {
                slot: slot(1),
                run_id: "b".into(),
                from: Some(stored[1].clone()),
                held: Some(refenced.clone()),
            },
            UnrecordedFence {
                slot: slot(3),
                run_id: "d".into(),
                from: None,
                held: Some(removed.clone()),
            },
        ];
        assert_eq!(
            as_fenced(&stored, &fences),
            vec![
                jumped.clone(),
                refenced.clone(),
                stored[2].clone(),
                removed.clone()
            ]
        );
        // A second fence of slot 1, planned from the first one's record: applied after it.
        let again = member(1, MemberState::Held, "b", Some(190));
        let mut chained = fences.clone();
        chained.push(UnrecordedFence {
            slot: slot(1),
            run_id: "b".into(),
            from: Some(refenced.clone()),
            held: Some(again.clone()),
        });
        assert_eq!(as_fenced(&stored, &chained)[1], again);
        // A newer record (a write that landed, someone else's edit) is left as it is, and a
        // slot that has a record meanwhile gets none added.
        let newer = [
            member(0, MemberState::Ready, "a", Some(1)),
            member(1, MemberState::Lost, "b", Some(300)),
            stored[2].clone(),
            member(3, MemberState::Lost, "x", Some(300)),
        ];
        assert_eq!(as_fenced(&newer, &fences), newer.to_vec());
    }

    #[test]
    fn unrecorded_fences_are_kept_in_order_until_a_write_lands() {
        let f = UnrecordedFences::default();
        let fence = |s: i32| UnrecordedFence {
            slot: slot(s),
            run_id: "r".into(),
            from: None,
            held: None,
        };
        f.keep("x", Vec::new());
        assert!(f.of("x").is_empty());
        f.keep("x", vec![fence(1)]);
        f.keep("x", vec![fence(0)]);
        assert_eq!(f.of("x"), vec![fence(1), fence(0)]);
        assert!(f.of("y").is_empty());
        f.recorded("x");
        assert!(f.of("x").is_empty());
    }

    /// A process let in and fenced again and again while writes fail keeps one entry, which
    /// plans as the chain of its fences would.
    #[test]
    fn a_process_fenced_again_keeps_one_entry() {
        let f = UnrecordedFences::default();
        let stored = vec![member(0, MemberState::Held, "r", Some(100))];
        let first = member(0, MemberState::Held, "r", Some(150));
        let second = member(0, MemberState::Held, "r", Some(170));
        let fence = |from: &MemberStatus, held: &MemberStatus| UnrecordedFence {
            slot: slot(0),
            run_id: "r".into(),
            from: Some(from.clone()),
            held: Some(held.clone()),
        };
        f.keep("x", vec![fence(&stored[0], &first)]);
        f.keep("x", vec![fence(&first, &second)]);
        assert_eq!(f.of("x"), vec![fence(&stored[0], &second)]);
        assert_eq!(as_fenced(&stored, &f.of("x")), vec![second.clone()]);
        // Another process of the slot, fenced from that record, is an entry of its own.
        let other = UnrecordedFence {
            run_id: "q".into(),
            ..fence(&second, &member(0, MemberState::Held, "q", Some(200)))
        };
        f.keep("x", vec![other.clone()]);
        assert_eq!(f.of("x"), vec![fence(&stored[0], &second), other]);
        assert_eq!(
            processes(&f.of("x")),
            vec![(slot(0), "q".into()), (slot(0), "r".into())]
        );
    }
}
