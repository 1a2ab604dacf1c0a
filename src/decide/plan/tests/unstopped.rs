//! Processes that outlived their pods (docs/design.md §9.5), of members and of removed slots.

use super::*;

// --- A process that outlived its pod (docs/design.md §9.5) ---

fn zombie_answers(run: &str, enabled: bool) -> Option<UnstoppedSearch> {
    Some(UnstoppedSearch::answered(RedisInfo {
        run_id: run.into(),
        version: "7.0.15".into(),
        client_enabled: enabled,
        pod_uid: None,
        client_password_hashes: None,
        admin_password_hashes: None,
        deviations: Vec::new(),
    }))
}

/// Audit finding D: a scale-down 3 → 2 while slot 2's node is cut off, and its pod is
/// force-deleted before the operator could fence it. Clients still told the list of 3
/// reach the process where it runs: it is looked for there, fenced when found serving
/// (the hold, and with it the shorter list, wait), and marked fenced when seen so.
#[test]
fn a_removed_members_process_that_outlives_its_pod_is_looked_for_and_fenced() {
    let members = [
        ready(0, "A", "c0"),
        ready(1, "B", "c1"),
        MemberStatus {
            pod_ip: Some("10.1.0.9".into()),
            ..ready(2, "C", "c2")
        },
    ];
    fn published(members: &[MemberStatus], now: Timestamp) -> PlanInput<'_> {
        PlanInput {
            published: 3,
            ..input(2, members, now)
        }
    }
    let vanished = |unstopped| {
        let mut o = observed([
            (0, running("A", true, "c0")),
            (1, running("B", true, "c1")),
            (2, missing()),
        ]);
        o.get_mut(&Slot::new(2)).unwrap().unstopped = unstopped;
        o
    };
    // It does not answer the operator (the partition cuts the operator off too): the
    // fence is not proven, and the record keeps which process it was.
    let silent = observed([
        (0, running("A", true, "c0")),
        (1, running("B", true, "c1")),
        (2, unreachable("c2")),
    ]);
    let p = plan(&published(&members, at(NOW - 1)), &silent);
    assert_eq!(p.members[2].held_until, None);
    assert_eq!(p.members[2].run_id.as_deref(), Some("C"));
    // Then its pod is force-deleted.
    let p = plan(&published(&p.members, at(NOW)), &vanished(None));
    let m = &p.members[2];
    assert!(m.state.is_holding(), "{m:?}");
    assert_eq!(
        m.unstopped,
        Some(UnstoppedProcess {
            run_id: "C".into(),
            pod_ip: "10.1.0.9".into(),
            listener: None,
            fenced: false,
            ..Default::default()
        }),
        "{m:?}"
    );
    assert!(
        m.message.as_deref().unwrap().contains("never seen to stop"),
        "{m:?}"
    );

    // Found letting clients in where it ran: fenced there, the hold restarts.
    let later = at(NOW + 20);
    let p2 = plan(
        &published(&p.members, later),
        &vanished(zombie_answers("C", true)),
    );
    assert_eq!(p2.fences, vec![(Slot::new(2), "C".to_owned())]);
    assert!(
        p2.events
            .iter()
            .any(|e| e.reason == MemberReason::UnstoppedProcessFenced)
    );
    let m2 = &p2.members[2];
    assert!(
        m2.held_until.as_ref().unwrap().0 > m.held_until.as_ref().unwrap().0,
        "{m2:?}"
    );
    assert!(!m2.unstopped.as_ref().unwrap().fenced);
    // The shorter list waits for that hold.
    let limits = crate::decide::resize::after_plan(
        crate::decide::resize::Limits {
            published: 3,
            confirmed: 2,
            token: None,
        },
        2,
        &p2.members,
        &vanished(None),
        at(NOW + 40),
    );
    assert_eq!(limits.published, 3);

    // Seen fenced: it grants nothing, and is not looked for any more.
    let p3 = plan(
        &published(&p2.members, at(NOW + 21)),
        &vanished(zombie_answers("C", false)),
    );
    assert!(p3.fences.is_empty());
    assert!(p3.members[2].unstopped.as_ref().unwrap().fenced);
    assert_eq!(p3.members[2].held_until, m2.held_until);
}

#[test]
fn a_pod_that_vanishes_while_its_process_runs_leaves_an_unstopped_process() {
    let members = [MemberStatus {
        pod_ip: Some("10.1.0.7".into()),
        ..ready(0, "A", "c1")
    }];
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, missing())]));
    let m = &p.members[0];
    assert_eq!(m.state, MemberState::Lost);
    assert_eq!(
        m.unstopped,
        Some(UnstoppedProcess {
            run_id: "A".into(),
            pod_ip: "10.1.0.7".into(),
            listener: None,
            fenced: false,
            ..Default::default()
        })
    );
    assert!(
        m.message.as_deref().unwrap().contains("looked for at 10.1.0.7"),
        "{m:?}"
    );
    assert_eq!(p.create_pods, vec![Slot::new(0)]);
    // A container seen stopped is a process seen to stop: nothing to look for.
    let stopped = SlotObservation {
        pod: PodState::NotRunning {
            reason: "Error".into(),
        },
        ..Default::default()
    };
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, stopped)]));
    assert_eq!(p.members[0].unstopped, None);
    // A pod the control plane marked failed (its node deleted) without any kubelet
    // reporting its container stopped: not a process seen to stop either.
    let marked_failed = SlotObservation {
        stop_unconfirmed: true,
        ..finished("Failed (DeletionByPodGC)")
    };
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, marked_failed)]));
    assert_eq!(
        p.members[0].unstopped.as_ref().map(|u| u.run_id.as_str()),
        Some("A")
    );
    // Finished with its container seen terminated: stopped.
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, finished("Failed"))]));
    assert_eq!(p.members[0].unstopped, None);
}

fn with_unstopped(m: MemberStatus, fenced: bool) -> MemberStatus {
    MemberStatus {
        unstopped: Some(UnstoppedProcess {
            run_id: "A".into(),
            pod_ip: "10.1.0.7".into(),
            listener: None,
            fenced,
            ..Default::default()
        }),
        ..m
    }
}

#[test]
fn an_unstopped_process_found_serving_is_fenced_and_the_hold_restarts() {
    // The replacement B has served its hold; the old process A still answers at its
    // address and lets clients in.
    let members = [with_unstopped(held(0, "B", "c2", at(NOW - 1)), false)];
    let obs = SlotObservation {
        unstopped: zombie_answers("A", true),
        ..running("B", false, "c2")
    };
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, obs)]));
    assert!(p.releases.is_empty(), "{:?}", p.releases);
    assert_eq!(p.fences, vec![(Slot::new(0), "A".to_owned())]);
    let m = &p.members[0];
    assert_eq!(m.held_until.as_ref().unwrap().0, hold_from_now());
    assert!(!m.unstopped.as_ref().unwrap().fenced);
    assert_eq!(p.events[0].reason, MemberReason::UnstoppedProcessFenced);

    // Seen fenced at the next probe: recorded, and the hold runs again from then (whoever
    // fenced it, it may have granted locks until that probe), then out without a warning.
    let obs = SlotObservation {
        unstopped: zombie_answers("A", false),
        ..running("B", false, "c2")
    };
    let p2 = plan(&input(1, &p.members, at(NOW + 1)), &observed([(0, obs.clone())]));
    assert!(p2.members[0].unstopped.as_ref().unwrap().fenced);
    let from_probe = hold_from_now().checked_add(SignedDuration::from_secs(1)).unwrap();
    assert_eq!(p2.members[0].held_until.as_ref().unwrap().0, from_probe);
    let early = plan(
        &input(1, &p2.members, hold_from_now()),
        &observed([(0, obs.clone())]),
    );
    assert!(early.releases.is_empty(), "{:?}", early.releases);
    let p3 = plan(&input(1, &p2.members, from_probe), &observed([(0, obs)]));
    assert_eq!(p3.releases, vec![(Slot::new(0), "B".to_owned())]);
    assert!(
        p3.events
            .iter()
            .all(|e| e.reason != MemberReason::ReleaseAssumesProcessGone)
    );
    assert_eq!(p3.members[0].unstopped, None);
}

#[test]
fn a_replacement_lost_in_turn_keeps_looking_for_the_earlier_process() {
    // Released relying on A being dead; then B, the replacement, is killed (its pod
    // stays): the new hold still looks for A, and finding it serving fences it.
    let members = [with_unstopped(ready(0, "B", "c2"), false)];
    let restarted = SlotObservation {
        unstopped: Some(UnstoppedSearch::unanswered("connect timed out", false)),
        ..running("C", false, "c3")
    };
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, restarted)]));
    let m = &p.members[0];
    assert_eq!(m.state, MemberState::Held);
    assert_eq!(m.run_id.as_deref(), Some("C"));
    assert_eq!(m.unstopped.as_ref().map(|u| u.run_id.as_str()), Some("A"));
    assert!(
        m.message
            .as_deref()
            .unwrap()
            .contains("still looked for at 10.1.0.7"),
        "{m:?}"
    );
    let found = SlotObservation {
        unstopped: zombie_answers("A", true),
        ..running("C", false, "c3")
    };
    let p2 = plan(&input(1, &p.members, at(NOW + 1)), &observed([(0, found)]));
    assert_eq!(p2.fences, vec![(Slot::new(0), "A".to_owned())]);
    assert!(p2.releases.is_empty());

    // B's pod vanished unseen as well: B is looked for now, and A's end is told.
    let b_vanished = [MemberStatus {
        pod_ip: Some("10.1.0.8".into()),
        ..with_unstopped(ready(0, "B", "c2"), false)
    }];
    let p = plan(&input(1, &b_vanished, at(NOW)), &observed([(0, missing())]));
    assert_eq!(
        p.members[0].unstopped.as_ref().map(|u| u.run_id.as_str()),
        Some("B")
    );
    let e = p
        .events
        .iter()
        .find(|e| e.reason == MemberReason::ReleaseAssumesProcessGone)
        .expect("told");
    assert!(e.message.contains("process A"), "{}", e.message);

    // An earlier process already seen fenced is not looked for again.
    let members = [with_unstopped(ready(0, "B", "c2"), true)];
    let p = plan(
        &input(1, &members, at(NOW)),
        &observed([(0, running("C", false, "c3"))]),
    );
    assert_eq!(p.members[0].unstopped, None);
}

/// The fresh-clone CI violation (a `partition` fault under load): the old process's node was
/// cut off from the API server, its pod force-deleted, and the probe of its address timed out
/// while it still granted locks. A timeout proves nothing: the slot stays held once its hold
/// has run, says why (message, Warning event once), and rewrites nothing while that lasts.
#[test]
fn a_timeout_at_the_old_address_never_releases_the_slot() {
    let members = [with_unstopped(held(0, "B", "c2", at(NOW - 1)), false)];
    let timed_out = || SlotObservation {
        unstopped: Some(UnstoppedSearch::unanswered("connect timed out", false)),
        ..running("B", false, "c2")
    };
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, timed_out())]));
    assert!(p.releases.is_empty(), "{p:?}");
    let m = &p.members[0];
    assert_eq!(m.state, MemberState::Held);
    assert!(!m.unstopped.as_ref().unwrap().fenced);
    let message = m.message.as_deref().unwrap();
    assert!(
        message.contains("process A (its pod vanished while it ran) may still grant locks")
            && message.contains("nothing answered at 10.1.0.7 (connect timed out)"),
        "{message}"
    );
    let e = p
        .events
        .iter()
        .find(|e| e.reason == MemberReason::ReleaseWaitsForProcessGone)
        .expect("told");
    assert!(e.warning);
    assert!(
        p.events
            .iter()
            .all(|e| e.reason != MemberReason::ReleaseAssumesProcessGone)
    );
    // Next period, the same: no release, no second event, the same record.
    let p2 = plan(&input(1, &p.members, at(NOW + 1)), &observed([(0, timed_out())]));
    assert!(p2.releases.is_empty() && p2.events.is_empty(), "{p2:?}");
    assert_eq!(p2.members, p.members);
    // Before the hold ends it is only carried along.
    let members = [with_unstopped(held(0, "B", "c2", at(NOW + 5)), false)];
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, timed_out())]));
    assert!(p.releases.is_empty() && p.events.is_empty());
    assert!(p.members[0].unstopped.is_some());
}

fn info(run: &str, enabled: bool, pod_uid: Option<&str>) -> RedisInfo {
    RedisInfo {
        run_id: run.into(),
        version: "7.0.15".into(),
        client_enabled: enabled,
        pod_uid: pod_uid.map(str::to_owned),
        client_password_hashes: None,
        admin_password_hashes: None,
        deviations: Vec::new(),
    }
}

/// Every kind of evidence a release may rest on, and every look that is none, on a slot
/// whose hold has run: released exactly on evidence, and the process is then no longer
/// looked for (its record ends, so the cluster can rest and a rotation finish).
#[test]
fn a_slot_is_released_over_a_vanished_process_only_on_positive_evidence() {
    use crate::decide::observe::KubeletAnswer::{self, *};
    use crate::redis::admin::ProbeFailure;
    let timeout = || {
        Err(ProbeFailure {
            why: "timed out".into(),
            refused: false,
        })
    };
    let refused = || {
        Err(ProbeFailure {
            why: "Connection refused".into(),
            refused: true,
        })
    };
    type Case = (
        &'static str,
        Result<RedisInfo, ProbeFailure>,
        KubeletAnswer,
        bool,
        &'static str,
        bool,
    );
    // (what, answer at the address, kubelet, record names node and pod, asserted by an admin,
    // evidence that it is gone). On evidence the hold runs again from it (the process may
    // have granted locks until then, found by the model check), and the slot is released
    // once that hold has run.
    let cases: Vec<Case> = vec![
        ("timeout, no kubelet asked", timeout(), NotAsked, false, "", false),
        (
            "timeout, kubelet unreachable",
            timeout(),
            Unknown("timed out".into()),
            true,
            "",
            false,
        ),
        ("timeout, kubelet still runs it", timeout(), Runs, true, "", false),
        ("timeout, kubelet runs none", timeout(), RunsNone, true, "", true),
        (
            "kubelet says none but the record names no node",
            timeout(),
            RunsNone,
            false,
            "",
            false,
        ),
        ("refused", refused(), NotAsked, false, "", true),
        (
            "another process of a pod",
            Ok(info("Z", true, Some("uid-2"))),
            NotAsked,
            false,
            "",
            true,
        ),
        (
            "another process naming no pod",
            Ok(info("Z", true, None)),
            NotAsked,
            false,
            "",
            false,
        ),
        (
            "seen fenced",
            Ok(info("A", false, None)),
            NotAsked,
            false,
            "",
            true,
        ),
        ("an admin asserts it dead", timeout(), NotAsked, false, "A", true),
        (
            "an admin asserts another dead",
            timeout(),
            NotAsked,
            false,
            "Q",
            false,
        ),
    ];
    for (what, answer, kubelet, named, asserted, gone) in cases {
        let mut m = with_unstopped(held(0, "B", "c2", at(NOW - 1)), false);
        if named {
            let u = m.unstopped.as_mut().unwrap();
            u.node = Some("node-3".into());
            u.pod_uid = Some("uid-1".into());
        }
        let obs = SlotObservation {
            unstopped: Some(UnstoppedSearch {
                answer,
                kubelet,
                out_of_service: false,
            }),
            ..running("B", false, "c2")
        };
        let asserted = crate::decide::plan::asserted_gone(Some(asserted));
        let members = [m];
        let observed = observed([(0, obs)]);
        let p = plan(
            &PlanInput {
                gone_asserted: &asserted,
                ..input(1, &members, at(NOW))
            },
            &observed,
        );
        assert!(
            p.releases.is_empty(),
            "{what}: never released at the evidence: {p:?}"
        );
        let m = &p.members[0];
        if gone {
            assert_eq!(m.state, MemberState::Held, "{what}");
            assert_eq!(
                m.held_until.as_ref().unwrap().0,
                hold_from_now(),
                "{what}: the hold restarts"
            );
            assert!(
                m.unstopped.as_ref().is_none_or(|u| u.fenced),
                "{what}: no longer looked for"
            );
            assert!(
                p.events
                    .iter()
                    .all(|e| e.reason != MemberReason::ReleaseWaitsForProcessGone),
                "{what}"
            );
            // One hold from the evidence on, released.
            let later = plan(
                &PlanInput {
                    gone_asserted: &asserted,
                    ..input(1, &p.members, hold_from_now())
                },
                &observed,
            );
            assert_eq!(
                later.releases,
                vec![(Slot::new(0), "B".to_owned())],
                "{what}: {later:?}"
            );
        } else {
            assert_eq!(m.state, MemberState::Held, "{what}");
            assert!(m.unstopped.is_some(), "{what}");
            assert!(
                p.events
                    .iter()
                    .any(|e| e.reason == MemberReason::ReleaseWaitsForProcessGone),
                "{what}"
            );
        }
    }
}

/// `node.kubernetes.io/out-of-service` on the node the process ran on is an admin's assertion
/// that the node is shut down (Kubernetes' non-graceful node shutdown): evidence, unless the
/// process answers serving (then it is fenced there, as always), and only for the node on
/// record.
#[test]
fn an_out_of_service_taint_on_its_node_is_an_admins_assertion() {
    use crate::redis::admin::ProbeFailure;
    let search = |answer| UnstoppedSearch {
        answer,
        kubelet: crate::decide::observe::KubeletAnswer::Unknown("unreachable".into()),
        out_of_service: true,
    };
    let timed_out = || {
        Err(ProbeFailure {
            why: "timed out".into(),
            refused: false,
        })
    };
    for (what, named, answer, gone) in [
        ("node on record, nothing answers", true, timed_out(), true),
        ("no node on record", false, timed_out(), false),
        ("it still serves", true, Ok(info("A", true, None)), false),
    ] {
        let mut m = with_unstopped(held(0, "B", "c2", at(NOW - 1)), false);
        if named {
            m.unstopped.as_mut().unwrap().node = Some("node-3".into());
        }
        let obs = SlotObservation {
            unstopped: Some(search(answer)),
            ..running("B", false, "c2")
        };
        let members = [m];
        let p = plan(&input(1, &members, at(NOW)), &observed([(0, obs)]));
        assert!(
            p.releases.is_empty(),
            "{what}: never released at the evidence: {p:?}"
        );
        if gone {
            let e = p
                .events
                .iter()
                .find(|e| e.reason == MemberReason::UnstoppedProcessGone)
                .expect("told");
            assert!(e.message.contains("out-of-service"), "{}", e.message);
        }
    }
}

#[test]
fn the_admins_assertion_lists_run_ids() {
    let got = crate::decide::plan::asserted_gone(Some(" a1, b2\nc3 ,,"));
    assert_eq!(
        got.into_iter().collect::<Vec<_>>(),
        vec!["a1".to_owned(), "b2".to_owned(), "c3".to_owned()]
    );
    assert!(crate::decide::plan::asserted_gone(None).is_empty());
}

/// A record from an operator that released a slot relying on the old process being dead
/// (before releases waited for evidence): the process is still looked for, and fenced with
/// its slot if it answers; positive evidence ends the search.
#[test]
fn a_process_released_past_is_still_looked_for_and_fenced_with_its_slot_when_it_answers() {
    let members = [with_unstopped(ready(0, "B", "c2"), false)];
    // Still nothing there: B serves on, A is looked for again.
    let quiet = SlotObservation {
        unstopped: Some(UnstoppedSearch::unanswered("connect timed out", false)),
        ..running("B", true, "c2")
    };
    let p2 = plan(&input(1, &members, at(NOW + 1)), &observed([(0, quiet)]));
    assert_eq!(p2.members[0].state, MemberState::Ready);
    assert!(p2.fences.is_empty() && p2.events.is_empty());
    assert!(p2.members[0].unstopped.is_some());

    // A answers and lets clients in: both are fenced, B is held in full from now.
    let back = SlotObservation {
        unstopped: zombie_answers("A", true),
        ..running("B", true, "c2")
    };
    let p3 = plan(&input(1, &p2.members, at(NOW + 2)), &observed([(0, back)]));
    assert_eq!(
        p3.fences,
        vec![(Slot::new(0), "A".to_owned()), (Slot::new(0), "B".to_owned())]
    );
    let m = &p3.members[0];
    assert_eq!(m.state, MemberState::Held);
    assert_eq!(m.run_id.as_deref(), Some("B"));
    assert_eq!(
        m.held_until.as_ref().unwrap().0,
        held_until(at(NOW + 2), input(1, &p2.members, at(NOW + 2)).hold)
    );
    assert!(!m.unstopped.as_ref().unwrap().fenced);
    assert!(
        p3.events
            .iter()
            .any(|e| e.reason == MemberReason::UnstoppedProcessFenced && e.warning)
    );

    // A seen fenced while B serves: it grants nothing, and is no longer looked for.
    let fenced = SlotObservation {
        unstopped: zombie_answers("A", false),
        ..running("B", true, "c2")
    };
    let p4 = plan(&input(1, &p2.members, at(NOW + 2)), &observed([(0, fenced)]));
    assert_eq!(p4.members[0].state, MemberState::Ready);
    assert_eq!(p4.members[0].unstopped, None);
    assert!(p4.fences.is_empty());

    // Its address refuses connections: gone, no longer looked for, and told.
    let refused = SlotObservation {
        unstopped: Some(UnstoppedSearch::unanswered("Connection refused", true)),
        ..running("B", true, "c2")
    };
    let p5 = plan(&input(1, &p2.members, at(NOW + 2)), &observed([(0, refused)]));
    assert_eq!(p5.members[0].state, MemberState::Ready);
    assert_eq!(p5.members[0].unstopped, None);
    assert!(
        p5.events
            .iter()
            .any(|e| e.reason == MemberReason::UnstoppedProcessGone && !e.warning)
    );
}

/// The mode a process listens in is recorded with its address, and goes with it into the
/// unstopped record: during a TLS toggle's rollout a process that outlives its pod listens
/// in the mode its pod was built with, not the spec's.
#[test]
fn the_listener_is_recorded_with_the_address_and_kept_for_an_unstopped_process() {
    let tls = |secret: Option<&str>| SlotObservation {
        pod_ip: Some("10.1.0.7".parse().unwrap()),
        tls_secret: secret.map(str::to_owned),
        ..running("A", true, "c1")
    };
    let old_tls = Some(Listener {
        tls_secret: Some("old-tls".into()),
    });
    // A record without a listener (made before it was kept) gets the one of its address.
    let members = [MemberStatus {
        pod_ip: Some("10.1.0.7".into()),
        ..ready(0, "A", "c1")
    }];
    let p = plan(
        &input(1, &members, at(NOW)),
        &observed([(0, tls(Some("old-tls")))]),
    );
    assert_eq!(p.members[0].listener, old_tls);
    // A plain process: a listener without a Secret (not the same as unknown).
    let p_plain = plan(&input(1, &members, at(NOW)), &observed([(0, tls(None))]));
    assert_eq!(p_plain.members[0].listener, Some(Listener::default()));
    // Without an answer at an address, nothing is recorded about how it listens.
    let silent = SlotObservation {
        probe: Probe::NotProbed,
        ..tls(Some("old-tls"))
    };
    let p_silent = plan(&input(1, &members, at(NOW)), &observed([(0, silent)]));
    assert_eq!(p_silent.members[0].listener, None);
    // The pod vanishes: the process is looked for in the mode it was recorded in.
    let p = plan(&input(1, &p.members, at(NOW + 1)), &observed([(0, missing())]));
    let u = p.members[0].unstopped.as_ref().expect("looked for");
    assert_eq!(u.listener, old_tls);
}

// --- The replacement pod's record of the process its predecessor left behind ---

/// The process slot 0's vanished pod left behind, as its record and its replacement pod say.
fn left_behind() -> UnstoppedProcess {
    UnstoppedProcess {
        run_id: "A".into(),
        pod_ip: "10.1.0.7".into(),
        pod_uid: Some("pod-old".into()),
        node: Some("node-0".into()),
        ..Default::default()
    }
}

/// The replacement pod of slot 0, its process `run` (fenced unless `serving`), carrying the
/// record of the old one.
fn replacement(run: &str, serving: bool) -> SlotObservation {
    SlotObservation {
        pod_uid: Some("pod-new".into()),
        pod_ip: Some("10.1.0.8".parse().unwrap()),
        predecessor: Some(left_behind()),
        ..running(run, serving, "c9")
    }
}

/// The model check's second finding (docs/model-check.md): a cut-off pod vanishes, its
/// replacement is made with the record of the process it left behind; then the status is
/// wiped. The replacement is held in full, and waits for evidence the old process is gone:
/// a hold's end with nothing found does not release it.
#[test]
fn a_replacement_made_for_a_process_never_seen_to_stop_carries_it_through_a_wiped_status() {
    let members = [
        MemberStatus {
            pod_ip: Some("10.1.0.7".into()),
            pod_uid: Some("pod-old".into()),
            node: Some("node-0".into()),
            ..ready(0, "A", "c0")
        },
        ready(1, "B", "c1"),
        ready(2, "C", "c2"),
    ];
    let others = || [(1, running("B", true, "c1")), (2, running("C", true, "c2"))];
    let mut vanished = observed(others());
    vanished.insert(Slot::new(0), missing());
    let p = plan(&input(3, &members, at(NOW)), &vanished);
    assert_eq!(p.create_pods, vec![Slot::new(0)]);
    assert_eq!(p.predecessors.get(&Slot::new(0)), p.members[0].unstopped.as_ref());
    assert_eq!(
        p.members[0].unstopped.as_ref().map(|u| &u.run_id),
        Some(&"A".to_owned())
    );

    // The status wiped: no record of any slot.
    let mut seen = observed(others());
    seen.insert(Slot::new(0), replacement("D", false));
    let wiped = plan(&input(3, &[], at(NOW + 5)), &seen);
    let m = &wiped.members[0];
    assert!(m.state.is_holding(), "{m:?}");
    assert_eq!(m.unstopped, Some(left_behind()), "{m:?}");
    assert!(
        m.message.as_deref().unwrap().contains("never seen to stop"),
        "{m:?}"
    );

    // Its hold over, the old process not found (its node cut off): still held, no release.
    let mut timed_out = seen.clone();
    timed_out.get_mut(&Slot::new(0)).unwrap().unstopped = Some(UnstoppedSearch {
        kubelet: KubeletAnswer::Unknown("node unreachable".into()),
        ..UnstoppedSearch::unanswered("timed out", false)
    });
    let later = at(NOW + 5 + HOLD.as_secs() as i64 + 10);
    let p = plan(&input(3, &wiped.members, later), &timed_out);
    assert!(p.members[0].state.is_holding(), "{:?}", p.members[0]);
    assert!(p.releases.is_empty(), "{:?}", p.releases);

    // A serving replacement the wiped status adopts keeps the old process looked for.
    seen.insert(Slot::new(0), replacement("D", true));
    let adopted = plan(&input(3, &[], at(NOW + 5)), &seen);
    assert_eq!(adopted.members[0].state, MemberState::Ready);
    assert_eq!(adopted.members[0].unstopped, Some(left_behind()));
}

/// A status restored from before the replacement was made is about the old pod: the
/// replacement's record of the old process is taken back. A record about the replacement
/// itself is the authority (it may have seen the old process gone) and is left as it is.
#[test]
fn a_record_about_another_pod_takes_back_the_replacements_record_and_one_about_it_does_not() {
    let restored = [
        MemberStatus {
            pod_uid: Some("pod-old".into()),
            pod_ip: Some("10.1.0.7".into()),
            ..ready(0, "A", "c0")
        },
        ready(1, "B", "c1"),
        ready(2, "C", "c2"),
    ];
    let seen = observed([
        (0, replacement("D", false)),
        (1, running("B", true, "c1")),
        (2, running("C", true, "c2")),
    ]);
    let p = plan(&input(3, &restored, at(NOW)), &seen);
    assert!(p.members[0].state.is_holding(), "{:?}", p.members[0]);
    assert_eq!(p.members[0].unstopped, Some(left_behind()), "{:?}", p.members[0]);

    let about_it = [
        MemberStatus {
            pod_uid: Some("pod-new".into()),
            pod_ip: Some("10.1.0.8".into()),
            ..ready(0, "D", "c9")
        },
        ready(1, "B", "c1"),
        ready(2, "C", "c2"),
    ];
    let mut serving = seen.clone();
    serving.insert(Slot::new(0), replacement("D", true));
    let p = plan(&input(3, &about_it, at(NOW)), &serving);
    assert_eq!(p.members[0].state, MemberState::Ready, "{:?}", p.members[0]);
    assert_eq!(p.members[0].unstopped, None);
}

// --- The ledger's record of each slot's last process (`crate::hold::ledger`) ---

/// `input` planned with `ledger`.
fn with_ledger<'a>(input: PlanInput<'a>, ledger: &'a crate::hold::ledger::Ledger) -> PlanInput<'a> {
    PlanInput {
        ledger: Some(ledger),
        ..input
    }
}

/// The model check's third finding (docs/model-check.md): the status is wiped before any
/// reconcile saw slot 0's cut-off pod vanish, so no replacement records its process and the
/// status says nothing. The ledger names it: it is planned as a member whose pod vanished
/// unseen (looked for, the replacement made with its record and held), and a hold's end with
/// nothing found releases nothing.
#[test]
fn a_slot_with_no_record_and_no_pod_takes_the_ledgers_process_back() {
    let ledger = crate::hold::ledger::Ledger::from([(Slot::new(0), left_behind())]);
    let others = || [(1, running("B", true, "c1")), (2, running("C", true, "c2"))];
    let mut gone = observed(others());
    gone.insert(Slot::new(0), missing());
    let p = super::super::plan(&with_ledger(input(3, &[], at(NOW)), &ledger), &gone);
    let m = &p.members[0];
    assert!(m.state.is_holding(), "{m:?}");
    assert_eq!(m.unstopped, Some(left_behind()), "{m:?}");
    assert!(
        m.message
            .as_deref()
            .unwrap()
            .contains("the ledger names process A at 10.1.0.7"),
        "{m:?}"
    );
    assert_eq!(p.create_pods, vec![Slot::new(0)]);
    assert_eq!(p.predecessors.get(&Slot::new(0)), Some(&left_behind()));
    // Slots with a pod are planned from the pod, as before (adopted as they serve).
    assert!(
        p.members[1..]
            .iter()
            .all(|m| m.state == MemberState::Ready && m.unstopped.is_none())
    );

    // The replacement runs; its hold over, the old process not found: held, no release.
    let mut seen = observed(others());
    seen.insert(Slot::new(0), replacement("D", false));
    seen.get_mut(&Slot::new(0)).unwrap().unstopped = Some(UnstoppedSearch {
        kubelet: KubeletAnswer::Unknown("node unreachable".into()),
        ..UnstoppedSearch::unanswered("timed out", false)
    });
    let held = plan(&input(3, &p.members, at(NOW + 1)), &seen);
    let later = at(NOW + 1 + HOLD.as_secs() as i64 + 10);
    let p = plan(&input(3, &held.members, later), &seen);
    assert!(p.members[0].state.is_holding(), "{:?}", p.members[0]);
    assert!(p.releases.is_empty(), "{:?}", p.releases);
}

/// The ledger is not consulted for a slot the status records, nor for a pod with no record
/// (its own records decide): only for a slot with neither.
#[test]
fn the_ledger_is_taken_back_only_for_a_slot_with_no_record_and_no_pod() {
    let ledger = crate::hold::ledger::Ledger::from([(Slot::new(0), left_behind())]);
    let fresh_pod = observed([(0, running("D", false, "c9"))]);
    let p = super::super::plan(&with_ledger(input(1, &[], at(NOW)), &ledger), &fresh_pod);
    assert_eq!(p.members[0].unstopped, None, "{:?}", p.members[0]);
    let starting = [starting(0)];
    let p = super::super::plan(
        &with_ledger(input(1, &starting, at(NOW)), &ledger),
        &observed([(0, missing())]),
    );
    assert_eq!(p.members[0].state, MemberState::Starting, "{:?}", p.members[0]);
    assert_eq!(p.members[0].unstopped, None);
}

/// No process is released before the ledger names it: its hold over, a process the ledger
/// does not name (yet) stays held and says why; once named, it is released.
#[test]
fn a_process_the_ledger_does_not_name_is_not_released() {
    let until = at(NOW - 1);
    let members = [held(0, "B", "c0", until)];
    let seen = observed([(0, running("B", false, "c0"))]);
    let older = crate::hold::ledger::Ledger::from([(
        Slot::new(0),
        UnstoppedProcess {
            run_id: "A".into(),
            ..left_behind()
        },
    )]);
    for ledger in [None, Some(&older)] {
        let p = super::super::plan(
            &PlanInput {
                ledger,
                ..input(1, &members, at(NOW))
            },
            &seen,
        );
        assert!(p.releases.is_empty(), "{:?}", p.releases);
        assert!(p.members[0].state.is_holding(), "{:?}", p.members[0]);
        assert!(
            p.members[0]
                .message
                .as_deref()
                .unwrap()
                .contains("the ledger (<name>-ledger) does not name this process"),
            "{:?}",
            p.members[0]
        );
    }
    let p = plan(&input(1, &members, at(NOW)), &seen);
    assert_eq!(p.releases, vec![(Slot::new(0), "B".to_owned())]);
}
