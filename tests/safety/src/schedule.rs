//! The fault schedule: which fault, on which members, for how long, and the pause before it,
//! all drawn from one seed so a failing run can be replayed exactly (`SAFETY_SEED`).
//!
//! Kinds come in shuffled rounds ("decks") of every kind, so any run of at least
//! `FaultKind::ALL.len()` faults has each kind once, and long runs have them evenly.

use serde::Serialize;

use crate::rng::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// `kill -9` of one member's redis-server.
    KillOne,
    /// `kill -9` of a minority (N/2 members, at least one, fewer than a quorum).
    KillMinority,
    /// `kill -9` of a majority (a quorum of members) at once.
    KillMajority,
    /// The member's pod is deleted (the operator creates a replacement).
    DeletePod,
    /// SIGSTOP of one member, SIGCONT after `duration_ms` (a frozen process keeps its keys).
    StopCont,
    /// `kill -9` of one member, then the operator is killed while the member is held, stays
    /// down past the hold's end, and is restarted.
    OperatorKill,
    /// The node of one member stops reporting and its processes die; restored after
    /// `duration_ms`.
    NodeLoss,
    /// An everyday operation: `maxLockTTL` lowered to a quarter while every client keeps using
    /// the old TTL, then one member is killed; raised back once it serves again.
    TtlLower,
    /// An everyday operation: the RedlockCluster is deleted and re-created with the same name
    /// and spec (`kubectl replace --force`, a GitOps replace), and the old pods are
    /// force-deleted at once; every member is replaced.
    Recreate,
    /// `kill -9` of one member, then the operator is killed while the member is held and a
    /// replacement operator whose wall clock runs 20 s ahead takes over (its clock offset
    /// bound set loose, so that timing the hold on its own clock is what protects it);
    /// healed by restarting the operator with a true clock.
    OperatorSkew,
    /// The node of one member is cut off from the API server while its process keeps
    /// serving; the node is cordoned and the pod force-deleted (an administrator asserting
    /// the process dead); healed (the old process killed, the node uncordoned) once the
    /// replacement serves.
    Partition,
    /// As `Partition`, but the administrator deletes the Node object instead (`kubectl
    /// delete node`): the pod garbage collector removes its pods once the node stays gone
    /// (40 s), while the old process keeps serving. Healed once the replacement serves: the
    /// node's kubelet starts anew, registers the Node again and kills the orphaned process.
    PartitionDeleteNode,
    /// An everyday operation: scale-down to a bare quorum of the members while every client
    /// keeps the list of all of them (clients on the old list), until the shorter list is
    /// published and the removed pods are gone; then scale-up back, which is the list the
    /// clients have (clients on the new list), confirmed once the operator asks for it. The
    /// members hit are the highest slots, the ones a scale-down removes.
    Resize,
    /// The wall clock of one member's host steps `clock_jump_s` forward (more than any lock's
    /// TTL, so every lock on it expires at once) while its process keeps serving; healed by
    /// stepping it back to true time once the member serves again after the operator's hold
    /// (in the control, after `duration_ms`). Needs Redis under libfaketime (the process
    /// kubelet's per-node clocks); not run on real nodes.
    MemberClockJump,
    /// An insider with the operator's admin login fences one member by hand (`ACL SETUSER
    /// <client> off`, its clients' connections killed) while its process keeps its keys, and
    /// switches it back on after `duration_ms`, within the hold the operator starts when it
    /// finds the fence (a fence may hide a flush). In the control, where no hold exists, the
    /// harm a fence can hide: the member loses its keys.
    HandFence,
    /// Every status write of the RedlockCluster refused by an admission policy for
    /// `duration_ms`, while one member is killed (`kill -9`) at its start: the hold cannot be
    /// written, so the replacement process (which starts fenced) must stay fenced until a write
    /// that holds it lands. In the control: the kill.
    WritesRefused,
    /// A second operator, elected with another Lease (a renamed or second install), runs
    /// beside the first; one member is killed, and the first operator is killed while that
    /// member is held. The second takes the cluster over once the first's Lease lapses, and
    /// holds and releases it; then the first comes back and the second stops (giving its Lease
    /// up), and the first takes the cluster back. In the control: the kill.
    TwoOperators,
}

impl FaultKind {
    pub const ALL: [FaultKind; 17] = [
        FaultKind::KillOne,
        FaultKind::KillMinority,
        FaultKind::KillMajority,
        FaultKind::DeletePod,
        FaultKind::StopCont,
        FaultKind::OperatorKill,
        FaultKind::NodeLoss,
        FaultKind::TtlLower,
        FaultKind::Recreate,
        FaultKind::OperatorSkew,
        FaultKind::Partition,
        FaultKind::PartitionDeleteNode,
        FaultKind::Resize,
        FaultKind::MemberClockJump,
        FaultKind::HandFence,
        FaultKind::WritesRefused,
        FaultKind::TwoOperators,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::KillOne => "kill-one",
            FaultKind::KillMinority => "kill-minority",
            FaultKind::KillMajority => "kill-majority",
            FaultKind::DeletePod => "delete-pod",
            FaultKind::StopCont => "stop-cont",
            FaultKind::OperatorKill => "operator-kill",
            FaultKind::NodeLoss => "node-loss",
            FaultKind::TtlLower => "ttl-lower",
            FaultKind::Recreate => "recreate",
            FaultKind::OperatorSkew => "operator-skew",
            FaultKind::Partition => "partition",
            FaultKind::PartitionDeleteNode => "partition-delete-node",
            FaultKind::Resize => "resize",
            FaultKind::MemberClockJump => "member-clock-jump",
            FaultKind::HandFence => "hand-fence",
            FaultKind::WritesRefused => "writes-refused",
            FaultKind::TwoOperators => "two-operators",
        }
    }

    /// The kind named `name` (as `name()` spells it).
    pub fn from_name(name: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether the fault needs members whose host clock the harness can step (Redis under
    /// libfaketime), which real nodes' images do not have.
    pub fn needs_member_clocks(self) -> bool {
        self == FaultKind::MemberClockJump
    }

    /// How many of `n` members the fault hits.
    pub fn members(self, n: usize) -> usize {
        match self {
            FaultKind::KillMinority => (n / 2).max(1).min(n.saturating_sub(1).max(1)),
            FaultKind::KillMajority => n / 2 + 1,
            FaultKind::Recreate => n,
            // Down to a bare quorum (n/2 + 1 members).
            FaultKind::Resize => n - (n / 2 + 1),
            _ => 1,
        }
    }
}

/// One planned fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fault {
    pub index: usize,
    pub kind: FaultKind,
    /// Member slots hit, sorted.
    pub members: Vec<usize>,
    /// How long the fault lasts before the harness heals it (SIGCONT, node restore, operator
    /// restart after the hold, a clock stepped back); 0 for faults that heal on their own.
    pub duration_ms: u64,
    /// How far a member's clock jumps forward (`MemberClockJump`), in seconds; 0 otherwise.
    pub clock_jump_s: u64,
    /// Pause after the previous fault recovered, before this one is injected.
    pub gap_ms: u64,
}

/// Tunables of the schedule.
#[derive(Debug, Clone)]
pub struct ScheduleConfig {
    pub members: usize,
    /// The kinds dealt, each once per round (default: all of them).
    pub kinds: Vec<FaultKind>,
    pub gap_ms: (u64, u64),
    pub stop_ms: (u64, u64),
    pub node_loss_ms: (u64, u64),
    /// How long the operator stays down beyond the hold.
    pub operator_down_extra_ms: (u64, u64),
    /// How far a member's clock jumps: beyond the longest lock TTL of either run (the
    /// operator run's 3 s and the control's 10 s), so every lock on it expires at once.
    pub clock_jump_s: (u64, u64),
    /// How long a jumped clock stays ahead at least (in the operator run also until the
    /// member serves again after its hold).
    pub clock_ahead_ms: (u64, u64),
    /// How long an insider's hand fence lasts before the insider switches the member back on
    /// (within the operator run's 3.53 s hold, so the operator must fence it again).
    pub hand_fence_ms: (u64, u64),
    /// How long status writes stay refused.
    pub refusal_ms: (u64, u64),
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        Self {
            members: 5,
            kinds: FaultKind::ALL.to_vec(),
            gap_ms: (200, 1500),
            stop_ms: (500, 3000),
            // Shorter than the control plane's node-monitor grace period (8 s in envtest):
            // the pod is never evicted while its node is away.
            node_loss_ms: (1500, 5000),
            operator_down_extra_ms: (200, 2000),
            clock_jump_s: (15, 60),
            // About what the operator run's detection and hold take (1–2 s + 3.53 s).
            clock_ahead_ms: (3000, 6000),
            hand_fence_ms: (300, 2500),
            refusal_ms: (2000, 8000),
        }
    }
}

pub fn schedule(seed: u64, count: usize, cfg: &ScheduleConfig) -> Vec<Fault> {
    assert!(!cfg.kinds.is_empty(), "a schedule needs at least one fault kind");
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(count);
    let mut deck: Vec<FaultKind> = Vec::new();
    while out.len() < count {
        if deck.is_empty() {
            deck = cfg.kinds.clone();
            rng.shuffle(&mut deck);
        }
        let kind = deck.pop().expect("refilled above");
        let mut members = rng.choose(cfg.members, kind.members(cfg.members));
        if kind == FaultKind::Resize {
            // A scale-down removes the highest slots.
            members = (cfg.members - members.len()..cfg.members).collect();
        }
        let duration_ms = match kind {
            FaultKind::StopCont => rng.range(cfg.stop_ms.0, cfg.stop_ms.1),
            FaultKind::NodeLoss => rng.range(cfg.node_loss_ms.0, cfg.node_loss_ms.1),
            FaultKind::OperatorKill => rng.range(cfg.operator_down_extra_ms.0, cfg.operator_down_extra_ms.1),
            FaultKind::MemberClockJump => rng.range(cfg.clock_ahead_ms.0, cfg.clock_ahead_ms.1),
            FaultKind::HandFence => rng.range(cfg.hand_fence_ms.0, cfg.hand_fence_ms.1),
            FaultKind::WritesRefused => rng.range(cfg.refusal_ms.0, cfg.refusal_ms.1),
            _ => 0,
        };
        let clock_jump_s = match kind {
            FaultKind::MemberClockJump => rng.range(cfg.clock_jump_s.0, cfg.clock_jump_s.1),
            _ => 0,
        };
        let gap_ms = rng.range(cfg.gap_ms.0, cfg.gap_ms.1);
        out.push(Fault {
            index: out.len(),
            kind,
            members,
            duration_ms,
            clock_jump_s,
            gap_ms,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproducible_from_the_seed() {
        let cfg = ScheduleConfig::default();
        assert_eq!(schedule(7, 50, &cfg), schedule(7, 50, &cfg));
        assert_ne!(schedule(7, 50, &cfg), schedule(8, 50, &cfg));
        // A shorter run is a prefix of a longer one with the same seed.
        assert_eq!(schedule(7, 10, &cfg)[..], schedule(7, 50, &cfg)[..10]);
    }

    #[test]
    fn every_kind_appears_in_every_round() {
        let n = FaultKind::ALL.len();
        let s = schedule(3, n * 30, &ScheduleConfig::default());
        for round in s.chunks(n) {
            let mut kinds: Vec<FaultKind> = round.iter().map(|f| f.kind).collect();
            kinds.sort();
            assert_eq!(kinds, FaultKind::ALL.to_vec());
        }
    }

    #[test]
    fn member_counts_fit_the_kind() {
        assert_eq!(FaultKind::KillMinority.members(5), 2);
        assert_eq!(FaultKind::KillMajority.members(5), 3);
        assert_eq!(FaultKind::KillMinority.members(3), 1);
        assert_eq!(FaultKind::KillMajority.members(3), 2);
        assert_eq!(FaultKind::KillMinority.members(7), 3);
        assert_eq!(FaultKind::KillMajority.members(7), 4);
        for f in schedule(11, 70, &ScheduleConfig::default()) {
            assert_eq!(f.members.len(), f.kind.members(5), "{f:?}");
            assert!(f.members.iter().all(|m| *m < 5));
            // A minority never reaches a quorum, a majority always does; a resize removes
            // the highest slots down to a bare quorum.
            match f.kind {
                FaultKind::Resize => assert_eq!(f.members, vec![3, 4]),
                FaultKind::KillMinority => assert!(f.members.len() < 3),
                FaultKind::KillMajority => assert!(f.members.len() >= 3),
                _ => {}
            }
        }
    }

    #[test]
    fn durations_and_gaps_follow_the_config() {
        let cfg = ScheduleConfig::default();
        for f in schedule(5, 140, &cfg) {
            assert!((cfg.gap_ms.0..=cfg.gap_ms.1).contains(&f.gap_ms));
            let (lo, hi) = match f.kind {
                FaultKind::StopCont => cfg.stop_ms,
                FaultKind::NodeLoss => cfg.node_loss_ms,
                FaultKind::OperatorKill => cfg.operator_down_extra_ms,
                FaultKind::MemberClockJump => cfg.clock_ahead_ms,
                FaultKind::HandFence => cfg.hand_fence_ms,
                FaultKind::WritesRefused => cfg.refusal_ms,
                _ => (0, 0),
            };
            assert!((lo..=hi).contains(&f.duration_ms), "{f:?}");
            let (lo, hi) = match f.kind {
                FaultKind::MemberClockJump => cfg.clock_jump_s,
                _ => (0, 0),
            };
            assert!((lo..=hi).contains(&f.clock_jump_s), "{f:?}");
        }
    }

    #[test]
    fn only_the_configured_kinds_are_dealt() {
        let kinds: Vec<FaultKind> = FaultKind::ALL
            .into_iter()
            .filter(|k| !k.needs_member_clocks())
            .collect();
        let cfg = ScheduleConfig {
            kinds: kinds.clone(),
            ..Default::default()
        };
        let s = schedule(9, kinds.len() * 5, &cfg);
        for round in s.chunks(kinds.len()) {
            let mut dealt: Vec<FaultKind> = round.iter().map(|f| f.kind).collect();
            dealt.sort();
            assert_eq!(dealt, kinds);
        }
        assert!(s.iter().all(|f| f.kind != FaultKind::MemberClockJump));
        for k in FaultKind::ALL {
            assert_eq!(FaultKind::from_name(k.name()), Some(k));
        }
        assert_eq!(FaultKind::from_name("no-such-kind"), None);
    }
}
