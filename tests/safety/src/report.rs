//! What a run found, as numbers: per fault kind the lock success rate and the longest stretch
//! without any successful acquisition, and the whole report (`report.json`, `summary.md`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::checker::{CounterMismatch, Violation};
use crate::clock_jumps::ClockJumpCounts;
use crate::history::Op;
use crate::host::{HostClockRecord, LoadRecord};
use crate::schedule::FaultKind;
use crate::violation::{ViolationDetail, WallClock, describe_all};

/// A fault as it happened. Times are CLOCK_MONOTONIC ns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FaultRecord {
    pub index: usize,
    pub kind: FaultKind,
    pub members: Vec<usize>,
    pub injected: u64,
    /// When the harness undid it (SIGCONT, node restored, operator restarted, the member's
    /// clock back at true time); = injected for faults that heal by themselves.
    pub healed: u64,
    /// When every member served again (operator run) or the servers were back (control).
    pub recovered: u64,
    /// How far the member's clock jumped (`member-clock-jump`), in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_jump_s: Option<u64>,
    /// When the member's own clock (`TIME`) first showed the jump (`member-clock-jump`): its
    /// locks have expired from then on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_jump_visible: Option<u64>,
    /// When the operator had the fault on record (`member-clock-jump`: the member held for its
    /// clock jump, the same process; the fence follows at once). From `clock_jump_visible` to
    /// here, clients could still take the member's expired locks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detected: Option<u64>,
    /// `member-clock-jump`: whether, just before its clock showed the jump, the member had a lock
    /// whose holder had it on a bare quorum ([`on_bare_quorum`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exposed: Option<bool>,
}

/// Whether `member` has a lock (the value of one key on each member, `None` where absent)
/// whose holder has it on exactly `quorum` members: only then can that member losing its keys
/// let a second client take the lock (on it and the members without the lock) while the
/// holder works on. A holder with more than a quorum keeps the second client below one.
pub fn on_bare_quorum<T: PartialEq>(values: &[Option<T>], member: usize, quorum: usize) -> bool {
    values
        .get(member)
        .and_then(Option::as_ref)
        .is_some_and(|v| values.iter().filter(|o| o.as_ref() == Some(v)).count() == quorum)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindStats {
    pub faults: usize,
    /// Acquisitions invoked between a fault's injection and its recovery.
    pub attempts: usize,
    pub successes: usize,
    pub success_rate: f64,
    /// Longest time within a fault's window with no acquisition succeeding on any key.
    pub longest_unavailability_ms: f64,
}

/// Longest stretch in `[from, to]` with no element of `successes` (sorted acquire_ok times).
fn longest_gap(successes: &[u64], from: u64, to: u64) -> u64 {
    let (start, end) = longest_gap_window(successes, from, to);
    end - start
}

/// Where that longest stretch lies: its start (`from` or a success) and end (a success or
/// `to`); the earliest of equally long ones.
fn longest_gap_window(successes: &[u64], from: u64, to: u64) -> (u64, u64) {
    let mut last = from;
    let mut longest = (from, from);
    for &t in successes.iter().filter(|t| (from..=to).contains(*t)) {
        if t - last > longest.1 - longest.0 {
            longest = (last, t);
        }
        last = t;
    }
    if to.saturating_sub(last) > longest.1 - longest.0 {
        longest = (last, to);
    }
    longest
}

pub fn kind_stats(ops: &[Op], faults: &[FaultRecord]) -> BTreeMap<FaultKind, KindStats> {
    let mut successes: Vec<u64> = ops.iter().filter_map(|o| o.acquire_ok).collect();
    successes.sort();
    let mut out: BTreeMap<FaultKind, KindStats> = BTreeMap::new();
    for f in faults {
        let in_window = |o: &&Op| {
            o.acquire_invoke
                .is_some_and(|t| (f.injected..=f.recovered).contains(&t))
        };
        let attempts = ops.iter().filter(in_window).count();
        let ok = ops.iter().filter(in_window).filter(|o| o.acquired()).count();
        let gap = longest_gap(&successes, f.injected, f.recovered);
        let s = out.entry(f.kind).or_insert(KindStats {
            faults: 0,
            attempts: 0,
            successes: 0,
            success_rate: 0.0,
            longest_unavailability_ms: 0.0,
        });
        s.faults += 1;
        s.attempts += attempts;
        s.successes += ok;
        s.longest_unavailability_ms = s.longest_unavailability_ms.max(gap as f64 / 1e6);
    }
    for s in out.values_mut() {
        s.success_rate = if s.attempts == 0 {
            0.0
        } else {
            s.successes as f64 / s.attempts as f64
        };
    }
    out
}

/// Success rate of acquisitions invoked outside every fault window: what contention alone
/// leaves (workers compete for few keys), the yardstick for the per-kind rates.
pub fn baseline_success_rate(ops: &[Op], faults: &[FaultRecord]) -> f64 {
    let outside: Vec<&Op> = ops
        .iter()
        .filter(|o| {
            o.acquire_invoke
                .is_some_and(|t| !faults.iter().any(|f| (f.injected..=f.recovered).contains(&t)))
        })
        .collect();
    if outside.is_empty() {
        return 0.0;
    }
    outside.iter().filter(|o| o.acquired()).count() as f64 / outside.len() as f64
}

/// Violations counted by the kind of the latest fault injected before each (the moment the
/// second holder acquired); `none` before the first fault. Shows which faults break a
/// server set without the hold (in the control: losing a majority).
pub fn violations_after(violations: &[Violation], faults: &[FaultRecord]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for v in violations {
        let kind = faults
            .iter()
            .filter(|f| f.injected <= v.at)
            .max_by_key(|f| f.injected)
            .map_or("none", |f| f.kind.name());
        *out.entry(kind.to_string()).or_default() += 1;
    }
    out
}

/// How many `violations` began (the second holder acquired) inside a member clock jump's
/// window: the member had a lock on a bare quorum when its clock showed the jump, and the
/// operator had not yet held it for that (`detected`; without an operator, until the clock was
/// stepped back). That is the limit docs/operations.md "Clocks" states (a jump is found at the next probe,
/// not prevented): such a violation is reported, and does not fail the run; any other does.
pub fn in_clock_jump_windows(violations: &[Violation], faults: &[FaultRecord]) -> usize {
    violations
        .iter()
        .filter(|v| {
            faults.iter().any(|f| {
                f.exposed == Some(true)
                    && f.clock_jump_visible
                        .is_some_and(|from| (from..=f.detected.unwrap_or(f.healed)).contains(&v.at))
            })
        })
        .count()
}

/// The updates `mismatches` lost (a counter above its critical sections counts in full: no
/// overlap explains it), less `explained` (one per in-window overlap).
pub fn lost_updates_beyond(mismatches: &[CounterMismatch], explained: usize) -> i64 {
    let missing: i64 = mismatches
        .iter()
        .map(|m| (m.critical_sections - m.counter).max(0))
        .sum();
    let surplus: i64 = mismatches
        .iter()
        .map(|m| (m.counter - m.critical_sections).max(0))
        .sum();
    (missing - explained as i64).max(0) + surplus
}

/// One phase (the operator run or the control run) as checked.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseReport {
    pub operations: usize,
    pub successful_operations: usize,
    pub faults: usize,
    pub violations: Vec<Violation>,
    /// Each violation with its two operations, the members each was granted the lock on and
    /// every member's reply (where the client shows them), and as text.
    pub violation_details: Vec<ViolationDetail>,
    pub violations_after_fault_kind: BTreeMap<String, usize>,
    /// Violations that began inside a member clock jump's window ([`in_clock_jump_windows`]).
    pub violations_in_clock_jump_windows: usize,
    pub counter_mismatches: Vec<CounterMismatch>,
    pub fault_kinds: BTreeMap<FaultKind, KindStats>,
    pub fault_log: Vec<FaultRecord>,
    pub baseline_success_rate: f64,
    /// The longest stretch of the run, from its first attempt to its last, without any
    /// successful acquisition: a run whose clients stopped getting locks tests nothing after
    /// that, however many faults it goes on injecting.
    pub longest_without_acquisition_ms: f64,
    /// Where that stretch began, in seconds after the run's first attempt.
    pub longest_without_acquisition_from_s: f64,
    /// What the client libraries said to the attempts that failed in that stretch, most
    /// common first: why the clients got no lock (taken, no quorum, a dial timeout, a refused
    /// password, ...), which the fault record alone cannot tell.
    pub failures_in_longest_stretch: Vec<FailureCount>,
    pub duration_s: f64,
    /// The load the harness put on the machine while the faults were dealt (`SAFETY_LOAD`)
    /// and the load average it measured; `None` where nothing was measured.
    pub load: Option<LoadRecord>,
    /// The host's wall clock against CLOCK_MONOTONIC over the phase: its steps.
    pub host_clock: Option<HostClockRecord>,
    /// The operator's `ClockJump` events, each explained by a clock jump fault, a host clock
    /// step, or nothing (operator run only).
    pub clock_jumps: Option<ClockJumpCounts>,
}

/// How often one client library failed an acquisition with one kind of reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailureCount {
    pub client: String,
    /// The reason with every number as `N` ([`reason_kind`]): one cause, one row.
    pub reason: String,
    pub count: usize,
    /// The first such reason as the library wrote it (addresses, ports, node numbers).
    pub example: String,
}

/// `reason` with each run of digits replaced by `N`, and go-redsync's per-node errors
/// (`node #N: …`) in sorted order. A cause repeats with different numbers and orders: go-redis
/// names its local ephemeral port (`read tcp a:54321->b:6379`), go-redsync joins the nodes'
/// errors in the order they answered; counted by their exact text, one dominant cause would be
/// spread over many rows.
fn reason_kind(reason: &str) -> String {
    const NODE: &str = "node #N: ";
    let folded = digits_folded(reason);
    let Some(first) = folded.find(NODE) else {
        return folded;
    };
    let (head, nodes) = folded.split_at(first);
    let mut parts: Vec<&str> = nodes
        .split(NODE)
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    parts.sort_unstable();
    let joined: Vec<String> = parts.iter().map(|p| format!("{NODE}{p}")).collect();
    format!("{head}{}", joined.join(" "))
}

/// `reason` with each run of digits replaced by `N`.
fn digits_folded(reason: &str) -> String {
    let mut out = String::with_capacity(reason.len());
    let mut in_digits = false;
    for c in reason.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('N');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

/// How many reasons the report keeps for the longest stretch.
const FAILURE_REASONS_KEPT: usize = 6;

/// The most a run may go without any successful acquisition and still pass: longer than a
/// real kubelet's crash-loop backoff (at most 5 min) keeps a killed majority down.
pub const MAX_WITHOUT_ACQUISITION_MS: f64 = 600_000.0;

impl PhaseReport {
    pub fn new(
        ops: &[Op],
        faults: &[FaultRecord],
        violations: Vec<Violation>,
        counter_mismatches: Vec<CounterMismatch>,
        duration_s: f64,
    ) -> Self {
        let stretch = longest_stretch(ops);
        Self {
            operations: ops.len(),
            successful_operations: ops.iter().filter(|o| o.acquired()).count(),
            faults: faults.len(),
            violations_after_fault_kind: violations_after(&violations, faults),
            violations_in_clock_jump_windows: in_clock_jump_windows(&violations, faults),
            violation_details: describe_all(&violations, ops, faults, None),
            violations,
            counter_mismatches,
            fault_kinds: kind_stats(ops, faults),
            fault_log: faults.to_vec(),
            baseline_success_rate: baseline_success_rate(ops, faults),
            longest_without_acquisition_ms: stretch.map_or(0, |(_, from, to)| to - from) as f64 / 1e6,
            longest_without_acquisition_from_s: stretch
                .map_or(0.0, |(first, from, _)| (from - first) as f64 / 1e9),
            failures_in_longest_stretch: stretch
                .map(|(_, from, to)| failures_between(ops, from, to))
                .unwrap_or_default(),
            duration_s,
            load: None,
            host_clock: None,
            clock_jumps: None,
        }
    }

    /// The same with what the machine did meanwhile: the load and the host clock's steps.
    pub fn with_host(mut self, load: Option<LoadRecord>, host_clock: Option<HostClockRecord>) -> Self {
        self.load = load;
        self.host_clock = host_clock;
        self
    }

    /// The same with the operator's `ClockJump` events classified
    /// ([`crate::clock_jumps::classify`]).
    pub fn with_clock_jumps(mut self, counts: ClockJumpCounts) -> Self {
        self.clock_jumps = Some(counts);
        self
    }

    /// `ClockJump` events of this phase that neither a fault nor a host clock step explains.
    pub fn false_clock_jumps(&self) -> usize {
        self.clock_jumps.as_ref().map_or(0, |c| c.false_positives)
    }

    /// The same, the violations' times also on the wall clock (UTC) `clock` gives: the times
    /// the operator's log and the events show.
    pub fn with_wall_clock(mut self, clock: WallClock) -> Self {
        for d in &mut self.violation_details {
            d.set_wall_clock(clock);
        }
        self
    }
}

/// A file of a run's evidence in its output directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EvidenceFile {
    /// `operator` or `control`.
    pub phase: String,
    pub path: String,
    /// What it holds.
    pub what: String,
}

/// The run's first attempt and the longest stretch without an acquisition between it and the
/// last attempt (all ns); `None` without attempts.
fn longest_stretch(ops: &[Op]) -> Option<(u64, u64, u64)> {
    let invoked = ops.iter().filter_map(|o| o.acquire_invoke);
    let (first, last) = (invoked.clone().min()?, invoked.max()?);
    let mut successes: Vec<u64> = ops.iter().filter_map(|o| o.acquire_ok).collect();
    successes.sort();
    let (from, to) = longest_gap_window(&successes, first, last);
    Some((first, from, to))
}

/// The reasons of the failed acquisitions invoked in `[from, to]`, by client, most common first
/// (ties by client and reason), at most [`FAILURE_REASONS_KEPT`].
fn failures_between(ops: &[Op], from: u64, to: u64) -> Vec<FailureCount> {
    let mut counts: BTreeMap<(&str, String), (usize, &str)> = BTreeMap::new();
    for o in ops {
        if let (Some(t), Some(reason)) = (o.acquire_invoke, o.fail_reason.as_deref())
            && (from..=to).contains(&t)
        {
            counts
                .entry((o.client.as_str(), reason_kind(reason)))
                .or_insert((0, reason))
                .0 += 1;
        }
    }
    let mut out: Vec<FailureCount> = counts
        .into_iter()
        .map(|((client, reason), (count, example))| FailureCount {
            client: client.to_owned(),
            reason,
            count,
            example: example.to_owned(),
        })
        .collect();
    out.sort_by_key(|f| std::cmp::Reverse(f.count));
    out.truncate(FAILURE_REASONS_KEPT);
    out
}

/// `reason` cut to a table cell: a client library's error can list every member's error.
fn shorten(reason: &str) -> String {
    const MAX: usize = 300;
    let clean = reason.replace(['|', '`'], "'");
    match clean.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &clean[..cut]),
        None => clean,
    }
}

/// How many violations a summary or a failure message spells out.
pub const VIOLATIONS_SHOWN: usize = 20;

/// `target/safety/report.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub seed: u64,
    pub clients: Vec<String>,
    pub operations: usize,
    pub successful_operations: usize,
    pub faults: usize,
    pub violations: usize,
    pub counter_mismatches: usize,
    /// The operator run's violations its stated limits do not explain: all but those that
    /// began inside an exposed member clock jump's window ([`in_clock_jump_windows`]).
    pub violations_beyond_limits: usize,
    /// Lost updates beyond what those in-window overlaps explain (an overlap loses at most one
    /// update).
    pub lost_updates_beyond_limits: i64,
    pub control_violations: usize,
    pub control_counter_mismatches: usize,
    /// The operator run's `ClockJump` events that no clock jump fault and no host clock step
    /// explains (false positives: the run fails with any).
    pub false_clock_jumps: usize,
    /// Busy processes the harness ran on the machine during the operator run (`SAFETY_LOAD`).
    pub busy_processes: usize,
    pub fault_kinds: BTreeMap<FaultKind, KindStats>,
    pub settings: serde_json::Value,
    pub operator: PhaseReport,
    pub control: PhaseReport,
    /// What the run kept besides this report (operator logs, events, status history), where.
    pub evidence: Vec<EvidenceFile>,
}

impl Report {
    pub fn new(
        seed: u64,
        clients: Vec<String>,
        settings: serde_json::Value,
        operator: PhaseReport,
        control: PhaseReport,
    ) -> Self {
        Self {
            seed,
            clients,
            operations: operator.operations,
            successful_operations: operator.successful_operations,
            faults: operator.faults,
            violations: operator.violations.len(),
            counter_mismatches: operator.counter_mismatches.len(),
            violations_beyond_limits: operator.violations.len() - operator.violations_in_clock_jump_windows,
            lost_updates_beyond_limits: lost_updates_beyond(
                &operator.counter_mismatches,
                operator.violations_in_clock_jump_windows,
            ),
            control_violations: control.violations.len(),
            control_counter_mismatches: control.counter_mismatches.len(),
            false_clock_jumps: operator.false_clock_jumps(),
            busy_processes: operator.load.as_ref().map_or(0, |l| l.busy_processes),
            fault_kinds: operator.fault_kinds.clone(),
            settings,
            operator,
            control,
            evidence: Vec::new(),
        }
    }

    pub fn with_evidence(mut self, evidence: Vec<EvidenceFile>) -> Self {
        self.evidence = evidence;
        self
    }

    /// The evidence files, one a line (`phase: path — what`); a line saying there is none.
    pub fn evidence_text(&self) -> String {
        if self.evidence.is_empty() {
            return "evidence: none kept\n".into();
        }
        self.evidence
            .iter()
            .map(|e| format!("evidence ({}): {} — {}\n", e.phase, e.path, e.what))
            .collect()
    }

    /// What a failing run's message says: each of the operator run's violations with its
    /// members and replies (at most [`VIOLATIONS_SHOWN`]), and where the evidence is.
    pub fn violations_text(&self) -> String {
        let details = &self.operator.violation_details;
        let mut s = format!(
            "{} mutual-exclusion violation(s) in the operator run (seed {}):\n",
            details.len(),
            self.seed
        );
        for d in details.iter().take(VIOLATIONS_SHOWN) {
            s.push_str(&d.text);
        }
        if details.len() > VIOLATIONS_SHOWN {
            s.push_str(&format!(
                "... and {} more in report.json (operator.violation_details)\n",
                details.len() - VIOLATIONS_SHOWN
            ));
        }
        s.push_str(&self.evidence_text());
        s
    }

    /// The suite passes when the operator run is clean but for its stated limit (overlaps that
    /// began inside a member clock jump's window, and the updates they lost), its clients kept
    /// getting locks (none at all, or none for longer than [`MAX_WITHOUT_ACQUISITION_MS`], and
    /// the faults after that tested nothing), the operator reported no clock jump that no clock
    /// made ([`Report::false_clock_jumps`]), and the control run is not clean: the checker
    /// demonstrably sees what the operator prevents.
    pub fn passed(&self) -> bool {
        self.violations_beyond_limits == 0
            && self.lost_updates_beyond_limits == 0
            && self.false_clock_jumps == 0
            && self.lock_service_kept_serving()
            && self.control_violations >= 1
    }

    /// The machine's conditions in the run, one line each: the load and load average of both
    /// phases, the host clock's steps, the operator's `ClockJump` events by what explains them
    /// (and each not explained by a fault).
    pub fn conditions_text(&self) -> String {
        let mut s = String::new();
        for (phase, p) in [("operator run", &self.operator), ("control", &self.control)] {
            if let Some(l) = &p.load {
                s.push_str(&format!("load ({phase}): {}\n", l.text()));
            }
        }
        for (phase, p) in [("operator run", &self.operator), ("control", &self.control)] {
            if let Some(h) = &p.host_clock {
                s.push_str(&format!("host clock ({phase}): {}\n", h.text()));
            }
        }
        if let Some(c) = &self.operator.clock_jumps {
            s.push_str(&format!("clock jumps (operator run): {}\n", c.text()));
            s.push_str(&c.unexplained_text());
        }
        s
    }

    /// What a run with false clock jumps fails with: the counts and each such event.
    pub fn false_clock_jumps_text(&self) -> String {
        match &self.operator.clock_jumps {
            Some(c) if c.false_positives > 0 => format!(
                "{} ClockJump event(s) of the operator run that no member-clock-jump fault (its member, from its injection to {} s after its heal) and no host clock step (within {} s) explains (seed {}): {}\n{}{}",
                c.false_positives,
                c.fault_margin_ms / 1000,
                c.host_step_near_ms / 1000,
                self.seed,
                c.text(),
                c.unexplained_text(),
                self.evidence_text()
            ),
            _ => String::new(),
        }
    }

    pub fn lock_service_kept_serving(&self) -> bool {
        self.operator.successful_operations > 0
            && self.operator.longest_without_acquisition_ms <= MAX_WITHOUT_ACQUISITION_MS
    }

    pub fn summary_markdown(&self) -> String {
        let mut s = String::new();
        s.push_str("# Safety suite\n\n");
        s.push_str(&format!(
            "**{}** — seed {}, clients: {}.\n\n",
            if self.passed() { "PASSED" } else { "FAILED" },
            self.seed,
            self.clients.join(", ")
        ));
        s.push_str("| | operator (RedlockCluster) | control (unfenced restarts) |\n|---|---|---|\n");
        let row = |name: &str, a: String, b: String| format!("| {name} | {a} | {b} |\n");
        let (o, c) = (&self.operator, &self.control);
        s.push_str(&row("faults", o.faults.to_string(), c.faults.to_string()));
        s.push_str(&row(
            "lock operations",
            o.operations.to_string(),
            c.operations.to_string(),
        ));
        s.push_str(&row(
            "acquired",
            o.successful_operations.to_string(),
            c.successful_operations.to_string(),
        ));
        s.push_str(&row(
            "**mutual-exclusion violations**",
            o.violations.len().to_string(),
            c.violations.len().to_string(),
        ));
        s.push_str(&row(
            "counter mismatches (lost updates)",
            o.counter_mismatches.len().to_string(),
            c.counter_mismatches.len().to_string(),
        ));
        s.push_str(&row(
            "longest time without any acquisition",
            format!("{:.1} s", o.longest_without_acquisition_ms / 1000.0),
            format!("{:.1} s", c.longest_without_acquisition_ms / 1000.0),
        ));
        s.push_str(&row(
            "duration",
            format!("{:.0} s", o.duration_s),
            format!("{:.0} s", c.duration_s),
        ));
        if o.load.is_some() || o.host_clock.is_some() || o.clock_jumps.is_some() {
            s.push_str(&row(
                "busy processes (load)",
                o.load
                    .as_ref()
                    .map_or("-".into(), |l| l.busy_processes.to_string()),
                c.load
                    .as_ref()
                    .map_or("-".into(), |l| l.busy_processes.to_string()),
            ));
            let avg = |p: &PhaseReport| {
                p.load.as_ref().map_or("-".into(), |l| {
                    format!("max {:.2}, mean {:.2}", l.max_load1, l.mean_load1)
                })
            };
            s.push_str(&row("load average (1 min) during the faults", avg(o), avg(c)));
            let steps = |p: &PhaseReport| {
                p.host_clock
                    .as_ref()
                    .map_or("-".into(), |h| h.steps.len().to_string())
            };
            s.push_str(&row("host clock steps (> 5 ms)", steps(o), steps(c)));
            if let Some(j) = &o.clock_jumps {
                s.push_str(&row(
                    "clock jump faults dealt",
                    j.faults_dealt.to_string(),
                    "-".into(),
                ));
                s.push_str(&row("ClockJump events", j.events.to_string(), "-".into()));
                s.push_str(&row(
                    "… explained by a clock jump fault",
                    j.explained.to_string(),
                    "-".into(),
                ));
                s.push_str(&row(
                    "… host clock stepped",
                    j.host_clock_stepped.to_string(),
                    "-".into(),
                ));
                s.push_str(&row(
                    "**… false positives**",
                    j.false_positives.to_string(),
                    "-".into(),
                ));
            }
            s.push_str(&format!("\n```\n{}```\n", self.conditions_text()));
        }
        if !o.failures_in_longest_stretch.is_empty() {
            s.push_str(&format!(
                "\nThe operator run's longest stretch without an acquisition began {:.0} s after its first attempt. \
                 What the clients were told in it, most common first (numbers as N, go-redsync's nodes sorted; one example each):\n\n\
                 | client | reason | attempts | example |\n|---|---|---|---|\n",
                o.longest_without_acquisition_from_s
            ));
            for f in &o.failures_in_longest_stretch {
                s.push_str(&format!(
                    "| {} | `{}` | {} | `{}` |\n",
                    f.client,
                    shorten(&f.reason),
                    f.count,
                    shorten(&f.example)
                ));
            }
        }
        s.push_str(&format!(
            "\nPer fault kind (operator run): lock success rate of acquisitions started during the fault \
             (from injection until every member serves again), and the longest time without any successful \
             acquisition. Outside faults the success rate is {:.0}%: {} workers compete for {} keys, so most \
             attempts find the lock taken.\n\n",
            o.baseline_success_rate * 100.0,
            self.settings["workers"].as_u64().unwrap_or(0),
            self.settings["keys"].as_u64().unwrap_or(0),
        ));
        s.push_str(
            "| fault | count | attempts | success rate | longest unavailability |\n|---|---|---|---|---|\n",
        );
        for (kind, k) in &self.fault_kinds {
            s.push_str(&format!(
                "| {} | {} | {} | {:.0}% | {:.1} s |\n",
                kind.name(),
                k.faults,
                k.attempts,
                k.success_rate * 100.0,
                k.longest_unavailability_ms / 1000.0
            ));
        }
        let secs = |from: u64, to: u64| to.saturating_sub(from) as f64 / 1e9;
        let range = |v: &[f64]| {
            let lo = format!("{:.1}", v.iter().copied().reduce(f64::min)?);
            let hi = format!("{:.1}", v.iter().copied().reduce(f64::max)?);
            Some(if lo == hi {
                format!("{lo} s")
            } else {
                format!("{lo}–{hi} s")
            })
        };
        let windows: Vec<f64> = o
            .fault_log
            .iter()
            .filter_map(|f| Some(secs(f.clock_jump_visible?, f.detected?)))
            .collect();
        let shows: Vec<f64> = o
            .fault_log
            .iter()
            .filter_map(|f| Some(secs(f.injected, f.clock_jump_visible?)))
            .collect();
        if let (Some(window), Some(show)) = (range(&windows), range(&shows)) {
            s.push_str(&format!(
                "\nMember clock jumps (operator run): {}, each member on record as held for it {window} after its \
                 clock showed the jump (the window in which clients could still take its expired locks; the fence \
                 follows the record at once). The step took {show} to show (libfaketime re-reads its offset file \
                 about once a second).\n",
                windows.len()
            ));
        }
        let exposure = |p: &PhaseReport| {
            let jumps: Vec<&FaultRecord> = p
                .fault_log
                .iter()
                .filter(|f| f.kind == FaultKind::MemberClockJump)
                .collect();
            let exposed = jumps.iter().filter(|f| f.exposed == Some(true)).count();
            let unknown = jumps.iter().filter(|f| f.exposed.is_none()).count();
            (jumps.len(), exposed, unknown)
        };
        let ((on, oe, ou), (cn, ce, cu)) = (exposure(o), exposure(c));
        if on + cn > 0 {
            s.push_str(&format!(
                "\nA member's lost keys let a second client in only where a holder had its lock on a bare quorum \
                 including that member. Clock jumps that hit such a lock: operator run {oe} of {on}, control {ce} of \
                 {cn}{}.\n",
                if ou + cu > 0 {
                    format!(" ({} not read)", ou + cu)
                } else {
                    String::new()
                }
            ));
        }
        if o.violations_in_clock_jump_windows > 0 {
            s.push_str(&format!(
                "\n{} of the operator run's violations began inside a member clock jump's window (a lock on the \
                 member was on a bare quorum when its clock showed the jump, and the operator had not held it \
                 yet): the limit docs/safety.md \"Clock jumps\" states, reported and not failing the run. Violations \
                 beyond it: {}; lost updates beyond it: {}.\n",
                o.violations_in_clock_jump_windows,
                self.violations_beyond_limits,
                self.lost_updates_beyond_limits
            ));
        }
        if !c.violations_after_fault_kind.is_empty() {
            let by_kind: Vec<String> = c
                .violations_after_fault_kind
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            s.push_str(&format!(
                "\nControl violations by the fault injected last before them: {}.\n",
                by_kind.join(", ")
            ));
        }
        if !o.violation_details.is_empty() {
            s.push_str(&format!(
                "\n## Violations in the operator run\n\nEach with the members its holders were granted the lock on \
                 and every member's reply their clients show (times after the fault injected last before it, and UTC, \
                 as in the operator's log and the events){}:\n\n```\n",
                if o.violation_details.len() > VIOLATIONS_SHOWN {
                    format!(
                        "; the first {VIOLATIONS_SHOWN} of {} (all in report.json)",
                        o.violation_details.len()
                    )
                } else {
                    String::new()
                }
            ));
            for d in o.violation_details.iter().take(VIOLATIONS_SHOWN) {
                s.push_str(&d.text);
            }
            s.push_str("```\n");
        }
        if let Some(v) = c.violations.first() {
            s.push_str(&format!(
                "\nExample control violation: key `{}`, op {} ({}) acquired while op {} ({}) held it; both held for {:.0} ms.\n",
                v.key,
                v.second,
                v.second_client,
                v.first,
                v.first_client,
                v.overlap_ns as f64 / 1e6
            ));
            if let Some(d) = c.violation_details.first() {
                s.push_str(&format!("\n```\n{}```\n", d.text));
            }
        }
        s.push_str("\nTimeline: `timeline.svg`.\n");
        if !self.evidence.is_empty() {
            s.push_str("\n## Evidence\n\n| phase | file | what |\n|---|---|---|\n");
            for e in &self.evidence {
                s.push_str(&format!(
                    "| {} | `{}` | {} |\n",
                    e.phase,
                    e.path,
                    shorten(&e.what)
                ));
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::tests::{failed, held};

    const MS: u64 = 1_000_000;

    fn fault(kind: FaultKind, from_ms: u64, to_ms: u64) -> FaultRecord {
        FaultRecord {
            index: 0,
            kind,
            members: vec![0],
            injected: from_ms * MS,
            healed: from_ms * MS,
            recovered: to_ms * MS,
            clock_jump_s: None,
            clock_jump_visible: None,
            detected: None,
            exposed: None,
        }
    }

    #[test]
    fn a_lock_on_a_bare_quorum_is_exposed_to_one_members_loss() {
        let v = |s: &[&str]| -> Vec<Option<String>> {
            s.iter().map(|x| (!x.is_empty()).then(|| x.to_string())).collect()
        };
        // A holds on 0, 1, 2: losing 0 lets B in on 0, 3, 4.
        assert!(on_bare_quorum(&v(&["a", "a", "a", "", ""]), 0, 3));
        // Not on member 3; and with 4 members A keeps B at 2.
        assert!(!on_bare_quorum(&v(&["a", "a", "a", "", ""]), 3, 3));
        assert!(!on_bare_quorum(&v(&["a", "a", "a", "a", ""]), 0, 3));
        // A loser's leftover on the others does not count for A.
        assert!(on_bare_quorum(&v(&["a", "a", "a", "b", "b"]), 1, 3));
        assert!(!on_bare_quorum(&v(&["a", "a", "a", "b", "b"]), 3, 3));
        assert!(!on_bare_quorum::<String>(&[], 0, 3));
    }

    #[test]
    fn longest_gap_counts_from_window_start_to_end() {
        assert_eq!(longest_gap(&[], 10, 50), 40);
        assert_eq!(longest_gap(&[20, 30], 10, 50), 20); // 30..50
        assert_eq!(longest_gap(&[5, 40, 100], 10, 50), 30); // 10..40
        assert_eq!(longest_gap(&[10, 50], 10, 50), 40);
    }

    /// From the first attempt to the last (ns); 0 without attempts.
    fn longest_without_acquisition(ops: &[Op]) -> u64 {
        longest_stretch(ops).map_or(0, |(_, from, to)| to - from)
    }

    #[test]
    fn the_longest_gaps_window_is_found_where_it_lies() {
        assert_eq!(longest_gap_window(&[], 10, 50), (10, 50));
        assert_eq!(longest_gap_window(&[20, 30], 10, 50), (30, 50));
        assert_eq!(longest_gap_window(&[5, 40, 100], 10, 50), (10, 40));
        assert_eq!(longest_gap_window(&[20, 45], 10, 50), (20, 45));
        // Equally long: the first.
        assert_eq!(longest_gap_window(&[20, 30], 10, 40), (10, 20));
    }

    #[test]
    fn the_longest_stretch_reports_what_its_failed_attempts_were_told() {
        let reason = |mut o: Op, r: &str| {
            o.fail_reason = Some(r.into());
            o
        };
        let ops = [
            held(1, "k", 10, 3000, Some(20)),
            // Before the stretch (it starts at the acquisition at 11 ms): not counted.
            reason(failed(2, "k", 0), "timeout"),
            reason(failed(3, "k", 100), "dial tcp 10.0.0.1:6379: i/o timeout"),
            reason(failed(4, "k", 200), "dial tcp 10.0.0.1:6379: i/o timeout"),
            reason(failed(5, "k", 300), "lock taken"),
            reason(failed(6, "k", 400), "dial tcp 10.0.0.1:6379: i/o timeout"),
        ];
        let (first, from, to) = longest_stretch(&ops).unwrap();
        assert_eq!((first, from, to), (0, 11 * MS, 400 * MS));
        let counts = failures_between(&ops, from, to);
        let seen: Vec<(&str, &str, usize)> = counts
            .iter()
            .map(|f| (f.client.as_str(), f.reason.as_str(), f.count))
            .collect();
        // Each op is its own client here (c<seq>): one count each, in client order.
        assert_eq!(
            seen,
            [
                ("c3", "dial tcp N.N.N.N:N: i/o timeout", 1),
                ("c4", "dial tcp N.N.N.N:N: i/o timeout", 1),
                ("c5", "lock taken", 1),
                ("c6", "dial tcp N.N.N.N:N: i/o timeout", 1),
            ]
        );
        // One client: one row per cause whatever its numbers, the most common first, with
        // the first text as it was.
        let same_client: Vec<Op> = ops
            .iter()
            .cloned()
            .map(|mut o| {
                o.client = "go-redsync".into();
                if o.seq == 6 {
                    o.fail_reason = Some("dial tcp 10.0.0.2:6379: i/o timeout".into());
                }
                o
            })
            .collect();
        let counts = failures_between(&same_client, from, to);
        assert_eq!(
            counts
                .iter()
                .map(|f| (f.reason.as_str(), f.count, f.example.as_str()))
                .collect::<Vec<_>>(),
            [
                (
                    "dial tcp N.N.N.N:N: i/o timeout",
                    3,
                    "dial tcp 10.0.0.1:6379: i/o timeout"
                ),
                ("lock taken", 1, "lock taken")
            ]
        );
        assert_eq!(
            reason_kind("read tcp 10.0.0.1:54321->10.0.0.2:6379: taken [2 0]"),
            "read tcp N.N.N.N:N->N.N.N.N:N: taken [N N]"
        );
        // go-redsync's nodes in the order they answered: one kind whatever the order.
        let one = "node #1: dial tcp 10.0.0.1:6379: i/o timeout node #4: lock already taken node #0: dial tcp 10.0.0.2:6379: i/o timeout";
        let other = "node #4: lock already taken node #0: dial tcp 10.0.0.2:6379: i/o timeout node #1: dial tcp 10.0.0.1:6379: i/o timeout";
        assert_eq!(reason_kind(one), reason_kind(other));
        assert_eq!(
            reason_kind(one),
            "node #N: dial tcp N.N.N.N:N: i/o timeout node #N: dial tcp N.N.N.N:N: i/o timeout node #N: lock already taken"
        );
        assert_eq!(
            reason_kind("lock: node #2: lock already taken"),
            "lock: node #N: lock already taken"
        );
        assert_eq!(shorten("a|b`c"), "a'b'c");
        assert_eq!(shorten(&"x".repeat(400)).chars().count(), 301);
    }

    #[test]
    fn the_longest_stretch_without_an_acquisition_spans_the_whole_run() {
        const MS: u64 = 1_000_000;
        assert_eq!(longest_without_acquisition(&[]), 0);
        // Acquired at 1 ms and 101 ms; attempts go on until 500 ms: 101..500 is the longest.
        let ops = [
            held(1, "k", 0, 3000, Some(10)),
            failed(2, "k", 50),
            held(3, "k", 100, 3000, Some(110)),
            failed(4, "k", 500),
        ];
        assert_eq!(longest_without_acquisition(&ops), 399 * MS);
        // No acquisition at all: the whole run.
        assert_eq!(
            longest_without_acquisition(&[failed(1, "k", 0), failed(2, "k", 700)]),
            700 * MS
        );
    }

    #[test]
    fn stats_per_kind_over_fault_windows() {
        let ops = vec![
            held(1, "k", 100, 3000, Some(150)), // acquired at 101, inside the first window
            failed(2, "k", 200),
            failed(3, "k", 300),
            held(4, "k", 600, 3000, Some(650)), // acquired at 601, inside the second window
            held(5, "k", 2000, 3000, Some(2100)), // outside every window
        ];
        let faults = vec![
            fault(FaultKind::KillMajority, 100, 500),
            fault(FaultKind::KillMajority, 500, 700),
            fault(FaultKind::StopCont, 1000, 1100),
        ];
        let stats = kind_stats(&ops, &faults);
        let m = &stats[&FaultKind::KillMajority];
        assert_eq!((m.faults, m.attempts, m.successes), (2, 4, 2));
        assert_eq!(m.success_rate, 0.5);
        // First window 100..500: success at 101, then nothing until 500 → 399 ms.
        assert_eq!(m.longest_unavailability_ms, 399.0);
        let s = &stats[&FaultKind::StopCont];
        assert_eq!(
            (s.faults, s.attempts, s.success_rate, s.longest_unavailability_ms),
            (1, 0, 0.0, 100.0)
        );
        assert!(!stats.contains_key(&FaultKind::NodeLoss));
        // Outside the windows (100..700, 1000..1100): only op 5, acquired.
        assert_eq!(baseline_success_rate(&ops, &faults), 1.0);
        assert_eq!(baseline_success_rate(&ops[..3], &faults), 0.0);
        assert_eq!(baseline_success_rate(&ops, &[]), 0.6);
    }

    #[test]
    fn violations_are_attributed_to_the_latest_fault_before_them() {
        let v = |at_ms: u64| Violation {
            key: "k".into(),
            first: 1,
            second: 2,
            first_client: "a".into(),
            second_client: "b".into(),
            at: at_ms * MS,
            overlap_ns: 1,
        };
        let faults = vec![
            fault(FaultKind::KillMajority, 100, 200),
            fault(FaultKind::StopCont, 300, 400),
        ];
        let by = violations_after(&[v(50), v(150), v(250), v(350), v(1000)], &faults);
        assert_eq!(
            by,
            BTreeMap::from([
                ("none".to_string(), 1),
                ("kill-majority".to_string(), 2),
                ("stop-cont".to_string(), 2)
            ])
        );
        assert!(violations_after(&[], &faults).is_empty());
    }

    #[test]
    fn report_passes_only_with_a_clean_run_and_a_dirty_control() {
        let clean = PhaseReport::new(&[held(1, "k", 0, 3000, Some(10))], &[], vec![], vec![], 1.0);
        let violation = Violation {
            key: "k".into(),
            first: 1,
            second: 2,
            first_client: "a".into(),
            second_client: "b".into(),
            at: 5,
            overlap_ns: 5,
        };
        let dirty = PhaseReport::new(
            &[held(1, "k", 0, 3000, Some(10))],
            &[],
            vec![violation],
            vec![],
            1.0,
        );
        let r = |o: &PhaseReport, c: &PhaseReport| {
            Report::new(1, vec!["a".into()], serde_json::json!({}), o.clone(), c.clone())
        };
        assert!(r(&clean, &dirty).passed());
        assert!(
            !r(&clean, &clean).passed(),
            "a control without violations proves nothing"
        );
        assert!(!r(&dirty, &dirty).passed());
        let mut lost_update = clean.clone();
        lost_update.counter_mismatches.push(CounterMismatch {
            key: "k".into(),
            critical_sections: 2,
            counter: 1,
        });
        assert!(!r(&lost_update, &dirty).passed());
        let mut stopped_serving = clean.clone();
        stopped_serving.longest_without_acquisition_ms = MAX_WITHOUT_ACQUISITION_MS + 1.0;
        assert!(
            !r(&stopped_serving, &dirty).passed(),
            "clients that stopped getting locks test nothing"
        );
        let mut never_served = clean.clone();
        never_served.successful_operations = 0;
        assert!(!r(&never_served, &dirty).passed());

        let report = r(&clean, &dirty);
        let json = serde_json::to_value(&report).unwrap();
        for field in [
            "operations",
            "faults",
            "violations",
            "control_violations",
            "clients",
            "seed",
            "fault_kinds",
        ] {
            assert!(json.get(field).is_some(), "{field} missing in {json}");
        }
        assert_eq!(json["control_violations"], 1);
        let md = report.summary_markdown();
        assert!(
            md.contains("PASSED") && md.contains("Example control violation"),
            "{md}"
        );
        assert!(!md.contains("Member clock jumps"), "{md}");
    }

    #[test]
    fn a_failing_runs_text_names_each_violations_members_and_the_evidence() {
        use crate::history::MemberReply;
        use crate::protocol::{Outcome, Step};
        let r = |step, member: &str, t_ms: u64, outcome| MemberReply {
            step,
            member: format!("{member}.ns.svc:6379"),
            t: t_ms * MS,
            outcome,
            detail: String::new(),
        };
        let mut a = held(1, "k", 100, 3000, Some(500));
        a.client = "node-redlock".into();
        a.replies = ["locks-0", "locks-1", "locks-3"]
            .iter()
            .map(|m| r(Step::Acquire, m, 100, Outcome::Ok))
            .collect();
        let mut b = held(2, "k", 300, 3000, Some(400));
        b.client = "go-redsync".into();
        b.replies = ["locks-2", "locks-3", "locks-4"]
            .iter()
            .map(|m| r(Step::Acquire, m, 300, Outcome::Ok))
            .collect();
        let ops = [a, b];
        let faults = [fault(FaultKind::Partition, 50, 1000)];
        let o = PhaseReport::new(&ops, &faults, crate::checker::overlaps(&ops), vec![], 1.0).with_wall_clock(
            WallClock {
                mono_ns: 0,
                unix_ns: 0,
            },
        );
        assert_eq!(o.violation_details.len(), 1);
        let report =
            Report::new(7, vec![], serde_json::json!({}), o.clone(), o).with_evidence(vec![EvidenceFile {
                phase: "operator".into(),
                path: "target/safety-short/operator/evidence/operator.log".into(),
                what: "the operator's log".into(),
            }]);
        let text = report.violations_text();
        for want in [
            "1 mutual-exclusion violation(s) in the operator run (seed 7)",
            "key k: op 2 (go-redsync) acquired +0.251 s (00:00:00.301Z) while op 1 (node-redlock)",
            "locked on 3 of 3 that answered: locks-0, locks-1, locks-3",
            "locked on 3 of 3 that answered: locks-2, locks-3, locks-4",
            "granted to both by: locks-3",
            "evidence (operator): target/safety-short/operator/evidence/operator.log — the operator's log",
        ] {
            assert!(text.contains(want), "{want:?} missing in:\n{text}");
        }
        let md = report.summary_markdown();
        for want in [
            "## Violations in the operator run",
            "granted to both by: locks-3",
            "## Evidence",
            "| operator | `target/safety-short/operator/evidence/operator.log` | the operator's log |",
        ] {
            assert!(md.contains(want), "{want:?} missing in:\n{md}");
        }
        // The control's example shows its members too.
        assert!(
            md.contains("Example control violation") && md.matches("granted to both by").count() == 2,
            "{md}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["evidence"][0]["phase"], "operator");
        assert_eq!(json["operator"]["violation_details"][0]["second"]["seq"], 2);
        // Nothing kept: said so.
        let bare = Report::new(
            7,
            vec![],
            serde_json::json!({}),
            report.operator.clone(),
            report.control.clone(),
        );
        assert_eq!(bare.evidence_text(), "evidence: none kept\n");
        assert!(!bare.summary_markdown().contains("## Evidence"));
    }

    #[test]
    fn the_summary_gives_how_soon_clock_jumps_were_fenced() {
        let jump = |from_ms: u64, found_ms: u64, exposed: bool| FaultRecord {
            kind: FaultKind::MemberClockJump,
            clock_jump_s: Some(30),
            clock_jump_visible: Some((from_ms + 500) * MS),
            detected: Some(found_ms * MS),
            exposed: Some(exposed),
            ..fault(FaultKind::MemberClockJump, from_ms, found_ms + 4000)
        };
        let faults = vec![
            jump(0, 1200, true),
            fault(FaultKind::KillOne, 6000, 6500),
            jump(7000, 7800, false),
        ];
        let o = PhaseReport::new(&[], &faults, vec![], vec![], 1.0);
        let c = PhaseReport::new(&[], &faults[..2], vec![], vec![], 1.0);
        let r = Report::new(1, vec![], serde_json::json!({}), o, c);
        let md = r.summary_markdown();
        assert!(
            md.contains(
                "Member clock jumps (operator run): 2, each member on record as held for it 0.3–0.7 s after"
            ),
            "{md}"
        );
        assert!(md.contains("The step took 0.5 s to show"), "{md}");
        assert!(
            md.contains("Clock jumps that hit such a lock: operator run 1 of 2, control 1 of 1."),
            "{md}"
        );
        assert!(!md.contains("began inside a member clock jump's window"), "{md}");
        let json = serde_json::to_value(&r.operator.fault_log).unwrap();
        assert_eq!(json[0]["clock_jump_s"], 30);
        assert!(json[1].get("detected").is_none(), "{json}");
    }

    #[test]
    fn violations_inside_an_exposed_clock_jump_window_are_told_apart() {
        let v = |at_ms: u64| Violation {
            key: "k".into(),
            first: 1,
            second: 2,
            first_client: "a".into(),
            second_client: "b".into(),
            at: at_ms * MS,
            overlap_ns: 1,
        };
        let jump = |from_ms: u64, exposed: bool, detected_ms: Option<u64>| FaultRecord {
            clock_jump_visible: Some((from_ms + 500) * MS),
            detected: detected_ms.map(|d| d * MS),
            exposed: Some(exposed),
            healed: (from_ms + 3000) * MS,
            ..fault(FaultKind::MemberClockJump, from_ms, from_ms + 5000)
        };
        // Operator run: the window is from the jump showing (500) to the hold on record (900).
        let faults = vec![jump(0, true, Some(900)), jump(10_000, false, Some(10_900))];
        // Clients that got a lock (a run without any fails for that alone).
        let served = [held(1, "k", 0, 3000, Some(10))];
        let vs = [v(400), v(600), v(900), v(950), v(10_600)];
        assert_eq!(in_clock_jump_windows(&vs, &faults), 2);
        // Control: no operator, so until the clock was stepped back (3000).
        assert_eq!(in_clock_jump_windows(&vs, &[jump(0, true, None)]), 3);
        let o = PhaseReport::new(&served, &faults, vs[1..2].to_vec(), vec![], 1.0);
        assert_eq!(o.violations_in_clock_jump_windows, 1);
        let report = Report::new(1, vec![], serde_json::json!({}), o.clone(), o);
        let md = report.summary_markdown();
        assert!(
            md.contains("1 of the operator run's violations began inside a member clock jump's window"),
            "{md}"
        );
        // The stated limit: reported, not failing (the control has its violation).
        assert_eq!(report.violations_beyond_limits, 0);
        assert!(report.passed() && md.contains("PASSED"), "{md}");
        // One outside the window fails the run.
        let o = PhaseReport::new(&served, &faults, vs[1..4].to_vec(), vec![], 1.0);
        let report = Report::new(1, vec![], serde_json::json!({}), o.clone(), o);
        assert_eq!(report.violations_beyond_limits, 1);
        assert!(!report.passed());
    }

    #[test]
    fn a_false_clock_jump_fails_the_run_and_the_report_states_load_and_clocks() {
        use crate::clock_jumps::{ClockJumpSighting, classify, occurrences};
        use crate::host::{HostClockRecord, LoadRecord, StepFinder, parse_loadavg};
        let clock = WallClock {
            mono_ns: 0,
            unix_ns: 1_767_225_600_000_000_000,
        };
        let sighting = |uid: &str, at_ms: u64, pod: &str| ClockJumpSighting {
            uid: uid.into(),
            resource_version: "1".into(),
            count: 1,
            observed_mono_ns: at_ms * MS,
            stated_unix_ns: None,
            pod: Some(pod.into()),
            message: format!("{pod}: its clock jumped 0.812 s forward since the last probe"),
        };
        let faults = vec![FaultRecord {
            kind: FaultKind::MemberClockJump,
            members: vec![1],
            healed: 5000 * MS,
            ..fault(FaultKind::MemberClockJump, 1000, 8000)
        }];
        let events = occurrences(
            &[sighting("a", 2000, "locks-1"), sighting("b", 40_000, "locks-3")],
            "locks",
            clock,
        );
        let served = [held(1, "k", 0, 3000, Some(10))];
        let load = |n: usize| {
            let sample = parse_loadavg("2.00 1.00 1.00 3/100 1", 0).unwrap();
            LoadRecord::new(1, n, vec![Some(0); n], 0, vec![sample], (0, 60_000 * MS))
        };
        let host = HostClockRecord::new(&StepFinder::default(), vec![]);
        let op = PhaseReport::new(&served, &faults, vec![], vec![], 1.0)
            .with_host(Some(load(2)), Some(host.clone()))
            .with_clock_jumps(classify(&events, &faults, &host.steps));
        let violation = Violation {
            key: "k".into(),
            first: 1,
            second: 2,
            first_client: "a".into(),
            second_client: "b".into(),
            at: 5,
            overlap_ns: 5,
        };
        let control =
            PhaseReport::new(&served, &faults, vec![violation], vec![], 1.0).with_host(Some(load(2)), None);
        let report = Report::new(3, vec![], serde_json::json!({}), op.clone(), control.clone());
        assert_eq!((report.false_clock_jumps, report.busy_processes), (1, 2));
        assert!(!report.passed(), "a false clock jump fails the run");
        let text = report.false_clock_jumps_text();
        assert!(
            text.starts_with("1 ClockJump event(s) of the operator run that no member-clock-jump fault"),
            "{text}"
        );
        assert!(text.contains("locks-3 (event b): FALSE POSITIVE"), "{text}");
        assert!(!text.contains("(event a)"), "{text}");
        let md = report.summary_markdown();
        for want in [
            "| busy processes (load) | 2 | 2 |",
            "| load average (1 min) during the faults | max 2.00, mean 2.00 | max 2.00, mean 2.00 |",
            "| host clock steps (> 5 ms) | 0 | - |",
            "| clock jump faults dealt | 1 | - |",
            "| ClockJump events | 2 | - |",
            "| … explained by a clock jump fault | 1 | - |",
            "| **… false positives** | 1 | - |",
            "load (operator run): 2 busy processes (1 per core × 2 cores, nice 0)",
            "clock jumps (operator run): clock jump faults dealt 1, ClockJump events 2, explained 1, host clock stepped 0, false positives 1",
        ] {
            assert!(md.contains(want), "{want:?} missing in:\n{md}");
        }
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["false_clock_jumps"], 1);
        assert_eq!(json["operator"]["load"]["busy_processes"], 2);
        assert_eq!(json["operator"]["clock_jumps"]["false_positives"], 1);
        // Explained by the fault only: passes.
        let op = op.with_clock_jumps(classify(&events[..1], &faults, &[]));
        let report = Report::new(3, vec![], serde_json::json!({}), op, control);
        assert!(report.passed() && report.false_clock_jumps_text().is_empty());
    }

    #[test]
    fn only_updates_the_in_window_overlaps_can_have_lost_are_excused() {
        let m = |sections: i64, counter: i64| CounterMismatch {
            key: "k".into(),
            critical_sections: sections,
            counter,
        };
        assert_eq!(lost_updates_beyond(&[m(10, 9)], 1), 0);
        assert_eq!(lost_updates_beyond(&[m(10, 8)], 1), 1);
        assert_eq!(lost_updates_beyond(&[m(10, 9)], 0), 1);
        // A counter above its critical sections: nothing explains it.
        assert_eq!(lost_updates_beyond(&[m(10, 11)], 5), 1);
        assert_eq!(lost_updates_beyond(&[m(10, 11)], 0), 1);
    }
}
