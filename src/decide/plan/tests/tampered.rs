//! A process whose settings show it can drop keys while it runs (safety review 3, N1).

use super::*;

fn deviating(run: &str, enabled: bool, container: &str) -> SlotObservation {
    let mut o = running(run, enabled, container);
    if let Probe::Answered(info) = &mut o.probe {
        info.deviations =
            vec!["maxmemory-policy is allkeys-lru (keys, locks among them, may be evicted)".into()];
    }
    o
}

/// An insider's `CONFIG SET maxmemory-policy allkeys-lru` on a serving member (or a
/// `REPLICAOF`, or keys evicted): fenced at once, held in full from now, its pod replaced.
#[test]
fn a_serving_process_whose_settings_changed_is_fenced_held_and_replaced() {
    let members = [ready(0, "A", "c1")];
    let p = plan(
        &input(1, &members, at(NOW)),
        &observed([(0, deviating("A", true, "c1"))]),
    );
    assert_eq!(p.fences, vec![(Slot::new(0), "A".to_owned())]);
    assert_eq!(p.delete_pods, vec![Slot::new(0)]);
    assert!(p.releases.is_empty());
    let m = &p.members[0];
    assert_eq!(m.state, MemberState::Held);
    assert_eq!(
        m.held_until.as_ref().unwrap().0,
        held_until(at(NOW), input(1, &members, at(NOW)).hold)
    );
    let e = p
        .events
        .iter()
        .find(|e| e.reason == MemberReason::ProcessTampered)
        .expect("told");
    assert!(e.warning && e.message.contains("allkeys-lru"), "{}", e.message);
    // The same member without the deviation: nothing happens.
    let p = plan(
        &input(1, &members, at(NOW)),
        &observed([(0, running("A", true, "c1"))]),
    );
    assert!(p.fences.is_empty() && p.delete_pods.is_empty());
    assert_eq!(p.members[0].state, MemberState::Ready);
}

/// A held process that deviates is never released, even once its hold has run, also when a
/// crash left its `Ready` record fenced; its pod is replaced.
#[test]
fn a_deviating_process_is_never_released() {
    let held_done = [held(0, "A", "c1", at(NOW - 1))];
    let p = plan(
        &input(1, &held_done, at(NOW)),
        &observed([(0, deviating("A", false, "c1"))]),
    );
    assert!(p.releases.is_empty(), "{p:?}");
    assert_eq!(p.delete_pods, vec![Slot::new(0)]);
    assert_eq!(p.members[0].state, MemberState::Held);
    // Its pod already terminating: nothing more to do, still not released.
    let mut terminating = deviating("A", false, "c1");
    if let PodState::Running { terminating: t, .. } = &mut terminating.pod {
        *t = true;
    }
    let p = plan(&input(1, &held_done, at(NOW)), &observed([(0, terminating)]));
    assert!(
        p.releases.is_empty() && p.delete_pods.is_empty() && p.events.is_empty(),
        "{p:?}"
    );
    // The control: without the deviation it is released.
    let p = plan(
        &input(1, &held_done, at(NOW)),
        &observed([(0, running("A", false, "c1"))]),
    );
    assert_eq!(p.releases, vec![(Slot::new(0), "A".to_owned())]);
    // A `Ready` record whose process is fenced (the release-again case) and deviates.
    let members = [ready(0, "A", "c1")];
    let p = plan(
        &input(1, &members, at(NOW)),
        &observed([(0, deviating("A", false, "c1"))]),
    );
    assert!(p.releases.is_empty(), "{p:?}");
    assert_eq!(p.members[0].state, MemberState::Held);
}
