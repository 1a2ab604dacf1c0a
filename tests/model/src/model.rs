//! The model: one cluster's pods and processes, its object as stored and as the operator's
//! watch cache shows it, what clients were told, the operator's memory and clock, and the
//! clients' locks. Every reconcile calls the operator's own `decide` (and the ahead-of-write
//! bookkeeping of `fence_ahead` and `release_ahead`) on inputs built from this state, and
//! applies the decision as `reconcile` does: fences at once, releases ahead of the write only
//! from the operator's own last write, the status write conditional on the version planned
//! from, then releases, pod creations and the endpoints clients read.

use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use stateright::{Model, Property};

use crate::operator::*;

/// Seconds since the epoch of tick 0 (any fixed instant).
const T0: i64 = 1_800_000_000;

/// A value the model keeps but cannot hash itself (operator types): equal by `PartialEq`,
/// hashed by its debug text (equal values print alike).
#[derive(Clone, PartialEq, Default)]
pub struct Opaque<T>(pub T);

impl<T: fmt::Debug> Hash for Opaque<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        format!("{:?}", self.0).hash(state);
    }
}

impl<T: PartialEq> Eq for Opaque<T> {}

impl<T: fmt::Debug> fmt::Debug for Opaque<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The records are long; a trace shows them by `State`'s own summary.
        write!(f, "…")
    }
}

/// A Redis process: `run` names it (its run id is `r<run>`); `key` is the one lock key it
/// holds, by client and expiry (tick).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Process {
    pub run: u16,
    pub serving: bool,
    pub key: Option<(u8, u16)>,
    /// Its clock jumped forward (its key expired at once) and no probe has looked at it since:
    /// the window docs/safety.md "Clock jumps" states as the limit of the claim (no lock attempt
    /// is made in it, and the properties do not count its lost key).
    pub jump_unprobed: bool,
    /// Its clock jumped and no status write that judged it has landed: its probes report the
    /// jump (the operator keeps a clock sample only once the verdict is on record, and a new
    /// leader compares with the reading on record, `clock::record`).
    pub jump_unrecorded: bool,
}

/// A pod of a slot; `process` is `None` while its container does not run.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pod {
    pub uid: u16,
    pub process: Option<Process>,
    /// Its `redlock.dev/unstopped-predecessor` annotation, as the operator made it
    /// (`children::pod::replacement`): the record of a process the pod it replaced left behind.
    pub predecessor: Option<String>,
}

/// The RedlockCluster object at one version: its spec as the model varies it, and its status.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Object {
    pub version: u32,
    pub generation: i64,
    pub instances: i32,
    /// `spec.maxLockTTL`, seconds.
    pub ttl: u16,
    pub status: Opaque<Option<RedlockClusterStatus>>,
}

/// What `<name>-endpoints` tells clients.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Published {
    pub list: i32,
    pub confirmed: i32,
    pub ttl: u16,
    pub hold_ttl: u16,
}

/// The operator process's memory: lost when it restarts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Memory {
    /// The version its last status write produced.
    pub last_written: Option<u32>,
    pub timers: Opaque<ClusterTimers>,
    pub fences: Opaque<Vec<UnrecordedFence>>,
    pub releases: Opaque<Vec<UnrecordedRelease>>,
    /// Releases it decided and has not seen serving (`release_ahead::OwedReleases`).
    pub owed: Vec<(Slot, String)>,
    /// The wall clock's forward steps before this process started (its step watch starts at
    /// zero).
    pub steps_before: u16,
}

impl Memory {
    fn fresh(steps_before: u16) -> Self {
        Memory {
            last_written: None,
            timers: Opaque(ClusterTimers::default()),
            fences: Opaque(Vec::new()),
            releases: Opaque(Vec::new()),
            owed: Vec::new(),
            steps_before,
        }
    }
}

/// A lock a client holds: on `members` (slot, run of the process that took the key), from
/// tick `taken` for `ttl` ticks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Lock {
    pub client: u8,
    pub members: Vec<(i32, u16)>,
    pub taken: u16,
    pub ttl: u16,
}

impl Lock {
    pub fn valid(&self, now: u16) -> bool {
        now < self.taken + self.ttl
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// True time, ticks of one second.
    pub now: u16,
    /// Forward steps of the operator's wall clock so far (seconds).
    pub wall_ahead: u16,
    pub pods: Vec<Option<Pod>>,
    /// Per slot, a process that outlived its pod on a node cut off from the API server and
    /// the operator (its pod force-deleted), still reachable by clients at its old address.
    pub orphans: Vec<Option<Process>>,
    /// Names new pods and processes.
    pub next_id: u16,
    pub stored: Object,
    /// The operator's watch cache: `stored` at some version, maybe an older one.
    pub cache: Object,
    /// The `<name>-ledger` ConfigMap (`hold::ledger`): an object of its own, which a status
    /// wipe leaves alone. The model's cache shows it as written (its writes are conditional
    /// on the version read, so a stale read can only withhold a release or miss an entry).
    pub ledger: Opaque<Option<Ledger>>,
    pub published: Option<Published>,
    pub memory: Memory,
    pub locks: Vec<Lock>,
    /// Faults and edits so far (bounded by `Bounds::faults`).
    pub faults: u8,
    /// Lock attempts per client so far.
    pub attempts: Vec<u8>,
    /// No tick after this one.
    pub horizon: u16,
    pub start: Start,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Tick,
    /// The slot's process dies (its keys with it); its pod stays.
    Crash(i32),
    /// The slot's container (re)starts: a new process, fenced, with no keys.
    Start(i32),
    /// The slot's pod is deleted: its process dies.
    DeletePod(i32),
    /// The slot's node is cut off from the API server and the operator, and its pod is
    /// force-deleted: the process runs on, serving clients that still reach its address.
    CutOff(i32),
    /// The cut-off node comes back: its kubelet stops the process of the deleted pod.
    Heal(i32),
    /// The slot's serving process's clock jumps forward: its lock key expires at once.
    MemberClockJump(i32),
    /// One reconcile; the probe of `unreachable` times out; the status write is refused
    /// (an admission policy) when `write_refused`.
    Reconcile {
        unreachable: Option<i32>,
        write_refused: bool,
        /// The watch event of its status write is delayed: the cache keeps the version
        /// planned from until `DeliverWatch`.
        lagging: bool,
    },
    /// The watch delivers the stored object to the operator's cache.
    DeliverWatch,
    /// Someone wipes the status (a backup restored without it).
    WipeStatus,
    /// The operator restarts: a new process with empty memory.
    OperatorRestart,
    /// The operator's wall clock steps forward one second.
    ClockStep,
    /// The user sets `spec.maxLockTTL` (seconds).
    SetMaxLockTtl(u16),
    /// A client tries for the lock with what it was told, reaching these slots; `old`: one
    /// of them at its old address (where a process that outlived its pod runs).
    Lock {
        client: u8,
        slots: Vec<i32>,
        old: Option<i32>,
    },
}

/// Where the model starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Start {
    /// Every member released and serving (reached by running the operator from nothing).
    Serving,
    /// A cluster re-created under the same name: no pods and no status yet, while a client
    /// of the earlier incarnation (told the same list) still holds a lock on a majority.
    Recreated,
}

/// The bounds and the actions explored.
#[derive(Clone, Debug)]
pub struct Bounds {
    pub instances: i32,
    /// `spec.maxLockTTL` at the start, seconds (holdMargin 0, clockDriftFactor 0: the hold is
    /// exactly this).
    pub ttl: u16,
    pub max_now: u16,
    /// Faults and edits (crash, pod delete, status wipe, operator restart, clock step,
    /// maxLockTTL edit, probe timeout, refused write), in all.
    pub faults: u8,
    pub clients: u8,
    pub attempts_per_client: u8,
    /// maxLockTTL values the user may set.
    pub ttl_edits: Vec<u16>,
    pub lagging_cache: bool,
    pub wipes: bool,
    pub operator_restarts: bool,
    pub clock_steps: bool,
    pub probe_timeouts: bool,
    pub write_refusals: bool,
    pub partitions: bool,
    /// Pods may be deleted (else only processes crash).
    pub deletes: bool,
    /// A cut-off node may come back (its kubelet then stops the deleted pod's process).
    pub heals: bool,
    /// A serving member's clock may jump forward.
    pub member_clock_jumps: bool,
    pub starts: Vec<Start>,
}

impl Bounds {
    /// The bound `make test` runs.
    pub fn small() -> Self {
        Bounds {
            instances: 3,
            ttl: 2,
            max_now: 4,
            faults: 1,
            clients: 2,
            attempts_per_client: 1,
            ttl_edits: vec![],
            lagging_cache: true,
            wipes: false,
            operator_restarts: true,
            clock_steps: false,
            probe_timeouts: false,
            write_refusals: false,
            partitions: false,
            heals: false,
            member_clock_jumps: false,
            deletes: true,
            starts: vec![Start::Serving, Start::Recreated],
        }
    }

    /// The bound `make model-check` runs.
    pub fn full() -> Self {
        Bounds {
            max_now: 5,
            faults: 1,
            ttl_edits: vec![1, 3],
            wipes: true,
            clock_steps: true,
            probe_timeouts: true,
            write_refusals: true,
            partitions: true,
            member_clock_jumps: true,
            ..Bounds::small()
        }
    }
}

impl Bounds {
    /// The bounds by name: `small`, `full`, or one focused on a rule (the mutation check,
    /// `tests/model/mutations/`): only the faults that rule is about, so that a check with it
    /// turned off finds its counterexample in seconds.
    pub fn named(name: &str) -> Option<Self> {
        let focused = Bounds {
            faults: 2,
            max_now: 3,
            lagging_cache: false,
            operator_restarts: false,
            deletes: false,
            starts: vec![Start::Serving],
            ..Bounds::small()
        };
        Some(match name {
            "small" => Bounds::small(),
            "full" => Bounds::full(),
            "first-process" => Bounds {
                faults: 0,
                max_now: 3,
                starts: vec![Start::Recreated],
                ..focused
            },
            "lowering" => Bounds {
                ttl_edits: vec![1],
                ..focused
            },
            "release-ahead" => Bounds {
                write_refusals: true,
                operator_restarts: true,
                lagging_cache: true,
                ..focused
            },
            "evidence" => Bounds {
                partitions: true,
                faults: 1,
                ..focused
            },
            "clock" => Bounds {
                clock_steps: true,
                ..focused
            },
            "member-clock" => Bounds {
                member_clock_jumps: true,
                write_refusals: true,
                operator_restarts: true,
                ..focused
            },
            // A cut-off node that comes back (docs/model-check.md, "Findings").
            "heal" => Bounds {
                partitions: true,
                heals: true,
                faults: 1,
                ..focused
            },
            _ => return None,
        })
    }
}

#[derive(Clone, Debug)]
pub struct HoldModel {
    pub bounds: Bounds,
}

fn run_id(run: u16) -> String {
    format!("r{run}")
}

fn quorum(list: i32) -> usize {
    (list / 2 + 1) as usize
}

fn empty_object(b: &Bounds) -> Object {
    Object {
        version: 1,
        generation: 1,
        instances: b.instances,
        ttl: b.ttl,
        status: Opaque(None),
    }
}

impl HoldModel {
    pub fn new(bounds: Bounds) -> Self {
        HoldModel { bounds }
    }

    fn nothing(&self) -> State {
        let b = &self.bounds;
        State {
            now: 0,
            wall_ahead: 0,
            pods: vec![None; b.instances as usize],
            orphans: vec![None; b.instances as usize],
            next_id: 1,
            stored: empty_object(b),
            cache: empty_object(b),
            ledger: Opaque(None),
            published: None,
            memory: Memory::fresh(0),
            locks: Vec::new(),
            faults: 0,
            attempts: vec![0; b.clients as usize],
            horizon: b.max_now,
            start: Start::Serving,
        }
    }

    /// The start `start`, reached with the operator's own decisions where it needs them.
    pub fn start(&self, start: Start) -> State {
        let mut s = State {
            start,
            ..self.nothing()
        };
        match start {
            Start::Recreated => {
                let list = self.bounds.instances;
                s.published = Some(Published {
                    list,
                    confirmed: list,
                    ttl: self.bounds.ttl,
                    hold_ttl: self.bounds.ttl,
                });
                // Client 0 of the earlier incarnation, on its processes (run 0: none of this
                // incarnation's).
                s.locks.push(Lock {
                    client: 0,
                    members: (0..quorum(list) as i32).map(|slot| (slot, 0)).collect(),
                    taken: 0,
                    ttl: self.bounds.ttl,
                });
                s.attempts[0] = 1;
                s
            }
            Start::Serving => {
                let reconcile = Action::Reconcile {
                    unreachable: None,
                    write_refused: false,
                    lagging: false,
                };
                let step = |s: &mut State, a: Action| {
                    if let Some(next) = self.step(s, a.clone()) {
                        *s = next;
                    } else {
                        assert_eq!(a, Action::DeliverWatch, "bootstrap: {a:?} did nothing");
                    }
                };
                step(&mut s, reconcile.clone());
                step(&mut s, reconcile.clone());
                for _ in 0..self.bounds.ttl {
                    step(&mut s, Action::Tick);
                }
                // Released, then the conditions say so: a fixpoint of reconciles.
                step(&mut s, reconcile.clone());
                step(&mut s, reconcile.clone());
                assert!(
                    s.pods
                        .iter()
                        .flatten()
                        .all(|p| p.process.as_ref().is_some_and(|p| p.serving)),
                    "bootstrap ends with every member serving: {s:?}"
                );
                // The bound on time counts from here.
                State {
                    horizon: s.now + self.bounds.max_now,
                    ..s
                }
            }
        }
    }

    /// The operator's clock reading now.
    fn reading(&self, s: &State) -> Reading {
        Reading {
            wall: at(s.now + s.wall_ahead),
            skipped: Duration::from_secs(u64::from(s.wall_ahead - s.memory.steps_before)),
        }
    }

    fn cluster_of(&self, o: &Object) -> RedlockCluster {
        let spec = serde_json::json!({
            "instances": o.instances,
            "maxLockTTL": format!("{}s", o.ttl),
            "holdMargin": "0s",
            "clockDriftFactor": 0.0,
        });
        let mut c = RedlockCluster::new("locks", serde_json::from_value(spec).expect("a valid spec"));
        c.metadata.namespace = Some("team".into());
        c.metadata.uid = Some("uid-1".into());
        c.metadata.generation = Some(o.generation);
        c.metadata.resource_version = Some(o.version.to_string());
        c.status = o.status.0.clone();
        c
    }

    fn observe(
        &self,
        s: &State,
        members: &[MemberStatus],
        unreachable: Option<i32>,
        spec_hash: &str,
    ) -> Observation {
        let mut slots = BTreeMap::new();
        for (i, pod) in s.pods.iter().enumerate() {
            let slot = i as i32;
            let Some(pod) = pod else { continue };
            let mut o = SlotObservation {
                pod_ip: Some(
                    format!("10.0.{slot}.{}", pod.uid % 250)
                        .parse()
                        .expect("an address"),
                ),
                pod_uid: Some(format!("pod-{}", pod.uid)),
                node: Some(format!("node-{slot}")),
                spec_hash: Some(spec_hash.to_owned()),
                // As `observe::slot_observation` reads it.
                predecessor: pod
                    .predecessor
                    .as_deref()
                    .and_then(|a| serde_json::from_str(a).ok()),
                ..SlotObservation::default()
            };
            match &pod.process {
                None => {
                    o.pod = PodState::NotRunning {
                        reason: "CrashLoopBackOff".into(),
                    };
                }
                Some(p) => {
                    o.pod = PodState::Running {
                        container_id: Some(format!("c{}", p.run)),
                        ready: p.serving,
                        terminating: false,
                    };
                    o.probe = if unreachable == Some(slot) {
                        Probe::Failed("timed out".into())
                    } else {
                        if p.jump_unrecorded {
                            o.clock = Some(Verdict::JumpedForward {
                                by: Duration::from_secs(15),
                                unwatched_since: None,
                            });
                        }
                        Probe::Answered(RedisInfo {
                            run_id: run_id(p.run),
                            version: "7.0.15".into(),
                            client_enabled: p.serving,
                            pod_uid: Some(format!("pod-{}", pod.uid)),
                            client_password_hashes: None,
                            admin_password_hashes: None,
                            deviations: Vec::new(),
                        })
                    };
                }
            }
            slots.insert(Slot::new(slot), o);
        }
        // Every recorded process that outlived its pod is looked for at its last address.
        for m in members {
            let Some(u) = m.unstopped.as_ref().filter(|u| !u.fenced) else {
                continue;
            };
            let alive = s.orphans[m.slot.index() as usize]
                .as_ref()
                .is_some_and(|p| run_id(p.run) == u.run_id);
            let search = if alive {
                UnstoppedSearch {
                    kubelet: KubeletAnswer::Unknown("node unreachable".into()),
                    ..UnstoppedSearch::unanswered("timed out", false)
                }
            } else {
                UnstoppedSearch::unanswered("connection refused", true)
            };
            slots.entry(m.slot).or_default().unstopped = Some(search);
        }
        let told = s.published.as_ref().map_or(Told::default(), |p| Told {
            servers: Some(p.list),
            confirmed: Some(p.confirmed),
            client_servers: Some(p.list),
        });
        Observation {
            slots,
            ttl: None,
            next_audit: Duration::from_secs(10),
            failure_domains: Default::default(),
            published_ttl: s.published.as_ref().map(|p| secs(p.ttl)),
            published_hold_ttl: s.published.as_ref().map(|p| secs(p.hold_ttl)),
            told,
            clock_tracks: Vec::new(),
            ledger: s.ledger.0.clone(),
        }
    }

    /// Sets the serving flag of `slot`'s process named `run` (a fence or a release that
    /// reaches it); whether it did.
    fn set_serving(s: &mut State, slot: Slot, run: &str, unreachable: Option<i32>, serving: bool) -> bool {
        if unreachable == Some(slot.index()) {
            return false;
        }
        let Some(Some(pod)) = s.pods.get_mut(slot.index() as usize) else {
            return false;
        };
        match &mut pod.process {
            Some(p) if run_id(p.run) == run => {
                p.serving = serving;
                true
            }
            _ => false,
        }
    }

    /// The slots whose process a reconcile's probe reaches (all running ones but `unreachable`).
    fn probed(s: &State, unreachable: Option<i32>) -> Vec<i32> {
        (0..s.pods.len() as i32)
            .filter(|&slot| unreachable != Some(slot))
            .filter(|&slot| {
                s.pods[slot as usize]
                    .as_ref()
                    .is_some_and(|p| p.process.is_some())
            })
            .collect()
    }

    fn process_mut(s: &mut State, slot: i32) -> Option<&mut Process> {
        s.pods.get_mut(slot as usize)?.as_mut()?.process.as_mut()
    }

    fn reconcile(&self, s: &State, unreachable: Option<i32>, write_refused: bool) -> Option<State> {
        let mut next = s.clone();
        // The guard: never plan from a cache older than this process's own last write.
        if s.memory.last_written.is_some_and(|v| s.cache.version < v) {
            return None;
        }
        let cached = self.cluster_of(&s.cache);
        let mut with_releases = cached.clone();
        if let Some(st) = with_releases.status.as_mut()
            && !s.memory.releases.0.is_empty()
        {
            st.members = release_ahead::as_released(&st.members, &s.memory.releases.0);
        }
        let mut planned = with_releases.clone();
        if let Some(st) = planned.status.as_mut()
            && !s.memory.fences.0.is_empty()
        {
            st.members = fence_ahead::as_fenced(&st.members, &s.memory.fences.0);
        }
        let fenced_processes = fence_ahead::processes(&s.memory.fences.0);
        let hash = spec_hash(&planned.spec);
        let observation = self.observe(s, planned.recorded_members(), unreachable, &hash);
        // The probes answered: a member clock's jump is now seen (the window of the limit ends).
        let probed = Self::probed(s, unreachable);
        for &slot in &probed {
            if let Some(p) = Self::process_mut(&mut next, slot) {
                p.jump_unprobed = false;
            }
        }
        let children = ChildrenReport {
            config_ready: true,
            ..Default::default()
        };
        let clock = self.reading(s);
        // As the reconcile: releases owed but settled by this observation are forgotten.
        let owed = still_owed(&s.memory.owed, &observation.slots);
        let decision = decide(
            &planned,
            &Facts {
                rejections: &[],
                children: &children,
                observation: &observation,
                probe_period: Duration::from_secs(1),
                timers: &s.memory.timers.0,
                release_blocked: None,
                fenced_unrecorded: &fenced_processes,
                owed_releases: &owed,
                lease: None,
                gate_writes_refused: None,
                password_rotation: Vec::new(),
                spec_hash: &hash,
                nonce: "n0",
            },
            clock,
        );
        next.memory.owed = owed;
        for r in &decision.plan.releases {
            if !next.memory.owed.contains(r) {
                next.memory.owed.push(r.clone());
            }
        }
        // Fences at once, whether or not the write lands.
        for (slot, run) in &decision.plan.fences {
            Self::set_serving(&mut next, *slot, run, unreachable, false);
        }
        let fenced = fence_ahead::unrecorded(
            planned.recorded_members(),
            &decision.status.members,
            &decision.plan.fences,
        );
        // Releases ahead of the write: only from this process's own last write.
        let own = s.memory.last_written == Some(s.cache.version);
        let ahead = if own {
            release_ahead::ending_recorded_holds(with_releases.recorded_members(), &decision.plan.releases)
        } else {
            Vec::new()
        };
        let mut released_ahead = Vec::new();
        // As `act::release_each`: only a process the ledger (as the cache shows it) names.
        for (slot, run) in ahead
            .iter()
            .filter(|(slot, run)| ledger::names(s.ledger.0.as_ref(), *slot, run))
        {
            if Self::set_serving(&mut next, *slot, run, unreachable, true) {
                released_ahead.push(Released {
                    slot: *slot,
                    run_id: run.clone(),
                    at: clock.wall,
                });
            }
        }
        let pending = release_ahead::unrecorded(
            with_releases.recorded_members(),
            &decision.status.members,
            &released_ahead,
        );
        // The status write, conditional on the version planned from.
        let must_write = !s.memory.releases.0.is_empty() || !s.memory.fences.0.is_empty();
        let unchanged = planned.status.as_ref() == Some(&decision.status);
        let writes = must_write || !unchanged || !decision.plan.releases.is_empty();
        let landed = !writes || (!write_refused && s.stored.version == s.cache.version);
        if !landed {
            let kept = Unrecorded::default();
            kept.keep("m", s.memory.releases.0.clone());
            kept.keep("m", pending);
            next.memory.releases = Opaque(kept.of("m"));
            let kept = UnrecordedFences::default();
            kept.keep("m", s.memory.fences.0.clone());
            kept.keep("m", fenced);
            next.memory.fences = Opaque(kept.of("m"));
            next.memory.timers = Opaque(decision.timers.clone().merged(&s.memory.timers.0));
            return Some(next);
        }
        if writes {
            if s.stored.status.0.as_ref() != Some(&decision.status) {
                next.stored.version += 1;
                next.stored.status = Opaque(Some(decision.status.clone()));
            }
            next.memory.last_written = Some(next.stored.version);
        }
        next.memory.releases = Opaque(Vec::new());
        next.memory.fences = Opaque(Vec::new());
        next.memory.timers = Opaque(decision.timers.clone());
        // The clock samples this write judged are kept now (`reconcile` keeps them only once
        // on record): a jump they showed is reported no more.
        for &slot in &probed {
            if let Some(p) = Self::process_mut(&mut next, slot) {
                p.jump_unrecorded = false;
            }
        }
        // On record: the ledger first, then releases it names, pods, the endpoints.
        if let Some(l) = &decision.ledger {
            next.ledger = Opaque(Some(l.clone()));
        }
        for (slot, run) in &decision.plan.releases {
            if !released_ahead.iter().any(|r| r.slot == *slot && &r.run_id == run)
                && ledger::names(next.ledger.0.as_ref(), *slot, run)
            {
                Self::set_serving(&mut next, *slot, run, unreachable, true);
            }
        }
        for slot in &decision.plan.create_pods {
            let i = slot.index() as usize;
            if i < next.pods.len() && next.pods[i].is_none() {
                // Its container starts at once (a process the operator has not seen is
                // planned like any other: `Start` after a crash covers the pod seen down).
                next.pods[i] = Some(Pod {
                    predecessor: decision
                        .plan
                        .predecessors
                        .get(slot)
                        .and_then(|u| {
                            pod_builder::replacement(&cached, *slot, Some(u))
                                .metadata
                                .annotations
                        })
                        .and_then(|mut a| a.remove(pod_builder::UNSTOPPED_PREDECESSOR)),
                    uid: next.next_id,
                    process: Some(Process {
                        run: next.next_id + 1,
                        ..Process::default()
                    }),
                });
                next.next_id += 2;
            }
        }
        for slot in &decision.plan.delete_pods {
            if let Some(p) = next.pods.get_mut(slot.index() as usize) {
                *p = None;
            }
        }
        let st = &decision.status;
        let list = st.published_instances.unwrap_or(planned.spec.instances);
        next.published = Some(Published {
            list,
            confirmed: st.confirmed_instances.unwrap_or(list),
            ttl: s.cache.ttl,
            hold_ttl: st
                .hold
                .as_ref()
                .map_or(s.cache.ttl, |h| Duration::from(h.max_lock_ttl).as_secs() as u16),
        });
        Some(next)
    }

    fn lock(&self, s: &State, client: u8, slots: &[i32], old: Option<i32>) -> Option<State> {
        let told = s.published.as_ref()?;
        let mut next = s.clone();
        next.attempts[client as usize] += 1;
        let mut members = Vec::new();
        for &slot in slots {
            let reached = if old == Some(slot) {
                next.orphans[slot as usize].as_mut()
            } else {
                match next.pods.get_mut(slot as usize) {
                    Some(Some(Pod { process: Some(p), .. })) => Some(p),
                    _ => None,
                }
            };
            if let Some(p) = reached
                && p.serving
                && p.key.is_none_or(|(_, until)| until <= s.now)
            {
                p.key = Some((client, s.now + told.ttl));
                members.push((slot, p.run));
            }
        }
        // A client that got no majority removes what it set: nothing changes.
        if members.len() < quorum(told.list) {
            return None;
        }
        next.locks.push(Lock {
            client,
            members,
            taken: s.now,
            ttl: told.ttl,
        });
        Some(next)
    }

    /// `a` applied to `s`; `None` when it changes nothing or is not possible.
    pub fn step(&self, s: &State, a: Action) -> Option<State> {
        let mut next = s.clone();
        match a {
            Action::Tick => {
                next.now += 1;
                let now = next.now;
                next.locks.retain(|l| l.valid(now));
                let orphans = next.orphans.iter_mut().flatten();
                for p in next
                    .pods
                    .iter_mut()
                    .flatten()
                    .filter_map(|p| p.process.as_mut())
                    .chain(orphans)
                {
                    if p.key.is_some_and(|(_, until)| until <= now) {
                        p.key = None;
                    }
                }
            }
            Action::Crash(slot) => {
                next.pods[slot as usize].as_mut()?.process.take()?;
                next.faults += 1;
            }
            Action::Start(slot) => {
                let pod = next.pods[slot as usize].as_mut()?;
                if pod.process.is_some() {
                    return None;
                }
                pod.process = Some(Process {
                    run: next.next_id,
                    ..Process::default()
                });
                next.next_id += 1;
            }
            Action::DeletePod(slot) => {
                next.pods[slot as usize].take()?;
                next.faults += 1;
            }
            Action::Reconcile {
                unreachable,
                write_refused,
                lagging,
            } => {
                next = self.reconcile(s, unreachable, write_refused)?;
                if lagging {
                    if next.stored.version == s.stored.version {
                        return None;
                    }
                } else if s.cache.version == s.stored.version {
                    next.cache = next.stored.clone();
                }
                next.faults += u8::from(unreachable.is_some()) + u8::from(write_refused) + u8::from(lagging);
            }
            Action::DeliverWatch => {
                if next.cache == next.stored {
                    return None;
                }
                next.cache = next.stored.clone();
            }
            Action::WipeStatus => {
                next.stored.status.0.as_ref()?;
                next.stored.status = Opaque(None);
                next.stored.version += 1;
                next.faults += 1;
            }
            Action::OperatorRestart => {
                next.memory = Memory::fresh(next.wall_ahead);
                next.faults += 1;
            }
            Action::ClockStep => {
                next.wall_ahead += 1;
                next.faults += 1;
            }
            Action::SetMaxLockTtl(ttl) => {
                if next.stored.ttl == ttl {
                    return None;
                }
                next.stored.ttl = ttl;
                next.stored.generation += 1;
                next.stored.version += 1;
                next.faults += 1;
            }
            Action::Lock { client, slots, old } => next = self.lock(s, client, &slots, old)?,
            Action::CutOff(slot) => {
                let p = next.pods[slot as usize].take()?.process?;
                next.orphans[slot as usize] = Some(p);
                next.faults += 1;
            }
            Action::Heal(slot) => {
                next.orphans[slot as usize].take()?;
            }
            Action::MemberClockJump(slot) => {
                let p = Self::process_mut(&mut next, slot).filter(|p| p.serving && !p.jump_unprobed)?;
                p.key = None;
                p.jump_unprobed = true;
                p.jump_unrecorded = true;
                next.faults += 1;
            }
        }
        Some(next)
    }

    /// Every action `s` allows within the bounds.
    pub fn all_actions(&self, s: &State, actions: &mut Vec<Action>) {
        let b = &self.bounds;
        let fault = s.faults < b.faults;
        if s.now < s.horizon {
            actions.push(Action::Tick);
        }
        for slot in 0..b.instances {
            let pod = &s.pods[slot as usize];
            if fault && pod.as_ref().is_some_and(|p| p.process.is_some()) {
                actions.push(Action::Crash(slot));
            }
            if fault && b.deletes && pod.is_some() {
                actions.push(Action::DeletePod(slot));
            }
            if pod.as_ref().is_some_and(|p| p.process.is_none()) {
                actions.push(Action::Start(slot));
            }
            if b.partitions
                && fault
                && s.orphans[slot as usize].is_none()
                && pod.as_ref().is_some_and(|p| p.process.is_some())
            {
                actions.push(Action::CutOff(slot));
            }
            if b.heals && s.orphans[slot as usize].is_some() {
                actions.push(Action::Heal(slot));
            }
            if b.member_clock_jumps
                && fault
                && pod
                    .as_ref()
                    .and_then(|p| p.process.as_ref())
                    .is_some_and(|p| p.serving)
            {
                actions.push(Action::MemberClockJump(slot));
            }
        }
        let reconcile = |unreachable, write_refused, lagging| Action::Reconcile {
            unreachable,
            write_refused,
            lagging,
        };
        actions.push(reconcile(None, false, false));
        if fault && b.lagging_cache {
            actions.push(reconcile(None, false, true));
        }
        if fault && b.probe_timeouts {
            for slot in 0..b.instances {
                actions.push(reconcile(Some(slot), false, false));
            }
        }
        if fault && b.write_refusals {
            actions.push(reconcile(None, true, false));
        }
        if s.cache != s.stored {
            actions.push(Action::DeliverWatch);
        }
        if fault && b.wipes && s.stored.status.0.is_some() {
            actions.push(Action::WipeStatus);
        }
        if fault && b.operator_restarts {
            actions.push(Action::OperatorRestart);
        }
        if fault && b.clock_steps {
            actions.push(Action::ClockStep);
        }
        if fault {
            for &ttl in &b.ttl_edits {
                if ttl != s.stored.ttl {
                    actions.push(Action::SetMaxLockTtl(ttl));
                }
            }
        }
        // No lock attempt between a member clock's jump and the next probe of it: the limit of
        // the claim (docs/safety.md "Clock jumps"); what happens after that probe is checked.
        // A jumped process cut off from the operator is never probed: its window lasts while
        // it serves there (the same limit: a jump the operator cannot see is not fenced).
        let orphans = s.orphans.iter().flatten();
        let in_jump_window = s
            .pods
            .iter()
            .flatten()
            .filter_map(|p| p.process.as_ref())
            .chain(orphans)
            .any(|p| p.serving && p.jump_unprobed);
        if let Some(told) = s.published.as_ref().filter(|_| !in_jump_window) {
            let q = quorum(told.list);
            for client in 0..b.clients {
                // Clients are alike: client c tries only after client c-1 did (one order of
                // each set of attempts, not every renaming of it).
                let earlier_tried = client == 0 || s.attempts[client as usize - 1] > 0;
                if !earlier_tried
                    || s.attempts[client as usize] >= b.attempts_per_client
                    || s.locks.iter().any(|l| l.client == client)
                {
                    continue;
                }
                for slots in subsets(told.list, q) {
                    for old in std::iter::once(None).chain(slots.iter().map(|&s| Some(s))) {
                        if old.is_none_or(|o| s.orphans[o as usize].is_some()) {
                            actions.push(Action::Lock {
                                client,
                                slots: slots.clone(),
                                old,
                            });
                        }
                    }
                }
            }
        }
    }
}

/// The subsets of `0..n` of size `k`, in order.
fn subsets(n: i32, k: usize) -> Vec<Vec<i32>> {
    let mut all = Vec::new();
    for mask in 0u32..(1 << n) {
        if mask.count_ones() as usize == k {
            all.push((0..n).filter(|i| mask & (1 << i) != 0).collect());
        }
    }
    all
}

fn at(tick: u16) -> Timestamp {
    Timestamp::from_second(T0 + i64::from(tick)).expect("in range")
}

fn secs(s: u16) -> Duration {
    Duration::from_secs(u64::from(s))
}

/// Two clients each hold a valid lock (each on a majority of the list it was told).
pub fn two_holders(s: &State) -> bool {
    s.locks.iter().any(|a| {
        s.locks
            .iter()
            .any(|b| a.client != b.client && a.valid(s.now) && b.valid(s.now))
    })
}

/// A member serves without the key a still valid lock set on it: with a process that came
/// after the one the key was set on, or with that process after its clock jumped (the key
/// expired early) once a probe has looked at it. It lets clients in while a lock that relied
/// on its lost key may still be held.
pub fn serves_within_hold(s: &State) -> bool {
    s.pods.iter().enumerate().any(|(slot, pod)| {
        let Some(Pod { process: Some(p), .. }) = pod else {
            return false;
        };
        let lost = |l: &Lock, run: u16| {
            run != p.run || (!p.jump_unprobed && p.key.is_none_or(|(c, _)| c != l.client))
        };
        p.serving
            && s.locks
                .iter()
                .any(|l| l.valid(s.now) && l.members.iter().any(|&(m, run)| m == slot as i32 && lost(l, run)))
    })
}

/// Every member serves (the cluster is available).
pub fn all_serving(s: &State) -> bool {
    s.pods.iter().all(|p| {
        p.as_ref()
            .and_then(|p| p.process.as_ref())
            .is_some_and(|p| p.serving)
    })
}

impl Model for HoldModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        self.bounds.starts.iter().map(|&s| self.start(s)).collect()
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        self.all_actions(s, actions);
    }

    fn next_state(&self, s: &State, a: Action) -> Option<State> {
        self.step(s, a)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("mutual exclusion", |_, s: &State| !two_holders(s)),
            Property::always("no member serves within its hold", |_, s: &State| {
                !serves_within_hold(s)
            }),
            Property::sometimes("a client holds the lock", |_, s: &State| !s.locks.is_empty()),
            // From a start where they do not, or after a fault.
            Property::sometimes("every member serves again", |_, s: &State| {
                (s.faults > 0 || s.start == Start::Recreated) && all_serving(s)
            }),
        ]
    }
}
