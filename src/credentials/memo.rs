//! The credentials last recovered from a cluster's three Secrets as cached (`<name>-admin`,
//! `<name>-client`, `<name>-acl`), by cluster UID. Recovering them checks every password
//! against the ACL file's hashes (SHA-256 each), once a probe period per cluster; while the
//! same three objects (UIDs and resourceVersions) are cached, it finds the same credentials.
//!
//! Only credentials recovered from the cache alone are remembered: none read from the API
//! server (a Secret the cache does not show), none with a password generated (random each
//! time until it is written), and none read fresh for a rotation.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::children::secrets::Credentials;

/// The UID and resourceVersion of each of the three cached Secrets, in the order admin,
/// client, ACL (a Secret deleted and created again is another object even before its
/// resourceVersion is compared).
pub(crate) type Versions = [(String, String); 3];

#[derive(Default)]
pub(crate) struct CredentialsMemo {
    by_uid: Mutex<HashMap<String, (Versions, Credentials)>>,
}

impl CredentialsMemo {
    /// The credentials recovered from exactly these Secrets, if they were.
    pub fn get(&self, uid: &str, versions: &Versions) -> Option<Credentials> {
        let by_uid = self.lock();
        let (recovered_from, credentials) = by_uid.get(uid)?;
        (recovered_from == versions).then(|| credentials.clone())
    }

    pub fn keep(&self, uid: &str, versions: Versions, credentials: Credentials) {
        self.lock().insert(uid.to_owned(), (versions, credentials));
    }

    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Versions, Credentials)>> {
        self.by_uid
            .lock()
            .expect("credentials memo lock is never poisoned")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn versions(admin: &str) -> Versions {
        [
            ("a".into(), admin.into()),
            ("c".into(), "2".into()),
            ("l".into(), "3".into()),
        ]
    }

    #[test]
    fn the_same_secrets_give_the_same_credentials() {
        let memo = CredentialsMemo::default();
        let creds = Credentials::new("a".into(), "c".into(), "p".into());
        assert_eq!(memo.get("u1", &versions("1")), None);
        memo.keep("u1", versions("1"), creds.clone());
        assert_eq!(memo.get("u1", &versions("1")), Some(creds));
        assert_eq!(memo.get("u1", &versions("4")), None, "a Secret changed");
        assert_eq!(memo.get("u2", &versions("1")), None, "another cluster");
        let mut recreated = versions("1");
        recreated[2].0 = "l2".into();
        assert_eq!(
            memo.get("u1", &recreated),
            None,
            "the ACL Secret deleted and created again"
        );
        memo.forget("u1");
        assert_eq!(memo.get("u1", &versions("1")), None);
    }
}
