//! The CAs of users' TLS Secrets (`spec.tls.secretName`), kept between reconciles.
//!
//! The Secret is the user's (cert-manager's, typically), not labelled as the operator's, so no
//! watch caches it; reading it on every reconcile cost one GET per TLS cluster per probe
//! period. A CA is read once and then trusted until a connection made with it fails: a CA
//! rotation shows up exactly that way (the servers' new certificates no longer verify), and
//! so does a Secret replaced under the same name. A failure makes the next reconcile read
//! the Secret again, at most once per [`REFETCH_AFTER`] per Secret, so a member that stays
//! unreachable costs one GET per that period, not one per reconcile.
//!
//! Trusting a stale CA can only make connections fail (nothing is released through a
//! connection that does not verify): the cache never makes the operator trust a server it
//! would not trust with a fresh read, except one whose certificate the user's previous CA
//! still signs, until a connection fails or the operator restarts.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The shortest time between two reads of one Secret caused by failing connections.
pub(crate) const REFETCH_AFTER: Duration = Duration::from_secs(10);

#[derive(Default)]
pub(crate) struct TlsCas {
    by_secret: Mutex<HashMap<SecretKey, Entry>>,
}

/// (namespace, Secret name).
type SecretKey = (String, String);

struct Entry {
    ca: Vec<u8>,
    read_at: Instant,
    /// A connection made with this CA failed since it was read.
    distrusted: bool,
}

impl TlsCas {
    /// The CA last read from `ns/secret`, unless a connection failed since and it is time to
    /// read it again.
    pub fn get(&self, ns: &str, secret: &str, now: Instant) -> Option<Vec<u8>> {
        let by_secret = self.by_secret.lock().expect("tls ca lock is never poisoned");
        let e = by_secret.get(&key(ns, secret))?;
        let reread = e.distrusted && now.saturating_duration_since(e.read_at) >= REFETCH_AFTER;
        (!reread).then(|| e.ca.clone())
    }

    /// Keeps the CA just read from `ns/secret`.
    pub fn keep(&self, ns: &str, secret: &str, ca: Vec<u8>, now: Instant) {
        self.by_secret
            .lock()
            .expect("tls ca lock is never poisoned")
            .insert(
                key(ns, secret),
                Entry {
                    ca,
                    read_at: now,
                    distrusted: false,
                },
            );
    }

    /// A connection made with the CA of `ns/secret` failed: read it again (when due).
    pub fn distrust(&self, ns: &str, secret: &str) {
        if let Some(e) = self
            .by_secret
            .lock()
            .expect("tls ca lock is never poisoned")
            .get_mut(&key(ns, secret))
        {
            e.distrusted = true;
        }
    }
}

fn key(ns: &str, secret: &str) -> SecretKey {
    (ns.to_owned(), secret.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_is_read_once_and_kept() {
        let cas = TlsCas::default();
        let t0 = Instant::now();
        assert_eq!(cas.get("ns", "tls", t0), None, "never read");
        cas.keep("ns", "tls", b"CA1".to_vec(), t0);
        assert_eq!(
            cas.get("ns", "tls", t0 + Duration::from_secs(3600)).as_deref(),
            Some(&b"CA1"[..])
        );
        assert_eq!(cas.get("other", "tls", t0), None, "per namespace");
        assert_eq!(cas.get("ns", "tls2", t0), None, "per Secret");
    }

    #[test]
    fn a_failed_connection_rereads_at_most_once_per_period() {
        let cas = TlsCas::default();
        let t0 = Instant::now();
        cas.keep("ns", "tls", b"CA1".to_vec(), t0);
        cas.distrust("ns", "tls");
        // Just read: a member that is down must not cost a GET per reconcile.
        assert!(cas.get("ns", "tls", t0 + Duration::from_secs(1)).is_some());
        assert!(
            cas.get("ns", "tls", t0 + REFETCH_AFTER).is_none(),
            "due: read again"
        );
        cas.keep("ns", "tls", b"CA2".to_vec(), t0 + REFETCH_AFTER);
        assert_eq!(
            cas.get("ns", "tls", t0 + REFETCH_AFTER * 5).as_deref(),
            Some(&b"CA2"[..]),
            "trusted again after the read"
        );
    }

    #[test]
    fn distrusting_an_unknown_secret_is_harmless() {
        let cas = TlsCas::default();
        cas.distrust("ns", "never-read");
        assert_eq!(cas.get("ns", "never-read", Instant::now()), None);
    }
}
