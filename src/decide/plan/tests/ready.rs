//! `Ready` members: released and serving, until their process is seen gone or replaced.

use super::*;

#[test]
fn ready_members() {
    let u = hold_from_now();
    let lost_now = MemberStatus {
        since: micro(at(NOW)),
        ..lost(0, u)
    };
    let held_now = |run: Option<&str>, container: &str| MemberStatus {
        state: MemberState::Held,
        run_id: run.map(str::to_owned),
        container_id: Some(container.into()),
        ..lost_now.clone()
    };
    let r = || Some(ready(0, "R", "c1"));
    run(vec![
        // 4
        Case::new("ready, pod deleted", r(), missing(), lost_now.clone())
            .msg(format!("pod deleted; held until {u}"))
            .create()
            .events(LOST)
            .next(HOLD),
        // 5
        Case::new(
            "ready, new run id in a new container",
            r(),
            running("Q", false, "c2"),
            held_now(Some("Q"), "c2"),
        )
        .msg(format!("new process (restarted); held until {u}"))
        .events(LOST)
        .next(HOLD),
        // The probe reached a restart's new process before the pod cache showed its
        // container, so the record paired the new run id with the old container id. The
        // cache catching up is no new process: the run id is the same. The record takes
        // the container id observed now.
        Case::new(
            "ready, same run id in another container: the same process",
            r(),
            running("R", true, "c2"),
            ready(0, "R", "c2"),
        ),
        Case::new(
            "ready, new run id, container id not changed",
            r(),
            running("Q", false, "c1"),
            held_now(Some("Q"), "c1"),
        )
        .msg("new process (restarted)")
        .events(LOST)
        .next(HOLD),
        Case::new(
            "ready, new run id already enabled: a new process, fenced",
            r(),
            running("Q", true, "c2"),
            held_now(Some("Q"), "c2"),
        )
        .msg("new process (restarted)")
        .fence("Q")
        .events(&[(MemberReason::InstanceLost, true), (MemberReason::HoldStarted, false), (MemberReason::Refenced, true)])
        .next(HOLD),
        // A Ready record without a run id cannot vouch for a fenced process: it may be a
        // new, empty one (an edited or restored status). Lost, never released.
        Case::new(
            "ready without a run id, fenced process: a loss, not a release",
            Some(MemberStatus {
                run_id: None,
                container_id: None,
                ..ready(0, "R", "c1")
            }),
            running("Q", false, "c2"),
            held_now(Some("Q"), "c2"),
        )
        .msg("no run id")
        .events(LOST)
        .next(HOLD),
        // 6
        Case::new(
            "ready, new container, redis unreachable",
            r(),
            unreachable("c2"),
            held_now(None, "c2"),
        )
        .msg("new process (restarted)")
        .events(LOST)
        .next(HOLD),
        // 7
        Case::new(
            "ready, crash-looping",
            r(),
            not_running("CrashLoopBackOff"),
            lost_now.clone(),
        )
        .msg("container not running (CrashLoopBackOff)")
        .events(LOST)
        .next(HOLD),
        Case::new(
            "ready, killed",
            r(),
            not_running("exit code 137"),
            lost_now.clone(),
        )
        .msg("container not running (exit code 137)")
        .events(LOST)
        .next(HOLD),
        // 8: the failed pod goes, so the next reconcile sees it missing and replaces it.
        Case::new(
            "ready, pod evicted",
            r(),
            finished("Failed (Evicted)"),
            lost_now.clone(),
        )
        .msg("pod Failed (Evicted)")
        .delete()
        .events(LOST)
        .next(HOLD),
        Case::new(
            "ready, pod succeeded",
            r(),
            finished("succeeded"),
            lost_now.clone(),
        )
        .msg("pod succeeded")
        .delete()
        .events(LOST)
        .next(HOLD),
        // 9: a stopped process keeps its keys; no hold while its container runs.
        Case::new(
            "ready, same container, redis unreachable",
            r(),
            unreachable("c1"),
            ready(0, "R", "c1"),
        )
        .msg("not answering the operator (connection refused)"),
        // 10: the process may still serve until it is gone.
        Case::new(
            "ready, pod terminating, process still answering",
            r(),
            terminating(running("R", true, "c1")),
            ready(0, "R", "c1"),
        )
        .msg("pod terminating; its process may still serve, so the hold starts once it is known to be gone"),
        Case::new(
            "ready, pod terminating, process not answering",
            r(),
            terminating(unreachable("c1")),
            ready(0, "R", "c1"),
        )
        .msg("pod terminating and not answering the operator (connection refused); its process may still serve"),
        // 19: node lost, pod still reported running: no replacement, nothing released.
        Case::new(
            "ready, node not reporting",
            r(),
            node_lost("c1"),
            ready(0, "R", "c1"),
        )
        .msg("not answering the operator (timed out)"),
        // A release this process decided but has not seen land (it failed, or is on its way):
        // released again.
        Case::new(
            "ready, same process still fenced, its release owed",
            r(),
            running("R", false, "c1"),
            ready(0, "R", "c1"),
        )
        .owed("R")
        .release("R"),
        // N1: fenced outside the operator (by hand, or a release an earlier operator process
        // never sent): held in full, not released again at once.
        Case::new(
            "ready, same process found fenced, no release owed",
            r(),
            running("R", false, "c1"),
            MemberStatus {
                since: micro(at(NOW)),
                ..held(0, "R", "c1", hold_from_now())
            },
        )
        .msg("found fenced although its record says Ready")
        .events(&[(MemberReason::HoldStarted, false)])
        .next(HOLD),
        // Another process's release owed settles nothing for this one.
        Case::new(
            "ready, same process found fenced, another's release owed",
            r(),
            running("R", false, "c1"),
            MemberStatus {
                since: micro(at(NOW)),
                ..held(0, "R", "c1", hold_from_now())
            },
        )
        .owed("OLD")
        .msg("found fenced although its record says Ready")
        .events(&[(MemberReason::HoldStarted, false)])
        .next(HOLD),
        Case::new(
            "ready, same process serving",
            r(),
            running("R", true, "c1"),
            ready(0, "R", "c1"),
        ),
        Case::new(
            "ready without a known container: filled in",
            Some(MemberStatus {
                container_id: None,
                ..ready(0, "R", "c1")
            }),
            running("R", true, "c1"),
            ready(0, "R", "c1"),
        ),
    ]);
}

/// An evicted pod stays in phase Failed until someone deletes it, and a pod of the same
/// name cannot be created meanwhile: without the delete the slot would stay Lost forever.
#[test]
fn evicted_pod_is_deleted_then_replaced_under_the_same_hold() {
    let u = hold_from_now();
    let members = [ready(0, "R", "c1")];
    let p = plan(
        &input(1, &members, at(NOW)),
        &observed([(0, finished("Failed (Evicted)"))]),
    );
    assert_eq!(p.members[0].state, MemberState::Lost);
    assert_eq!(p.members[0].held_until, micro(u));
    assert_eq!(
        (p.delete_pods.clone(), p.create_pods.clone()),
        (vec![Slot::new(0)], vec![])
    );
    // The pod is gone: a replacement is created; the hold keeps its end.
    let p = plan(&input(1, &p.members, at(NOW + 1)), &observed([]));
    assert_eq!(
        (p.delete_pods.clone(), p.create_pods.clone()),
        (vec![], vec![Slot::new(0)])
    );
    assert_eq!(p.members[0].held_until, micro(u));
    let p = plan(
        &input(1, &p.members, at(NOW + 5)),
        &observed([(0, running("Q", false, "c2"))]),
    );
    assert_eq!(p.members[0].state, MemberState::Held);
    assert_eq!(p.members[0].held_until, micro(u));
    assert!(p.releases.is_empty());
    let p = plan(
        &input(1, &p.members, u),
        &observed([(0, running("Q", false, "c2"))]),
    );
    assert_eq!(p.members[0].state, MemberState::Ready);
    assert_eq!(p.releases, vec![(Slot::new(0), "Q".to_owned())]);
}

/// 22: an unchanged cluster plans exactly its status back: no write, no action.
#[test]
fn steady_state_changes_nothing() {
    let members: Vec<_> = (0..5)
        .map(|s| MemberStatus {
            endpoint: Some(format!("locks-{s}.default.svc:6379")),
            ..ready(s, &format!("R{s}"), &format!("c{s}"))
        })
        .collect();
    let obs = observed((0..5).map(|s| (s, running(&format!("R{s}"), true, &format!("c{s}")))));
    let p = plan(&input(5, &members, at(NOW)), &obs);
    assert_eq!(
        p,
        Plan {
            members: members.clone(),
            ..Plan::default()
        }
    );
}

/// A release stays owed until its process is seen serving, or is no longer the slot's
/// process; a process that does not answer settles nothing.
#[test]
fn an_owed_release_is_settled_by_its_process_serving_or_gone_and_by_nothing_else() {
    let owed = |slot: i32, run: &str| (Slot::new(slot), run.to_owned());
    let all = vec![
        owed(0, "A"),
        owed(1, "B"),
        owed(2, "C"),
        owed(3, "D"),
        owed(4, "E"),
        owed(5, "F"),
    ];
    let obs = observed([
        (0, running("A", true, "c0")),  // serving: settled
        (1, running("B", false, "c1")), // still fenced: owed
        (2, running("X", false, "c2")), // another process: settled
        (3, unreachable("c3")),         // not answering: owed
        (4, missing()),                 // no pod: settled
    ]); // slot 5 not observed: settled
    assert_eq!(
        crate::decide::plan::still_owed(&all, &obs),
        vec![owed(1, "B"), owed(3, "D")]
    );
    let memory = crate::hold::release_ahead::OwedReleases::default();
    memory.owe("u", &all[..2]);
    memory.owe("u", &all[1..3]);
    assert_eq!(memory.of("u"), all[..3].to_vec(), "each release owed once");
    memory.settle("u", vec![owed(1, "B")]);
    assert_eq!(memory.of("u"), vec![owed(1, "B")]);
    memory.settle("u", vec![]);
    assert!(memory.of("u").is_empty());
}
