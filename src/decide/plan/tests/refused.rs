//! A released member whose address refuses connections while its pod runs: `Lost` at once
//! (`refusedSince`), nothing held, and planned as the `Ready` member it stands for, so that a
//! refusal that was not a crash (something rejecting the operator alone) changes no decision.

use super::*;

const ADDR: &str = "10.0.0.5";

/// The kubelet still shows the container running; the process's port refuses connections.
fn refused(container: &str) -> SlotObservation {
    SlotObservation {
        probe: Probe::Refused("Connection refused (os error 111)".into()),
        ..unreachable(container)
    }
}

/// The released record, with the address its process answered at.
fn serving() -> MemberStatus {
    MemberStatus {
        pod_ip: Some(ADDR.into()),
        ..ready(0, "R", "c1")
    }
}

/// `serving()` presumed crashed since `t`.
fn presumed(t: i64) -> MemberStatus {
    MemberStatus {
        state: MemberState::Lost,
        refused_since: micro(at(t)),
        since: micro(at(t)),
        message: Some("refused".into()),
        ..serving()
    }
}

#[test]
fn a_refusal_while_the_pod_runs_is_shown_lost_and_decides_nothing() {
    let u = hold_from_now();
    let lost_now = MemberStatus {
        since: micro(at(NOW)),
        ..lost(0, u)
    };
    run(vec![
        Case::new(
            "ready, refused while its pod runs: Lost, nothing held, same process on record",
            Some(serving()),
            refused("c1"),
            presumed(NOW),
        )
        .msg("process R refuses connections (Connection refused (os error 111)) while its pod shows the container running: presumed crashed, not serving"),
        Case::new(
            "presumed crashed, still refused: the record stands (no write per period)",
            Some(presumed(T0)),
            refused("c1"),
            presumed(T0),
        )
        .msg("presumed crashed"),
        Case::new(
            "presumed crashed, the same process answers again: Ready, nothing held",
            Some(presumed(T0)),
            running("R", true, "c1"),
            MemberStatus {
                since: micro(at(NOW)),
                ..serving()
            },
        ),
        Case::new(
            "presumed crashed, the same process answers fenced, its release owed: released again, as a Ready member would be",
            Some(presumed(T0)),
            running("R", false, "c1"),
            MemberStatus {
                since: micro(at(NOW)),
                ..serving()
            },
        )
        .owed("R")
        .release("R"),
        // The hold counts from the replacement's observation, never from the refusal: the
        // refused process may have granted locks until just before the replacement.
        Case::new(
            "presumed crashed, a replacement answers: held in full from now",
            Some(presumed(T0)),
            running("Q", false, "c2"),
            MemberStatus {
                state: MemberState::Held,
                run_id: Some("Q".into()),
                container_id: Some("c2".into()),
                ..lost_now.clone()
            },
        )
        .msg(format!("new process (restarted); held until {u}"))
        .events(LOST)
        .next(HOLD),
        Case::new(
            "presumed crashed, container reported stopped: held in full from now",
            Some(presumed(T0)),
            not_running("exit code 137"),
            lost_now.clone(),
        )
        .msg("container not running (exit code 137)")
        .events(LOST)
        .next(HOLD),
        // A refusal proves nothing: the process may run on behind a rule that rejects the
        // operator alone. Its pod vanishing (force-deleted, node deleted) must leave it looked
        // for at its address, exactly as for a Ready member (design §9.5).
        Case::new(
            "presumed crashed, pod deleted: held from now, and the process still looked for",
            Some(presumed(T0)),
            missing(),
            MemberStatus {
                unstopped: Some(UnstoppedProcess {
                    run_id: "R".into(),
                    pod_ip: ADDR.into(),
                    listener: None,
                    fenced: false, ..Default::default() }),
                ..lost_now.clone()
            },
        )
        .msg(format!("its process R was never seen to stop, so it is looked for at {ADDR}"))
        .create()
        .events(LOST)
        .next(HOLD),
        Case::new(
            "presumed crashed, the probe now times out: Ready, keys presumed intact",
            Some(presumed(T0)),
            node_lost("c1"),
            MemberStatus {
                since: micro(at(NOW)),
                ..serving()
            },
        )
        .msg("not answering the operator (timed out); keys presumed intact"),
        Case::new(
            "ready, refused from a terminating pod: not presumed crashed (the pod's end decides)",
            Some(serving()),
            terminating(refused("c1")),
            serving(),
        )
        .msg("pod terminating"),
        Case::new(
            "ready without a run id, refused: not presumed crashed (no process on record to tell a replacement from)",
            Some(MemberStatus {
                run_id: None,
                ..serving()
            }),
            refused("c1"),
            MemberStatus {
                run_id: None,
                ..serving()
            },
        )
        .msg("not answering the operator (Connection refused (os error 111))"),
    ]);
}

/// Whatever is observed, a member `Lost` on a refusal plans as the `Ready` member it stands
/// for: the same actions and events, and the same record (but for `since`, which is when the
/// record's state began), in the slots clients use and in a slot a scale-down removes.
#[test]
fn a_member_lost_on_a_refusal_plans_as_its_ready_record() {
    let with_ip = |mut o: SlotObservation| {
        o.pod_ip = Some(ADDR.parse().unwrap());
        o
    };
    let observations = [
        missing(),
        not_running("CrashLoopBackOff"),
        finished("Failed (Evicted)"),
        with_ip(running("R", true, "c1")),
        with_ip(running("R", false, "c1")),
        with_ip(running("Q", false, "c2")),
        with_ip(running("Q", true, "c2")),
        node_lost("c1"),
        unreachable("c2"),
        terminating(refused("c1")),
        terminating(with_ip(running("R", true, "c1"))),
    ];
    let strip = |m: &MemberStatus| MemberStatus {
        since: None,
        ..m.clone()
    };
    // (instances, published): slot 0 serving; slot 0 removed while clients still use it;
    // slot 0 removed and off the published list.
    for (instances, published) in [(1, 1), (0, 1), (0, 0)] {
        for obs in &observations {
            let obs = observed([(0, obs.clone())]);
            let plan_of = |m: MemberStatus| {
                let members = [m];
                let mut i = input(instances, &members, at(NOW));
                i.published = published;
                i.confirmed = published;
                plan(&i, &obs)
            };
            let from_ready = plan_of(serving());
            let from_lost = plan_of(presumed(T0));
            let what = format!("{instances} instances, {published} published, {obs:?}");
            assert_eq!(
                from_lost.members.iter().map(strip).collect::<Vec<_>>(),
                from_ready.members.iter().map(strip).collect::<Vec<_>>(),
                "{what}"
            );
            assert_eq!(from_lost.create_pods, from_ready.create_pods, "{what}");
            assert_eq!(from_lost.delete_pods, from_ready.delete_pods, "{what}");
            assert_eq!(from_lost.fences, from_ready.fences, "{what}");
            assert_eq!(from_lost.releases, from_ready.releases, "{what}");
            assert_eq!(reasons(&from_lost), reasons(&from_ready), "{what}");
            assert_eq!(from_lost.next_hold_end, from_ready.next_hold_end, "{what}");
        }
    }
}

/// `kubectl redlock fence` on a member `Lost` on a refusal: nothing answers to be fenced, so it
/// is marked and says it is not fenced yet (the plugin keeps waiting); once the same process
/// answers again it is fenced and held in full, as a serving member is.
#[test]
fn a_fence_for_maintenance_waits_for_a_refusing_member_to_answer() {
    let request: BTreeMap<Slot, String> = [(Slot::new(0), "disk".to_owned())].into();
    let plan_with = |m: MemberStatus, obs: SlotObservation| {
        let members = [m];
        plan(
            &PlanInput {
                maintenance: &request,
                ..input(1, &members, at(NOW))
            },
            &observed([(0, obs)]),
        )
    };
    let p = plan_with(presumed(T0), refused("c1"));
    let m = &p.members[0];
    assert!(m.lost_on_refusal(), "{m:?}");
    assert_eq!(m.maintenance.as_deref(), Some("disk"));
    let text = m.message.as_deref().unwrap_or_default();
    assert!(text.contains("refuses connections, so not fenced yet"), "{text}");
    assert!(p.fences.is_empty() && p.releases.is_empty());
    // Planned again from what was written: the same record, nothing new.
    let again = plan_with(m.clone(), refused("c1"));
    assert_eq!(&again.members[0], m);
    assert!(again.events.is_empty());

    let p = plan_with(m.clone(), running("R", true, "c1"));
    let m = &p.members[0];
    assert_eq!(m.state, MemberState::Held);
    assert_eq!(m.held_until.as_ref().unwrap().0, hold_from_now());
    assert_eq!(p.fences, vec![(Slot::new(0), "R".to_owned())]);
}

/// A record that says `refusedSince` but carries a hold (edited, or restored from another
/// time) is not planned as a `Ready` member: a hold on record is never skipped.
#[test]
fn a_refusal_record_with_a_hold_is_planned_as_the_hold() {
    let u = at(NOW + 10);
    let edited = MemberStatus {
        held_until: micro(u),
        hold_started_at: started_for(u),
        ..presumed(T0)
    };
    assert!(!edited.lost_on_refusal());
    let p = plan(
        &input(1, std::slice::from_ref(&edited), at(NOW)),
        &observed([(0, running("R", true, "c1"))]),
    );
    let m = &p.members[0];
    assert_eq!(m.state, MemberState::Held, "{m:?}");
    assert_eq!(
        p.fences,
        vec![(Slot::new(0), "R".to_owned())],
        "serving during a hold: fenced again"
    );
    assert!(p.releases.is_empty());
}
