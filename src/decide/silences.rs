//! How long each member's process has gone without answering the operator's probes (safety
//! review 3, N7). A released process that hangs (SIGSTOPped, blocked in a long command, its
//! node overloaded) keeps passing the kubelet's TCP readiness dial, since the kernel completes
//! the handshake, so without this it would stay behind its Services for good, and clients
//! without a command timeout would block on it. A timeout is no loss (its keys are presumed
//! intact, no hold starts); it only takes the pod out of its Services after
//! [`HUNG_AFTER`] of silence (`serving_gate`), and the first answer puts it back.
//!
//! In memory: after a restart every process starts unsilent, and is taken out again after
//! another [`HUNG_AFTER`] if it still does not answer.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::crd::model::Slot;

/// How long a process may go without answering before its pod leaves its Services: several
/// probe periods, so that one slow answer on a loaded machine does not flap a Service.
pub const HUNG_AFTER: Duration = Duration::from_secs(10);

/// Per (cluster UID, slot): the container whose process stopped answering, and since when.
#[derive(Default)]
pub(crate) struct Silences {
    since: Mutex<HashMap<(String, Slot), (String, Instant)>>,
}

/// What one probe of a slot's process said, as far as silence goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Heard {
    /// Its process answered.
    Answered,
    /// Its process did not answer (a timeout or a broken exchange; not a refusal, which says
    /// nothing listens: a crash the kubelet reports).
    Silent,
    /// Not probed, refused, or another process answered: nothing to count.
    Other,
}

impl Silences {
    /// Records what the probe of `slot`'s container `container` said at `now`; returns how
    /// long that container's process has been silent (`None` while it answers).
    pub fn heard(
        &self,
        uid: &str,
        slot: Slot,
        container: &str,
        heard: Heard,
        now: Instant,
    ) -> Option<Duration> {
        let mut since = self.since.lock().expect("silences lock is never poisoned");
        let key = (uid.to_owned(), slot);
        match heard {
            Heard::Silent => {
                let entry = since.entry(key).or_insert_with(|| (container.to_owned(), now));
                if entry.0 != container {
                    *entry = (container.to_owned(), now);
                }
                Some(now.saturating_duration_since(entry.1))
            }
            Heard::Answered | Heard::Other => {
                since.remove(&key);
                None
            }
        }
    }

    /// Forgets a cluster (deleted).
    pub fn forget(&self, uid: &str) {
        self.since
            .lock()
            .expect("silences lock is never poisoned")
            .retain(|(u, _), _| u != uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_is_counted_from_the_first_unanswered_probe_of_the_same_container() {
        let s = Silences::default();
        let t0 = Instant::now();
        let slot = Slot::new(0);
        assert_eq!(s.heard("u", slot, "c1", Heard::Answered, t0), None);
        assert_eq!(s.heard("u", slot, "c1", Heard::Silent, t0), Some(Duration::ZERO));
        assert_eq!(
            s.heard("u", slot, "c1", Heard::Silent, t0 + Duration::from_secs(4)),
            Some(Duration::from_secs(4))
        );
        // Another container (a restart): counted anew.
        assert_eq!(
            s.heard("u", slot, "c2", Heard::Silent, t0 + Duration::from_secs(5)),
            Some(Duration::ZERO)
        );
        // An answer ends it; the next silence starts from zero.
        assert_eq!(
            s.heard("u", slot, "c2", Heard::Answered, t0 + Duration::from_secs(6)),
            None
        );
        assert_eq!(
            s.heard("u", slot, "c2", Heard::Silent, t0 + Duration::from_secs(7)),
            Some(Duration::ZERO)
        );
        // Slots and clusters apart.
        assert_eq!(
            s.heard(
                "u",
                Slot::new(1),
                "c2",
                Heard::Silent,
                t0 + Duration::from_secs(9)
            ),
            Some(Duration::ZERO)
        );
        s.forget("u");
        assert_eq!(
            s.heard("u", slot, "c2", Heard::Silent, t0 + Duration::from_secs(9)),
            Some(Duration::ZERO)
        );
    }
}
