//! An exhaustive model check of the hold rule over the operator's own decision code
//! (docs/model-check.md): [`model::HoldModel`] explores every interleaving of crashes,
//! restarts, pod deletions, stale caches, status wipes, operator restarts, clock steps and
//! maxLockTTL edits within its [`model::Bounds`], calling the operator's `decide` at every
//! reconcile, and checks that no two clients ever hold the lock at once.

pub mod model;
pub mod operator;

use std::time::{Duration, Instant};

use stateright::{Checker, Model};

use model::{Action, Bounds, HoldModel, State};

/// What one check found.
pub struct Outcome {
    pub states: usize,
    pub unique: usize,
    pub depth: usize,
    pub elapsed: Duration,
    /// Per `always` property violated: its counterexample, as the start and the actions.
    pub violations: Vec<(&'static str, State, Vec<Action>)>,
    /// `sometimes` properties no state showed (the model would be vacuous for them).
    pub never_seen: Vec<&'static str>,
}

/// Checks `bounds` exhaustively (breadth first: the counterexamples are shortest).
pub fn check(bounds: Bounds, threads: usize) -> Outcome {
    check_for(bounds, threads, None)
}

/// [`check`], stopped after `limit` when given (then the numbers are what was explored by
/// then, not the whole bound).
pub fn check_for(bounds: Bounds, threads: usize, limit: Option<Duration>) -> Outcome {
    let started = Instant::now();
    let model = HoldModel::new(bounds);
    let properties = model.properties();
    let mut builder = model.checker().threads(threads);
    if let Some(limit) = limit {
        builder = builder.timeout(limit);
    }
    let checker = builder.spawn_bfs().join();
    let mut violations = Vec::new();
    let mut never_seen = Vec::new();
    for p in properties {
        let found = checker.discovery(p.name);
        match (p.expectation, found) {
            (stateright::Expectation::Always, Some(path)) => {
                let start = path.clone().into_states().remove(0);
                violations.push((p.name, start, path.into_actions()));
            }
            (stateright::Expectation::Sometimes, None) => never_seen.push(p.name),
            _ => {}
        }
    }
    Outcome {
        states: checker.state_count(),
        unique: checker.unique_state_count(),
        depth: checker.max_depth(),
        elapsed: started.elapsed(),
        violations,
        never_seen,
    }
}

/// Replays `actions` from `start`, printing each step: the counterexample as a trace.
pub fn replay(bounds: Bounds, start: &State, actions: &[Action]) -> State {
    let model = HoldModel::new(bounds);
    let mut s = start.clone();
    for a in actions {
        s = model
            .step(&s, a.clone())
            .unwrap_or_else(|| panic!("{a:?} is not possible in {s:?}"));
    }
    s
}

/// A counterexample, one action a line with what clients and processes were then.
pub fn format_trace(bounds: &Bounds, start: &State, actions: &[Action]) -> String {
    let model = HoldModel::new(bounds.clone());
    let mut s = start.clone();
    let mut out = format!("  start: {}\n", summary(start));
    for a in actions {
        s = model
            .step(&s, a.clone())
            .expect("a trace the checker found replays");
        out.push_str(&format!("  {a:?}\n      -> {}\n", summary(&s)));
    }
    out
}

/// One line: time, each slot's process, the record, what clients were told, the locks.
pub fn summary(s: &State) -> String {
    let slots: Vec<String> = s
        .pods
        .iter()
        .map(|p| match p {
            None => "-".into(),
            Some(p) => match &p.process {
                None => "down".into(),
                // `+` serving; `!` its clock jumped and no write that judged it landed yet.
                Some(p) => format!(
                    "r{}{}{}",
                    p.run,
                    if p.serving { "+" } else { "" },
                    if p.jump_unrecorded { "!" } else { "" }
                ),
            },
        })
        .collect();
    let orphans: Vec<String> = s
        .orphans
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            p.as_ref()
                .map(|p| format!("{i}:r{}{}", p.run, if p.serving { "+" } else { "" }))
        })
        .collect();
    let members: Vec<String> = s.stored.status.0.as_ref().map_or(Vec::new(), |st| {
        st.members.iter().map(|m| format!("{:?}", m.state)).collect()
    });
    format!(
        "t={} procs=[{}] cut-off=[{}] status(v{})=[{}] cache=v{} told={:?} locks={:?}",
        s.now,
        slots.join(" "),
        orphans.join(" "),
        s.stored.version,
        members.join(" "),
        s.cache.version,
        s.published.as_ref().map(|p| (p.list, p.ttl)),
        s.locks
            .iter()
            .map(|l| (l.client, l.members.clone(), l.taken, l.ttl))
            .collect::<Vec<_>>()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::Start;
    use operator::MemberState;

    #[test]
    fn the_starts_are_reached_by_the_operator() {
        let m = HoldModel::new(Bounds::small());
        let s = m.start(Start::Serving);
        assert!(model::all_serving(&s), "{}", summary(&s));
    }

    #[test]
    fn a_serving_cluster_is_a_fixpoint_of_reconciles() {
        let m = HoldModel::new(Bounds::small());
        let s = m.start(Start::Serving);
        let r = Action::Reconcile {
            unreachable: None,
            write_refused: false,
            lagging: false,
        };
        assert_eq!(m.step(&s, r).as_ref(), Some(&s), "{}", summary(&s));
    }

    #[test]
    fn the_small_bound_holds() {
        let bounds = Bounds::small();
        let out = check(bounds.clone(), 2);
        let traces: Vec<String> = out
            .violations
            .iter()
            .map(|(name, start, actions)| format!("{name}:\n{}", format_trace(&bounds, start, actions)))
            .collect();
        assert!(traces.is_empty(), "{}", traces.join("\n"));
        assert!(out.never_seen.is_empty(), "vacuous: {:?}", out.never_seen);
        eprintln!(
            "small bound: {} states, depth {}, {:?}",
            out.states, out.depth, out.elapsed
        );
    }

    /// The `Serving` start of `bounds`, and a plain reconcile.
    fn serving(bounds: &Bounds) -> (State, Action) {
        let start = HoldModel::new(bounds.clone()).start(Start::Serving);
        let reconcile = Action::Reconcile {
            unreachable: None,
            write_refused: false,
            lagging: false,
        };
        (start, reconcile)
    }

    /// The `heal` finding (docs/model-check.md, "Findings"), replayed: a client's lock on a
    /// cut-off process that then dies is still valid when the replacement is released, so a
    /// second client gets a majority. Fixed: `plan::holding` runs the hold again from the
    /// evidence, so the replacement does not serve yet and the second lock cannot be taken.
    #[test]
    fn a_cut_off_process_that_dies_after_the_hold_leaves_no_lock_a_second_client_can_take() {
        let bounds = Bounds::named("heal").expect("a bound");
        let (start, reconcile) = serving(&bounds);
        let trace = [
            Action::CutOff(0),
            reconcile.clone(),
            Action::Tick,
            Action::Tick,
            Action::Lock {
                client: 0,
                slots: vec![0, 1],
                old: Some(0),
            },
            Action::Heal(0),
            reconcile,
            Action::Lock {
                client: 1,
                slots: vec![0, 2],
                old: None,
            },
        ];
        let (last, before) = trace.split_last().expect("a trace");
        let end = replay(bounds.clone(), &start, before);
        let after = HoldModel::new(bounds.clone()).step(&end, last.clone());
        assert!(
            after.is_none_or(|s| !model::two_holders(&s)),
            "two holders:\n{}",
            format_trace(&bounds, &start, &trace)
        );
    }

    /// The second finding (docs/model-check.md, "Findings"): a status wipe lost the record of
    /// a process that outlived its pod, and its replacement was released after one hold while
    /// that process still served. Fixed: the replacement pod carries that record
    /// (`children::pod::UNSTOPPED_PREDECESSOR`), which planning takes back when the status has
    /// no word of the pod, so the replacement waits for evidence the old process is gone.
    #[test]
    fn a_wipe_after_a_cut_off_keeps_the_old_process_looked_for() {
        let mut bounds = Bounds::full();
        bounds.faults = 2;
        let (start, reconcile) = serving(&bounds);
        let trace = [
            Action::CutOff(0),
            reconcile.clone(),
            Action::WipeStatus,
            Action::DeliverWatch,
            reconcile.clone(),
            Action::Tick,
            Action::Lock {
                client: 0,
                slots: vec![0, 2],
                old: Some(0),
            },
            Action::Tick,
            reconcile,
        ];
        let end = replay(bounds.clone(), &start, &trace);
        assert!(
            !model::serves_within_hold(&end),
            "serves within its hold:\n{}",
            format_trace(&bounds, &start, &trace)
        );
    }

    /// The third finding (docs/model-check.md, "Findings"): the status is wiped before the
    /// operator saw the cut-off pod vanish, so neither the status nor a replacement pod
    /// records its process. The slot looked new; its first process was held in full and
    /// released while the old one served on. Fixed: the ledger (`hold::ledger`, an object of
    /// its own) names every process before it is released, and planning takes its entry back
    /// for a slot with no record and no pod.
    #[test]
    fn a_wipe_before_the_operator_sees_a_cut_off_pod_vanish_keeps_the_ledgers_process_looked_for() {
        let mut bounds = Bounds::full();
        bounds.faults = 2;
        let (start, reconcile) = serving(&bounds);
        let trace = [
            Action::CutOff(0),
            Action::WipeStatus,
            Action::DeliverWatch,
            reconcile.clone(),
            reconcile.clone(),
            Action::Tick,
            Action::Lock {
                client: 0,
                slots: vec![0, 2],
                old: Some(0),
            },
            Action::Tick,
            reconcile.clone(),
            reconcile.clone(),
        ];
        let end = replay(bounds.clone(), &start, &trace);
        assert!(
            !model::serves_within_hold(&end),
            "serves within its hold:\n{}",
            format_trace(&bounds, &start, &trace)
        );
    }

    /// Found with two faults (`MODEL_FAULTS=2`, bound `full`): the status is wiped, then a
    /// member's clock jumps while a lock is on it. The reconcile that rebuilds the status
    /// adopted every serving process as it was, the jumped one too, so it served on without
    /// the key the lock relied on. Fixed: an adopted process is judged as any `Ready` member
    /// (`plan::unrecorded`), so its jump fences and holds it.
    #[test]
    fn a_wiped_status_does_not_adopt_a_member_whose_clock_jumped() {
        let mut bounds = Bounds::full();
        bounds.faults = 2;
        let (start, reconcile) = serving(&bounds);
        let trace = [
            Action::WipeStatus,
            Action::DeliverWatch,
            Action::Lock {
                client: 0,
                slots: vec![1, 2],
                old: None,
            },
            Action::MemberClockJump(2),
            reconcile,
        ];
        let end = replay(bounds.clone(), &start, &trace);
        assert!(
            !model::serves_within_hold(&end),
            "serves within its hold:\n{}",
            format_trace(&bounds, &start, &trace)
        );
    }

    /// Client 0 takes the lock on members 0 and 1; then member 0's clock jumps.
    fn locked_then_jumped() -> [Action; 2] {
        [
            Action::Lock {
                client: 0,
                slots: vec![0, 1],
                old: None,
            },
            Action::MemberClockJump(0),
        ]
    }

    /// A member clock's jump (docs/design.md §9.3) as the model has it: the lock key on it is
    /// gone at once, which the properties leave alone until a probe has looked at it (the
    /// limit of the claim) and count from then on.
    #[test]
    fn a_key_a_clock_jump_expired_counts_as_lost_once_a_probe_looked() {
        let bounds = Bounds::named("member-clock").expect("a bound");
        let (start, _) = serving(&bounds);
        let mut end = replay(bounds.clone(), &start, &locked_then_jumped());
        assert!(!model::serves_within_hold(&end), "{}", summary(&end));
        let p = end.pods[0]
            .as_mut()
            .and_then(|p| p.process.as_mut())
            .expect("a process");
        assert!(
            p.serving && p.key.is_none() && p.jump_unprobed,
            "{}",
            summary(&end)
        );
        p.jump_unprobed = false;
        assert!(model::serves_within_hold(&end), "{}", summary(&end));
    }

    /// The jump is fenced by the first probe that sees it and held in full from then; the
    /// status write that records it is refused and the operator restarts before another, so
    /// the next leader sees the jump again (its probes report it until a write judged it) and
    /// holds the member anew. No second client gets the lock while the first one's is valid.
    #[test]
    fn a_member_clock_jump_is_fenced_and_held_across_a_refused_write_and_a_restart() {
        let bounds = Bounds::named("member-clock").expect("a bound");
        let (start, reconcile) = serving(&bounds);
        let refused = Action::Reconcile {
            unreachable: None,
            write_refused: true,
            lagging: false,
        };
        let trace = [
            locked_then_jumped().to_vec(),
            vec![
                refused,
                Action::OperatorRestart,
                reconcile.clone(),
                Action::Tick,
                reconcile.clone(),
            ],
        ]
        .concat();
        let model = HoldModel::new(bounds.clone());
        let mut s = start.clone();
        for a in &trace {
            s = model.step(&s, a.clone()).expect("possible");
            assert!(
                !model::serves_within_hold(&s) && !model::two_holders(&s),
                "{}",
                format_trace(&bounds, &start, &trace)
            );
        }
        let p = s.pods[0]
            .as_ref()
            .and_then(|p| p.process.as_ref())
            .expect("a process");
        assert!(!p.serving && !p.jump_unrecorded, "{}", summary(&s));
        let held = s.stored.status.0.as_ref().map(|st| st.members[0].state);
        assert_eq!(held, Some(MemberState::Held), "{}", summary(&s));
        let second = Action::Lock {
            client: 1,
            slots: vec![0, 2],
            old: None,
        };
        assert!(model.step(&s, second).is_none(), "{}", summary(&s));
    }
}
