//! Rotating the admin password, the operator's own (docs/design.md §8.11). Pure: what to do
//! next, given the credentials on record, the request and what the probes found.
//!
//! No lock client uses the admin password, so nothing is published and nothing waits for a
//! confirmation; what must hold is that the operator never loses its way into a process:
//!
//! 1. **Adding** (on `redlock.dev/rotate-admin-password: <token>`): the new password is kept
//!    in `<name>-admin` first, then the ACL file names both hashes, and every process gets
//!    the new one added (`ACL SETUSER redlock-admin resetpass #old #new`). The operator still
//!    logs in with the old one, which every process accepts (a restarted one from either file).
//! 2. **Revoking**, once every running process answered and accepts both: `<name>-admin`
//!    holds the new one as the password (the old one kept beside it), the ACL file names the
//!    new one only, and every process is brought to it. The operator logs in with the new one
//!    and falls back to the old one for a process that refuses it (one restarted from an ACL
//!    file its kubelet had not updated yet), which is then brought to the new one too.
//! 3. **Done** once every running process answered and accepts only the new one, and no
//!    earlier than `--password-rotation-grace-ms` after the switch (a container that restarts
//!    before its kubelet synced the new ACL file starts with the old one, and the operator
//!    reaches it only through the fallback); the token is kept, so the request may stay.
//!
//! Every step is recorded in `<name>-admin` before any process is changed, and the ACL file
//! never names a password that `<name>-admin` does not hold: an operator restarted at any
//! point recovers the phase from the Secrets (`secrets::recover_credentials`).

use crate::children::secrets::{AdminRotation, AdminRotationPhase, Credentials};
use crate::crd::conditions::{ConditionReason, ConditionType, Desired};
use crate::crd::model::Slot;
use crate::crd::reasons::ClusterReason;
use crate::crd::{MemberStatus, RedlockCluster};
use crate::credentials::client_rotation::Timing;
use crate::credentials::client_rotation::{ProcessPasswords, Transition};

/// Annotation on the RedlockCluster that asks for an admin password rotation; its value is
/// the token.
pub const ROTATE_ADMIN_ANNOTATION: &str = "redlock.dev/rotate-admin-password";
/// The condition's type as the API carries it.
pub const CONDITION: &str = ConditionType::AdminPasswordRotation.as_str();

/// The token `cluster` asks an admin rotation for, if any (an empty one asks for nothing).
pub(crate) fn requested(cluster: &RedlockCluster) -> Option<&str> {
    cluster
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ROTATE_ADMIN_ANNOTATION))
        .map(String::as_str)
        .filter(|t| !t.is_empty())
}

/// Whether a step may be taken now: then the credentials are read with a GET, not from the
/// watch cache, whose lag could take a phase back. Not in steady state.
pub(crate) fn active(creds: &Credentials, token: Option<&str>) -> bool {
    creds.admin_rotation.is_some() || token.is_some_and(|t| creds.admin_rotated_token.as_deref() != Some(t))
}

/// Starts a requested rotation: the new password goes on record before any process learns it.
/// A token already rotated, or one asked for while another admin rotation runs, starts nothing.
pub(crate) fn start(
    creds: &Credentials,
    token: Option<&str>,
    generate: impl FnOnce() -> String,
) -> (Credentials, Option<Transition>) {
    let Some(token) = token else {
        return (creds.clone(), None);
    };
    if creds.admin_rotation.is_some() || creds.admin_rotated_token.as_deref() == Some(token) {
        return (creds.clone(), None);
    }
    let next = Credentials {
        admin_rotation: Some(AdminRotation {
            token: token.to_owned(),
            phase: AdminRotationPhase::Adding { next: generate() },
        }),
        ..creds.clone()
    };
    let t = Transition {
        reason: ClusterReason::AdminPasswordRotationStarted,
        message: format!(
            "admin rotation {token}: a new admin password is added to every instance next to the current one"
        ),
    };
    (next, Some(t))
}

/// The next phase, given what the probes found: every running process must have answered
/// (`unanswered` empty) and accept exactly the admin passwords of the phase. A process the
/// operator cannot reach may restart or be reached later knowing only the old password, so
/// it holds the rotation where it is.
pub(crate) fn advance(
    creds: &Credentials,
    found: &[ProcessPasswords],
    unanswered: &[Slot],
    timing: Timing,
) -> (Credentials, Option<Transition>) {
    let Some(rotation) = &creds.admin_rotation else {
        return (creds.clone(), None);
    };
    let want = creds.accepted_admin_hashes();
    let all_match = unanswered.is_empty() && found.iter().all(|p| sorted(&p.hashes) == want);
    if !all_match {
        return (creds.clone(), None);
    }
    let token = rotation.token.clone();
    let (next, transition) = match &rotation.phase {
        AdminRotationPhase::Adding { next } => (
            Credentials {
                admin_password: next.clone(),
                admin_rotation: Some(AdminRotation {
                    token: token.clone(),
                    phase: AdminRotationPhase::Revoking {
                        previous: creds.admin_password.clone(),
                        at: timing.now,
                    },
                }),
                ..creds.clone()
            },
            Transition {
                reason: ClusterReason::AdminPasswordSwitched,
                message: format!(
                    "admin rotation {token}: every instance accepts both admin passwords; the operator now logs in with the new one, and the old one is removed from every instance"
                ),
            },
        ),
        AdminRotationPhase::Revoking { at, .. }
            if timing.now < at.checked_add(timing.grace).unwrap_or(*at) =>
        {
            return (creds.clone(), None);
        }
        AdminRotationPhase::Revoking { .. } => (
            Credentials {
                admin_rotation: None,
                admin_rotated_token: Some(token.clone()),
                ..creds.clone()
            },
            Transition {
                reason: ClusterReason::AdminPasswordRotated,
                message: format!(
                    "admin rotation {token}: done; every running instance answered accepting only the new admin password"
                ),
            },
        ),
    };
    (next, Some(transition))
}

/// The slots that hold an admin rotation where it is: a running pod whose process did not
/// answer this probe, and a process on record that outlived its pod (`unstopped`). That one is
/// not probed like the members, so it never gets the new password; it is looked for and
/// fenced at its last address with the admin password, so the rotation must not end (and drop
/// the old password) while it may still run.
pub(crate) fn holding(running_unanswered: &[Slot], members: &[MemberStatus]) -> Vec<Slot> {
    let mut slots: Vec<Slot> = running_unanswered
        .iter()
        .copied()
        .chain(members.iter().filter(|m| m.unstopped.is_some()).map(|m| m.slot))
        .collect();
    slots.sort();
    slots.dedup();
    slots
}

/// While an admin rotation runs, the processes whose admin user accepts other passwords than
/// the phase's: each is set to exactly those. Outside a rotation nothing is changed.
pub(crate) fn syncs(creds: &Credentials, found: &[ProcessPasswords]) -> Vec<(Slot, String)> {
    if creds.admin_rotation.is_none() {
        return Vec::new();
    }
    let want = creds.accepted_admin_hashes();
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

/// The `AdminPasswordRotation` condition, once one was asked for: where it stands and what it
/// waits for, or which token was rotated last.
pub(crate) fn condition(creds: &Credentials, token: Option<&str>, unanswered: &[Slot]) -> Option<Desired> {
    let desired = |status: bool, reason: ConditionReason, message: String| Desired {
        type_: ConditionType::AdminPasswordRotation,
        status,
        reason,
        message,
    };
    let waiting = if unanswered.is_empty() {
        String::new()
    } else {
        format!(
            "; waiting for members {unanswered:?} to answer (a process that outlived its pod: until it is gone)"
        )
    };
    Some(match &creds.admin_rotation {
        Some(r) => match &r.phase {
            AdminRotationPhase::Adding { .. } => desired(
                true,
                ConditionReason::AddingPassword,
                format!(
                    "admin rotation {}: adding the new admin password to every instance{waiting}",
                    r.token
                ),
            ),
            AdminRotationPhase::Revoking { .. } => desired(
                true,
                ConditionReason::RemovingOldPassword,
                format!(
                    "admin rotation {}: the operator logs in with the new admin password; removing the old one from every instance{waiting}",
                    r.token
                ),
            ),
        },
        None => {
            let done = creds.admin_rotated_token.as_deref();
            match token.filter(|t| Some(*t) != done) {
                // Only between the request and the next reconcile.
                Some(t) => desired(
                    true,
                    ConditionReason::AddingPassword,
                    format!("admin rotation {t} asked for"),
                ),
                None => desired(
                    false,
                    ConditionReason::Rotated,
                    format!(
                        "admin rotation {} done; to rotate again, set {ROTATE_ADMIN_ANNOTATION} to a new token",
                        done?
                    ),
                ),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::children::secrets::{acl_file, password_hash};

    fn creds() -> Credentials {
        Credentials::new("old".into(), "client".into(), "probe".into())
    }

    const GRACE: std::time::Duration = std::time::Duration::from_secs(120);

    fn at(s: i64) -> Timing {
        Timing {
            now: k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + s).unwrap(),
            grace: GRACE,
        }
    }

    /// A process whose admin user accepts `passwords`.
    fn process(slot: i32, passwords: &[&str]) -> ProcessPasswords {
        ProcessPasswords {
            slot: Slot::new(slot),
            run_id: format!("run{slot}"),
            hashes: passwords.iter().map(|p| password_hash(p)).collect(),
        }
    }

    fn admin_line(c: &Credentials) -> String {
        acl_file(true, c)
            .lines()
            .find(|l| l.starts_with("user redlock-admin "))
            .unwrap()
            .to_owned()
    }

    #[test]
    fn a_rotation_adds_then_switches_then_removes_and_never_twice_for_a_token() {
        let (c, t) = start(&creds(), Some("a1"), || "new".into());
        assert_eq!(t.unwrap().reason, ClusterReason::AdminPasswordRotationStarted);
        // The operator still logs in with the old one; the ACL file names both.
        assert_eq!(c.admin_password, "old");
        assert_eq!(c.admin_fallback_password(), None);
        let mut both = vec![password_hash("old"), password_hash("new")];
        both.sort();
        assert_eq!(c.accepted_admin_hashes(), both);
        assert!(admin_line(&c).contains(&both[0]) && admin_line(&c).contains(&both[1]));

        // Not every process has the new one yet: synced, and the phase waits.
        let found = [process(0, &["old"]), process(1, &["new", "old"])];
        assert_eq!(syncs(&c, &found), vec![(Slot::new(0), "run0".to_owned())]);
        let (same, t) = advance(&c, &found, &[], at(0));
        assert!(t.is_none());
        assert_eq!(same, c);

        // All accept both: the operator switches to the new one and removes the old one.
        let found = [process(0, &["old", "new"]), process(1, &["new", "old"])];
        let (c, t) = advance(&c, &found, &[], at(0));
        assert_eq!(t.unwrap().reason, ClusterReason::AdminPasswordSwitched);
        assert_eq!(c.admin_password, "new");
        assert_eq!(c.admin_fallback_password(), Some("old"));
        assert_eq!(c.accepted_admin_hashes(), vec![password_hash("new")]);
        assert!(!admin_line(&c).contains(&password_hash("old")));
        assert_eq!(
            syncs(&c, &found),
            vec![
                (Slot::new(0), "run0".to_owned()),
                (Slot::new(1), "run1".to_owned())
            ]
        );
        assert!(
            advance(&c, &found, &[], at(500)).1.is_none(),
            "the old one is still accepted"
        );

        // Done once every process accepts only the new one and the grace since the switch has
        // passed (a container restarting from a stale ACL file is reached by the fallback).
        let found = [process(0, &["new"]), process(1, &["new"])];
        let early = at(GRACE.as_secs() as i64 - 1);
        assert!(advance(&c, &found, &[], early).1.is_none(), "within the grace");
        let (c, t) = advance(&c, &found, &[], at(120));
        assert_eq!(t.unwrap().reason, ClusterReason::AdminPasswordRotated);
        assert_eq!(c.admin_rotation, None);
        assert_eq!(c.admin_rotated_token.as_deref(), Some("a1"));
        assert_eq!(c.admin_fallback_password(), None);
        assert!(syncs(&c, &[process(0, &["new", "intruder"])]).is_empty());
        assert!(!active(&c, Some("a1")));
        let (again, t) = start(&c, Some("a1"), || unreachable!());
        assert!(t.is_none());
        assert_eq!(again, c);
        // A new token rotates again, from the new password.
        assert!(active(&c, Some("a2")));
        let (c2, t) = start(&c, Some("a2"), || "newer".into());
        assert!(t.is_some());
        let mut both = vec![password_hash("new"), password_hash("newer")];
        both.sort();
        assert_eq!(c2.accepted_admin_hashes(), both);
    }

    #[test]
    fn a_member_that_does_not_answer_holds_the_rotation_where_it_is() {
        let (adding, _) = start(&creds(), Some("a1"), || "new".into());
        let both = [process(0, &["old", "new"])];
        let silent = [Slot::new(1)];
        assert!(advance(&adding, &both, &silent, at(0)).1.is_none());
        assert!(
            advance(&adding, &[], &silent, at(0)).1.is_none(),
            "nothing answering proves nothing"
        );
        let d = condition(&adding, Some("a1"), &silent).unwrap();
        assert_eq!((d.status, d.reason), (true, ConditionReason::AddingPassword));
        assert!(d.message.contains("waiting for members [1]"), "{}", d.message);
        let (revoking, _) = advance(&adding, &both, &[], at(0));
        let only_new = [process(0, &["new"])];
        assert!(advance(&revoking, &only_new, &silent, at(500)).1.is_none());
        let d = condition(&revoking, Some("a1"), &silent).unwrap();
        assert_eq!(d.reason, ConditionReason::RemovingOldPassword);
    }

    #[test]
    fn a_process_that_outlived_its_pod_holds_the_rotation_like_a_silent_member() {
        use crate::crd::{MemberState, UnstoppedProcess};
        let mut gone = MemberStatus::new("locks-1".into(), 1, MemberState::Held);
        gone.unstopped = Some(UnstoppedProcess {
            run_id: "r1".into(),
            pod_ip: "10.0.0.1".into(),
            listener: None,
            fenced: true,
            ..Default::default()
        });
        let ready = MemberStatus::new("locks-0".into(), 0, MemberState::Ready);
        let members = [ready, gone];
        assert_eq!(holding(&[], &members), vec![Slot::new(1)]);
        assert_eq!(
            holding(&[Slot::new(2), Slot::new(1)], &members),
            vec![Slot::new(1), Slot::new(2)]
        );
        assert!(holding(&[], &members[..1]).is_empty());
        let (adding, _) = start(&creds(), Some("a1"), || "new".into());
        let both = [process(0, &["old", "new"])];
        assert!(
            advance(&adding, &both, &holding(&[], &members), at(0))
                .1
                .is_none()
        );
    }

    #[test]
    fn nothing_starts_without_a_token_or_during_another_admin_rotation() {
        assert!(start(&creds(), None, || unreachable!()).1.is_none());
        assert!(!active(&creds(), None));
        assert_eq!(condition(&creds(), None, &[]), None);
        let (running, _) = start(&creds(), Some("a1"), || "new".into());
        let (same, t) = start(&running, Some("a2"), || unreachable!());
        assert!(t.is_none());
        assert_eq!(same, running);
        // Asked for, not started yet (the condition between the request and the next step).
        let d = condition(&creds(), Some("a1"), &[]).unwrap();
        assert_eq!((d.status, d.reason), (true, ConditionReason::AddingPassword));
        // A client password rotation is another matter: it does not hold this one.
        assert!(syncs(&creds(), &[process(0, &["intruder"])]).is_empty());
    }
}
