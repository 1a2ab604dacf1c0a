//! Per-object retry delays after failed reconciles: doubling from one second up to a cap,
//! reset by the next success, so a broken object neither spins nor waits forever.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::runtime::reflector::ObjectRef;

use crate::crd::RedlockCluster;

const BASE: Duration = Duration::from_secs(1);
const CAP: Duration = Duration::from_secs(300);

/// Delay before retry number `failures` (1 = first failure).
pub(crate) fn delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    (BASE * 2u32.pow(doublings)).min(CAP)
}

#[derive(Default)]
pub(crate) struct Backoff {
    failures: Mutex<HashMap<ObjectRef<RedlockCluster>, u32>>,
}

impl Backoff {
    /// Records one more failure of `obj` and returns how long to wait before retrying.
    pub fn failed(&self, obj: ObjectRef<RedlockCluster>) -> Duration {
        let mut failures = self.failures.lock().expect("backoff lock poisoned");
        let n = failures.entry(obj).or_default();
        *n = n.saturating_add(1);
        delay(*n)
    }

    pub fn succeeded(&self, obj: &ObjectRef<RedlockCluster>) {
        self.failures.lock().expect("backoff lock poisoned").remove(obj);
    }
}

/// A gate for one kind of write that keeps failing (pod creates and deletes refused by a quota
/// or an admission webhook): the reconcile goes on at its own pace (probes, holds, releases),
/// and only that write waits out the backoff before it is tried again. Failing the whole
/// reconcile instead would push the next probe and release back by up to [`CAP`].
#[derive(Default)]
pub(crate) struct RetryGate {
    state: Mutex<HashMap<ObjectRef<RedlockCluster>, (u32, Instant)>>,
}

impl RetryGate {
    /// Whether the write may be tried at `now`.
    pub fn open(&self, obj: &ObjectRef<RedlockCluster>, now: Instant) -> bool {
        let state = self.state.lock().expect("retry gate lock poisoned");
        state.get(obj).is_none_or(|(_, at)| now >= *at)
    }

    /// Records a failure at `now`; returns the delay until the gate opens again.
    pub fn failed(&self, obj: ObjectRef<RedlockCluster>, now: Instant) -> Duration {
        let mut state = self.state.lock().expect("retry gate lock poisoned");
        let (n, at) = state.entry(obj).or_insert((0, now));
        *n = n.saturating_add(1);
        let wait = delay(*n);
        *at = now + wait;
        wait
    }

    pub fn succeeded(&self, obj: &ObjectRef<RedlockCluster>) {
        self.state.lock().expect("retry gate lock poisoned").remove(obj);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gate_closes_for_the_backoff_after_each_failure_and_opens_on_success() {
        let gate = RetryGate::default();
        let obj = ObjectRef::new("locks").within("ns");
        let t0 = Instant::now();
        assert!(gate.open(&obj, t0));
        assert_eq!(gate.failed(obj.clone(), t0), Duration::from_secs(1));
        assert!(!gate.open(&obj, t0 + Duration::from_millis(999)));
        assert!(gate.open(&obj, t0 + Duration::from_secs(1)));
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(gate.failed(obj.clone(), t1), Duration::from_secs(2));
        assert!(!gate.open(&obj, t1 + Duration::from_millis(1999)));
        gate.succeeded(&obj);
        assert!(gate.open(&obj, t1));
        // Another cluster is not held back.
        assert!(gate.open(&ObjectRef::new("other").within("ns"), t1));
    }

    #[test]
    fn doubles_up_to_the_cap() {
        let secs: Vec<u64> = (1..=11).map(|n| delay(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(delay(u32::MAX), CAP);
    }

    #[test]
    fn success_resets_the_count() {
        let b = Backoff::default();
        let obj = ObjectRef::new("locks").within("ns");
        assert_eq!(b.failed(obj.clone()).as_secs(), 1);
        assert_eq!(b.failed(obj.clone()).as_secs(), 2);
        b.succeeded(&obj);
        assert_eq!(b.failed(obj).as_secs(), 1);
    }
}
