//! `fenceSeenAt` (safety review 3, N5): a hold's fence counts as landed only once a probe
//! finds the process on record with no lock-client user on; what `kubectl redlock fence`
//! waits for.

use super::*;

/// (name, record, observation, `fenceSeenAt` of the planned record)
type SeenCase = (&'static str, MemberStatus, SlotObservation, Option<Timestamp>);

#[test]
fn a_fence_counts_as_landed_only_once_a_probe_finds_the_process_fenced() {
    let until = at(NOW + 20);
    let seen = at(NOW - 5);
    let held_seen = |run: &str| MemberStatus {
        fence_seen_at: micro(seen),
        ..held(0, run, "c1", until)
    };
    let cases: Vec<SeenCase> = vec![
        (
            "held, the probe finds it fenced: seen now",
            held(0, "A", "c1", until),
            running("A", false, "c1"),
            Some(at(NOW)),
        ),
        (
            "held and seen before, still fenced: the first moment stays",
            held_seen("A"),
            running("A", false, "c1"),
            Some(seen),
        ),
        (
            // The fence was undone (or never landed): not in place, fenced again.
            "held and seen before, now found serving",
            held_seen("A"),
            running("A", true, "c1"),
            None,
        ),
        (
            "held, not yet seen, found serving (the fence failed)",
            held(0, "A", "c1", until),
            running("A", true, "c1"),
            None,
        ),
        (
            // No answer proves nothing either way.
            "held and seen before, no answer",
            held_seen("A"),
            unreachable("c1"),
            Some(seen),
        ),
        (
            "held, never seen, no answer",
            held(0, "A", "c1", until),
            unreachable("c1"),
            None,
        ),
        (
            // The record is about the new process now: what was seen of the old one says
            // nothing about it.
            "held and seen before, a new process found fenced",
            held_seen("A"),
            running("B", false, "c2"),
            Some(at(NOW)),
        ),
        (
            // Released: no hold to confirm a fence of.
            "hold ended, released",
            MemberStatus {
                fence_seen_at: micro(seen),
                ..held(0, "A", "c1", at(NOW - 1))
            },
            running("A", false, "c1"),
            None,
        ),
    ];
    for (name, prev, obs, want) in cases {
        let members = vec![prev];
        let p = plan(&input(1, &members, at(NOW)), &observed([(0, obs)]));
        let got = &p.members[0];
        assert_eq!(got.fence_seen_at.as_ref().map(|t| t.0), want, "{name}: {got:?}");
    }
}
