//! A violation as a person reads it from a failed run's log: the two operations with their
//! times (after the fault injected last before the second acquired, and on the wall clock the
//! operator's log and the events use), the members each was granted the lock on, and every
//! member's reply to its acquisition and release, as far as its client library shows them
//! (go-redsync and node-redlock do, through their workers; rslock 0.10 folds its servers'
//! replies into a count and shows none).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::checker::{Violation, hold_interval};
use crate::history::{MemberReply, Op};
use crate::protocol::Step;
use crate::report::FaultRecord;

/// One instant on CLOCK_MONOTONIC (the history's clock) and on the wall clock (UTC, ns since
/// the Unix epoch): converts the history's times to the times the operator's log and the
/// Kubernetes events show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WallClock {
    pub mono_ns: u64,
    pub unix_ns: i128,
}

impl WallClock {
    /// `mono` (CLOCK_MONOTONIC ns) as UTC, e.g. `2026-05-20T10:42:13.245Z`.
    pub fn utc(&self, mono: u64) -> String {
        utc(self.unix_ns + (i128::from(mono) - i128::from(self.mono_ns)))
    }
}

/// `unix_ns` (ns since the Unix epoch) as RFC 3339 UTC with milliseconds.
pub fn utc(unix_ns: i128) -> String {
    let ms = unix_ns.div_euclid(1_000_000);
    let (secs, milli) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, day_s) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days: the proleptic Gregorian date of a day count.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i128::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{milli:03}Z",
        day_s / 3600,
        day_s / 60 % 60,
        day_s % 60
    )
}

/// Why an operation has no per-member replies, by client: what its library shows.
pub fn no_replies_because(client: &str) -> &'static str {
    match client {
        "rslock" => {
            "rslock 0.10 shows no per-member replies: it folds each server's answer into a count (the worker cannot see which members granted the lock)"
        }
        _ => "its worker reported no per-member replies",
    }
}

/// The fault injected last before a violation began.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FaultRef {
    /// As the harness's progress lines count: from 1.
    pub number: usize,
    pub kind: String,
    pub members: Vec<usize>,
    pub injected: u64,
    pub recovered: u64,
}

/// One of the two holders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holder {
    pub seq: u64,
    pub client: String,
    pub worker: String,
    pub acquire_invoke: Option<u64>,
    pub acquire_ok: Option<u64>,
    pub validity_ms: Option<i64>,
    /// The end of its hold interval as the checker counts it (release invoked, or validity
    /// over).
    pub held_until: Option<u64>,
    pub release_invoke: Option<u64>,
    pub release_end: Option<u64>,
    pub release_failed: bool,
    /// The members whose acquire reply was `ok`, in the order they answered; empty without
    /// replies.
    pub locked_on: Vec<String>,
    pub replies: Vec<MemberReply>,
    /// Why `replies` is empty ([`no_replies_because`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_replies: Option<String>,
}

impl Holder {
    fn of(op: &Op) -> Self {
        Self {
            seq: op.seq,
            client: op.client.clone(),
            worker: op.worker.clone(),
            acquire_invoke: op.acquire_invoke,
            acquire_ok: op.acquire_ok,
            validity_ms: op.validity_ms,
            held_until: hold_interval(op).map(|(_, end)| end),
            release_invoke: op.release_invoke,
            release_end: op.release_end,
            release_failed: op.release_failed,
            locked_on: op.locked_on().into_iter().map(str::to_owned).collect(),
            replies: op.replies.clone(),
            no_replies: op
                .replies
                .is_empty()
                .then(|| no_replies_because(&op.client).to_owned()),
        }
    }

    /// Stands in for an operation the history does not have (never: the checker found it
    /// there).
    fn unknown(seq: u64, client: &str) -> Self {
        Self {
            seq,
            client: client.to_owned(),
            worker: String::new(),
            acquire_invoke: None,
            acquire_ok: None,
            validity_ms: None,
            held_until: None,
            release_invoke: None,
            release_end: None,
            release_failed: false,
            locked_on: Vec::new(),
            replies: Vec::new(),
            no_replies: Some("the operation is not in the history".into()),
        }
    }
}

/// A violation with what the history knows about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ViolationDetail {
    pub key: String,
    /// When the second holder acquired, and how long both held (ns).
    pub at: u64,
    pub overlap_ns: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_fault: Option<FaultRef>,
    pub first: Holder,
    pub second: Holder,
    /// The members that granted the lock to both (two majorities share at least one): the
    /// members that let the second in while the first held. `None` when a holder's client
    /// shows no replies.
    pub granted_to_both: Option<Vec<String>>,
    /// The phase's first attempt (ns), the origin of the times without a fault before them.
    pub origin: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_clock: Option<WallClock>,
    /// All of it as text ([`ViolationDetail::text`]).
    pub text: String,
}

impl ViolationDetail {
    /// `v` with its operations from `ops` (by seq) and the latest of `faults` injected before it
    /// began; `origin` (ns) is the phase's first attempt.
    pub fn new(
        v: &Violation,
        ops: &BTreeMap<u64, &Op>,
        faults: &[FaultRecord],
        origin: u64,
        wall_clock: Option<WallClock>,
    ) -> Self {
        let holder = |seq: u64, client: &str| {
            ops.get(&seq)
                .map_or_else(|| Holder::unknown(seq, client), |op| Holder::of(op))
        };
        let (first, second) = (
            holder(v.first, &v.first_client),
            holder(v.second, &v.second_client),
        );
        let granted_to_both = (first.no_replies.is_none() && second.no_replies.is_none()).then(|| {
            first
                .locked_on
                .iter()
                .filter(|m| second.locked_on.contains(m))
                .cloned()
                .collect()
        });
        let after_fault = faults
            .iter()
            .filter(|f| f.injected <= v.at)
            .max_by_key(|f| f.injected)
            .map(|f| FaultRef {
                number: f.index + 1,
                kind: f.kind.name().to_owned(),
                members: f.members.clone(),
                injected: f.injected,
                recovered: f.recovered,
            });
        let mut d = Self {
            key: v.key.clone(),
            at: v.at,
            overlap_ns: v.overlap_ns,
            after_fault,
            first,
            second,
            granted_to_both,
            origin,
            wall_clock,
            text: String::new(),
        };
        d.text = d.render();
        d
    }

    /// The same, its times also on the wall clock `clock` gives.
    pub fn set_wall_clock(&mut self, clock: WallClock) {
        self.wall_clock = Some(clock);
        self.text = self.render();
    }

    /// What the text's times count from: the fault (or the phase's first attempt).
    fn base(&self) -> (u64, String) {
        match &self.after_fault {
            Some(f) => (f.injected, format!("fault {}", f.number)),
            None => (self.origin, "the phase's first attempt".to_owned()),
        }
    }

    /// A time of the history after [`Self::base`], in seconds.
    fn rel(&self, t: u64) -> String {
        let rel = (i128::from(t) - i128::from(self.base().0)) as f64 / 1e9;
        format!("{rel:+.3} s")
    }

    /// The same, and in UTC (time of day) when the wall clock is known.
    fn when(&self, t: u64) -> String {
        match self.wall_clock {
            Some(c) => format!("{} ({})", self.rel(t), &c.utc(t)[11..]),
            None => self.rel(t),
        }
    }

    fn holder_text(&self, h: &Holder, out: &mut String) {
        let opt = |t: Option<u64>| t.map_or_else(|| "never".to_owned(), |t| self.when(t));
        out.push_str(&format!(
            "  op {} ({}, worker {}): invoked {}; granted {} (validity {} ms); held until {}; release {}",
            h.seq,
            h.client,
            h.worker,
            opt(h.acquire_invoke),
            opt(h.acquire_ok),
            h.validity_ms.map_or_else(|| "?".to_owned(), |v| v.to_string()),
            opt(h.held_until),
            match (h.release_invoke, h.release_end) {
                (None, _) => "never invoked".to_owned(),
                (Some(r), end) => format!(
                    "invoked {}, {} {}",
                    self.when(r),
                    if h.release_failed { "failed" } else { "returned" },
                    opt(end)
                ),
            }
        ));
        out.push('\n');
        if let Some(why) = &h.no_replies {
            out.push_str(&format!("    locked on: unknown ({why})\n"));
            return;
        }
        let total = {
            let mut members: Vec<&str> = h
                .replies
                .iter()
                .filter(|r| r.step == Step::Acquire)
                .map(|r| r.member.as_str())
                .collect();
            members.sort_unstable();
            members.dedup();
            members.len()
        };
        let short: Vec<&str> = h.locked_on.iter().map(|m| short_member(m)).collect();
        out.push_str(&format!(
            "    locked on {} of {total} that answered: {}\n",
            h.locked_on.len(),
            if short.is_empty() {
                "none".to_owned()
            } else {
                short.join(", ")
            }
        ));
        for step in [Step::Acquire, Step::Release] {
            let replies: Vec<String> = h
                .replies
                .iter()
                .filter(|r| r.step == step)
                .map(|r| {
                    let detail = if r.detail.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", r.detail)
                    };
                    format!(
                        "{} {}{detail} {}",
                        short_member(&r.member),
                        r.outcome.name(),
                        self.rel(r.t)
                    )
                })
                .collect();
            if !replies.is_empty() {
                out.push_str(&format!("    {} replies: {}\n", step.name(), replies.join("; ")));
            } else if step == Step::Release && h.release_invoke.is_some() {
                out.push_str("    release replies: none reported\n");
            }
        }
    }

    /// The violation as text, one holder after the other.
    pub fn render(&self) -> String {
        let mut out = format!(
            "key {}: op {} ({}) acquired {} while op {} ({}) held it: {:.0} ms of two holders",
            self.key,
            self.second.seq,
            self.second.client,
            self.when(self.at),
            self.first.seq,
            self.first.client,
            self.overlap_ns as f64 / 1e6
        );
        let (_, base) = self.base();
        out.push_str(&format!(" (times after {base}"));
        if let Some(f) = &self.after_fault {
            let utc = self
                .wall_clock
                .map(|c| format!(" at {}", c.utc(f.injected)))
                .unwrap_or_default();
            out.push_str(&format!(
                ": {} {:?}, injected{utc}, recovered {}",
                f.kind,
                f.members,
                self.rel(f.recovered)
            ));
        }
        out.push(')');
        out.push('\n');
        self.holder_text(&self.first, &mut out);
        self.holder_text(&self.second, &mut out);
        match &self.granted_to_both {
            Some(both) if both.is_empty() => out.push_str(
                "  granted to both by: none (two majorities of one list share a member: the clients used different lists)\n",
            ),
            Some(both) => out.push_str(&format!(
                "  granted to both by: {} (the member(s) that let the second in while the first held)\n",
                both.iter().map(|m| short_member(m)).collect::<Vec<_>>().join(", ")
            )),
            None => out.push_str("  granted to both by: unknown (a holder's client shows no per-member replies)\n"),
        }
        out
    }
}

/// Every violation of `violations` described against `ops` and `faults`.
pub fn describe_all(
    violations: &[Violation],
    ops: &[Op],
    faults: &[FaultRecord],
    wall_clock: Option<WallClock>,
) -> Vec<ViolationDetail> {
    if violations.is_empty() {
        return Vec::new();
    }
    let by_seq: BTreeMap<u64, &Op> = ops.iter().map(|o| (o.seq, o)).collect();
    let origin = ops.iter().filter_map(|o| o.acquire_invoke).min().unwrap_or(0);
    violations
        .iter()
        .map(|v| ViolationDetail::new(v, &by_seq, faults, origin, wall_clock))
        .collect()
}

/// A member's published name without the namespace and the default port
/// (`locks-3.team.svc:6379` → `locks-3`); an address (the control's `127.0.0.1:7001`) as it is.
pub fn short_member(member: &str) -> &str {
    let host = member.rsplit_once(':').map_or(member, |(h, _)| h);
    match host.split_once('.') {
        Some((first, _)) if host.parse::<std::net::IpAddr>().is_err() && !first.is_empty() => first,
        _ => member,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::overlaps;
    use crate::checker::tests::held;
    use crate::protocol::Outcome;
    use crate::schedule::FaultKind;

    const MS: u64 = 1_000_000;

    fn reply(step: Step, member: &str, t_ms: u64, outcome: Outcome, detail: &str) -> MemberReply {
        MemberReply {
            step,
            member: format!("{member}.team.svc:6379"),
            t: t_ms * MS,
            outcome,
            detail: detail.into(),
        }
    }

    #[test]
    fn utc_formats_the_epoch_leap_days_and_milliseconds() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        // 2024-02-29T23:59:59.999Z
        assert_eq!(utc(1_709_251_199_999_000_000), "2024-02-29T23:59:59.999Z");
        assert_eq!(utc(1_709_251_200_000_000_000), "2024-03-01T00:00:00.000Z");
        assert_eq!(utc(-1_000_000), "1969-12-31T23:59:59.999Z");
        let c = WallClock {
            mono_ns: 5_000 * MS,
            unix_ns: 1_709_251_200_000_000_000,
        };
        assert_eq!(c.utc(5_250 * MS), "2024-03-01T00:00:00.250Z");
        assert_eq!(c.utc(4_000 * MS), "2024-02-29T23:59:59.000Z");
    }

    #[test]
    fn members_are_named_by_their_pod() {
        assert_eq!(short_member("locks-3.team.svc:6379"), "locks-3");
        assert_eq!(short_member("locks-3.team.svc.cluster.local"), "locks-3");
        assert_eq!(short_member("127.0.0.1:7001"), "127.0.0.1:7001");
        assert_eq!(short_member("locks-0:6379"), "locks-0:6379");
    }

    /// The CI failure of issue 46 as the history would have it now: node-redlock holds key1
    /// on 0, 1, 3 (3's old process, never fenced, still serving after fault 6's partition),
    /// go-redsync gets 2, 3, 4 while it holds.
    fn partition_case() -> (Vec<Op>, Vec<FaultRecord>) {
        let mut a = held(4489, "key1", 13_200, 3000, Some(14_390));
        a.client = "node-redlock".into();
        a.worker = "node-redlock-1".into();
        a.release_failed = true;
        a.replies = vec![
            reply(Step::Acquire, "locks-0", 13_205, Outcome::Ok, ""),
            reply(Step::Acquire, "locks-1", 13_206, Outcome::Ok, ""),
            reply(Step::Acquire, "locks-2", 13_207, Outcome::No, ""),
            reply(Step::Acquire, "locks-3", 13_208, Outcome::Ok, ""),
            reply(
                Step::Acquire,
                "locks-4",
                13_500,
                Outcome::Error,
                "Command timed out",
            ),
            reply(Step::Release, "locks-0", 14_392, Outcome::Ok, ""),
            reply(Step::Release, "locks-1", 14_393, Outcome::No, ""),
        ];
        let mut b = held(4518, "key1", 14_320, 3000, Some(15_000));
        b.client = "go-redsync".into();
        b.worker = "go-redsync-0".into();
        b.replies = vec![
            reply(Step::Acquire, "locks-2", 14_321, Outcome::Ok, ""),
            reply(Step::Acquire, "locks-3", 14_321, Outcome::Ok, ""),
            reply(Step::Acquire, "locks-4", 14_322, Outcome::Ok, ""),
            reply(Step::Acquire, "locks-0", 14_322, Outcome::No, ""),
            reply(Step::Acquire, "locks-1", 14_323, Outcome::No, ""),
        ];
        let fault = FaultRecord {
            index: 5,
            kind: FaultKind::Partition,
            members: vec![3],
            injected: 10_000 * MS,
            healed: 20_000 * MS,
            recovered: 21_000 * MS,
            clock_jump_s: None,
            clock_jump_visible: None,
            detected: None,
            exposed: None,
        };
        (vec![a, b], vec![fault])
    }

    #[test]
    fn a_violation_names_the_members_each_holder_locked_and_their_replies() {
        let (ops, faults) = partition_case();
        let vs = overlaps(&ops);
        assert_eq!(vs.len(), 1);
        let clock = WallClock {
            mono_ns: 0,
            unix_ns: 1_709_251_200_000_000_000,
        };
        let d = &describe_all(&vs, &ops, &faults, Some(clock))[0];
        assert_eq!(d.first.locked_on.len(), 3);
        assert_eq!(
            d.second.locked_on,
            [
                "locks-2.team.svc:6379",
                "locks-3.team.svc:6379",
                "locks-4.team.svc:6379"
            ]
        );
        assert_eq!(
            d.granted_to_both.as_deref(),
            Some(&["locks-3.team.svc:6379".to_string()][..])
        );
        assert_eq!(d.after_fault.as_ref().map(|f| f.number), Some(6));
        let text = &d.text;
        for want in [
            "key key1: op 4518 (go-redsync) acquired +4.321 s (00:00:14.321Z) while op 4489 (node-redlock) held it: 69 ms of two holders",
            "(times after fault 6: partition [3], injected at 2024-03-01T00:00:10.000Z, recovered +11.000 s)",
            "op 4489 (node-redlock, worker node-redlock-1): invoked +3.200 s (00:00:13.200Z); granted +3.201 s",
            "release invoked +4.390 s (00:00:14.390Z), failed +4.391 s (00:00:14.391Z)",
            "locked on 3 of 5 that answered: locks-0, locks-1, locks-3",
            "acquire replies: locks-0 ok +3.205 s; locks-1 ok +3.206 s; locks-2 no +3.207 s; locks-3 ok +3.208 s; locks-4 error (Command timed out) +3.500 s",
            "release replies: locks-0 ok +4.392 s; locks-1 no +4.393 s",
            "locked on 3 of 5 that answered: locks-2, locks-3, locks-4",
            "locks-0 no +4.322 s",
            "granted to both by: locks-3 (",
        ] {
            assert!(text.contains(want), "{want:?} missing in:\n{text}");
        }
        // Without the wall clock: no UTC, the rest the same.
        let plain = &describe_all(&vs, &ops, &faults, None)[0];
        assert!(!plain.text.contains("00:00:14"), "{}", plain.text);
        let mut later = plain.clone();
        later.set_wall_clock(clock);
        assert_eq!(&later, d);
        // In report.json with its text.
        let json = serde_json::to_value(d).unwrap();
        assert_eq!(json["first"]["locked_on"][2], "locks-3.team.svc:6379");
        assert_eq!(json["second"]["replies"][0]["outcome"], "ok");
        assert!(
            json["text"]
                .as_str()
                .unwrap()
                .contains("granted to both by: locks-3")
        );
        assert!(json["first"].get("no_replies").is_none());
    }

    #[test]
    fn a_holder_whose_client_shows_no_replies_says_so() {
        let (mut ops, faults) = partition_case();
        ops[1].client = "rslock".into();
        ops[1].replies.clear();
        let d = &describe_all(&overlaps(&ops), &ops, &faults, None)[0];
        assert_eq!(d.granted_to_both, None);
        assert!(
            d.text
                .contains("locked on: unknown (rslock 0.10 shows no per-member replies"),
            "{}",
            d.text
        );
        assert!(d.text.contains("granted to both by: unknown"), "{}", d.text);
        // The other holder's replies are still there.
        assert!(
            d.text
                .contains("locked on 3 of 5 that answered: locks-0, locks-1, locks-3"),
            "{}",
            d.text
        );
        // Before any fault: times from the phase's first attempt.
        let d = &describe_all(&overlaps(&ops), &ops, &[], None)[0];
        assert!(
            d.text.contains("acquired +1.121 s while op 4489")
                && d.text.contains("(times after the phase's first attempt)"),
            "{}",
            d.text
        );
        assert!(d.after_fault.is_none());
        // A release that got no reply at all.
        ops[0].replies.retain(|r| r.step == Step::Acquire);
        let d = &describe_all(&overlaps(&ops), &ops, &[], None)[0];
        assert!(d.text.contains("release replies: none reported"), "{}", d.text);
    }

    #[test]
    fn holders_on_different_lists_share_no_member() {
        let (mut ops, faults) = partition_case();
        ops[1].replies.retain(|r| !r.member.starts_with("locks-3"));
        let d = &describe_all(&overlaps(&ops), &ops, &faults, None)[0];
        assert_eq!(d.granted_to_both.as_deref(), Some(&[][..]));
        assert!(d.text.contains("granted to both by: none"), "{}", d.text);
        assert!(describe_all(&[], &ops, &faults, None).is_empty());
    }
}
