//! Changing N while lock clients run, on the old and the new server list at once. Pure.
//!
//! Two numbers, persisted in status, make every mix of old-list and new-list clients safe:
//! - `publishedInstances`, the list clients are told. A scale-up publishes the longer list at
//!   once; a scale-down first fences the removed members and publishes the shorter list only
//!   once they have been fenced for one full hold (every lock they granted has expired), and
//!   only then are their pods deleted. Old-list clients then need a quorum of the old N among
//!   the remaining members, which intersects every quorum of the new list.
//! - `confirmedInstances`: slots at or above it are never released. A scale-up's new members
//!   are held (their first process is held in full anyway) and then stay fenced until the user
//!   confirms, with the annotation [`CLIENTS_USE_INSTANCES`], that no client uses the old list
//!   any more. Until then a new-list quorum can only be formed from old members, and it is
//!   larger than half of them, so it intersects every old-list quorum.

use crate::crd::conditions::ConditionReason;
use crate::crd::model::Slot;
use crate::crd::{MemberStatus, RedlockCluster};
use crate::decide::observe::{PodState, SlotObservation};
use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;

/// The annotation a user sets to confirm that every lock client uses the list of N servers:
/// `kubectl annotate rlc <name> redlock.dev/clients-use-instances=<N>`.
pub const CLIENTS_USE_INSTANCES: &str = "redlock.dev/clients-use-instances";

/// The two limits for this reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Servers in the published list.
    pub published: i32,
    /// Slots below this may be released.
    pub confirmed: i32,
    /// While a scale-up waits: the exact annotation value that confirms it, `<N>-<generation>`
    /// (the generation at which the wait began). A value left from an earlier resize, or set
    /// in the same commit as the scale-up, can therefore never confirm it.
    pub token: Option<String>,
}

/// Limits before planning: what the persisted status says, moved on where a change needs no
/// waiting (a scale-up publishes at once; a confirmation or a scale-down lowers `confirmed`).
/// A scale-down's `published` moves in [`after_plan`], once the removed members are fenced
/// and held.
///
/// `nonce` is this reconcile's random part of a new confirmation token
/// ([`confirmation_token`]); a token already on record stays.
pub(crate) fn before_plan(cluster: &RedlockCluster, told: Told, nonce: &str) -> Limits {
    let n = cluster.spec.instances;
    let status = cluster.status.as_ref();
    let prev_published = status.and_then(|s| s.published_instances);
    let prev_confirmed = status.and_then(|s| s.confirmed_instances);
    let (Some(published), Some(confirmed)) = (prev_published, prev_confirmed) else {
        return without_record(cluster, told, nonce);
    };
    let confirmed = confirmed.min(n);
    if confirmed >= n {
        return Limits {
            published: published.max(n),
            confirmed: n,
            token: None,
        };
    }
    let token = status
        .and_then(|s| s.confirmation_token.clone())
        .filter(|t| t.starts_with(&format!("{n}-")))
        .unwrap_or_else(|| confirmation_token(cluster, nonce));
    let confirmed_by_user = cluster
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CLIENTS_USE_INSTANCES))
        .is_some_and(|v| v.trim() == token);
    Limits {
        published: published.max(n),
        confirmed: if confirmed_by_user { n } else { confirmed },
        token: (!confirmed_by_user).then_some(token),
    }
}

/// A new confirmation token for a scale-up to N: `<N>-<generation>-<nonce>`. The count and
/// generation tell a reader what it confirms; the nonce, drawn at random when the wait begins
/// and kept in status, makes it unpredictable (safety review 3, N8): an annotation written
/// together with the scale-up, or left over in a manifest from a deleted predecessor (whose
/// generations started at 1 too), can never match it. Only a value read from this status
/// (or the `Resizing` condition) confirms.
pub(crate) fn confirmation_token(cluster: &RedlockCluster, nonce: &str) -> String {
    format!(
        "{}-{}-{nonce}",
        cluster.spec.instances,
        cluster.metadata.generation.unwrap_or_default()
    )
}

/// A fresh nonce for [`confirmation_token`]: 64 random bits, hex.
pub(crate) fn new_nonce() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("the OS random source works");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the published objects tell clients: the second record of a resize, read when the
/// status has none. `<name>-endpoints` is written after each status write; `<name>-client`
/// in each reconcile's children step. Either may lag (a write refused for a while), so every
/// list either tells bounds what may be released.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Told {
    /// How many servers `<name>-endpoints` lists.
    pub servers: Option<i32>,
    /// Its `confirmedInstances`: slots at or above it were not to be released.
    pub confirmed: Option<i32>,
    /// How many `urls` `<name>-client` lists.
    pub client_servers: Option<i32>,
}

impl Told {
    /// The longest list clients may use, if any object tells one.
    pub fn longest(&self) -> Option<i32> {
        self.servers.max(self.client_servers)
    }

    /// Slots below this may be released as far as the published objects tell: the
    /// ConfigMap's `confirmedInstances` (else its list, for one written before the key
    /// existed) and the client Secret's list, whichever is smaller.
    fn confirmed(&self) -> Option<i32> {
        [self.confirmed.or(self.servers), self.client_servers]
            .into_iter()
            .flatten()
            .min()
    }
}

/// The limits without a record in status (a new cluster, a status wiped or restored without
/// them). Clients may still be told a longer list than N by a published object: its extra
/// members are removed safely. And unknown means unsafe: a scale-up waiting for its
/// confirmation (the longer list published, `confirmedInstances` below it) keeps waiting, for
/// a new token; a shorter list clients were told bounds what may be released, too.
fn without_record(cluster: &RedlockCluster, told: Told, nonce: &str) -> Limits {
    let n = cluster.spec.instances;
    let confirmed = told.confirmed().unwrap_or(n).clamp(0, n);
    let token = (confirmed < n).then(|| confirmation_token(cluster, nonce));
    Limits {
        published: published_without_record(cluster, told),
        confirmed,
        token,
    }
}

/// The published list without a record in status: the longest list a published object tells,
/// never shorter than N.
fn published_without_record(cluster: &RedlockCluster, told: Told) -> i32 {
    told.longest()
        .unwrap_or(cluster.spec.instances)
        .max(cluster.spec.instances)
}

/// The list the children step builds `<name>-client` (`urls` and `quorum`) and the slot
/// Services from. It runs before the reconcile plans, so it cannot wait for [`before_plan`]:
/// the status's `publishedInstances` while the status has the resize's record (with the scale-up
/// a status write ahead of the Secret, as the record must be), else the same second record
/// [`without_record`] reads (and a half record's list, if longer). Never `spec.instances` alone
/// (safety review 3, N2): a status wiped or pruned during a scale-down's hold would write the
/// short list and its quorum while the removed members still hold valid locks, and delete
/// their Services.
pub(crate) fn published_for_children(cluster: &RedlockCluster, told: Told) -> i32 {
    let status = cluster.status.as_ref();
    match status.map(|s| (s.published_instances, s.confirmed_instances)) {
        Some((Some(published), Some(_))) => published,
        Some((Some(published), None)) => published.max(published_without_record(cluster, told)),
        _ => published_without_record(cluster, told),
    }
}

/// The limits while the spec is rejected: a rejected spec changes nothing that runs, also not
/// which list clients are told, so the record in status stands, or without one, what the
/// published objects tell (never the rejected spec's N unless nothing tells anything).
pub(crate) fn while_rejected(cluster: &RedlockCluster, told: Told) -> Limits {
    let status = cluster.status.as_ref();
    let recorded = status.and_then(|s| s.published_instances.zip(s.confirmed_instances));
    let Some((published, confirmed)) = recorded else {
        let published = told.longest().unwrap_or(cluster.spec.instances);
        let confirmed = told.confirmed().unwrap_or(published).clamp(0, published);
        return Limits {
            published,
            confirmed,
            token: None,
        };
    };
    Limits {
        published,
        confirmed,
        token: status.and_then(|s| s.confirmation_token.clone()),
    }
}

/// The published list after planning: during a scale-down it shrinks to N once every removed
/// slot is fenced (or gone) and its hold has ended.
pub(crate) fn after_plan(
    limits: Limits,
    instances: i32,
    members: &[MemberStatus],
    observed: &BTreeMap<Slot, SlotObservation>,
    now: Timestamp,
) -> Limits {
    if limits.published <= instances {
        return limits;
    }
    let done = Slot::span(instances, limits.published).all(|slot| {
        let obs = observed.get(&slot);
        // Proof that it grants no lock now: no process, or a process seen fenced. A process
        // that does not answer proves nothing.
        let gone = obs.is_none_or(|o| !matches!(o.pod, PodState::Running { .. } | PodState::Foreign { .. }));
        let fenced = obs
            .and_then(|o| o.probe.answered())
            .is_some_and(|r| !r.client_enabled);
        let Some(m) = members.iter().find(|m| m.slot == slot) else {
            // No record: never created, or gone after its hold.
            return obs.is_none_or(|o| o.pod == PodState::Missing);
        };
        let held_out = match m.state {
            crate::crd::MemberState::Starting => gone,
            crate::crd::MemberState::Ready => false,
            _ => m.held_until.as_ref().is_some_and(|u| u.0 <= now),
        };
        held_out && (gone || fenced)
    });
    Limits {
        published: if done { instances } else { limits.published },
        ..limits
    }
}

/// What the `Resizing` condition says: `None` when the list is settled.
pub(crate) fn waiting_for(limits: &Limits, instances: i32, name: &str) -> Option<(ConditionReason, String)> {
    if limits.published > instances {
        return Some((
            ConditionReason::ScaleDown,
            format!(
                "removing members {instances}..{}: fenced and held for one full hold before the list of {instances} is published; clients may keep using the list of {} until then",
                limits.published - 1,
                limits.published
            ),
        ));
    }
    if limits.confirmed < instances {
        return Some((
            ConditionReason::AwaitingClientConfirmation,
            format!(
                "the list of {instances} is published; new members {}..{} stay fenced until every client uses it: kubectl annotate --overwrite rlc {name} {CLIENTS_USE_INSTANCES}={}",
                limits.confirmed,
                instances - 1,
                limits.token.as_deref().unwrap_or_default()
            ),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn nonces_are_random_hex() {
        let (a, b) = (super::new_nonce(), super::new_nonce());
        assert_eq!(a.len(), 16);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    use super::*;
    use crate::crd::{MemberState, RedlockClusterStatus};
    use crate::decide::observe::{Probe, RedisInfo};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn cluster(
        n: i32,
        published: Option<i32>,
        confirmed: Option<i32>,
        annotation: Option<&str>,
    ) -> RedlockCluster {
        let mut c = crate::fixtures::cluster(serde_json::json!({"instances": n}));
        c.status = Some(RedlockClusterStatus {
            published_instances: published,
            confirmed_instances: confirmed,
            ..Default::default()
        });
        if let Some(a) = annotation {
            c.metadata.annotations = Some([(CLIENTS_USE_INSTANCES.to_owned(), a.to_owned())].into());
        }
        c
    }

    fn limits(published: i32, confirmed: i32) -> Limits {
        Limits {
            published,
            confirmed,
            token: None,
        }
    }

    #[test]
    fn before_plan_in_every_direction() {
        let token = |t: &str| Some(t.to_owned());
        for (n, published, confirmed, annotation, want) in [
            // New cluster: everything at once.
            (3, None, None, None, limits(3, 3)),
            // Steady.
            (3, Some(3), Some(3), None, limits(3, 3)),
            // Scale-up: published at once, new members wait for the confirmation of this very
            // resize: `5-<generation>` (generation 4 here).
            (
                5,
                Some(3),
                Some(3),
                None,
                Limits {
                    token: token("5-4-n0"),
                    ..limits(5, 3)
                },
            ),
            (
                5,
                Some(3),
                Some(3),
                Some("3"),
                Limits {
                    token: token("5-4-n0"),
                    ..limits(5, 3)
                },
            ),
            // A bare count (left from an earlier resize, or set with the scale-up) never confirms.
            (
                5,
                Some(3),
                Some(3),
                Some("5"),
                Limits {
                    token: token("5-4-n0"),
                    ..limits(5, 3)
                },
            ),
            (
                5,
                Some(3),
                Some(3),
                Some("5-3"),
                Limits {
                    token: token("5-4-n0"),
                    ..limits(5, 3)
                },
            ),
            // The predictable `<N>-<generation>` (written with the scale-up, or left over from
            // a deleted predecessor) does not confirm: only the token with its nonce does.
            (
                5,
                Some(3),
                Some(3),
                Some("5-4"),
                Limits {
                    token: token("5-4-n0"),
                    ..limits(5, 3)
                },
            ),
            (5, Some(3), Some(3), Some("5-4-n0"), limits(5, 5)),
            (5, Some(5), Some(3), Some(" 5-4-n0 "), limits(5, 5)),
            // Scale-down: confirmed drops at once (removed members never serve again),
            // published waits.
            (3, Some(5), Some(5), None, limits(5, 3)),
            // Down during an unconfirmed scale-up.
            (
                4,
                Some(5),
                Some(3),
                None,
                Limits {
                    token: token("4-4-n0"),
                    ..limits(5, 3)
                },
            ),
        ] {
            let mut c = cluster(n, published, confirmed, annotation);
            c.metadata.generation = Some(4);
            assert_eq!(
                before_plan(&c, Told::default(), "n0"),
                want,
                "{n} {published:?} {confirmed:?} {annotation:?}"
            );
        }
        // The token of a wait already on record stays, whatever the generation is now.
        let mut c = cluster(5, Some(5), Some(3), Some("5-2"));
        c.metadata.generation = Some(9);
        c.status.as_mut().unwrap().confirmation_token = Some("5-2".into());
        assert_eq!(before_plan(&c, Told::default(), "n0"), limits(5, 5));
    }

    /// Safety-review F6/F8: a status wiped or restored without the resize's record. The
    /// `<name>-endpoints` ConfigMap, written after every status write, says what clients were
    /// told; unknown means unsafe.
    #[test]
    fn without_a_record_the_published_list_bounds_what_is_released() {
        let told = |servers, confirmed| Told {
            servers,
            confirmed,
            client_servers: servers,
        };
        let mut c = cluster(5, None, None, None);
        c.metadata.generation = Some(7);
        let waiting = |published, confirmed| Limits {
            token: Some("5-7-n0".to_owned()),
            ..limits(published, confirmed)
        };
        for (what, t, want) in [
            ("a new cluster", told(None, None), limits(5, 5)),
            ("settled at 5", told(Some(5), Some(5)), limits(5, 5)),
            // A scale-up 3 -> 5 waiting for its confirmation: it keeps waiting (a new token).
            ("scale-up waiting", told(Some(5), Some(3)), waiting(5, 3)),
            // The list of 3 still published (the wipe came before the longer list was): the
            // new members wait for a confirmation too.
            (
                "scale-up not yet published",
                told(Some(3), Some(3)),
                waiting(5, 3),
            ),
            // A ConfigMap from before `confirmedInstances` existed: its list bounds it.
            (
                "older ConfigMap, shorter list",
                told(Some(3), None),
                waiting(5, 3),
            ),
            ("older ConfigMap, same list", told(Some(5), None), limits(5, 5)),
            // Clients are told a longer list: its extra members are removed safely.
            ("scale-down under way", told(Some(7), Some(7)), limits(7, 5)),
            ("nonsense", told(Some(5), Some(-2)), waiting(5, 0)),
        ] {
            assert_eq!(before_plan(&c, t, "n0"), want, "{what}");
        }
        // The ConfigMap's writes were refused through a scale-down 5 -> 3 (it still says 5 of
        // 5) while `<name>-client` told the list of 3; scaled up to 5 again and wiped: the
        // client Secret's shorter list bounds what is released.
        let stale = Told {
            servers: Some(5),
            confirmed: Some(5),
            client_servers: Some(3),
        };
        assert_eq!(before_plan(&c, stale, "n0"), waiting(5, 3));
        // Only the client Secret is left (the ConfigMap gone): its list counts alone.
        let secret_only = Told {
            client_servers: Some(3),
            ..Told::default()
        };
        assert_eq!(before_plan(&c, secret_only, "n0"), waiting(5, 3));
        let longer = Told {
            client_servers: Some(7),
            ..Told::default()
        };
        assert_eq!(before_plan(&c, longer, "n0"), limits(7, 5));
    }

    /// Safety-review 3, N2: the children step writes `<name>-client` (`urls` and `quorum`) and
    /// deletes slot Services before the reconcile plans. During a scale-down's hold, a status
    /// that lost `publishedInstances` (wiped, patched, pruned by an older CRD schema) must not
    /// make it write the short list: it takes the list the published objects tell, as the
    /// resize does, and never a shorter one than any record says.
    #[test]
    fn a_missing_published_count_never_shortens_the_list_clients_are_told() {
        let told = |servers, client| Told {
            servers,
            confirmed: servers,
            client_servers: client,
        };
        for (what, status, t, want) in [
            ("a new cluster", (None, None), told(None, None), 3),
            // The hold of a scale-down 5 -> 3, the status's count gone.
            ("scale-down hold, wiped", (None, None), told(Some(5), Some(5)), 5),
            ("only the ConfigMap tells", (None, None), told(Some(5), None), 5),
            ("only the Secret tells", (None, None), told(None, Some(5)), 5),
            // Only `confirmedInstances` left: the count alone decides nothing.
            ("count pruned", (None, Some(3)), told(Some(5), Some(5)), 5),
            // Only the count left: it is still a record, the longer of it and the objects.
            ("half a record", (Some(5), None), told(None, None), 5),
            (
                "half a record, objects longer",
                (Some(3), None),
                told(Some(5), Some(5)),
                5,
            ),
            // The record in status decides: the shorter list once the hold ended, the longer
            // one only once a scale-up's status write says so (write-ahead).
            (
                "scale-down published",
                (Some(3), Some(3)),
                told(Some(5), Some(5)),
                3,
            ),
            (
                "scale-up not yet on record",
                (Some(3), Some(3)),
                told(Some(3), Some(3)),
                3,
            ),
            ("nothing told, spec 3", (None, None), told(None, None), 3),
        ] {
            let c = cluster(3, status.0, status.1, None);
            assert_eq!(published_for_children(&c, t), want, "{what}");
        }
        let mut wiped = cluster(3, None, None, None);
        wiped.status = None;
        assert_eq!(
            published_for_children(&wiped, told(Some(5), Some(5))),
            5,
            "no status"
        );
    }

    /// A rejected spec changes no limit: the record in status stands, and without one the
    /// published objects decide, never the rejected N (review finding: a wiped status plus a
    /// rejected spec released a waiting scale-up's new members).
    #[test]
    fn a_rejected_spec_keeps_the_limits_on_record_or_told() {
        let told = |servers, confirmed, client| Told {
            servers,
            confirmed,
            client_servers: client,
        };
        let mut c = cluster(5, Some(5), Some(3), None);
        c.status.as_mut().unwrap().confirmation_token = Some("5-2".into());
        assert_eq!(
            while_rejected(&c, told(Some(7), Some(7), Some(7))),
            Limits {
                token: Some("5-2".into()),
                ..limits(5, 3)
            }
        );
        let c = cluster(5, None, None, None);
        for (what, t, want) in [
            (
                "scale-up waiting, wiped",
                told(Some(5), Some(3), Some(5)),
                limits(5, 3),
            ),
            ("stale ConfigMap", told(Some(5), Some(5), Some(3)), limits(5, 3)),
            ("older ConfigMap", told(Some(3), None, Some(3)), limits(3, 3)),
            (
                "nothing told: a new cluster",
                told(None, None, None),
                limits(5, 5),
            ),
        ] {
            assert_eq!(while_rejected(&c, t), want, "{what}");
        }
    }

    fn member(slot: i32, state: MemberState, until: Option<i64>) -> MemberStatus {
        MemberStatus {
            held_until: until.map(|s| MicroTime(Timestamp::from_second(s).unwrap())),
            ..MemberStatus::new(format!("locks-{slot}"), slot, state)
        }
    }

    fn fenced(enabled: bool) -> SlotObservation {
        SlotObservation {
            pod: PodState::Running {
                container_id: None,
                ready: false,
                terminating: false,
            },
            probe: Probe::Answered(RedisInfo {
                run_id: "r".into(),
                version: "7.0.15".into(),
                client_enabled: enabled,
                pod_uid: None,
                client_password_hashes: None,
                admin_password_hashes: None,
                deviations: Vec::new(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_shorter_list_is_published_only_after_one_hold_of_fenced_removed_members() {
        let now = Timestamp::from_second(100).unwrap();
        let l = limits(5, 3);
        let obs = |a, b| BTreeMap::from([(Slot::new(3), fenced(a)), (Slot::new(4), fenced(b))]);
        let held = |u3, u4| {
            vec![
                member(3, MemberState::Held, Some(u3)),
                member(4, MemberState::Held, Some(u4)),
            ]
        };
        // Holds running: not yet.
        assert_eq!(
            after_plan(l.clone(), 3, &held(90, 110), &obs(false, false), now).published,
            5
        );
        // Both ended, both fenced: published.
        assert_eq!(
            after_plan(l.clone(), 3, &held(90, 100), &obs(false, false), now).published,
            3
        );
        // One still lets clients in: not yet (it is being fenced).
        assert_eq!(
            after_plan(l.clone(), 3, &held(90, 100), &obs(false, true), now).published,
            5
        );
        // A member still on record as Ready (not fenced yet): not yet.
        let ready = vec![
            member(3, MemberState::Ready, None),
            member(4, MemberState::Held, Some(90)),
        ];
        assert_eq!(
            after_plan(l.clone(), 3, &ready, &obs(false, false), now).published,
            5
        );
        // Not answering proves nothing, even with the hold over.
        let silent = BTreeMap::from([
            (Slot::new(3), fenced(false)),
            (
                Slot::new(4),
                SlotObservation {
                    probe: Probe::NotProbed,
                    ..fenced(false)
                },
            ),
        ]);
        assert_eq!(
            after_plan(l.clone(), 3, &held(90, 100), &silent, now).published,
            5
        );
        // Gone with no record, or never created: fine.
        assert_eq!(after_plan(l.clone(), 3, &[], &BTreeMap::new(), now).published, 3);
        assert_eq!(
            after_plan(l.clone(), 3, &[], &obs(false, false), now).published,
            5
        );
        // Nothing to shrink.
        assert_eq!(
            after_plan(limits(3, 3), 3, &[], &BTreeMap::new(), now),
            limits(3, 3)
        );
    }

    #[test]
    fn the_condition_says_what_it_waits_for() {
        assert_eq!(waiting_for(&limits(3, 3), 3, "locks"), None);
        let (reason, msg) = waiting_for(&limits(5, 3), 3, "locks").unwrap();
        assert_eq!(reason, ConditionReason::ScaleDown);
        assert!(msg.contains("members 3..4"), "{msg}");
        let waiting = Limits {
            token: Some("5-7".into()),
            ..limits(5, 3)
        };
        let (reason, msg) = waiting_for(&waiting, 5, "locks").unwrap();
        assert_eq!(reason, ConditionReason::AwaitingClientConfirmation);
        assert!(msg.contains("redlock.dev/clients-use-instances=5-7"), "{msg}");
    }
}
