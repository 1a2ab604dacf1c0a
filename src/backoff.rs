//! Per-object retry delays after failed reconciles: doubling from one second up to a cap,
//! reset by the next success, so a broken object neither spins nor waits forever.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::runtime::reflector::ObjectRef;

use crate::crd::RedlockCluster;

const BASE: Duration = Duration::from_secs(1);
const CAP: Duration = Duration::from_secs(300);

/// Delay before retry number `failures` (1 = first failure).
pub fn delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    (BASE * 2u32.pow(doublings)).min(CAP)
}

#[derive(Default)]
pub struct Backoff {
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

#[cfg(test)]
mod tests {
    use super::*;

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
