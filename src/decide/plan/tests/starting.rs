//! Slots without a process yet: no record of the slot (`unrecorded`), or `Starting`; and new
//! slots of a new cluster or a scale-up.

use super::*;

/// What observe says of a container whose image cannot be pulled.
const NOT_PULLED: &str = "image redis:7.4 cannot be pulled; the pod's events say why";

#[test]
fn starting_members() {
    let since_now = micro(at(NOW));
    run(vec![
        // 1: new slot, no pod: `Starting` on record, then the pod; no hold.
        Case::new(
            "no record, no pod",
            None,
            missing(),
            MemberStatus {
                since: since_now.clone(),
                ..starting(0)
            },
        )
        .create()
        .events(&[(MemberReason::InstanceCreated, false)]),
        Case::new(
            "starting, pod not there yet",
            Some(starting(0)),
            missing(),
            starting(0),
        )
        .create(),
        Case::new(
            "starting, pod pending: the record says why",
            Some(starting(0)),
            not_running("cannot be placed: 0/3 nodes are available"),
            MemberStatus {
                message: Some("cannot be placed: 0/3 nodes are available".into()),
                ..starting(0)
            },
        ),
        // An image that cannot be pulled: the record says so, and a Warning tells it once.
        Case::new(
            "starting, image cannot be pulled: told",
            Some(starting(0)),
            not_running(NOT_PULLED),
            MemberStatus {
                message: Some(NOT_PULLED.into()),
                ..starting(0)
            },
        )
        .events(&[(MemberReason::ImagePullFailed, true)]),
        Case::new(
            "starting, image still cannot be pulled: not told again",
            Some(MemberStatus {
                message: Some(NOT_PULLED.into()),
                ..starting(0)
            }),
            not_running(NOT_PULLED),
            MemberStatus {
                message: Some(NOT_PULLED.into()),
                ..starting(0)
            },
        ),
        Case::new(
            "starting, process not answering yet",
            Some(starting(0)),
            unreachable("c1"),
            starting(0),
        ),
        // The first process of a slot: nothing proves no earlier process of this name
        // granted locks that are still valid (delete and re-create, a wiped status), so it
        // is held in full from when it is first seen.
        Case::new(
            "starting, fenced process up: held in full",
            Some(starting(0)),
            running("R", false, "c1"),
            MemberStatus {
                since: since_now.clone(),
                ..held(0, "R", "c1", hold_from_now())
            },
        )
        .msg("first process of the slot; held in full")
        .events(&[(MemberReason::HoldStarted, false)])
        .next(HOLD),
        // Clients got in without a release (an edited ACL Secret): fenced, held in full.
        Case::new(
            "starting, process already enabled: fenced and held",
            Some(starting(0)),
            running("R", true, "c1"),
            MemberStatus {
                since: since_now.clone(),
                ..held(0, "R", "c1", hold_from_now())
            },
        )
        .msg("fenced again")
        .fence("R")
        .events(&[(MemberReason::Refenced, true)])
        .next(HOLD),
        Case::new(
            "starting, pod failed",
            Some(starting(0)),
            finished("Failed (Evicted)"),
            starting(0),
        )
        .delete(),
    ]);
}

/// 18: a pod without a record is unknown, and unknown means unsafe.
#[test]
fn unknown_processes() {
    let u = hold_from_now();
    let fresh = |state| MemberStatus {
        held_until: micro(u),
        hold_started_at: micro(at(NOW)),
        since: micro(at(NOW)),
        ..record(0, state)
    };
    const STARTED: &[(MemberReason, bool)] = &[(MemberReason::HoldStarted, false)];
    run(vec![
        Case::new(
            "no record, fenced process",
            None,
            running("Q", false, "c1"),
            MemberStatus {
                run_id: Some("Q".into()),
                container_id: Some("c1".into()),
                ..fresh(MemberState::Held)
            },
        )
        .msg(format!(
            "unknown process (no record of this slot); held until {u}"
        ))
        .events(STARTED)
        .next(HOLD),
        Case::new(
            "no record, process not answering",
            None,
            unreachable("c1"),
            MemberStatus {
                container_id: Some("c1".into()),
                ..fresh(MemberState::Held)
            },
        )
        .msg("unknown process")
        .events(STARTED)
        .next(HOLD),
        Case::new(
            "no record, pod pending",
            None,
            not_running("pending (not started)"),
            fresh(MemberState::Lost),
        )
        .msg("unknown process")
        .events(STARTED)
        .next(HOLD),
        Case::new(
            "no record, pod failed",
            None,
            finished("Failed (Evicted)"),
            fresh(MemberState::Lost),
        )
        .msg("unknown process")
        .delete()
        .events(STARTED)
        .next(HOLD),
        // Someone released it; fencing it now would not undo what it served.
        Case::new(
            "no record, process already serving",
            None,
            running("Q", true, "c1"),
            MemberStatus {
                since: micro(at(NOW)),
                message: Some("adopted a process that already serves clients".into()),
                ..ready(0, "Q", "c1")
            },
        ),
    ]);
}

/// 1
#[test]
fn new_cluster_starts_every_slot() {
    let p = plan(&input(3, &[], at(NOW)), &BTreeMap::new());
    let want: Vec<_> = (0..3)
        .map(|s| MemberStatus {
            since: micro(at(NOW)),
            ..starting(s)
        })
        .collect();
    assert_eq!(p.members, want);
    assert_eq!(p.create_pods, vec![0, 1, 2]);
    assert!(p.delete_pods.is_empty() && p.releases.is_empty());
    assert_eq!(
        reasons(&p),
        vec![
            (0, MemberReason::InstanceCreated),
            (1, MemberReason::InstanceCreated),
            (2, MemberReason::InstanceCreated)
        ]
    );
    assert_eq!(p.events[2].message, "creating locks-2");
    assert_eq!(p.next_hold_end, None);
}

/// 21
#[test]
fn scale_up_starts_new_slots() {
    let members: Vec<_> = (0..3).map(|s| ready(s, "R", &format!("c{s}"))).collect();
    let obs = observed((0..3).map(|s| (s, running("R", true, &format!("c{s}")))));
    let p = plan(&input(5, &members, at(NOW)), &obs);
    assert_eq!(&p.members[..3], &members[..]);
    for s in 3..5 {
        assert_eq!(
            p.members[s as usize],
            MemberStatus {
                since: micro(at(NOW)),
                ..starting(s)
            }
        );
    }
    assert_eq!(p.create_pods, vec![3, 4]);
    assert_eq!(
        reasons(&p),
        vec![
            (3, MemberReason::InstanceCreated),
            (4, MemberReason::InstanceCreated)
        ]
    );
    assert!(p.releases.is_empty() && p.delete_pods.is_empty());
    assert_eq!(p.next_hold_end, None);
}
