//! Which maxLockTTL the holds use (`status.hold`). Pure; the clock is an argument.
//!
//! A hold must outlast every lock a lost instance could have granted, so it is computed from
//! the longest TTL a client may *still* be using, which is not always the one in the spec:
//! - a **raise** takes effect at once (clients may use the new value as soon as they can read
//!   it, even before the operator has), and running holds lengthen with it (see `plan`);
//! - a **lowering** is published at once, but holds keep the old value until every lock taken
//!   under it has expired: `lowersAt` is when the operator first saw the lower value
//!   published plus the hold of the value published before it (never earlier than a lowering
//!   already pending);
//! - a spec the operator **rejects** changes nothing here (clients were never told about it);
//! - with **no record** (a new cluster, or a status wiped or restored without it) the larger
//!   of the spec and the value clients are found to be told is used, or, when `<name>-endpoints`
//!   says a longer one was still in force for holds (`holdMaxLockTTLMillis`: a lowering was
//!   pending when the record was lost), that one, lowered again one full hold later
//!   ([`recovered`]).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

use crate::crd::reasons::ClusterReason;
use crate::crd::{HoldPolicy, RedlockClusterSpec};
use crate::hold::{held_until, hold_duration};

/// Why the policy changed, for an event on the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The maxLockTTL in force went up (running holds lengthen).
    Raised,
    /// Clients are told a lower maxLockTTL; holds keep the old one until `lowersAt`.
    Lowering,
    /// A pending lowering took effect.
    Lowered,
}

impl Change {
    pub fn reason(self) -> ClusterReason {
        match self {
            Change::Raised => ClusterReason::MaxLockTtlRaised,
            Change::Lowering => ClusterReason::MaxLockTtlLowering,
            Change::Lowered => ClusterReason::MaxLockTtlLowered,
        }
    }
}

/// The policy after one reconcile, and what changed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Update {
    pub policy: HoldPolicy,
    /// (what changed, a sentence for the event).
    pub changes: Vec<(Change, String)>,
}

/// The hold policy for this reconcile. One function on purpose: its steps are ordered (what
/// clients were told, the spec, a lowering that is due, a value in force above everything
/// told, the floor of what is told) and each reads what the one before decided.
/// - `prev`: `status.hold` as persisted.
/// - `accepted`: whether the operator acts on `spec` (no validation problems).
/// - `published`: the maxLockTTL the cluster's `<name>-endpoints` ConfigMap tells clients now
///   (the operator's cache), if it exists.
pub(crate) fn next(
    prev: Option<&HoldPolicy>,
    spec: &RedlockClusterSpec,
    accepted: bool,
    published: Option<Duration>,
    now: Timestamp,
    lowering_not_before: Option<Timestamp>,
) -> Update {
    let spec_ttl: Duration = spec.max_lock_ttl.into();
    let Some(prev) = prev else {
        let ttl = published.map_or(spec_ttl, |p| p.max(spec_ttl));
        return Update {
            policy: policy(
                ttl,
                spec.clock_drift_factor,
                spec.hold_margin.into(),
                published,
                None,
            ),
            changes: vec![],
        };
    };
    let prev_ttl: Duration = prev.max_lock_ttl.into();
    let prev_margin: Duration = prev.hold_margin.into();
    let (drift, margin) = if accepted {
        (spec.clock_drift_factor, spec.hold_margin.into())
    } else {
        (prev.clock_drift_factor, prev_margin)
    };
    let prev_published: Option<Duration> = prev.published_max_lock_ttl.map(Into::into);
    let mut ttl = prev_ttl;
    // A pending lowering never ends before this process has timed it in full itself.
    let mut lowers_at = prev
        .lowers_at
        .as_ref()
        .map(|t| lowering_not_before.map_or(t.0, |n| t.0.max(n)));
    let mut changes = vec![];
    let mut kept_published = prev_published;

    // Clients were told something new.
    if let Some(told) = published
        && Some(told) != prev_published
    {
        kept_published = Some(told);
        if told > ttl {
            ttl = told;
            lowers_at = None;
        } else if told < ttl {
            // Locks taken under the value told before may live until its TTL has passed from
            // now; locks under older values until a lowering already pending.
            // The value in force, not only the one last seen published: a raise may have been
            // published (and used) without the operator's cache ever showing it.
            let before = prev_ttl;
            let hold = hold_duration(
                before,
                drift.max(prev.clock_drift_factor),
                margin.max(prev_margin),
            );
            let at = held_until(now, hold);
            let at = lowers_at.map_or(at, |pending| pending.max(at));
            lowers_at = Some(at);
            changes.push((
                Change::Lowering,
                format!(
                    "clients are told maxLockTTL {}; holds keep using {} until {at}, when every lock taken under a longer TTL has expired",
                    fmt(told),
                    fmt(ttl)
                ),
            ));
        } else {
            lowers_at = None;
        }
    }
    if accepted && spec_ttl > ttl {
        ttl = spec_ttl;
        lowers_at = None;
    }
    if let Some(at) = lowers_at
        && at <= now
    {
        lowers_at = None;
        let target = kept_published
            .unwrap_or(ttl)
            .max(if accepted { spec_ttl } else { Duration::ZERO });
        if target < ttl {
            changes.push((
                Change::Lowered,
                format!("maxLockTTL in force lowered from {} to {}", fmt(ttl), fmt(target)),
            ));
            ttl = target;
        }
    }
    // In force above everything clients may be told now (a raise that was reverted before it
    // was seen published): lower it like any lowering, one hold of the value in force later.
    let told_now = kept_published
        .unwrap_or(ttl)
        .max(if accepted { spec_ttl } else { Duration::ZERO });
    if lowers_at.is_none() && told_now < ttl {
        let at = held_until(
            now,
            hold_duration(ttl, drift.max(prev.clock_drift_factor), margin.max(prev_margin)),
        );
        lowers_at = Some(at);
        changes.push((
            Change::Lowering,
            format!(
                "clients are told maxLockTTL {}; holds keep using {} until {at}, when every lock taken under a longer TTL has expired",
                fmt(told_now),
                fmt(ttl)
            ),
        ));
    }
    // Never below what clients are told (also when the record itself said otherwise: an
    // edited status).
    if let Some(told) = kept_published
        && told > ttl
    {
        ttl = told;
        lowers_at = None;
    }
    if ttl > prev_ttl {
        changes.push((
            Change::Raised,
            format!(
                "maxLockTTL in force raised from {} to {}; running holds are lengthened to match",
                fmt(prev_ttl),
                fmt(ttl)
            ),
        ));
    }
    Update {
        policy: policy(ttl, drift, margin, kept_published, lowers_at),
        changes,
    }
}

/// The record to go on when the status has none, from what `<name>-endpoints` says was in force
/// for holds (`in_force`) when it was last written: `None` unless that is longer than both the
/// spec and what clients are told (`told`); then that value, with clients told the lower one,
/// so that [`next`] lowers it again only one full hold of it from now. Without this, a status
/// lost while a lowering was pending would lower the holds at once, under locks still taken
/// with the longer TTL.
pub(crate) fn recovered(
    spec: &RedlockClusterSpec,
    told: Option<Duration>,
    in_force: Option<Duration>,
) -> Option<HoldPolicy> {
    let spec_ttl: Duration = spec.max_lock_ttl.into();
    let in_force = in_force?;
    (in_force > told.unwrap_or(spec_ttl).max(spec_ttl)).then(|| {
        policy(
            in_force,
            spec.clock_drift_factor,
            spec.hold_margin.into(),
            told,
            None,
        )
    })
}

fn policy(
    ttl: Duration,
    drift: f64,
    margin: Duration,
    published: Option<Duration>,
    lowers_at: Option<Timestamp>,
) -> HoldPolicy {
    HoldPolicy {
        max_lock_ttl: ttl.into(),
        clock_drift_factor: drift,
        hold_margin: margin.into(),
        duration: hold_duration(ttl, drift, margin).into(),
        published_max_lock_ttl: published.map(Into::into),
        lowers_at: lowers_at.map(MicroTime),
    }
}

/// The hold the policy prescribes.
pub(crate) fn hold_of(policy: &HoldPolicy) -> Duration {
    hold_duration(
        policy.max_lock_ttl.into(),
        policy.clock_drift_factor,
        policy.hold_margin.into(),
    )
}

fn fmt(d: Duration) -> String {
    kube::core::Duration::from(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::SignedDuration;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn at(sec: i64) -> Timestamp {
        Timestamp::from_second(sec).unwrap()
    }

    fn spec(ttl: &str) -> RedlockClusterSpec {
        serde_json::from_value(
            serde_json::json!({"maxLockTTL": ttl, "holdMargin": "0s", "clockDriftFactor": 0.0}),
        )
        .unwrap()
    }

    fn ttl(p: &HoldPolicy) -> Duration {
        p.max_lock_ttl.into()
    }

    fn changes(u: &Update) -> Vec<Change> {
        u.changes.iter().map(|(c, _)| *c).collect()
    }

    /// A policy in force: `ttl`, clients told `published`, maybe a lowering pending.
    fn prev(ttl: u64, published: Option<u64>, lowers_at: Option<i64>) -> HoldPolicy {
        policy(s(ttl), 0.0, Duration::ZERO, published.map(s), lowers_at.map(at))
    }

    #[test]
    fn no_record_takes_the_larger_of_spec_and_what_clients_are_told() {
        for (spec_ttl, published, want) in [
            ("30s", None, 30),
            ("30s", Some(10), 30),
            // A wiped status of a cluster that told clients 120s: 120s until lowered properly.
            ("30s", Some(120), 120),
        ] {
            let u = next(None, &spec(spec_ttl), true, published.map(s), at(100), None);
            assert_eq!(ttl(&u.policy), s(want), "{spec_ttl} {published:?}");
            assert_eq!(u.policy.published_max_lock_ttl, published.map(|p| s(p).into()));
            assert!(u.policy.lowers_at.is_none() && u.changes.is_empty());
        }
        // Rejected spec, nothing published yet: the spec is all there is to go by.
        let u = next(None, &spec("30s"), false, None, at(100), None);
        assert_eq!(ttl(&u.policy), s(30));
    }

    #[test]
    fn a_lowering_pending_when_the_record_was_lost_is_timed_again_in_full() {
        // Clients are told 2s, but `<name>-endpoints` says 10s was still in force.
        let sp = spec("2s");
        let rec = recovered(&sp, Some(s(2)), Some(s(10))).unwrap();
        let u = next(Some(&rec), &sp, true, Some(s(2)), at(100), None);
        assert_eq!(ttl(&u.policy), s(10));
        assert_eq!(
            u.policy.lowers_at,
            Some(MicroTime(at(110))),
            "one full hold from now"
        );
        assert_eq!(changes(&u), [Change::Lowering]);
        let later = next(Some(&u.policy), &sp, true, Some(s(2)), at(110), None);
        assert_eq!(ttl(&later.policy), s(2));
        assert_eq!(changes(&later), [Change::Lowered]);
        // Nothing longer in force than the spec or what clients are told: no record to invent.
        assert_eq!(recovered(&sp, Some(s(2)), Some(s(2))), None);
        assert_eq!(recovered(&spec("30s"), Some(s(2)), Some(s(10))), None);
        assert_eq!(recovered(&sp, Some(s(20)), Some(s(10))), None);
        assert_eq!(recovered(&sp, None, None), None);
        // A ConfigMap from before the key existed, or none at all: as before.
        assert_eq!(recovered(&sp, None, Some(s(10))).map(|p| ttl(&p)), Some(s(10)));
    }

    #[test]
    fn raise_applies_at_once_even_before_it_is_published() {
        let p = prev(30, Some(30), None);
        let u = next(Some(&p), &spec("60s"), true, Some(s(30)), at(100), None);
        assert_eq!(ttl(&u.policy), s(60));
        assert_eq!(u.policy.duration, s(60));
        assert_eq!(changes(&u), [Change::Raised]);
        // Once published: nothing more to say.
        let again = next(Some(&u.policy), &spec("60s"), true, Some(s(60)), at(101), None);
        assert_eq!(ttl(&again.policy), s(60));
        assert!(again.changes.is_empty(), "{:?}", again.changes);
    }

    #[test]
    fn rejected_spec_changes_nothing() {
        let p = prev(30, Some(30), None);
        for spec_ttl in ["3s", "60s"] {
            let mut sp = spec(spec_ttl);
            sp.hold_margin = kube::core::Duration::from(Duration::ZERO);
            sp.clock_drift_factor = 0.5;
            let u = next(Some(&p), &sp, false, Some(s(30)), at(100), None);
            assert_eq!(u.policy, p, "{spec_ttl}");
            assert!(u.changes.is_empty());
        }
    }

    #[test]
    fn lowering_waits_one_old_hold_after_it_is_published() {
        let p = prev(30, Some(30), None);
        // Accepted, not yet published: nothing changes.
        let u = next(Some(&p), &spec("3s"), true, Some(s(30)), at(100), None);
        assert_eq!(u.policy, p);
        // Published (seen at 105): holds keep 30s until 105 + 30s.
        let u = next(Some(&p), &spec("3s"), true, Some(s(3)), at(105), None);
        assert_eq!(ttl(&u.policy), s(30));
        assert_eq!(u.policy.published_max_lock_ttl, Some(s(3).into()));
        assert_eq!(u.policy.lowers_at, Some(MicroTime(at(135))));
        assert_eq!(changes(&u), [Change::Lowering]);
        // Re-planned before then: stable, silent.
        let mid = next(Some(&u.policy), &spec("3s"), true, Some(s(3)), at(134), None);
        assert_eq!(mid.policy, u.policy);
        assert!(mid.changes.is_empty());
        // At lowersAt: in force.
        let done = next(Some(&u.policy), &spec("3s"), true, Some(s(3)), at(135), None);
        assert_eq!(ttl(&done.policy), s(3));
        assert_eq!(done.policy.lowers_at, None);
        assert_eq!(changes(&done), [Change::Lowered]);
        let stable = next(Some(&done.policy), &spec("3s"), true, Some(s(3)), at(200), None);
        assert_eq!(stable.policy, done.policy);
        assert!(stable.changes.is_empty());
    }

    #[test]
    fn a_pending_lowering_waits_for_this_process_to_time_it() {
        let p = prev(30, Some(30), None);
        let u = next(Some(&p), &spec("3s"), true, Some(s(3)), at(105), None);
        assert_eq!(u.policy.lowers_at, Some(MicroTime(at(135))));
        // A new leader (its clock 20 s ahead: it reads 135 at real 115) first saw the pending
        // lowering at its 130: not before its 160.
        let early = next(
            Some(&u.policy),
            &spec("3s"),
            true,
            Some(s(3)),
            at(135),
            Some(at(160)),
        );
        assert_eq!(ttl(&early.policy), s(30));
        assert_eq!(early.policy.lowers_at, Some(MicroTime(at(160))));
        assert!(early.changes.is_empty());
        let done = next(
            Some(&early.policy),
            &spec("3s"),
            true,
            Some(s(3)),
            at(160),
            Some(at(160)),
        );
        assert_eq!(ttl(&done.policy), s(3));
        assert_eq!(changes(&done), [Change::Lowered]);
        // A bound earlier than the record changes nothing.
        let same = next(
            Some(&u.policy),
            &spec("3s"),
            true,
            Some(s(3)),
            at(120),
            Some(at(110)),
        );
        assert_eq!(same.policy.lowers_at, Some(MicroTime(at(135))));
    }

    #[test]
    fn lowering_counts_drift_and_margin_of_the_old_value() {
        let mut p = prev(30, Some(30), None);
        p.clock_drift_factor = 0.01;
        p.hold_margin = s(1).into();
        let mut sp = spec("3s");
        sp.clock_drift_factor = 0.01;
        sp.hold_margin = s(1).into();
        let u = next(Some(&p), &sp, true, Some(s(3)), at(100), None);
        // 30s + 300ms + 1s.
        let want = at(100).checked_add(SignedDuration::from_millis(31_300)).unwrap();
        assert_eq!(u.policy.lowers_at, Some(MicroTime(want)));
    }

    #[test]
    fn a_second_lowering_never_ends_the_first_earlier() {
        // 100s told; lowered to 50s at 0 (pending until 100); lowered to 10s at 80.
        let p = prev(100, Some(100), None);
        let a = next(Some(&p), &spec("50s"), true, Some(s(50)), at(0), None);
        assert_eq!(a.policy.lowers_at, Some(MicroTime(at(100))));
        let b = next(Some(&a.policy), &spec("10s"), true, Some(s(10)), at(80), None);
        // Counted from the value in force (100s), not the 50s last seen published: a value
        // published in between may never have shown in the operator's cache.
        assert_eq!(b.policy.lowers_at, Some(MicroTime(at(180))));
        assert_eq!(ttl(&b.policy), s(100));
        let c = next(Some(&b.policy), &spec("10s"), true, Some(s(10)), at(180), None);
        assert_eq!(ttl(&c.policy), s(10));
        // The other order: 100 → 10 at 0 (until 100), → 50 at 5 (one hold of the 100s in
        // force from then: 105).
        let a = next(Some(&p), &spec("10s"), true, Some(s(10)), at(0), None);
        let b = next(Some(&a.policy), &spec("50s"), true, Some(s(50)), at(5), None);
        assert_eq!(b.policy.lowers_at, Some(MicroTime(at(105))));
        let c = next(Some(&b.policy), &spec("50s"), true, Some(s(50)), at(105), None);
        assert_eq!(ttl(&c.policy), s(50));
    }

    #[test]
    fn a_raise_reverted_before_it_was_seen_published_is_lowered_like_any_lowering() {
        // 60s in force (raised), clients still seen told 30s, and the spec is back at 30s.
        let p = prev(60, Some(30), None);
        let u = next(Some(&p), &spec("30s"), true, Some(s(30)), at(100), None);
        assert_eq!(ttl(&u.policy), s(60));
        assert_eq!(u.policy.lowers_at, Some(MicroTime(at(160))));
        assert_eq!(changes(&u), [Change::Lowering]);
        let done = next(Some(&u.policy), &spec("30s"), true, Some(s(30)), at(160), None);
        assert_eq!(ttl(&done.policy), s(30));
        // While the raise is being published, nothing is lowered.
        let pending = next(Some(&p), &spec("60s"), true, Some(s(30)), at(100), None);
        assert_eq!(pending.policy.lowers_at, None);
    }

    #[test]
    fn raising_during_a_pending_lowering_cancels_it() {
        let p = prev(30, Some(3), Some(135));
        let u = next(Some(&p), &spec("60s"), true, Some(s(3)), at(110), None);
        assert_eq!(ttl(&u.policy), s(60));
        assert_eq!(u.policy.lowers_at, None);
        // Published back at the old value: no lowering.
        let back = next(Some(&p), &spec("30s"), true, Some(s(30)), at(110), None);
        assert_eq!(ttl(&back.policy), s(30));
        assert_eq!(back.policy.lowers_at, None);
        assert!(back.changes.is_empty(), "{:?}", back.changes);
    }

    #[test]
    fn lowering_never_goes_below_the_accepted_spec() {
        // Told 3s, lowering due; meanwhile the spec went to 10s (not yet published).
        let p = prev(30, Some(3), Some(135));
        let u = next(Some(&p), &spec("10s"), true, Some(s(3)), at(140), None);
        assert_eq!(ttl(&u.policy), s(10));
        // A rejected spec does not hold it up, nor does it count.
        let u = next(Some(&p), &spec("1s"), false, Some(s(3)), at(140), None);
        assert_eq!(ttl(&u.policy), s(3));
    }

    #[test]
    fn published_above_the_policy_raises_it() {
        // Someone or something published more than the operator knew about.
        let p = prev(30, Some(30), None);
        let u = next(Some(&p), &spec("30s"), true, Some(s(90)), at(100), None);
        assert_eq!(ttl(&u.policy), s(90));
        assert_eq!(changes(&u), [Change::Raised]);
    }

    #[test]
    fn the_policy_never_lowers_without_lowers_at() {
        // Exhaustive over small values: whatever the inputs, the TTL in force drops only when
        // a lowering was pending and its time has come.
        let values = [1u64, 3, 30, 60];
        for &pt in &values {
            for pp in [None, Some(1u64), Some(3), Some(30), Some(60)] {
                for pl in [None, Some(50i64), Some(150)] {
                    let p = prev(pt, pp, pl);
                    for &st in &values {
                        for accepted in [true, false] {
                            for told in [None, Some(1u64), Some(3), Some(30), Some(60)] {
                                let u = next(
                                    Some(&p),
                                    &spec(&format!("{st}s")),
                                    accepted,
                                    told.map(s),
                                    at(100),
                                    None,
                                );
                                let due = pl.is_some_and(|l| l <= 100);
                                if !due {
                                    assert!(
                                        ttl(&u.policy) >= s(pt),
                                        "{pt} {pp:?} {pl:?} {st} {accepted} {told:?}: {:?}",
                                        u.policy
                                    );
                                }
                                // Never below what clients are told now.
                                if let Some(t) = told {
                                    assert!(ttl(&u.policy) >= s(t), "{pt} {told:?}");
                                }
                                if accepted {
                                    assert!(ttl(&u.policy) >= s(st).min(s(pt)));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
