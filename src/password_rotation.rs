//! Rotating the client password while lock clients run (docs/design.md §8.10). Pure: what to
//! do next, given the credentials on record, the user's annotations and what the probes found.
//!
//! A Redis ACL user can accept several passwords, so no client ever has to be cut off:
//!
//! 1. **Adding** (on `redlock.dev/rotate-client-password: <token>`): a new password is kept in
//!    `<name>-admin`, the ACL file names both hashes, and every process gets the new one added
//!    (`ACL SETUSER <client> resetpass #old #new`). Clients are still told the old one.
//! 2. **Published**, once every answering process accepts both: `<name>-client` tells the new
//!    one. Clients move over as they re-read the Secret; both work meanwhile.
//! 3. **Revoking**, once the user confirms no client uses the old one any more
//!    (`redlock.dev/clients-use-password: <token>`): the ACL file and every process accept the
//!    new one only.
//! 4. **Done** once every answering process does; the token is kept, so the request may stay.
//!
//! None of this touches `on`/`off`: a fenced process stays fenced (`resetpass` and `#<hash>`
//! change passwords only).

use crate::conditions::Desired;
use crate::crd::RedlockCluster;
use crate::resources::secrets::{Credentials, Rotation, RotationPhase};

/// Annotation on the RedlockCluster that asks for a rotation; its value is the token.
pub const ROTATE_ANNOTATION: &str = "redlock.dev/rotate-client-password";
/// Annotation that confirms no client uses the old password any more; the rotation's token.
pub const CONFIRM_ANNOTATION: &str = "redlock.dev/clients-use-password";
pub const CONDITION: &str = "ClientPasswordRotation";

/// One answering process and the client password hashes (`#<sha256 hex>`) its client user
/// accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessPasswords {
    pub slot: i32,
    pub run_id: String,
    pub hashes: Vec<String>,
}

/// What the user asked for, from the cluster's annotations.
#[derive(Debug, Clone, Copy, Default)]
pub struct Request<'a> {
    pub rotate: Option<&'a str>,
    pub confirm: Option<&'a str>,
    pub auth_enabled: bool,
}

/// What `cluster`'s annotations ask for.
pub fn request(cluster: &RedlockCluster) -> Request<'_> {
    let annotation = |key: &str| {
        cluster
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    };
    Request {
        rotate: annotation(ROTATE_ANNOTATION),
        confirm: annotation(CONFIRM_ANNOTATION),
        auth_enabled: cluster.spec.auth.enabled,
    }
}

/// Whether a rotation runs or is asked for: then the credentials are read with a GET rather
/// than from the watch cache, whose lag could otherwise take a phase back (only during a
/// rotation; steady state reads nothing).
pub fn active(creds: &Credentials, request: Request<'_>) -> bool {
    creds.rotation.is_some()
        || request.auth_enabled
            && request
                .rotate
                .is_some_and(|t| !t.is_empty() && creds.rotated_token.as_deref() != Some(t))
}

/// A change of phase, for its event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub reason: &'static str,
    pub message: String,
}

/// Starts a requested rotation: before anything is written or probed in this reconcile, so
/// the new password is on record (`<name>-admin`) before any process learns it. A token
/// already rotated, or one asked for while another rotation runs, starts nothing.
pub fn start(
    creds: &Credentials,
    request: Request<'_>,
    generate: impl FnOnce() -> String,
) -> (Credentials, Option<Transition>) {
    let Some(token) = request.rotate.filter(|t| !t.is_empty()) else {
        return (creds.clone(), None);
    };
    if !request.auth_enabled || creds.rotation.is_some() || creds.rotated_token.as_deref() == Some(token) {
        return (creds.clone(), None);
    }
    let next = Credentials {
        rotation: Some(Rotation {
            token: token.to_owned(),
            phase: RotationPhase::Adding { next: generate() },
        }),
        ..creds.clone()
    };
    let t = Transition {
        reason: "ClientPasswordRotationStarted",
        message: format!(
            "rotation {token}: a new client password is added to every instance next to the current one; clients are told it once every instance accepts both"
        ),
    };
    (next, Some(t))
}

/// The next phase, given what the probes found (answering processes of the client user).
/// Processes that do not answer are not waited for: one that comes back is brought to the
/// accepted passwords by `syncs` at its first probe, and a restarted one starts from the ACL
/// file, which names them.
pub fn advance(
    creds: &Credentials,
    request: Request<'_>,
    found: &[ProcessPasswords],
) -> (Credentials, Option<Transition>) {
    let Some(rotation) = &creds.rotation else {
        return (creds.clone(), None);
    };
    let token = rotation.token.clone();
    let all_match = found
        .iter()
        .all(|p| sorted(&p.hashes) == creds.accepted_client_hashes());
    let (next, transition) = match &rotation.phase {
        RotationPhase::Adding { next } if all_match => (
            Credentials {
                rotation: Some(Rotation {
                    token: token.clone(),
                    phase: RotationPhase::Published { next: next.clone() },
                }),
                ..creds.clone()
            },
            Transition {
                reason: "ClientPasswordPublished",
                message: format!(
                    "rotation {token}: every instance accepts both passwords, and <name>-client now holds the new one; once no client uses the old one, confirm with the annotation {CONFIRM_ANNOTATION}={token}"
                ),
            },
        ),
        RotationPhase::Published { next } if request.confirm == Some(token.as_str()) => (
            Credentials {
                client_password: next.clone(),
                rotation: Some(Rotation {
                    token: token.clone(),
                    phase: RotationPhase::Revoking {
                        previous: creds.client_password.clone(),
                    },
                }),
                ..creds.clone()
            },
            Transition {
                reason: "ClientPasswordConfirmed",
                message: format!(
                    "rotation {token}: confirmed; the old client password is removed from every instance (connections logged in with it stay until they close)"
                ),
            },
        ),
        RotationPhase::Revoking { .. } if all_match => (
            Credentials {
                rotation: None,
                rotated_token: Some(token.clone()),
                ..creds.clone()
            },
            Transition {
                reason: "ClientPasswordRotated",
                message: format!(
                    "rotation {token}: done; every instance accepts only the new client password"
                ),
            },
        ),
        _ => return (creds.clone(), None),
    };
    (next, Some(transition))
}

/// The processes whose client user accepts other passwords than `creds` says (a new one not
/// added yet, an old one not removed yet, one restarted from an older ACL file, one edited by
/// hand): each is set to exactly the accepted ones.
pub fn syncs(creds: &Credentials, found: &[ProcessPasswords]) -> Vec<(i32, String)> {
    let want = creds.accepted_client_hashes();
    found
        .iter()
        .filter(|p| sorted(&p.hashes) != want)
        .map(|p| (p.slot, p.run_id.clone()))
        .collect()
}

fn sorted(hashes: &[String]) -> Vec<String> {
    let mut h = hashes.to_vec();
    h.sort();
    h.dedup();
    h
}

/// The `ClientPasswordRotation` condition, when there is anything to say: a rotation under
/// way, one asked for, or one done.
pub fn condition(creds: &Credentials, request: Request<'_>, name: &str) -> Option<Desired> {
    let desired = |status: bool, reason: &'static str, message: String| Desired {
        type_: CONDITION,
        status,
        reason,
        message,
    };
    Some(match (&creds.rotation, request.rotate) {
        (Some(r), _) => match &r.phase {
            RotationPhase::Adding { .. } => desired(
                true,
                "AddingPassword",
                format!(
                    "rotation {}: adding the new client password to every instance",
                    r.token
                ),
            ),
            RotationPhase::Published { .. } => desired(
                true,
                "AwaitingClientConfirmation",
                format!(
                    "rotation {token}: {name}-client holds the new password and every instance accepts both; once no client uses the old one: kubectl annotate --overwrite rlc {name} {CONFIRM_ANNOTATION}={token}",
                    token = r.token
                ),
            ),
            RotationPhase::Revoking { .. } => desired(
                true,
                "RemovingOldPassword",
                format!(
                    "rotation {}: removing the old client password from every instance",
                    r.token
                ),
            ),
        },
        (None, Some(token)) if !request.auth_enabled => desired(
            false,
            "AuthDisabled",
            format!(
                "rotation {token} asked for, but auth is disabled: lock clients log in without a password"
            ),
        ),
        (None, _) => {
            let done = creds.rotated_token.as_ref()?;
            let pending = request.rotate.filter(|t| !t.is_empty() && *t != done);
            match pending {
                // Only between the request and the next reconcile.
                Some(t) => desired(true, "AddingPassword", format!("rotation {t} asked for")),
                None => desired(
                    false,
                    "Rotated",
                    format!("rotation {done} done; to rotate again, set {ROTATE_ANNOTATION} to a new token"),
                ),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::secrets::password_hash;

    fn creds() -> Credentials {
        Credentials::new("adminpw".into(), "old".into())
    }

    fn on(rotate: Option<&'static str>, confirm: Option<&'static str>) -> Request<'static> {
        Request {
            rotate,
            confirm,
            auth_enabled: true,
        }
    }

    fn process(slot: i32, passwords: &[&str]) -> ProcessPasswords {
        ProcessPasswords {
            slot,
            run_id: format!("run{slot}"),
            hashes: passwords.iter().map(|p| password_hash(p)).collect(),
        }
    }

    #[test]
    fn a_rotation_runs_through_its_phases_with_both_passwords_accepted_until_confirmed() {
        let (c, t) = start(&creds(), on(Some("t1"), None), || "new".into());
        assert_eq!(t.unwrap().reason, "ClientPasswordRotationStarted");
        assert_eq!(c.accepted_client_passwords(), vec!["old", "new"]);
        assert_eq!(c.told_client_password(), "old");

        // Processes not yet given the new one: synced, and the phase waits.
        let found = [process(0, &["old"]), process(1, &["old", "new"])];
        assert_eq!(syncs(&c, &found), vec![(0, "run0".to_owned())]);
        let (same, t) = advance(&c, on(Some("t1"), None), &found);
        assert!(t.is_none());
        assert_eq!(same, c);

        // All accept both: published.
        let found = [process(0, &["new", "old"]), process(1, &["old", "new"])];
        assert!(syncs(&c, &found).is_empty());
        let (c, t) = advance(&c, on(Some("t1"), None), &found);
        assert_eq!(t.unwrap().reason, "ClientPasswordPublished");
        assert_eq!(c.told_client_password(), "new");
        assert_eq!(c.accepted_client_passwords(), vec!["old", "new"]);

        // Waits for the confirmation of this very rotation.
        for wrong in [None, Some("t0"), Some("")] {
            assert!(advance(&c, on(Some("t1"), wrong), &found).1.is_none());
        }
        let (c, t) = advance(&c, on(Some("t1"), Some("t1")), &found);
        assert_eq!(t.unwrap().reason, "ClientPasswordConfirmed");
        assert_eq!(c.client_password, "new");
        assert_eq!(c.accepted_client_passwords(), vec!["new"]);
        assert_eq!(
            syncs(&c, &found),
            vec![(0, "run0".to_owned()), (1, "run1".to_owned())]
        );

        // Done once every process accepts the new one only; the request may stay.
        let (c, t) = advance(
            &c,
            on(Some("t1"), Some("t1")),
            &[process(0, &["new"]), process(1, &["new"])],
        );
        assert_eq!(t.unwrap().reason, "ClientPasswordRotated");
        assert_eq!(c.rotation, None);
        assert_eq!(c.rotated_token.as_deref(), Some("t1"));
        let (again, t) = start(&c, on(Some("t1"), Some("t1")), || unreachable!());
        assert!(t.is_none());
        assert_eq!(again, c);
        // A new token rotates again, from the new password.
        let (c2, t) = start(&c, on(Some("t2"), Some("t1")), || "newer".into());
        assert!(t.is_some());
        assert_eq!(c2.accepted_client_passwords(), vec!["new", "newer"]);
    }

    #[test]
    fn nothing_starts_without_auth_during_another_rotation_or_for_an_empty_token() {
        let off = Request {
            auth_enabled: false,
            ..on(Some("t1"), None)
        };
        assert!(start(&creds(), off, || unreachable!()).1.is_none());
        assert!(start(&creds(), on(Some(""), None), || unreachable!()).1.is_none());
        assert!(start(&creds(), on(None, None), || unreachable!()).1.is_none());
        let (running, _) = start(&creds(), on(Some("t1"), None), || "new".into());
        let (same, t) = start(&running, on(Some("t2"), None), || unreachable!());
        assert!(t.is_none());
        assert_eq!(same, running);
        let c = condition(&creds(), off, "locks").unwrap();
        assert_eq!((c.status, c.reason), (false, "AuthDisabled"));
    }

    #[test]
    fn outside_a_rotation_processes_are_brought_back_to_the_one_password() {
        // An extra password added by hand, or a process that kept the old one.
        let found = [
            process(0, &["old", "intruder"]),
            process(1, &["old"]),
            process(2, &[]),
        ];
        assert_eq!(
            syncs(&creds(), &found),
            vec![(0, "run0".to_owned()), (2, "run2".to_owned())]
        );
        assert!(advance(&creds(), on(None, None), &found).1.is_none());
        assert_eq!(condition(&creds(), on(None, None), "locks"), None);
    }

    #[test]
    fn the_condition_names_the_exact_confirmation() {
        let (c, _) = start(&creds(), on(Some("t1"), None), || "new".into());
        let d = condition(&c, on(Some("t1"), None), "locks").unwrap();
        assert_eq!((d.status, d.reason), (true, "AddingPassword"));
        let (c, _) = advance(&c, on(Some("t1"), None), &[]);
        let d = condition(&c, on(Some("t1"), None), "locks").unwrap();
        assert_eq!((d.status, d.reason), (true, "AwaitingClientConfirmation"));
        assert!(
            d.message
                .contains("kubectl annotate --overwrite rlc locks redlock.dev/clients-use-password=t1"),
            "{}",
            d.message
        );
        let (c, _) = advance(&c, on(Some("t1"), Some("t1")), &[]);
        assert_eq!(
            condition(&c, on(Some("t1"), Some("t1")), "locks").unwrap().reason,
            "RemovingOldPassword"
        );
        let (c, _) = advance(&c, on(Some("t1"), Some("t1")), &[]);
        let d = condition(&c, on(Some("t1"), Some("t1")), "locks").unwrap();
        assert_eq!((d.status, d.reason), (false, "Rotated"));
    }
}
