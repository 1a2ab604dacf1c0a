//! One leader per cluster, across Leases (safety review 3, N6). The Lease makes one leader
//! among the replicas that share it; nothing stopped two operators elected with *different*
//! Leases (a `helm upgrade` that renames `leaderElection.leaseName` runs old and new pods side
//! by side with `maxSurge: 1`; two installs) from acting on the same cluster. Conditional
//! status writes serialize their records, but a release ahead of the write
//! (`reconcile::persist::ahead_of_write`) rests on "no other operator process writes": one
//! leader could release, from its own last record, a process the other had just put on hold
//! again (a clock jump, a maintenance fence) in a write its cache did not show yet.
//!
//! So every status write names its writer's Lease (`status.lease`, `<namespace>/<name>`), a
//! cluster that names none is claimed by such a write before anything else is done for it, and
//! an operator elected with another Lease leaves the cluster alone — no write, no fence, no
//! release, no pod change — until that Lease is judged free by the election's own rule: gone,
//! given up, or unchanged for its whole duration on this process's clock ([`judge`]). Its
//! holder, if it still runs, has stopped acting by its renew deadline by then, as a leader that
//! loses a shared Lease does. The takeover is the next status write, conditional on the
//! version planned from like every write, so two operators that both judge a cluster theirs
//! cannot both record it: the loser's write is refused, and its next reconcile sees the
//! winner's Lease.
//!
//! What is not covered: an operator without election (`--leader-elect=false`, one process by
//! definition) names no Lease and checks none; a status removed by hand names none, so whoever
//! claims it first takes the cluster (as on creation).

use std::collections::HashMap;
use std::sync::Mutex;
use tokio::time::Instant;

use crate::runtime::leader::{self, LeaseRecord};

/// Whose a cluster is, from the Lease its status names and this operator's own.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Owner<'a> {
    /// This operator's Lease is named: it acts.
    Ours,
    /// No Lease named (a new cluster, a status removed, one from before `status.lease`, a hand
    /// edit naming no Lease anyone could hold): this operator claims it (a status write naming
    /// its Lease, conditional on the version it read) before it does anything else, so two
    /// operators never both create its Secrets or pods.
    Unclaimed,
    /// Another Lease: this operator acts only once [`judge`] finds it free.
    Other { namespace: &'a str, name: &'a str },
}

/// `<namespace>/<name>` of a Lease, as `status.lease` names it.
pub(crate) fn lease_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Whose a cluster is whose status names `recorded` (`status.lease`), for an operator elected
/// with the Lease `own` (`lease_key`).
pub(crate) fn owner<'a>(recorded: Option<&'a str>, own: &str) -> Owner<'a> {
    match recorded {
        None => Owner::Unclaimed,
        Some(r) if r == own => Owner::Ours,
        Some(r) => match r.split_once('/') {
            Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() && !name.contains('/') => {
                Owner::Other { namespace, name }
            }
            // No Lease anyone could hold (a hand edit): it keeps nobody out.
            _ => Owner::Unclaimed,
        },
    }
}

/// What an operator does about a cluster another Lease names, from that Lease as read now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Its holder may still act.
    Wait { holder: String },
    /// Gone, given up, or unrenewed for its whole duration: the cluster is this operator's.
    TakeOver,
}

/// The election's rule for a Lease this operator does not hold: `lease` is the Lease as read
/// now (`None`: it does not exist), `unchanged_since` when this process first saw it so
/// ([`ForeignLeases::unchanged_since`]).
pub(crate) fn judge(lease: Option<&LeaseRecord>, unchanged_since: Instant, now: Instant) -> Verdict {
    match lease.map(|l| (l, &l.holder)) {
        None | Some((_, None)) => Verdict::TakeOver,
        Some((l, _)) if leader::expired(l, unchanged_since, now) => Verdict::TakeOver,
        Some((_, Some(holder))) => Verdict::Wait {
            holder: holder.clone(),
        },
    }
}

/// The Leases of other operators this process has read, each with when it first saw it in its
/// current form (on its own monotonic clock, as the election times its own Lease), and per
/// cluster the last thing it reported about it (one event per change).
#[derive(Default)]
pub(crate) struct ForeignLeases {
    seen: Mutex<HashMap<String, (Option<LeaseRecord>, Instant)>>,
    reported: Mutex<HashMap<String, String>>,
}

impl ForeignLeases {
    /// When this process first saw the Lease `key` as `record`: `now` if it is new to it or
    /// changed since the last reading (a renewal changes `renewTime`).
    pub fn unchanged_since(&self, key: &str, record: Option<&LeaseRecord>, now: Instant) -> Instant {
        let mut seen = self.seen.lock().expect("foreign lease lock is never poisoned");
        match seen.get(key) {
            Some((r, since)) if r.as_ref() == record => *since,
            _ => {
                seen.insert(key.to_owned(), (record.cloned(), now));
                now
            }
        }
    }

    /// Whether `note` about the cluster `uid` is new (not the last one reported about it);
    /// remembers it.
    pub fn first_report(&self, uid: &str, note: &str) -> bool {
        let mut reported = self
            .reported
            .lock()
            .expect("foreign lease lock is never poisoned");
        if reported.get(uid).map(String::as_str) == Some(note) {
            return false;
        }
        reported.insert(uid.to_owned(), note.to_owned());
        true
    }

    /// The cluster `uid` is this operator's again: the next wait is reported anew.
    pub fn forget_report(&self, uid: &str) {
        self.reported
            .lock()
            .expect("foreign lease lock is never poisoned")
            .remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn held(holder: Option<&str>, renewed: i64) -> LeaseRecord {
        LeaseRecord {
            holder: holder.map(str::to_owned),
            lease_duration_seconds: 15,
            transitions: 0,
            renew_time: Some(k8s_openapi::jiff::Timestamp::from_second(renewed).unwrap()),
        }
    }

    #[test]
    fn a_cluster_is_ours_if_its_status_names_our_lease_and_unclaimed_if_it_names_none() {
        let own = lease_key("ops", "redlock-operator");
        assert_eq!(owner(None, &own), Owner::Unclaimed);
        assert_eq!(owner(Some("ops/redlock-operator"), &own), Owner::Ours);
        assert_eq!(
            owner(Some("ops/renamed"), &own),
            Owner::Other {
                namespace: "ops",
                name: "renamed"
            }
        );
        assert_eq!(
            owner(Some("other/redlock-operator"), &own),
            Owner::Other {
                namespace: "other",
                name: "redlock-operator"
            }
        );
        for junk in ["", "noslash", "/name", "ns/", "a/b/c"] {
            assert_eq!(owner(Some(junk), &own), Owner::Unclaimed, "{junk:?}");
        }
    }

    #[test]
    fn another_lease_is_waited_for_while_held_and_taken_over_once_gone_given_up_or_unrenewed() {
        let t0 = Instant::now();
        let lease = held(Some("old-pod"), 100);
        let wait = Verdict::Wait {
            holder: "old-pod".into(),
        };
        assert_eq!(judge(Some(&lease), t0, t0), wait);
        assert_eq!(judge(Some(&lease), t0, t0 + Duration::from_millis(14_999)), wait);
        assert_eq!(
            judge(Some(&lease), t0, t0 + Duration::from_secs(15)),
            Verdict::TakeOver
        );
        assert_eq!(judge(Some(&held(None, 100)), t0, t0), Verdict::TakeOver);
        assert_eq!(judge(None, t0, t0), Verdict::TakeOver);
    }

    #[test]
    fn a_renewal_restarts_the_wait_and_an_unchanged_lease_keeps_its_first_sighting() {
        let leases = ForeignLeases::default();
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(10);
        let first = held(Some("old-pod"), 100);
        assert_eq!(leases.unchanged_since("ops/a", Some(&first), t0), t0);
        assert_eq!(leases.unchanged_since("ops/a", Some(&first), later), t0);
        // Renewed: the holder is alive, the wait starts again.
        let renewed = held(Some("old-pod"), 102);
        assert_eq!(leases.unchanged_since("ops/a", Some(&renewed), later), later);
        assert_eq!(
            judge(Some(&renewed), later, later + Duration::from_secs(14)),
            Verdict::Wait {
                holder: "old-pod".into()
            }
        );
        // Another Lease is timed on its own.
        assert_eq!(leases.unchanged_since("ops/b", Some(&first), later), later);
    }

    #[test]
    fn a_wait_is_reported_once_per_change() {
        let leases = ForeignLeases::default();
        assert!(leases.first_report("u", "led by ops/a"));
        assert!(!leases.first_report("u", "led by ops/a"));
        assert!(leases.first_report("u", "led by ops/b"));
        leases.forget_report("u");
        assert!(leases.first_report("u", "led by ops/b"));
    }
}
