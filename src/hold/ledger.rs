//! The ledger: the third record of which process each slot ran (docs/design.md §9.5), kept
//! outside the status and outside the pods, in the `<name>-ledger` ConfigMap. Pure.
//!
//! The status records each member's process, and a replacement pod records the process its
//! predecessor left behind (`children::pod::UNSTOPPED_PREDECESSOR`). Neither survives a status
//! wiped (or restored from a backup) *before* any reconcile saw a cut-off pod vanish: its pod is
//! gone, no replacement exists yet, and the status is empty, so the slot looks new while its
//! old process may still grant locks on a node cut off from the API server (the model check's
//! third finding). The ledger names, per slot, the last process the operator identified there,
//! and no process is let in to lock clients before the ledger on the API server names it
//! ([`names`]). So every process that may serve is in the ledger, or in a record that names
//! a later one; where the status has no word of a slot whose pod is gone, planning takes the
//! ledger's process back as a process that outlived its pod (`plan::unrecorded`).

use std::collections::BTreeMap;

use crate::crd::model::Slot;
use crate::crd::{MemberStatus, UnstoppedProcess};

/// The last process the operator identified on each slot: its run id, address, listener, pod
/// and node, as a process that outlived its pod would be recorded (`fenced` always false).
pub type Ledger = BTreeMap<Slot, UnstoppedProcess>;

/// The ledger to keep: `current` with each slot's entry replaced by the process its planned
/// record is about, once that process is identified (run id and address known); entries of
/// slots at or above `instances` that no record keeps are dropped (a removed slot is not
/// published again without a new record, which is then the authority).
///
/// Written early, as soon as a held process is identified, so that its release (a hold later)
/// finds it on record and is not delayed by it.
pub(crate) fn desired(current: Option<&Ledger>, members: &[MemberStatus], instances: i32) -> Ledger {
    let mut ledger = current.cloned().unwrap_or_default();
    ledger.retain(|slot, _| slot.within(instances) || members.iter().any(|m| m.slot == *slot));
    for m in members {
        if let Some(entry) = m.process_record() {
            ledger.insert(m.slot, entry);
        }
    }
    ledger
}

/// Whether `ledger` names process `run_id` on `slot`: the condition of its release.
pub fn names(ledger: Option<&Ledger>, slot: Slot, run_id: &str) -> bool {
    ledger
        .and_then(|l| l.get(&slot))
        .is_some_and(|e| e.run_id == run_id)
}

/// The ledger as the ConfigMap stores it (one JSON object, slot → process).
pub(crate) fn to_json(ledger: &Ledger) -> String {
    serde_json::to_string_pretty(ledger).unwrap_or_default()
}

/// The ledger a ConfigMap stores; an error for anything but what [`to_json`] writes.
pub(crate) fn from_json(text: &str) -> Result<Ledger, String> {
    serde_json::from_str(text).map_err(|e| format!("not a ledger: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::MemberState;

    fn member(slot: i32, run_id: Option<&str>, ip: Option<&str>) -> MemberStatus {
        MemberStatus {
            run_id: run_id.map(Into::into),
            pod_ip: ip.map(Into::into),
            pod_uid: Some(format!("uid-{slot}")),
            node: Some("n1".into()),
            ..MemberStatus::new(format!("locks-{slot}"), slot, MemberState::Held)
        }
    }

    fn entry(run_id: &str, ip: &str) -> UnstoppedProcess {
        UnstoppedProcess {
            run_id: run_id.into(),
            pod_ip: ip.into(),
            listener: None,
            fenced: false,
            pod_uid: None,
            node: None,
        }
    }

    #[test]
    fn an_identified_process_replaces_its_slots_entry_and_an_unidentified_one_keeps_it() {
        let current = Ledger::from([
            (Slot::new(0), entry("old0", "10.0.0.1")),
            (Slot::new(1), entry("old1", "10.0.0.2")),
        ]);
        let members = [member(0, Some("new0"), Some("10.0.0.9")), member(1, None, None)];
        let d = desired(Some(&current), &members, 2);
        assert_eq!(d[&Slot::new(0)].run_id, "new0");
        assert_eq!(d[&Slot::new(0)].pod_ip, "10.0.0.9");
        assert_eq!(d[&Slot::new(0)].pod_uid.as_deref(), Some("uid-0"));
        assert_eq!(d[&Slot::new(1)], entry("old1", "10.0.0.2"));
        // A run id without an address is not enough to look for it: the old entry stays.
        let d = desired(Some(&current), &[member(0, Some("new0"), None)], 2);
        assert_eq!(d[&Slot::new(0)].run_id, "old0");
    }

    #[test]
    fn a_removed_slot_leaves_the_ledger_once_no_record_keeps_it() {
        let current = Ledger::from([
            (Slot::new(0), entry("a", "10.0.0.1")),
            (Slot::new(3), entry("d", "10.0.0.4")),
        ]);
        let kept = desired(Some(&current), &[member(3, None, None)], 1);
        assert!(
            kept.contains_key(&Slot::new(3)),
            "a slot still on record keeps its entry"
        );
        let dropped = desired(Some(&current), &[], 1);
        assert_eq!(dropped.keys().copied().collect::<Vec<_>>(), [Slot::new(0)]);
        // No ledger yet (an upgrade, a deleted ConfigMap): built from the records alone.
        let fresh = desired(None, &[member(0, Some("r"), Some("10.0.0.1"))], 1);
        assert_eq!(fresh.len(), 1);
    }

    #[test]
    fn a_release_needs_the_ledger_to_name_that_very_process() {
        let l = Ledger::from([(Slot::new(0), entry("a", "10.0.0.1"))]);
        assert!(names(Some(&l), Slot::new(0), "a"));
        assert!(!names(Some(&l), Slot::new(0), "b"), "another process of the slot");
        assert!(!names(Some(&l), Slot::new(1), "a"), "another slot");
        assert!(!names(None, Slot::new(0), "a"), "no ledger");
    }

    #[test]
    fn the_stored_form_reads_back_and_anything_else_is_refused() {
        let l = Ledger::from([(Slot::new(2), entry("a", "10.0.0.1"))]);
        assert_eq!(from_json(&to_json(&l)), Ok(l));
        assert!(from_json("{\"x\": 1}").is_err());
        assert!(from_json("").is_err());
    }
}
