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

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::children::secrets::{Credentials, Rotation, RotationPhase};
use crate::crd::RedlockCluster;
use crate::crd::conditions::{ConditionReason, ConditionType, Desired};
use crate::crd::model::Slot;
use crate::crd::reasons::ClusterReason;

/// Annotation on the RedlockCluster that asks for a rotation; its value is the token.
pub const ROTATE_ANNOTATION: &str = "redlock.dev/rotate-client-password";
/// Annotation that confirms no client uses the old password any more; the rotation's token.
pub const CONFIRM_ANNOTATION: &str = "redlock.dev/clients-use-password";
/// The condition's type as the API carries it (tests/password_rotation.rs reads it by this
/// name).
pub const CONDITION: &str = ConditionType::ClientPasswordRotation.as_str();

/// One answering process and the client password hashes (`#<sha256 hex>`) its client user
/// accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcessPasswords {
    pub slot: Slot,
    pub run_id: String,
    pub hashes: Vec<String>,
}

/// What the user asked for, from the cluster's annotations.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Request<'a> {
    pub rotate: Option<&'a str>,
    pub confirm: Option<&'a str>,
    pub auth_enabled: bool,
}

/// What `cluster`'s annotations ask for.
pub(crate) fn request(cluster: &RedlockCluster) -> Request<'_> {
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

/// Whether a rotation step may be taken now: then the credentials are read with a GET rather
/// than from the watch cache, whose lag could otherwise take a phase back. Not in steady
/// state, and not while a published rotation waits for the user's confirmation.
pub(crate) fn active(creds: &Credentials, request: Request<'_>) -> bool {
    match creds.rotation.as_ref().map(|r| (&r.phase, r.token.as_str())) {
        // Waiting for the user (maybe for days): nothing moves until the confirmation.
        Some((RotationPhase::Published { .. }, token)) => request.confirm == Some(token),
        Some(_) => true,
        None => {
            request.auth_enabled
                && request
                    .rotate
                    .is_some_and(|t| !t.is_empty() && creds.rotated_token.as_deref() != Some(t))
        }
    }
}

/// A change of phase, for its event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Transition {
    pub reason: ClusterReason,
    pub message: String,
}

/// Starts a requested rotation: before anything is written or probed in this reconcile, so
/// the new password is on record (`<name>-admin`) before any process learns it. A token
/// already rotated, or one asked for while another rotation runs, starts nothing.
pub(crate) fn start(
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
        reason: ClusterReason::ClientPasswordRotationStarted,
        message: format!(
            "rotation {token}: a new client password is added to every instance next to the current one; clients are told it once every instance accepts both"
        ),
    };
    (next, Some(t))
}

/// Which of the processes that lock clients log in to as the client user did not answer
/// this probe, and which pods' readiness probes still log in with a client password (pods
/// built before the probe had its own, `PROBE_PASSWORD_KEY`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Coverage {
    pub unanswered: Vec<Slot>,
    pub old_probes: Vec<Slot>,
}

/// The times a step depends on: now, and how long clients get from the publication of the
/// new password before a confirmation may remove the old one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub now: Timestamp,
    pub grace: Duration,
}

/// The next phase, given what the probes found. Every process lock clients log in to must
/// answer (`coverage.unanswered` empty) and accept exactly the passwords of the phase: one cut
/// off from the operator but reachable by clients would otherwise refuse the published
/// password, or keep accepting the removed one. The old password is removed only once no
/// readiness probe logs in with it and `grace` has passed since the publication (clients that
/// mount `<name>-client` see a change only after the kubelet's sync), whatever the
/// confirmation says.
// One match over the phases, each arm its guard, next phase and event: the rotation's
// state machine reads best in one place.
pub(crate) fn advance(
    creds: &Credentials,
    request: Request<'_>,
    found: &[ProcessPasswords],
    coverage: &Coverage,
    timing: Timing,
) -> (Credentials, Option<Transition>) {
    let Some(rotation) = &creds.rotation else {
        return (creds.clone(), None);
    };
    let token = rotation.token.clone();
    let all_match = coverage.unanswered.is_empty()
        && found
            .iter()
            .all(|p| sorted(&p.hashes) == creds.accepted_client_hashes());
    let (next, transition) = match &rotation.phase {
        RotationPhase::Adding { next } if all_match => (
            Credentials {
                rotation: Some(Rotation {
                    token: token.clone(),
                    phase: RotationPhase::Published {
                        next: next.clone(),
                        at: timing.now,
                    },
                }),
                ..creds.clone()
            },
            Transition {
                reason: ClusterReason::ClientPasswordPublished,
                message: format!(
                    "rotation {token}: every instance accepts both passwords, and <name>-client now holds the new one; once no client uses the old one, confirm with the annotation {CONFIRM_ANNOTATION}={token}"
                ),
            },
        ),
        RotationPhase::Published { next, at }
            if request.confirm == Some(token.as_str())
                && coverage.old_probes.is_empty()
                && timing.now >= revocable_at(*at, timing.grace) =>
        {
            (
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
                    reason: ClusterReason::ClientPasswordConfirmed,
                    message: format!(
                        "rotation {token}: confirmed; the old client password is removed from every instance (connections logged in with it stay until they close)"
                    ),
                },
            )
        }
        RotationPhase::Revoking { .. } if all_match => (
            Credentials {
                rotation: None,
                rotated_token: Some(token.clone()),
                ..creds.clone()
            },
            Transition {
                reason: ClusterReason::ClientPasswordRotated,
                message: format!(
                    "rotation {token}: done; every instance accepts only the new client password"
                ),
            },
        ),
        _ => return (creds.clone(), None),
    };
    (next, Some(transition))
}

/// The earliest time a confirmation removes the old password of a rotation published `at`.
fn revocable_at(at: Timestamp, grace: Duration) -> Timestamp {
    at.checked_add(grace).unwrap_or(at)
}

/// The processes whose client user accepts other passwords than `creds` says (a new one not
/// added yet, an old one not removed yet, one restarted from an older ACL file, one edited by
/// hand): each is set to exactly the accepted ones.
pub(crate) fn syncs(creds: &Credentials, found: &[ProcessPasswords]) -> Vec<(Slot, String)> {
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
/// way (and what it waits for), one asked for, or one done.
// One match over the phases, each arm its wording: kept whole so the messages a user reads
// through a rotation sit side by side.
pub(crate) fn condition(
    creds: &Credentials,
    request: Request<'_>,
    coverage: &Coverage,
    grace: Duration,
    name: &str,
) -> Option<Desired> {
    let desired = |status: bool, reason: ConditionReason, message: String| Desired {
        type_: ConditionType::ClientPasswordRotation,
        status,
        reason,
        message,
    };
    let unanswered = |what: &str| {
        if coverage.unanswered.is_empty() {
            String::new()
        } else {
            format!("; waiting for members {:?} to answer {what}", coverage.unanswered)
        }
    };
    Some(match (&creds.rotation, request.rotate) {
        (Some(r), _) => match &r.phase {
            RotationPhase::Adding { .. } => desired(
                true,
                ConditionReason::AddingPassword,
                format!(
                    "rotation {}: adding the new client password to every instance{}",
                    r.token,
                    unanswered(
                        "(every member clients can reach must accept the new password before clients are told it)"
                    )
                ),
            ),
            RotationPhase::Published { at, .. } => {
                let mut message = format!(
                    "rotation {token}: {name}-client holds the new password and every instance accepts both; once no client uses the old one: kubectl annotate --overwrite rlc {name} {CONFIRM_ANNOTATION}={token} (the old one is removed at {earliest} at the earliest)",
                    token = r.token,
                    earliest = revocable_at(*at, grace)
                );
                if !coverage.old_probes.is_empty() {
                    message.push_str(&format!(
                        "; members {:?} run pods whose readiness probe logs in with a client password: the old one is removed only once they are replaced",
                        coverage.old_probes
                    ));
                }
                desired(true, ConditionReason::AwaitingClientConfirmation, message)
            }
            RotationPhase::Revoking { .. } => desired(
                true,
                ConditionReason::RemovingOldPassword,
                format!(
                    "rotation {}: removing the old client password from every instance{}",
                    r.token,
                    unanswered("(a member clients can reach keeps the old password until it does)")
                ),
            ),
        },
        (None, Some(token)) if !token.is_empty() && !request.auth_enabled => desired(
            false,
            ConditionReason::AuthDisabled,
            format!(
                "rotation {token} asked for, but auth is disabled: lock clients log in without a password"
            ),
        ),
        (None, _) => {
            let done = creds.rotated_token.as_ref()?;
            let pending = request.rotate.filter(|t| !t.is_empty() && *t != done);
            match pending {
                // Only between the request and the next reconcile.
                Some(t) => desired(
                    true,
                    ConditionReason::AddingPassword,
                    format!("rotation {t} asked for"),
                ),
                None => desired(
                    false,
                    ConditionReason::Rotated,
                    format!("rotation {done} done; to rotate again, set {ROTATE_ANNOTATION} to a new token"),
                ),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::children::secrets::password_hash;

    fn creds() -> Credentials {
        Credentials::new("adminpw".into(), "old".into(), "probe".into())
    }

    fn on(rotate: Option<&'static str>, confirm: Option<&'static str>) -> Request<'static> {
        Request {
            rotate,
            confirm,
            auth_enabled: true,
        }
    }

    /// A process whose client user accepts `passwords` and the probe's.
    fn process(slot: i32, passwords: &[&str]) -> ProcessPasswords {
        ProcessPasswords {
            slot: Slot::new(slot),
            run_id: format!("run{slot}"),
            hashes: passwords
                .iter()
                .chain(&["probe"])
                .map(|p| password_hash(p))
                .collect(),
        }
    }

    const GRACE: Duration = Duration::from_secs(120);

    fn at(s: i64) -> Timing {
        Timing {
            now: Timestamp::from_second(1_800_000_000 + s).unwrap(),
            grace: GRACE,
        }
    }

    fn all_answer() -> Coverage {
        Coverage::default()
    }

    #[test]
    fn a_rotation_runs_through_its_phases_with_both_passwords_accepted_until_confirmed() {
        let (c, t) = start(&creds(), on(Some("t1"), None), || "new".into());
        assert_eq!(t.unwrap().reason, ClusterReason::ClientPasswordRotationStarted);
        assert_eq!(c.accepted_client_passwords(), vec!["old", "new"]);
        assert_eq!(c.told_client_password(), "old");

        // Processes not yet given the new one: synced, and the phase waits.
        let found = [process(0, &["old"]), process(1, &["old", "new"])];
        assert_eq!(syncs(&c, &found), vec![(Slot::new(0), "run0".to_owned())]);
        let (same, t) = advance(&c, on(Some("t1"), None), &found, &all_answer(), at(0));
        assert!(t.is_none());
        assert_eq!(same, c);

        // All accept both: published.
        let found = [process(0, &["new", "old"]), process(1, &["old", "new"])];
        assert!(syncs(&c, &found).is_empty());
        let (c, t) = advance(&c, on(Some("t1"), None), &found, &all_answer(), at(0));
        assert_eq!(t.unwrap().reason, ClusterReason::ClientPasswordPublished);
        assert_eq!(c.told_client_password(), "new");
        assert_eq!(c.accepted_client_passwords(), vec!["old", "new"]);

        // Waits for the confirmation of this very rotation, and for the grace.
        for wrong in [None, Some("t0"), Some("")] {
            assert!(
                advance(&c, on(Some("t1"), wrong), &found, &all_answer(), at(500))
                    .1
                    .is_none()
            );
        }
        let early = at(GRACE.as_secs() as i64 - 1);
        assert!(
            advance(&c, on(Some("t1"), Some("t1")), &found, &all_answer(), early)
                .1
                .is_none()
        );
        let (c, t) = advance(&c, on(Some("t1"), Some("t1")), &found, &all_answer(), at(120));
        assert_eq!(t.unwrap().reason, ClusterReason::ClientPasswordConfirmed);
        assert_eq!(c.client_password, "new");
        assert_eq!(c.accepted_client_passwords(), vec!["new"]);
        assert_eq!(
            syncs(&c, &found),
            vec![
                (Slot::new(0), "run0".to_owned()),
                (Slot::new(1), "run1".to_owned())
            ]
        );

        // Done once every process accepts the new one only; the request may stay.
        let found = [process(0, &["new"]), process(1, &["new"])];
        let (c, t) = advance(&c, on(Some("t1"), Some("t1")), &found, &all_answer(), at(121));
        assert_eq!(t.unwrap().reason, ClusterReason::ClientPasswordRotated);
        assert_eq!(c.rotation, None);
        assert_eq!(c.rotated_token.as_deref(), Some("t1"));
        let (again, t) = start(&c, on(Some("t1"), Some("t1")), || unreachable!());
        assert!(t.is_none());
        assert_eq!(again, c);
        assert!(!active(&c, on(Some("t1"), Some("t1"))));
        // A new token rotates again, from the new password.
        let (c2, t) = start(&c, on(Some("t2"), Some("t1")), || "newer".into());
        assert!(t.is_some());
        assert_eq!(c2.accepted_client_passwords(), vec!["new", "newer"]);
    }

    #[test]
    fn a_member_that_does_not_answer_or_probes_with_a_client_password_holds_the_rotation() {
        let (c, _) = start(&creds(), on(Some("t1"), None), || "new".into());
        let found = [process(0, &["old", "new"])];
        // Member 1 runs but did not answer: clients may reach it; not published.
        let silent = Coverage {
            unanswered: vec![Slot::new(1)],
            old_probes: vec![],
        };
        assert!(
            advance(&c, on(Some("t1"), None), &found, &silent, at(0))
                .1
                .is_none()
        );
        // Nothing answering at all proves nothing either.
        assert!(advance(&c, on(Some("t1"), None), &[], &silent, at(0)).1.is_none());
        let (c, _) = advance(&c, on(Some("t1"), None), &found, &all_answer(), at(0));
        // A pod whose readiness probe logs in with the old client password: not revoked.
        let old_probe = Coverage {
            unanswered: vec![],
            old_probes: vec![Slot::new(2)],
        };
        let confirmed = on(Some("t1"), Some("t1"));
        assert!(advance(&c, confirmed, &found, &old_probe, at(500)).1.is_none());
        let d = condition(&c, confirmed, &old_probe, GRACE, "locks").unwrap();
        assert!(
            d.message.contains("members [2] run pods whose readiness probe"),
            "{}",
            d.message
        );
        let (c, _) = advance(&c, confirmed, &found, &all_answer(), at(500));
        // Revoking waits for every member too.
        let found = [process(0, &["new"])];
        assert!(advance(&c, confirmed, &found, &silent, at(501)).1.is_none());
        let d = condition(&c, confirmed, &silent, GRACE, "locks").unwrap();
        assert!(d.message.contains("waiting for members [1]"), "{}", d.message);
    }

    #[test]
    fn reads_go_to_the_api_only_while_a_step_may_be_taken() {
        let (c, _) = start(&creds(), on(Some("t1"), None), || "new".into());
        assert!(active(&creds(), on(Some("t1"), None)), "asked for");
        assert!(active(&c, on(Some("t1"), None)), "adding");
        let (c, _) = advance(&c, on(Some("t1"), None), &[], &all_answer(), at(0));
        assert!(
            !active(&c, on(Some("t1"), None)),
            "published, waiting for the user"
        );
        assert!(active(&c, on(Some("t1"), Some("t1"))), "confirmed");
        assert!(!active(&creds(), on(None, None)));
        let off = Request {
            auth_enabled: false,
            ..on(Some("t1"), None)
        };
        assert!(!active(&creds(), off));
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
        let c = condition(&creds(), off, &all_answer(), GRACE, "locks").unwrap();
        assert_eq!((c.status, c.reason), (false, ConditionReason::AuthDisabled));
    }

    #[test]
    fn outside_a_rotation_processes_are_brought_back_to_the_recorded_passwords() {
        // An extra password added by hand, a process without the probe's, one with none.
        let without_probe = ProcessPasswords {
            slot: Slot::new(3),
            run_id: "run3".into(),
            hashes: vec![password_hash("old")],
        };
        let found = [
            process(0, &["old", "intruder"]),
            process(1, &["old"]),
            process(2, &[]),
            without_probe,
        ];
        assert_eq!(
            syncs(&creds(), &found),
            vec![
                (Slot::new(0), "run0".to_owned()),
                (Slot::new(2), "run2".to_owned()),
                (Slot::new(3), "run3".to_owned())
            ]
        );
        assert!(
            advance(&creds(), on(None, None), &found, &all_answer(), at(0))
                .1
                .is_none()
        );
        assert_eq!(
            condition(&creds(), on(None, None), &all_answer(), GRACE, "locks"),
            None
        );
    }

    #[test]
    fn the_condition_names_the_exact_confirmation_and_its_earliest_effect() {
        let (c, _) = start(&creds(), on(Some("t1"), None), || "new".into());
        let d = condition(&c, on(Some("t1"), None), &all_answer(), GRACE, "locks").unwrap();
        assert_eq!((d.status, d.reason), (true, ConditionReason::AddingPassword));
        let (c, _) = advance(&c, on(Some("t1"), None), &[], &all_answer(), at(0));
        let d = condition(&c, on(Some("t1"), None), &all_answer(), GRACE, "locks").unwrap();
        assert_eq!(
            (d.status, d.reason),
            (true, ConditionReason::AwaitingClientConfirmation)
        );
        assert!(
            d.message
                .contains("kubectl annotate --overwrite rlc locks redlock.dev/clients-use-password=t1"),
            "{}",
            d.message
        );
        assert!(d.message.contains(&at(120).now.to_string()), "{}", d.message);
        let (c, _) = advance(&c, on(Some("t1"), Some("t1")), &[], &all_answer(), at(120));
        let d = condition(&c, on(Some("t1"), Some("t1")), &all_answer(), GRACE, "locks").unwrap();
        assert_eq!(d.reason, ConditionReason::RemovingOldPassword);
        let (c, _) = advance(&c, on(Some("t1"), Some("t1")), &[], &all_answer(), at(121));
        let d = condition(&c, on(Some("t1"), Some("t1")), &all_answer(), GRACE, "locks").unwrap();
        assert_eq!((d.status, d.reason), (false, ConditionReason::Rotated));
    }
}
