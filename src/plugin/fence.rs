//! `kubectl redlock fence` / `unfence`: the new value of the fence annotation, or why the
//! request is refused. Pure; the command patches the annotation with a resourceVersion
//! precondition, so a concurrent edit is never overwritten.

use std::collections::BTreeMap;

use crate::crd::model::{Slot, quorum};
use crate::crd::{MemberState, RedlockCluster};
use crate::hold::maintenance::{self, FENCED_MEMBERS};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("slot {slot} does not exist: {name} has slots 0..{last}", last = .instances - 1)]
    NoSuchSlot { name: String, slot: i32, instances: i32 },
    #[error(
        "refused: with {member} fenced, {serving} of {published} members would serve, below the quorum of {quorum}: no client could take a lock. Pass --force to fence it anyway"
    )]
    BelowQuorum {
        member: String,
        serving: i32,
        published: i32,
        quorum: i32,
    },
    #[error("annotation {FENCED_MEMBERS} on {name} cannot be read ({error}); fix or remove it first")]
    Unreadable { name: String, error: String },
    #[error("a reason is required (--reason \"...\"): it is recorded in status for whoever looks next")]
    NoReason,
}

/// The fenced slots now on record in the annotation.
pub(crate) fn current(cluster: &RedlockCluster) -> Result<BTreeMap<Slot, String>, Refusal> {
    let raw = cluster
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(FENCED_MEMBERS))
        .map(String::as_str)
        .unwrap_or("");
    maintenance::parse(raw).map_err(|error| Refusal::Unreadable {
        name: cluster.metadata.name.clone().unwrap_or_default(),
        error,
    })
}

/// The annotation's slots with `slot` fenced for `reason`. Refused when it leaves fewer
/// serving members than the quorum, unless `force`.
pub(crate) fn fence(
    cluster: &RedlockCluster,
    slot: i32,
    reason: &str,
    force: bool,
) -> Result<BTreeMap<Slot, String>, Refusal> {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let instances = cluster.spec.instances;
    if !(0..instances).contains(&slot) {
        return Err(Refusal::NoSuchSlot {
            name,
            slot,
            instances,
        });
    }
    if reason.trim().is_empty() {
        return Err(Refusal::NoReason);
    }
    let mut slots = current(cluster)?;
    let status = cluster.status.clone().unwrap_or_default();
    let published = status.published_instances.unwrap_or(instances);
    // Clients lock a quorum of the list they are told, which a resize can keep longer than N.
    let q = quorum(published).max(status.quorum.unwrap_or(0));
    let serving = status
        .members
        .iter()
        .filter(|m| {
            m.state == MemberState::Ready
                && m.slot.within(published)
                && m.slot != Slot::new(slot)
                && !slots.contains_key(&m.slot)
        })
        .count() as i32;
    if serving < q && !force {
        return Err(Refusal::BelowQuorum {
            member: crate::children::names::slot_name(&name, slot),
            serving,
            published,
            quorum: q,
        });
    }
    slots.insert(Slot::new(slot), reason.trim().to_owned());
    Ok(slots)
}

/// The annotation's slots without `slot`.
pub(crate) fn unfence(cluster: &RedlockCluster, slot: i32) -> Result<BTreeMap<Slot, String>, Refusal> {
    let mut slots = current(cluster)?;
    slots.remove(&Slot::new(slot));
    Ok(slots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{MemberStatus, RedlockClusterStatus};

    fn cluster(states: &[MemberState], annotation: Option<&str>) -> RedlockCluster {
        let mut c = crate::fixtures::cluster(serde_json::json!({"instances": states.len()}));
        c.status = Some(RedlockClusterStatus {
            members: states
                .iter()
                .enumerate()
                .map(|(i, s)| MemberStatus::new(format!("locks-{i}"), Slot::new(i as i32), *s))
                .collect(),
            ..Default::default()
        });
        if let Some(a) = annotation {
            c.metadata.annotations = Some([(FENCED_MEMBERS.to_owned(), a.to_owned())].into());
        }
        c
    }

    use MemberState::{Held, Ready};

    #[test]
    fn fences_while_a_quorum_still_serves() {
        let c = cluster(&[Ready, Ready, Ready], None);
        assert_eq!(
            fence(&c, 1, " kernel ", false),
            Ok([(Slot::new(1), "kernel".to_owned())].into())
        );
        // A second one would leave 1 of 3.
        let c = cluster(&[Ready, Ready, Ready], Some(r#"{"1":"kernel"}"#));
        let e = fence(&c, 2, "disk", false).unwrap_err();
        assert!(
            matches!(
                e,
                Refusal::BelowQuorum {
                    serving: 1,
                    quorum: 2,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("--force"), "{e}");
        assert_eq!(
            fence(&c, 2, "disk", true),
            Ok([
                (Slot::new(1), "kernel".to_owned()),
                (Slot::new(2), "disk".to_owned())
            ]
            .into())
        );
        // A held member does not count as serving.
        let c = cluster(&[Ready, Held, Ready], None);
        assert!(fence(&c, 0, "x", false).is_err());
        // A scale-down 5 -> 3 with the list of 5 still published: clients need 3 of those 5.
        let mut c = cluster(&[Ready, Ready, Ready, Held, Held], None);
        c.spec.instances = 3;
        let s = c.status.as_mut().unwrap();
        s.published_instances = Some(5);
        s.quorum = Some(2);
        let e = fence(&c, 0, "x", false).unwrap_err();
        assert!(
            matches!(
                e,
                Refusal::BelowQuorum {
                    serving: 2,
                    quorum: 3,
                    published: 5,
                    ..
                }
            ),
            "{e}"
        );
        // Re-fencing a fenced member only changes the reason.
        let c = cluster(&[Ready, Ready, Ready], Some(r#"{"1":"kernel"}"#));
        assert_eq!(
            fence(&c, 1, "firmware", false),
            Ok([(Slot::new(1), "firmware".to_owned())].into())
        );
    }

    #[test]
    fn refuses_bad_requests() {
        let c = cluster(&[Ready, Ready, Ready], None);
        assert!(matches!(
            fence(&c, 3, "x", false),
            Err(Refusal::NoSuchSlot { .. })
        ));
        assert!(matches!(
            fence(&c, -1, "x", false),
            Err(Refusal::NoSuchSlot { .. })
        ));
        assert_eq!(fence(&c, 0, "  ", false), Err(Refusal::NoReason));
        let c = cluster(&[Ready, Ready, Ready], Some("{oops"));
        assert!(matches!(
            fence(&c, 0, "x", false),
            Err(Refusal::Unreadable { .. })
        ));
        assert!(matches!(unfence(&c, 0), Err(Refusal::Unreadable { .. })));
    }

    #[test]
    fn unfence_removes_only_that_slot() {
        let c = cluster(&[Ready, Ready, Ready], Some(r#"{"1":"a","2":"b"}"#));
        assert_eq!(unfence(&c, 1), Ok([(Slot::new(2), "b".to_owned())].into()));
        assert_eq!(
            unfence(&c, 0),
            Ok([(Slot::new(1), "a".to_owned()), (Slot::new(2), "b".to_owned())].into())
        );
    }
}
