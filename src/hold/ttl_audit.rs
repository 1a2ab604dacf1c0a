//! TTL audit: the hold rule is only sound if no client holds a key longer than `maxLockTTL`.
//! Every audit period the operator samples keys on each serving member (as admin: `SCAN` plus
//! `PTTL`, a bounded number of keys per member, no writes) and reports keys with a TTL above
//! `maxLockTTL` or with no expiry at all. This module is the pure bookkeeping: cursors that
//! continue across periods, sweeps that complete when the cursor wraps, and the report.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::crd::model::Slot;

/// A sampled key and its `PTTL` reply in milliseconds (-1: no expiry, -2: gone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampledKey {
    pub key: Vec<u8>,
    pub pttl_ms: i64,
}

/// Why a key breaks the policy. Not the key's remaining TTL: it shrinks from one sweep to the
/// next, and a status message that showed it would be rewritten every audit period (and a
/// resting cluster woken for it) while nothing about the finding changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Finding {
    NoExpiry,
    TtlAbove,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::NoExpiry => f.write_str("no expiry"),
            Finding::TtlAbove => f.write_str("TTL above maxLockTTL"),
        }
    }
}

pub(crate) fn classify(pttl_ms: i64, max_lock_ttl_ms: u64) -> Option<Finding> {
    match pttl_ms {
        -1 => Some(Finding::NoExpiry),
        ms if ms >= 0 && ms as u64 > max_lock_ttl_ms => Some(Finding::TtlAbove),
        // -2: expired or deleted between SCAN and PTTL.
        _ => None,
    }
}

/// One offending key, for the message.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Example {
    pub member: String,
    pub key: String,
    pub finding: Finding,
}

/// Results of one pass over a member's keyspace (or of the pass in progress).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Sweep {
    pub checked: u64,
    pub violations: u64,
    /// The smallest offending (member, key): a stable choice, so a status message does not
    /// change from one sweep to the next while the same keys offend.
    pub example: Option<Example>,
}

/// Audit state of one member's process. A new process (new run id) starts over.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct MemberAudit {
    pub run_id: String,
    pub cursor: u64,
    pub current: Sweep,
    /// The last completed sweep.
    pub last: Option<Sweep>,
}

impl MemberAudit {
    pub fn new(run_id: &str) -> Self {
        Self {
            run_id: run_id.to_owned(),
            ..Default::default()
        }
    }

    /// Takes one `SCAN` batch; a `next_cursor` of 0 completes the sweep.
    pub fn absorb(&mut self, member: &str, batch: &[SampledKey], next_cursor: u64, max_lock_ttl_ms: u64) {
        for k in batch {
            self.current.checked += 1;
            if let Some(finding) = classify(k.pttl_ms, max_lock_ttl_ms) {
                self.current.violations += 1;
                let example = Example {
                    member: member.to_owned(),
                    key: String::from_utf8_lossy(&k.key).into_owned(),
                    finding,
                };
                if self.current.example.as_ref().is_none_or(|e| example < *e) {
                    self.current.example = Some(example);
                }
            }
        }
        self.cursor = next_cursor;
        if next_cursor == 0 {
            self.last = Some(std::mem::take(&mut self.current));
        }
    }
}

/// Audit state of one cluster: each member's sweep, and when the next period starts.
#[derive(Debug, Clone)]
pub(crate) struct ClusterAudit {
    pub members: BTreeMap<Slot, MemberAudit>,
    pub next_due: Instant,
}

impl ClusterAudit {
    pub fn new(now: Instant) -> Self {
        Self {
            members: BTreeMap::new(),
            next_due: now,
        }
    }

    /// Whether a period starts now (and if so, schedules the next one). Periods keep their
    /// cadence: one taken a little late (the caller looks once a probe period, after its
    /// probe) does not push the next one back, or a period would last up to a probe period
    /// longer than configured. After a long pause the cadence starts again from now.
    pub fn take_due(&mut self, now: Instant, period: Duration) -> bool {
        if now < self.next_due {
            return false;
        }
        let on_cadence = self.next_due + period;
        self.next_due = if now < on_cadence {
            on_cadence
        } else {
            now + period
        };
        true
    }

    /// Keeps exactly the given (slot, run id) members; a new process starts a new sweep.
    /// Returns each member's cursor to continue from.
    pub fn retain(&mut self, serving: &[(Slot, String)]) -> Vec<(Slot, u64)> {
        self.members
            .retain(|slot, m| serving.iter().any(|(s, id)| s == slot && *id == m.run_id));
        serving
            .iter()
            .map(|(slot, run_id)| {
                let m = self
                    .members
                    .entry(*slot)
                    .or_insert_with(|| MemberAudit::new(run_id));
                (*slot, m.cursor)
            })
            .collect()
    }
}

/// What the audit says about a whole cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub checked: u64,
    pub violations: u64,
    pub members_with_violations: usize,
    pub example: Option<Example>,
}

/// Whether two reports say the same to the user: the `TTLPolicy` condition and the
/// violations metric show all but the number of keys checked, which moves with every sweep
/// of a cluster in use and would wake a resting cluster for nothing to write.
pub(crate) fn same_findings(a: Option<&Report>, b: Option<&Report>) -> bool {
    fn shown(r: &Report) -> (u64, usize, Option<&Example>) {
        (r.violations, r.members_with_violations, r.example.as_ref())
    }
    a.map(shown) == b.map(shown)
}

/// The report over the members' last completed sweeps; `None` until one has completed.
pub(crate) fn report(members: &BTreeMap<Slot, MemberAudit>) -> Option<Report> {
    let done: Vec<&Sweep> = members.values().filter_map(|m| m.last.as_ref()).collect();
    if done.is_empty() {
        return None;
    }
    Some(Report {
        checked: done.iter().map(|s| s.checked).sum(),
        violations: done.iter().map(|s| s.violations).sum(),
        members_with_violations: done.iter().filter(|s| s.violations > 0).count(),
        example: done.iter().filter_map(|s| s.example.clone()).min(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str, pttl_ms: i64) -> SampledKey {
        SampledKey {
            key: k.as_bytes().to_vec(),
            pttl_ms,
        }
    }

    #[test]
    fn classifies_no_expiry_and_long_ttls_only() {
        assert_eq!(classify(-1, 30_000), Some(Finding::NoExpiry));
        assert_eq!(classify(-2, 30_000), None);
        assert_eq!(classify(0, 30_000), None);
        assert_eq!(classify(30_000, 30_000), None);
        assert_eq!(classify(30_001, 30_000), Some(Finding::TtlAbove));
    }

    #[test]
    fn a_sweep_completes_when_the_cursor_wraps() {
        let mut m = MemberAudit::new("run-a");
        m.absorb("locks-0", &[key("ok", 100), key("zz", -1)], 17, 30_000);
        assert_eq!((m.cursor, m.last.clone()), (17, None));
        m.absorb("locks-0", &[key("aa", 60_000)], 0, 30_000);
        let last = m.last.clone().unwrap();
        assert_eq!((last.checked, last.violations), (3, 2));
        let example = last.example.unwrap();
        assert_eq!((example.key.as_str(), example.finding), ("aa", Finding::TtlAbove));
        assert_eq!(m.current, Sweep::default());
        // The next sweep replaces the last one once it completes: keys gone, report clears.
        m.absorb("locks-0", &[key("ok", 100)], 0, 30_000);
        assert_eq!(m.last.unwrap().violations, 0);
    }

    #[test]
    fn periods_are_due_once_and_members_follow_their_process() {
        let t0 = Instant::now();
        let mut c = ClusterAudit::new(t0);
        assert!(c.take_due(t0, Duration::from_secs(10)));
        assert!(!c.take_due(t0 + Duration::from_secs(9), Duration::from_secs(10)));
        assert!(c.take_due(t0 + Duration::from_secs(10), Duration::from_secs(10)));
        // Taken 3 s late: the next is still due on the cadence, at 30 s.
        assert!(c.take_due(t0 + Duration::from_secs(23), Duration::from_secs(10)));
        assert!(!c.take_due(t0 + Duration::from_millis(29_999), Duration::from_secs(10)));
        assert!(c.take_due(t0 + Duration::from_secs(30), Duration::from_secs(10)));
        // After a pause longer than a period, the cadence starts again from then.
        assert!(c.take_due(t0 + Duration::from_secs(75), Duration::from_secs(10)));
        assert!(!c.take_due(t0 + Duration::from_secs(84), Duration::from_secs(10)));
        assert!(c.take_due(t0 + Duration::from_secs(85), Duration::from_secs(10)));

        assert_eq!(
            c.retain(&[(Slot::new(0), "a".into()), (Slot::new(1), "b".into())]),
            vec![(Slot::new(0), 0), (Slot::new(1), 0)]
        );
        c.members
            .get_mut(&Slot::new(0))
            .unwrap()
            .absorb("locks-0", &[key("k", -1)], 42, 1000);
        c.members
            .get_mut(&Slot::new(1))
            .unwrap()
            .absorb("locks-1", &[key("k", -1)], 7, 1000);
        // Slot 0 continues its sweep; slot 1 restarted (new run id) and starts over; slot 2 is
        // no longer serving and is forgotten.
        assert_eq!(
            c.retain(&[(Slot::new(0), "a".into()), (Slot::new(1), "b2".into())]),
            vec![(Slot::new(0), 42), (Slot::new(1), 0)]
        );
        assert_eq!(c.members[&Slot::new(1)].run_id, "b2");
        assert_eq!(c.members[&Slot::new(1)].current, Sweep::default());
        assert_eq!(c.retain(&[]), vec![]);
        assert!(c.members.is_empty());
    }

    #[test]
    fn the_report_sums_completed_sweeps_and_picks_a_stable_example() {
        let mut a = MemberAudit::new("a");
        a.absorb("locks-1", &[key("k2", -1)], 0, 1000);
        let mut b = MemberAudit::new("b");
        b.absorb("locks-0", &[key("k9", -1), key("k1", 5)], 0, 1000);
        let mut c = MemberAudit::new("c");
        c.absorb("locks-2", &[key("k0", -1)], 5, 1000); // not complete: not reported yet
        let members = BTreeMap::from([(Slot::new(1), a), (Slot::new(0), b), (Slot::new(2), c)]);
        let r = report(&members).unwrap();
        assert_eq!((r.checked, r.violations, r.members_with_violations), (3, 2, 2));
        let e = r.example.unwrap();
        assert_eq!((e.member.as_str(), e.key.as_str()), ("locks-0", "k9"));
        assert_eq!(report(&BTreeMap::new()), None);
    }

    #[test]
    fn reports_differ_only_in_what_the_user_is_shown() {
        let r = Report {
            checked: 10,
            violations: 1,
            members_with_violations: 1,
            example: Some(Example {
                member: "locks-0".into(),
                key: "k".into(),
                finding: Finding::NoExpiry,
            }),
        };
        let same = |f: fn(&mut Report)| {
            let mut other = r.clone();
            f(&mut other);
            same_findings(Some(&r), Some(&other))
        };
        assert!(same(|o| o.checked = 11));
        assert!(!same(|o| o.violations = 2));
        assert!(!same(|o| o.members_with_violations = 2));
        assert!(!same(|o| o.example = None));
        assert!(!same(|o| o.example.as_mut().unwrap().key = "j".into()));
        assert!(!same(|o| o.example.as_mut().unwrap().finding = Finding::TtlAbove));
        // Absent (no sweep yet) is not the same as a clean sweep: the condition appears.
        let clean = Report {
            violations: 0,
            members_with_violations: 0,
            example: None,
            ..r.clone()
        };
        assert!(!same_findings(None, Some(&clean)));
        assert!(same_findings(None, None));
    }
}
