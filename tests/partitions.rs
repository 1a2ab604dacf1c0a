//! Partitions (issue 15, docs/design.md §9.5) on the real control plane: a node cut off from
//! the API server whose Redis keeps serving the clients that still reach it. The
//! administrator cordons it and then force-deletes the pod, or deletes the node (both assert
//! that the process is dead). It is not: the tests check with real lock clients that the old
//! process and the replacement never both grant locks.

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams};
use redlock_operator::crd::MemberState;
use redlock_test_support::*;
use serde_json::json;

const NAME: &str = "locks";

/// How the administrator asserts that the partitioned node's process is dead.
#[derive(Clone, Copy)]
enum Assertion {
    /// `kubectl delete pod --force --grace-period=0`.
    ForceDeletePod,
    /// `kubectl delete node`: the pod garbage collector then removes its pods.
    DeleteNode,
}

#[tokio::test]
async fn a_process_that_outlives_its_force_deleted_pod_is_fenced_before_its_replacement_serves() {
    outlived_pod(Assertion::ForceDeletePod).await;
}

#[tokio::test]
async fn a_process_that_outlives_its_deleted_node_is_fenced_before_its_replacement_serves() {
    outlived_pod(Assertion::DeleteNode).await;
}

/// Three members serving; then slot 1's node is cut off from the API server (its process
/// keeps serving) and cordoned. Returns the members' addresses before, slot 1's run id and
/// its node.
async fn serving_then_partitioned(env: &Env, max_lock_ttl: &str) -> (Vec<IpAddr>, String, String) {
    env.create_cluster(
        NAME,
        json!({"instances": 3, "maxLockTTL": max_lock_ttl, "holdMargin": "0s"}),
    )
    .await;
    env.wait_ready(NAME, 3, Duration::from_secs(40)).await;
    let old: Vec<IpAddr> = env.member_ips(NAME, 3).await;
    let old_run = env.member(NAME, 1).await.unwrap().run_id.unwrap();
    let node = env.node_of(NAME, 1).await;
    env.partition_and_cordon(&node).await;
    (old, old_run, node)
}

async fn outlived_pod(assertion: Assertion) {
    let env = Env::start(4).await;
    let (old, old_run, node) = serving_then_partitioned(&env, "3s").await;
    let login = env.client_login(NAME).await;
    match assertion {
        Assertion::ForceDeletePod => {
            env.pods()
                .delete(&format!("{NAME}-1"), &DeleteParams::default().grace_period(0))
                .await
                .unwrap();
        }
        Assertion::DeleteNode => {
            Api::<Node>::all(env.cp.client())
                .delete(&node, &DeleteParams::default())
                .await
                .unwrap();
        }
    }

    // The replacement serves after its hold (after a node deletion, once the pod garbage
    // collector has removed the pod: it waits 40 s for a node to stay gone).
    env.wait_member(NAME, 1, "replacement released", Duration::from_secs(120), |m| {
        m.state == MemberState::Ready && m.run_id.as_deref() != Some(old_run.as_str())
    })
    .await;
    let new: Vec<IpAddr> = env.member_ips(NAME, 3).await;
    assert_ne!(new[1], old[1], "the replacement has another address");

    // Two clients, one with the current addresses and one with the old ones: the first takes
    // a lock on its majority {0, new 1}; the second must not get a majority of its own list
    // {0, old 1, 2}: with the old process fenced, only slot 2 is free to it.
    // Retried: status says Ready before the release itself (write-ahead), so the replacement
    // may refuse for a moment after the record the wait above saw.
    let ttl = Duration::from_secs(3);
    let fresh = [new[0], new[1]];
    wait_for(
        "the current list's client takes {0, new 1}",
        Duration::from_secs(10),
        async || {
            let (granted, valid) = redlock_attempt(&fresh, &login, "orders", "fresh-client", ttl).await;
            Ok((granted == 2 && valid).then_some(()))
        },
    )
    .await;
    let (granted, valid) = redlock_attempt(&old, &login, "orders", "stale-client", ttl).await;
    assert!(
        !valid,
        "the stale client got a majority of the old list ({granted} of 3) while the fresh one holds the lock"
    );
    assert_eq!(granted, 1, "only slot 2 granted it");

    // What kept the stale client out: the operator looked for the old process at its last
    // address, found it still letting lock clients in (the event says so) and fenced it there.
    env.wait_event("UnstoppedProcessFenced").await;
    assert!(
        connect(old[1], &login).await.is_err(),
        "the old process no longer lets lock clients log in"
    );
}

/// The fresh-clone CI violation's shape: the old process's node is cut off from the API
/// server, its pod force-deleted, and the operator cannot reach the old process (here it is
/// paused, as a loaded machine or a partition that cuts the operator off would leave it) nor
/// its kubelet. A timeout is no evidence: the replacement stays held after its hold has run,
/// says why (message, Warning `ReleaseWaitsForProcessGone`), and no client gets slot 1. When
/// the old process answers again with its client user on, it is fenced there, and the slot is
/// released only after that fence was seen, once a new hold has run.
#[tokio::test]
async fn a_slot_whose_old_process_cannot_be_reached_stays_held_until_it_is_found_fenced() {
    let env = Env::start(4).await;
    let (old, old_run, _node) = serving_then_partitioned(&env, "3s").await;
    let login = env.client_login(NAME).await;
    let pid = pause_and_force_delete_member_1(&env).await;
    let waiting = env
        .wait_member(
            NAME,
            1,
            "hold ended, release waits",
            Duration::from_secs(90),
            |m| {
                m.state == MemberState::Held
                    && m.run_id.as_deref().is_some_and(|r| r != old_run)
                    && m.held_until
                        .as_ref()
                        .is_some_and(|u| u.0 < k8s_openapi::jiff::Timestamp::now())
                    && m.message
                        .as_deref()
                        .is_some_and(|t| t.contains("may still grant locks"))
            },
        )
        .await;
    env.wait_event("ReleaseWaitsForProcessGone").await;
    let new_ip = env.pod_ip(NAME, 1).await;
    // Held well past its hold: no client gets slot 1 through the replacement.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let m = env.member(NAME, 1).await.unwrap();
    assert_eq!(m.state, MemberState::Held, "released without evidence: {m:?}");
    assert!(
        connect(new_ip, &login).await.is_err(),
        "the replacement lets lock clients in while the old process may serve"
    );

    // The old process answers again, its keys and its client user intact: fenced there.
    resume_and_see_it_fenced(&env, pid, old[1], &login).await;
    // Then, seen fenced, the replacement serves after a hold.
    let released = env
        .wait_member(NAME, 1, "replacement released", Duration::from_secs(60), |m| {
            m.state == MemberState::Ready && m.run_id == waiting.run_id
        })
        .await;
    assert!(
        released.unstopped.as_ref().is_none_or(|u| u.fenced),
        "{released:?}"
    );
    assert!(
        connect(old[1], &login).await.is_err(),
        "the old process stays fenced"
    );
}

/// The model check's second finding (docs/model-check.md): the old process of slot 1 outlives
/// its force-deleted pod, unreachable (paused, its node cut off), and the status is then
/// wiped (a backup restored without it). The replacement pod carries the record of the old
/// process (`redlock.dev/unstopped-predecessor`), so the operator, with no status to go on,
/// holds the replacement and keeps it held past its hold while the old process may serve:
/// no lock client gets in. When the old process answers again it is fenced there, and the
/// replacement is released after a new hold.
#[tokio::test]
async fn a_wiped_status_keeps_a_replacement_held_while_its_old_process_may_serve() {
    let env = Env::start(4).await;
    let (old, old_run, _node) = serving_then_partitioned(&env, "3s").await;
    let login = env.client_login(NAME).await;
    let pid = pause_and_force_delete_member_1(&env).await;
    let predecessor = wait_for(
        "the replacement pod, recording the old process",
        Duration::from_secs(30),
        async || {
            let pod = env.pods().get_opt(&format!("{NAME}-1")).await?;
            Ok(pod.and_then(|p| {
                p.metadata
                    .annotations?
                    .get("redlock.dev/unstopped-predecessor")
                    .cloned()
            }))
        },
    )
    .await;
    assert!(predecessor.contains(&old_run), "{predecessor}");

    wipe_status(&env).await;
    // Planned anew from the pods alone.
    let recalled = replacement_held_past_its_hold(&env, &old_run, &login).await;
    // What kept it held: the old process, taken back from the pod's record (the wiped
    // status had none), and not found.
    assert!(
        recalled
            .unstopped
            .as_ref()
            .is_some_and(|u| u.run_id == old_run && !u.fenced)
            && recalled
                .message
                .as_deref()
                .is_some_and(|t| t.contains("may still grant locks")),
        "{recalled:?}"
    );

    // The old process answers again, its client user on: fenced there, then the replacement
    // serves after a hold.
    resume_and_see_it_fenced(&env, pid, old[1], &login).await;
    env.wait_member(NAME, 1, "replacement released", Duration::from_secs(60), |m| {
        m.state == MemberState::Ready && m.run_id.is_some() && m.run_id != Some(old_run.clone())
    })
    .await;
}

/// The model check's third finding (docs/model-check.md): the old process of slot 1 outlives
/// its force-deleted pod, unreachable (paused, its node cut off), and the status is wiped
/// before any reconcile saw the pod vanish (here the operator is down meanwhile), so no
/// replacement records it and the status says nothing of the slot. The ledger
/// (`<name>-ledger`, written before the old process was released) names it: the operator
/// takes it back as a process that outlived its pod, holds the replacement past its hold,
/// and no lock client gets in until the old process is found and fenced.
#[tokio::test]
async fn a_status_wiped_before_a_cut_off_pod_is_seen_gone_keeps_the_ledgers_process_looked_for() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let mut env = Env::start(4).await;
    let (old, old_run, _node) = serving_then_partitioned(&env, "3s").await;
    let login = env.client_login(NAME).await;
    let ledger = Api::<ConfigMap>::namespaced(env.cp.client(), &env.ns)
        .get(&format!("{NAME}-ledger"))
        .await
        .unwrap();
    let processes = ledger
        .data
        .unwrap_or_default()
        .remove("processes")
        .unwrap_or_default();
    assert!(
        processes.contains(&old_run),
        "the ledger names the serving process: {processes}"
    );

    env.operator.kill().unwrap();
    let pid = pause_and_force_delete_member_1(&env).await;
    wipe_status(&env).await;
    env.operator = start_operator(&env.cp, "operator-2.log").await;

    // Planned anew with no status and no pod for slot 1.
    let held = replacement_held_past_its_hold(&env, &old_run, &login).await;
    // What kept it held: the ledger's process, taken back (nothing else recorded it).
    assert!(
        held.unstopped
            .as_ref()
            .is_some_and(|u| u.run_id == old_run && !u.fenced)
            && held.message.as_deref().is_some_and(|t| t.contains(&old_run)),
        "{held:?}"
    );

    resume_and_see_it_fenced(&env, pid, old[1], &login).await;
    env.wait_member(NAME, 1, "replacement released", Duration::from_secs(60), |m| {
        m.state == MemberState::Ready && m.run_id.is_some() && m.run_id != Some(old_run.clone())
    })
    .await;
}

/// The cluster's status wiped (a backup restored without it).
async fn wipe_status(env: &Env) {
    use kube::api::{Patch, PatchParams};
    env.clusters()
        .patch_status(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": null})),
        )
        .await
        .unwrap();
}

/// After a wiped status, once slot 1's replacement (a process other than `old_run`) is
/// identified: its hold (3 s) long over with the old process not found, it is still held and
/// lets no lock client in. Returns its record.
async fn replacement_held_past_its_hold(
    env: &Env,
    old_run: &str,
    login: &Login,
) -> redlock_operator::crd::MemberStatus {
    env.wait_member(
        NAME,
        1,
        "a replacement identified",
        Duration::from_secs(60),
        |m| m.run_id.as_deref().is_some_and(|r| r != old_run),
    )
    .await;
    let new_ip = env.pod_ip(NAME, 1).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let held = env.member(NAME, 1).await.unwrap();
    assert!(
        connect(new_ip, login).await.is_err(),
        "the replacement lets lock clients in while the old process may serve: {held:?}"
    );
    assert!(
        held.state.is_holding(),
        "released without evidence after a wipe: {held:?}"
    );
    held
}

/// Audit finding D: a scale-down 5 → 3 while the two removed members' node is cut off, and
/// neither answers the operator (paused, as if the partition cut it off too) until their pods
/// were force-deleted. Nothing shows their processes stopped; when they answer again, with
/// their client users on, clients still told the list of 5 could lock on {2, 3, 4} while a
/// client of the list of 3 holds {0, 1}: two majorities. The operator looks for both at their
/// last addresses and fences them there, so the old-list client gets only slot 2.
#[tokio::test]
async fn removed_members_that_outlive_their_pods_are_fenced_before_old_list_clients_reach_them() {
    use nix::sys::signal::{Signal, kill};
    let env = Env::start(6).await;
    let (old, login, paused) = scaled_down_with_removed_members_cut_off(&env, &[3, 4]).await;
    // They answer again, their keys and client users intact.
    for pid in paused {
        kill(pid, Signal::SIGCONT).unwrap();
    }
    for slot in [3, 4] {
        wait_for("the old process fenced", Duration::from_secs(15), async || {
            Ok(connect(old[slot], &login).await.is_err().then_some(()))
        })
        .await;
    }
    env.wait_event("UnstoppedProcessFenced").await;

    let ttl = Duration::from_secs(3);
    let (granted, _) = redlock_attempt(&old[..2], &login, "orders", "new-list-client", ttl).await;
    assert_eq!(granted, 2, "the list of 3's client takes {{0, 1}}");
    let (granted, valid) = redlock_attempt(&old, &login, "orders", "old-list-client", ttl).await;
    assert!(
        !valid,
        "a client of the list of 5 got a majority ({granted} of 5) while the list of 3's client holds the lock"
    );
    assert_eq!(granted, 1, "only slot 2 granted it");
}

/// A scale-down 5 → 3 whose removed `slots` are cut off (node partitioned, process paused) and
/// force-deleted; returns the old addresses, the client login and the paused processes.
async fn scaled_down_with_removed_members_cut_off(
    env: &Env,
    slots: &[i32],
) -> (Vec<IpAddr>, Login, Vec<nix::unistd::Pid>) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    env.create_cluster(
        NAME,
        json!({"instances": 5, "maxLockTTL": "3s", "holdMargin": "0s"}),
    )
    .await;
    env.wait_ready(NAME, 5, Duration::from_secs(60)).await;
    let old: Vec<IpAddr> = env.member_ips(NAME, 5).await;
    let login = env.client_login(NAME).await;
    let mut paused = Vec::new();
    for &slot in slots {
        let node = env.node_of(NAME, slot).await;
        env.cp.nodes().partition_node(&node).unwrap();
        let pid = env
            .cp
            .nodes()
            .pid(&env.ns, &format!("{NAME}-{slot}"))
            .await
            .unwrap();
        let pid = Pid::from_raw(pid as i32);
        kill(pid, Signal::SIGSTOP).unwrap();
        paused.push(pid);
    }
    env.patch_spec(NAME, json!({"instances": 3})).await;
    for &slot in slots {
        env.pods()
            .delete(
                &format!("{NAME}-{slot}"),
                &DeleteParams::default().grace_period(0),
            )
            .await
            .unwrap();
    }
    for &slot in slots {
        env.wait_member(NAME, slot, "looked for", Duration::from_secs(30), |m| {
            m.unstopped.as_ref().is_some_and(|u| !u.fenced)
        })
        .await;
    }
    (old, login, paused)
}

/// The same scale-down with removed member 4's process cut off through its whole hold: the
/// list of 3 is published relying on that process being dead, and a Warning
/// `ReleaseAssumesProcessGone` on the member says so, as a slot's release does (§9.5).
#[tokio::test]
async fn publishing_the_shorter_list_over_a_removed_process_never_found_says_so() {
    use nix::sys::signal::{Signal, kill};
    let env = Env::start(6).await;
    let (_, _, paused) = scaled_down_with_removed_members_cut_off(&env, &[4]).await;
    wait_for("the list of 3 published", Duration::from_secs(30), async || {
        let c = env.cluster(NAME).await;
        Ok((c.status.and_then(|s| s.published_instances) == Some(3)).then_some(()))
    })
    .await;
    env.wait_event("ReleaseAssumesProcessGone").await;
    for pid in paused {
        kill(pid, Signal::SIGCONT).unwrap();
    }
}

/// Safety review 3, N3, and the kubelet's evidence: a member force-deleted on a healthy node
/// while its process does not answer (paused, so it neither answers nor refuses; its kubelet
/// kills it, and its address then leads nowhere once its network namespace is gone). Its
/// kubelet's list of running pods, or its address refusing while the namespace remains, shows
/// it gone: the replacement is released on that evidence, the search ends
/// (`UnstoppedProcessGone`, naming it), and the record keeps nothing the cluster would wait for
/// again.
#[tokio::test]
async fn a_force_deleted_member_is_proven_gone_by_its_kubelet_and_its_search_ends() {
    let env = Env::start(4).await;
    env.create_cluster(
        NAME,
        json!({"instances": 3, "maxLockTTL": "3s", "holdMargin": "0s"}),
    )
    .await;
    env.wait_ready(NAME, 3, Duration::from_secs(60)).await;
    let before = env.member(NAME, 1).await.unwrap();
    assert!(
        before.pod_uid.is_some() && before.node.is_some(),
        "the record names its process's pod and node: {before:?}"
    );
    pause_and_force_delete_member_1(&env).await;
    let m = env
        .wait_member(
            NAME,
            1,
            "replacement released, search ended",
            Duration::from_secs(120),
            |m| m.state == MemberState::Ready && m.run_id != before.run_id && m.unstopped.is_none(),
        )
        .await;
    assert!(m.message.is_none(), "{m:?}");
    // Events are published after the status write that ended the search: wait for it.
    let gone: Vec<String> = wait_for(
        "event UnstoppedProcessGone",
        Duration::from_secs(15),
        async || {
            let events: kube::api::ObjectList<k8s_openapi::api::events::v1::Event> =
                Api::namespaced(env.cp.client(), &env.ns)
                    .list(&Default::default())
                    .await?;
            let notes: Vec<String> = events
                .items
                .iter()
                .filter(|e| e.reason.as_deref() == Some("UnstoppedProcessGone"))
                .filter_map(|e| e.note.clone())
                .collect();
            Ok((!notes.is_empty()).then_some(notes))
        },
    )
    .await;
    // The kubelet kills the paused process; until its network namespace goes, its address
    // refuses, after that only the kubelet can tell. Either is positive evidence; which came
    // first depends on timing (both were seen in CI runs).
    let by_kubelet = gone
        .iter()
        .any(|n| n.contains("the kubelet of node") && n.contains("runs no container of its pod"));
    let by_refusal = gone.iter().any(|n| n.contains("its address refuses connections"));
    assert!(
        by_kubelet || by_refusal,
        "positive evidence ended the search: {gone:?}"
    );
    println!(
        "proven gone by {}",
        if by_kubelet {
            "its kubelet"
        } else {
            "its address refusing"
        }
    );
}

/// The paused old process of slot 1 resumed (SIGCONT) with its client user on: the operator
/// finds it at its last address `ip` and fences it there (the event says so).
async fn resume_and_see_it_fenced(env: &Env, pid: nix::unistd::Pid, ip: IpAddr, login: &Login) {
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    wait_for("the old process fenced", Duration::from_secs(15), async || {
        Ok(connect(ip, login).await.is_err().then_some(()))
    })
    .await;
    env.wait_event("UnstoppedProcessFenced").await;
}

/// Slot 1's process paused (SIGSTOP: it neither answers nor refuses) and its pod
/// force-deleted; returns the process, to resume it. The node's runtime knows its processes
/// also while its kubelet is cut off.
async fn pause_and_force_delete_member_1(env: &Env) -> nix::unistd::Pid {
    use nix::sys::signal::{Signal, kill};
    let pid =
        nix::unistd::Pid::from_raw(env.cp.nodes().pid(&env.ns, &format!("{NAME}-1")).await.unwrap() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    env.pods()
        .delete(&format!("{NAME}-1"), &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    pid
}
