//! The cluster's Secrets: the operator's admin password, the client credentials, and the ACL
//! file every Redis process starts with — the client user `off`: **fenced at start**.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::api::ObjectMeta;
use sha2::{Digest, Sha256};

use super::endpoints;
use super::names::{
    ADMIN_USER, CLIENT_USER, acl_secret_name, admin_secret_name, client_secret_name, cluster_labels,
};
use crate::crd::RedlockCluster;
use crate::crd::reasons::ClusterReason;

/// Key of the ACL file in the `<name>-acl` Secret for the spec as it is now. Pods built before
/// the per-mode files existed name it in redis.conf; newer pods name their own mode's file.
pub(crate) const ACL_FILE_KEY: &str = "users.acl";

/// Key of the ACL file for a process started with auth on or off. Both are always written, so
/// a process whose container restarts during an auth toggle's rollout reads the file of the
/// mode its pod was built for (docs/design.md §8.8).
pub(crate) fn acl_file_key(auth_enabled: bool) -> &'static str {
    if auth_enabled {
        "users-auth.acl"
    } else {
        "users-noauth.acl"
    }
}

/// Key of the client password's second copy in the operator-private `<name>-admin` Secret, so
/// that a deleted `<name>-client` Secret is re-created with the password the running processes
/// know instead of a new one.
pub(crate) const CLIENT_PASSWORD_KEY: &str = "clientPassword";

/// Key of the readiness probe's password in `<name>-admin`: a password of the client user
/// that no lock client is given, so the probe (whose environment is fixed when its container
/// starts) keeps logging in through a client password rotation. Never rotated.
pub(crate) const PROBE_PASSWORD_KEY: &str = "probePassword";

/// Keys of a client password rotation's state in `<name>-admin` (docs/design.md §8.10): the new
/// password, the request's token, the phase, and the token of the last rotation completed.
pub(crate) const CLIENT_PASSWORD_NEXT_KEY: &str = "clientPasswordNext";
pub(crate) const CLIENT_PASSWORD_PREVIOUS_KEY: &str = "clientPasswordPrevious";
pub(crate) const ROTATION_TOKEN_KEY: &str = "rotationToken";
pub(crate) const ROTATION_PHASE_KEY: &str = "rotationPhase";
pub(crate) const ROTATED_TOKEN_KEY: &str = "rotatedToken";
pub(crate) const ROTATION_PUBLISHED_AT_KEY: &str = "rotationPublishedAt";

/// Keys of an admin password rotation's state in `<name>-admin` (docs/design.md §8.11): the
/// new password while it is added, the old one while it is removed, the request's token, the
/// phase, and the token of the last admin rotation completed.
pub(crate) const ADMIN_PASSWORD_NEXT_KEY: &str = "passwordNext";
pub(crate) const ADMIN_PASSWORD_PREVIOUS_KEY: &str = "passwordPrevious";
pub(crate) const ADMIN_ROTATION_TOKEN_KEY: &str = "adminRotationToken";
pub(crate) const ADMIN_ROTATION_PHASE_KEY: &str = "adminRotationPhase";
pub(crate) const ADMIN_ROTATED_TOKEN_KEY: &str = "adminRotatedToken";
pub(crate) const ADMIN_ROTATION_SWITCHED_AT_KEY: &str = "adminRotationSwitchedAt";

/// Where an admin password rotation stands. No client uses the admin password, so there is
/// no publication and no confirmation: the operator itself is its only user.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) enum AdminRotationPhase {
    /// `next` is being added to every process; the operator still logs in with the current
    /// `admin_password`, which every process accepts.
    Adding { next: String },
    /// Every process accepted both: `admin_password` is the new one, which the operator logs
    /// in with, and `previous` is being removed from every process (the operator falls back to
    /// it only for a process that does not take the new one yet, e.g. one restarted from an
    /// ACL file its kubelet had not updated). Since `at`: the fallback is kept for a grace
    /// after it, however fast every process drops the old one, because a container that
    /// restarts before its kubelet synced the new ACL file starts knowing the old one only.
    Revoking {
        previous: String,
        at: k8s_openapi::jiff::Timestamp,
    },
}

impl AdminRotationPhase {
    pub fn name(&self) -> &'static str {
        match self {
            AdminRotationPhase::Adding { .. } => "adding",
            AdminRotationPhase::Revoking { .. } => "revoking",
        }
    }
}

/// An admin password rotation under way, for the request with `token`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct AdminRotation {
    pub token: String,
    pub phase: AdminRotationPhase,
}

impl std::fmt::Debug for AdminRotation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AdminRotation({}, {})", self.token, self.phase.name())
    }
}

/// Where a client password rotation stands.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) enum RotationPhase {
    /// `next` is being added to every process (both passwords accepted); clients are still
    /// told the current one.
    Adding { next: String },
    /// Every process answering accepts both; clients are told `next` (since `at`); waiting
    /// for the user's confirmation that no client uses the old one any more.
    Published {
        next: String,
        at: k8s_openapi::jiff::Timestamp,
    },
    /// Confirmed: the new password is `client_password`, and the old one, `previous`, is
    /// being removed from every process (kept here only to explain its hash where a process
    /// or the ACL Secret still names it).
    Revoking { previous: String },
}

impl RotationPhase {
    pub fn name(&self) -> &'static str {
        match self {
            RotationPhase::Adding { .. } => "adding",
            RotationPhase::Published { .. } => "published",
            RotationPhase::Revoking { .. } => "revoking",
        }
    }
}

/// A client password rotation under way, for the request with `token`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Rotation {
    pub token: String,
    pub phase: RotationPhase,
}

impl std::fmt::Debug for Rotation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Rotation({}, {})", self.token, self.phase.name())
    }
}

/// The two generated passwords. Generated once; afterwards always read back from the Secrets,
/// and changed only by a rotation the user asks for.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Credentials {
    pub admin_password: String,
    pub client_password: String,
    /// The readiness probe's password of the client user ([`PROBE_PASSWORD_KEY`]).
    pub probe_password: String,
    pub rotation: Option<Rotation>,
    /// The token of the last rotation completed: its request may stay on the cluster without
    /// starting another.
    pub rotated_token: Option<String>,
    /// An admin password rotation under way, and the token of the last one completed.
    pub admin_rotation: Option<AdminRotation>,
    pub admin_rotated_token: Option<String>,
    /// The resourceVersion of the `<name>-admin` these were read from, when read fresh from
    /// the API server (while a rotation runs or is asked for): a rotation step is written only
    /// over that very version.
    pub admin_read_at: Option<String>,
}

impl Credentials {
    pub fn new(admin_password: String, client_password: String, probe_password: String) -> Self {
        Self {
            admin_password,
            client_password,
            probe_password,
            rotation: None,
            rotated_token: None,
            admin_rotation: None,
            admin_rotated_token: None,
            admin_read_at: None,
        }
    }

    /// The admin password hashes the ACL file names, and every process is brought to while an
    /// admin rotation runs: both while the new one is added, else the current one only.
    pub fn accepted_admin_hashes(&self) -> Vec<String> {
        let mut hashes = vec![password_hash(&self.admin_password)];
        if let Some(AdminRotationPhase::Adding { next }) = self.admin_rotation.as_ref().map(|r| &r.phase) {
            hashes.push(password_hash(next));
        }
        hashes.sort();
        hashes.dedup();
        hashes
    }

    /// The password the operator falls back to when a process refuses `admin_password`: the
    /// old one, while an admin rotation removes it.
    pub fn admin_fallback_password(&self) -> Option<&str> {
        match self.admin_rotation.as_ref().map(|r| &r.phase) {
            Some(AdminRotationPhase::Revoking { previous, .. }) => Some(previous),
            _ => None,
        }
    }

    /// Every password the client user accepts: the ACL file names their hashes, and every
    /// process is brought to exactly these. Two only while a new one is added and published.
    pub fn accepted_client_passwords(&self) -> Vec<&str> {
        let mut accepted = vec![self.client_password.as_str()];
        match self.rotation.as_ref().map(|r| &r.phase) {
            Some(RotationPhase::Adding { next } | RotationPhase::Published { next, .. }) => {
                accepted.push(next)
            }
            Some(RotationPhase::Revoking { .. }) | None => {}
        }
        accepted
    }

    /// The hashes the client user accepts, as the ACL file and `ACL GETUSER` name them
    /// (`#<sha256 hex>`), sorted: those of [`Self::accepted_client_passwords`] and the
    /// readiness probe's.
    pub fn accepted_client_hashes(&self) -> Vec<String> {
        let mut hashes: Vec<String> = self
            .accepted_client_passwords()
            .into_iter()
            .chain(
                [self.probe_password.as_str()]
                    .into_iter()
                    .filter(|p| !p.is_empty()),
            )
            .map(password_hash)
            .collect();
        hashes.sort();
        hashes.dedup();
        hashes
    }

    /// The password clients are told (`<name>-client`): the new one from its publication on.
    pub fn told_client_password(&self) -> &str {
        match self.rotation.as_ref().map(|r| &r.phase) {
            Some(RotationPhase::Published { next, .. }) => next,
            _ => &self.client_password,
        }
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials(<redacted>)")
    }
}

/// 32 random bytes as 64 hex characters: no quoting issues in ACL files, URLs or shells.
pub(crate) fn generate_password() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    hex(&bytes)
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// The readiness probe's password of the client user ([`PROBE_PASSWORD_KEY`]): derived from
/// the admin password (64 random hex digits), so it is the same whenever and wherever it is
/// computed, and as hard to guess.
pub(crate) fn probe_password_of(admin_password: &str) -> String {
    hex(&Sha256::digest(
        format!("redlock-operator readiness probe\n{admin_password}").as_bytes(),
    ))
}

/// ACL password entry: `#<sha256 hex>`, so the file never holds a password in clear.
pub fn password_hash(password: &str) -> String {
    format!("#{}", hex(&Sha256::digest(password.as_bytes())))
}

/// Name of the ACL user lock clients use.
pub(crate) fn client_user(cluster: &RedlockCluster) -> &'static str {
    if cluster.spec.auth.enabled {
        CLIENT_USER
    } else {
        "default"
    }
}

/// What lock clients may run: everything a Redlock client needs (SET NX PX, GET, DEL, EVAL,
/// EVALSHA, SCRIPT LOAD, PING, INFO, HELLO, SELECT, CLIENT SETNAME) and nothing that could drop,
/// move or persist keys, change the server, or touch other connections — each of those would
/// break the safety argument as surely as a crash. ACLs also bind scripts: `redis.call` inside
/// EVAL runs with the caller's permissions.
///
/// Every command named here must exist in every Redis the spec allows (6.2 and newer): a rule
/// naming an unknown command makes the ACL file invalid and the server refuses to start. The
/// categories already cover the denied commands; they are named as well so that a future
/// re-categorisation cannot silently re-allow one. Rules that only newer servers understand
/// are added at release time instead ([`release_rules`]).
pub(crate) const CLIENT_RULES: &str = "~* &* +@all -@admin -@dangerous +ping +info +hello +client|setname +client|getname +client|id -flushall -flushdb -swapdb -config -shutdown -replicaof -slaveof -debug -module -acl -monitor -save -bgsave -bgrewriteaof -failover";

/// The `ACL SETUSER <client>` arguments of a release on a server reporting `redis_version`:
/// `on`, plus `+client|setinfo` where it exists (7.2 and newer; Valkey reports 7.2.4). Modern
/// clients (go-redis 9, redis-py 5, ioredis 5) send `CLIENT SETINFO` on connect; older servers
/// answer it with "unknown subcommand", which those clients ignore, and naming it in an ACL rule
/// there would be refused. Added in the same command as `on`, so a released user never lacks it.
///
/// From 7.0, where an ACL rule can take a subcommand away, also `-script|debug`: `SCRIPT DEBUG
/// SYNC` lets one client stop the whole server for an interactive session (every member at
/// once, for every client). Older servers cannot deny a subcommand alone; denying `SCRIPT` as a
/// whole would break clients that load their scripts.
pub fn release_rules(redis_version: &str) -> Vec<&'static str> {
    let mut rules = vec!["on"];
    if version_at_least(redis_version, (7, 0)) {
        rules.push("-script|debug");
    }
    if version_at_least(redis_version, (7, 2)) {
        rules.push("+client|setinfo");
    }
    rules
}

/// Whether `version` (`7.2.4`, `7.0.15`, `255.255.255` for unstable builds) is at least
/// `major.minor`. An unreadable version is treated as old: the rule is then left out, which
/// costs a client at most a refused `CLIENT SETINFO`, whereas an unknown rule would fail the
/// release.
pub fn version_at_least(version: &str, (major, minor): (u32, u32)) -> bool {
    let mut parts = version.trim().split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(ma), Some(mi)) => (ma, mi) >= (major, minor),
        _ => false,
    }
}

/// What the operator's own user may run: exactly the commands the operator sends (`AUTH`,
/// `INFO`, `TIME`, `ACL GETUSER|SETUSER`, `CLIENT KILL`, `CONFIG GET`, `SCAN`, `PTTL`), plus
/// read-only inspection an admin may need with its password (`PING`, `HELLO`, `ROLE`,
/// `CLIENT LIST`, `GET`). Nothing that drops, moves or persists keys, or changes the server:
/// no `FLUSHALL`, `FLUSHDB`, `SWAPDB`, `RESTORE`, `CONFIG SET`, `REPLICAOF`, `SHUTDOWN`,
/// `DEBUG` or `MODULE` — a key lost on a serving member without a restart is exactly the loss
/// the hold exists for, and nothing would start one. `ACL SETUSER` is needed for every fence
/// and release, so whoever holds the admin password can still widen this user on purpose;
/// the rule stops the accident (an admin "cleaning up" a member), not a determined insider.
/// Every command named exists in every Redis the spec allows (6.2 and newer; subcommand
/// allow rules are 6.0).
pub(crate) const ADMIN_RULES: &str = "~* &* -@all +auth +hello +ping +info +time +role +scan +pttl +get +acl|getuser +acl|setuser +client|kill +client|list +config|get";

/// The ACL file. The client user is `off`: a process started from this file serves no lock
/// client until the operator releases it.
pub(crate) fn acl_file(auth_enabled: bool, credentials: &Credentials) -> String {
    let admin = format!(
        "user {ADMIN_USER} on {} {ADMIN_RULES}",
        credentials.accepted_admin_hashes().join(" ")
    );
    let (default, client) = if auth_enabled {
        (
            "user default off nopass resetkeys resetchannels -@all".to_owned(),
            Some(format!(
                "user {CLIENT_USER} off {} {CLIENT_RULES}",
                credentials.accepted_client_hashes().join(" ")
            )),
        )
    } else {
        (format!("user default off nopass {CLIENT_RULES}"), None)
    };
    let mut lines = vec![default, admin];
    lines.extend(client);
    lines.join("\n") + "\n"
}

fn secret(cluster: &RedlockCluster, name: String, data: BTreeMap<String, String>) -> Secret {
    let cluster_name = cluster.metadata.name.clone().unwrap_or_default();
    Secret {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: cluster.metadata.namespace.clone(),
            labels: Some(cluster_labels(&cluster_name)),
            owner_references: cluster.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(bytes(data)),
        ..Default::default()
    }
}

/// Secret data as the API carries it.
fn bytes(data: BTreeMap<String, String>) -> BTreeMap<String, ByteString> {
    data.into_iter()
        .map(|(k, v)| (k, ByteString(v.into_bytes())))
        .collect()
}

pub(crate) fn admin_secret(cluster: &RedlockCluster, credentials: &Credentials) -> Secret {
    let name = admin_secret_name(&cluster.metadata.name.clone().unwrap_or_default());
    secret(cluster, name, admin_secret_data(credentials))
}

fn admin_secret_data(credentials: &Credentials) -> BTreeMap<String, String> {
    let mut data = BTreeMap::from([
        ("username".into(), ADMIN_USER.into()),
        ("password".into(), credentials.admin_password.clone()),
        (CLIENT_PASSWORD_KEY.into(), credentials.client_password.clone()),
        (PROBE_PASSWORD_KEY.into(), credentials.probe_password.clone()),
    ]);
    if let Some(r) = &credentials.rotation {
        data.insert(ROTATION_TOKEN_KEY.into(), r.token.clone());
        data.insert(ROTATION_PHASE_KEY.into(), r.phase.name().into());
        match &r.phase {
            RotationPhase::Adding { next } => {
                data.insert(CLIENT_PASSWORD_NEXT_KEY.into(), next.clone());
            }
            RotationPhase::Published { next, at } => {
                data.insert(CLIENT_PASSWORD_NEXT_KEY.into(), next.clone());
                data.insert(ROTATION_PUBLISHED_AT_KEY.into(), at.to_string());
            }
            RotationPhase::Revoking { previous } => {
                data.insert(CLIENT_PASSWORD_PREVIOUS_KEY.into(), previous.clone());
            }
        }
    }
    if let Some(t) = &credentials.rotated_token {
        data.insert(ROTATED_TOKEN_KEY.into(), t.clone());
    }
    if let Some(r) = &credentials.admin_rotation {
        data.insert(ADMIN_ROTATION_TOKEN_KEY.into(), r.token.clone());
        data.insert(ADMIN_ROTATION_PHASE_KEY.into(), r.phase.name().into());
        match &r.phase {
            AdminRotationPhase::Adding { next } => data.insert(ADMIN_PASSWORD_NEXT_KEY.into(), next.clone()),
            AdminRotationPhase::Revoking { previous, at } => {
                data.insert(ADMIN_ROTATION_SWITCHED_AT_KEY.into(), at.to_string());
                data.insert(ADMIN_PASSWORD_PREVIOUS_KEY.into(), previous.clone())
            }
        };
    }
    if let Some(t) = &credentials.admin_rotated_token {
        data.insert(ADMIN_ROTATED_TOKEN_KEY.into(), t.clone());
    }
    data
}

/// The admin rotation state `<name>-admin` keeps; an unreadable one counts as none (and the
/// ACL check then reports a hash no stored password explains).
fn stored_admin_rotation(admin: Option<&Secret>) -> Option<AdminRotation> {
    let token = stored(admin, ADMIN_ROTATION_TOKEN_KEY)?;
    let phase = match stored(admin, ADMIN_ROTATION_PHASE_KEY)?.as_str() {
        "adding" => AdminRotationPhase::Adding {
            next: stored(admin, ADMIN_PASSWORD_NEXT_KEY)?,
        },
        "revoking" => AdminRotationPhase::Revoking {
            previous: stored(admin, ADMIN_PASSWORD_PREVIOUS_KEY)?,
            at: stored(admin, ADMIN_ROTATION_SWITCHED_AT_KEY)?.parse().ok()?,
        },
        _ => return None,
    };
    Some(AdminRotation { token, phase })
}

/// The rotation state `<name>-admin` keeps; an unreadable one (a phase without its new
/// password, an unknown phase) counts as none, and the ACL check then reports any hash the
/// processes may know that no password explains.
fn stored_rotation(admin: Option<&Secret>) -> Option<Rotation> {
    let token = stored(admin, ROTATION_TOKEN_KEY)?;
    let next = stored(admin, CLIENT_PASSWORD_NEXT_KEY);
    let phase = match stored(admin, ROTATION_PHASE_KEY)?.as_str() {
        "adding" => RotationPhase::Adding { next: next? },
        "published" => RotationPhase::Published {
            next: next?,
            at: stored(admin, ROTATION_PUBLISHED_AT_KEY)?.parse().ok()?,
        },
        "revoking" => RotationPhase::Revoking {
            previous: stored(admin, CLIENT_PASSWORD_PREVIOUS_KEY)?,
        },
        _ => return None,
    };
    Some(Rotation { token, phase })
}

/// Key of `<name>-client` with the URLs comma-separated (no spaces, no trailing comma).
pub(crate) const URLS_CSV: &str = "urls.csv";

/// Key of `<name>-client` with the URLs as a JSON array of strings.
pub(crate) const URLS_JSON: &str = "urls.json";

/// The `<name>-client` Secret for the published list of `instances` servers: `urls` and
/// `quorum` come from that one number, so a client that reads this one object never mixes a
/// list with another list's quorum.
pub(crate) fn client_secret(cluster: &RedlockCluster, credentials: &Credentials, instances: i32) -> Secret {
    let name = client_secret_name(&cluster.metadata.name.clone().unwrap_or_default());
    let username = client_user(cluster);
    let password = cluster
        .spec
        .auth
        .enabled
        .then_some(credentials.told_client_password());
    let urls = endpoints::client_urls(cluster, instances, username, password);
    let mut data = BTreeMap::from([
        ("username".to_owned(), username.to_owned()),
        ("urls".to_owned(), endpoints::lines(&urls)),
        // The same list for clients that take one string (`REDLOCK_URLS=a,b,c`) or a JSON
        // array: a client never has to reformat the list, and so never drops an entry.
        (URLS_CSV.to_owned(), urls.join(",")),
        (
            URLS_JSON.to_owned(),
            serde_json::to_string(&urls).expect("a list of strings is JSON"),
        ),
        (
            "quorum".to_owned(),
            crate::crd::model::quorum(instances).to_string(),
        ),
    ]);
    if let Some(password) = password {
        data.insert("password".into(), password.to_owned());
    }
    secret(cluster, name, data)
}

pub(crate) fn acl_secret(cluster: &RedlockCluster, credentials: &Credentials) -> Secret {
    let name = acl_secret_name(&cluster.metadata.name.clone().unwrap_or_default());
    secret(
        cluster,
        name,
        BTreeMap::from([
            (
                ACL_FILE_KEY.into(),
                acl_file(cluster.spec.auth.enabled, credentials),
            ),
            (acl_file_key(true).into(), acl_file(true, credentials)),
            (acl_file_key(false).into(), acl_file(false, credentials)),
        ]),
    )
}

/// The non-empty text stored under `key` in a Secret, if any.
fn stored(secret: Option<&Secret>, key: &str) -> Option<String> {
    let bytes = secret?.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone()).ok().filter(|p| !p.is_empty())
}

/// The `#<sha256>` password entries of `user` in ACL files (a user has two during a client
/// password rotation), sorted and without repeats.
fn acl_password_entries<'a>(acl_file: &'a str, user: &str) -> Vec<&'a str> {
    let mut entries: Vec<&str> = acl_file
        .lines()
        .filter_map(|line| line.strip_prefix("user ")?.strip_prefix(user)?.strip_prefix(' '))
        .flat_map(str::split_whitespace)
        .filter(|rule| rule.starts_with('#'))
        .collect();
    entries.sort();
    entries.dedup();
    entries
}

/// Why the stored passwords cannot be used. The running processes know each password only by
/// the hash in the ACL file they started from, so a password that is gone or changed cannot be
/// replaced by another without locking the operator (or every client) out of them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsProblem {
    #[error(
        "the password of ACL user {user} is missing from Secret {secret}, but Secret {acl} still holds its hash, so the running instances only accept the old one. Restore {secret} from a backup; no new password is generated while {acl} exists (deleting {acl} too starts over with new passwords: the running instances then cannot be probed or released until their pods are replaced)"
    )]
    Missing {
        user: &'static str,
        secret: String,
        acl: String,
    },
    #[error(
        "the password of ACL user {user} in Secret {secret} does not match the hash in Secret {acl} that the running instances started from: not used, and {acl} is not rewritten. Put the original password back into {secret}"
    )]
    Mismatch {
        user: &'static str,
        secret: String,
        acl: String,
    },
}

impl CredentialsProblem {
    /// The event reason this problem is reported under.
    pub fn reason(&self) -> ClusterReason {
        match self {
            CredentialsProblem::Missing { .. } => ClusterReason::CredentialsMissing,
            CredentialsProblem::Mismatch { .. } => ClusterReason::CredentialsMismatch,
        }
    }
}

/// The cluster's passwords, read back from its Secrets; a password is generated only where no
/// earlier one can exist. The ACL Secret is the evidence: it is written only after both
/// password Secrets, so a hash there means processes may run that accept only that password.
/// The client password has two copies (`<name>-client` for clients, `<name>-admin` for the
/// operator), so deleting either Secret alone loses nothing.
// Kept whole: each password is checked against the evidence the ones before it add (admin,
// then probe and rotation, then client), and that order is the safety argument.
pub(crate) fn recover_credentials(
    cluster_name: &str,
    admin: Option<&Secret>,
    client: Option<&Secret>,
    acl: Option<&Secret>,
    generate: impl Fn() -> String,
) -> Result<Credentials, CredentialsProblem> {
    // Every ACL file of the Secret: processes of either auth mode may run.
    let acl_text: String = [ACL_FILE_KEY, acl_file_key(true), acl_file_key(false)]
        .iter()
        .filter_map(|key| stored(acl, key))
        .collect::<Vec<_>>()
        .join("\n");
    // Every hash the ACL files name for `user` must be one of `also`'s or the password's:
    // a hash no stored password explains means processes that only accept a password lost.
    let known = |user: &'static str, password: Option<String>, also: &[String], secret: String| {
        let acl = acl_secret_name(cluster_name);
        let entries = acl_password_entries(&acl_text, user);
        match password {
            _ if entries.is_empty() => Ok(password.unwrap_or_else(&generate)),
            Some(password) => {
                // Each hash computed once, not once per entry.
                let hashes: Vec<String> = [&password]
                    .into_iter()
                    .chain(also)
                    .map(|p| password_hash(p))
                    .collect();
                let explained = |e: &&str| hashes.iter().any(|h| e == h);
                if entries.iter().all(explained) {
                    Ok(password)
                } else {
                    Err(CredentialsProblem::Mismatch { user, secret, acl })
                }
            }
            None => Err(CredentialsProblem::Missing { user, secret, acl }),
        }
    };
    // The admin password's other one of an admin rotation under way explains its hash: the
    // new one is in the ACL files before the operator logs in with it, the old one until
    // every process dropped it.
    let admin_rotation = stored_admin_rotation(admin);
    // A rotation on record that cannot be read (a key of its phase edited away): which
    // passwords the processes accept, and when the old one may go, is not known. Going on
    // without it would remove the old password before its grace and rotate the same token
    // again.
    if admin_rotation.is_none() && stored(admin, ADMIN_ROTATION_TOKEN_KEY).is_some() {
        return Err(CredentialsProblem::Mismatch {
            user: ADMIN_USER,
            secret: admin_secret_name(cluster_name),
            acl: acl_secret_name(cluster_name),
        });
    }
    let admin_other: Vec<String> = admin_rotation
        .iter()
        .map(|r| match &r.phase {
            AdminRotationPhase::Adding { next: p } | AdminRotationPhase::Revoking { previous: p, .. } => {
                p.clone()
            }
        })
        .collect();
    let admin_password = known(
        ADMIN_USER,
        stored(admin, "password"),
        &admin_other,
        admin_secret_name(cluster_name),
    )?;
    let rotation = stored_rotation(admin);
    // Processes know the probe's password too, derived from the admin password (so it is
    // never generated twice: not by a lagging cache, not after a backup restore, not after a
    // rollback stripped the key; the processes get it added at their next probe), and the
    // other password of a rotation under way. A different one stored earlier is explained too.
    // The stored one is kept unless the ACL files contradict it (they name client passwords,
    // not it): running readiness probes took it into their environment when their container
    // started, and after an admin rotation it was derived from an earlier admin password. Also
    // when the ACL Secret is gone: deriving a new one then would make every running pod
    // unready, and only a restart (keys lost, a hold) would bring it back.
    let derived = probe_password_of(&admin_password);
    let client_entries = acl_password_entries(&acl_text, CLIENT_USER);
    let probe_password = stored(admin, PROBE_PASSWORD_KEY)
        .filter(|p| client_entries.is_empty() || client_entries.contains(&password_hash(p).as_str()))
        .unwrap_or(derived);
    let mut other = vec![probe_password.clone()];
    other.extend(stored(admin, PROBE_PASSWORD_KEY).filter(|p| *p != probe_password));
    if let Some(
        RotationPhase::Adding { next: p }
        | RotationPhase::Published { next: p, .. }
        | RotationPhase::Revoking { previous: p },
    ) = rotation.as_ref().map(|r| &r.phase)
    {
        other.push(p.clone());
    }
    // The operator's copy first: it is the one clients cannot edit by accident. When it does
    // not match the ACL files but the clients' copy does (e.g. `<name>-admin` restored from a
    // backup taken before a rotation), the processes accept the clients' copy: that one is
    // on record, and `<name>-admin` is written with it again.
    let client_copy = stored(client, "password");
    let client_password = match stored(admin, CLIENT_PASSWORD_KEY) {
        Some(p) => match known(CLIENT_USER, Some(p), &other, admin_secret_name(cluster_name)) {
            Err(mismatch @ CredentialsProblem::Mismatch { .. }) => client_copy
                .and_then(|c| known(CLIENT_USER, Some(c), &other, client_secret_name(cluster_name)).ok())
                .ok_or(mismatch)?,
            found => found?,
        },
        None => known(CLIENT_USER, client_copy, &other, client_secret_name(cluster_name))?,
    };
    Ok(Credentials {
        admin_password,
        client_password,
        probe_password,
        rotation,
        rotated_token: stored(admin, ROTATED_TOKEN_KEY),
        admin_rotation,
        admin_rotated_token: stored(admin, ADMIN_ROTATED_TOKEN_KEY),
        admin_read_at: None,
    })
}

/// `recover_credentials`, and when that fails, again with `remembered` (what this operator
/// process last recovered for this very cluster object) in place of `<name>-admin`: accepted
/// only if it explains every hash of the ACL files, as a restored Secret would have to. Then
/// the second value names the problem it overcame, and the caller writes `<name>-admin` back.
/// This heals a `<name>-admin` deleted by hand or by the garbage collector after a re-created
/// cluster adopted `<name>-acl`, and an edited one, while the operator that knows the
/// passwords runs; after a restart it cannot, and the problem is reported as before.
pub(crate) fn recover_or_restore(
    cluster_name: &str,
    admin: Option<&Secret>,
    client: Option<&Secret>,
    acl: Option<&Secret>,
    remembered: Option<&Credentials>,
    generate: impl Fn() -> String,
) -> Result<(Credentials, Option<CredentialsProblem>), CredentialsProblem> {
    let problem = match recover_credentials(cluster_name, admin, client, acl, &generate) {
        Ok(found) => return Ok((found, None)),
        Err(problem) => problem,
    };
    let Some(remembered) = remembered else {
        return Err(problem);
    };
    let from_memory = Secret {
        data: Some(bytes(admin_secret_data(remembered))),
        ..Default::default()
    };
    // Nothing may be generated here: a password the ACL files do not name is no restore.
    let never = || String::new();
    match recover_credentials(cluster_name, Some(&from_memory), client, acl, never) {
        Ok(found)
            if found.admin_password == remembered.admin_password && !found.client_password.is_empty() =>
        {
            Ok((found, Some(problem)))
        }
        _ => Err(problem),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_admin_user_may_run_only_what_the_operator_sends_and_reads() {
        let rules: Vec<&str> = ADMIN_RULES.split(' ').collect();
        assert_eq!(rules[..3], ["~*", "&*", "-@all"], "everything denied first");
        for rule in &rules[3..] {
            assert!(
                rule.starts_with('+') && !rule.starts_with("+@"),
                "{rule}: one command at a time"
            );
        }
        for dropping in [
            "flushall",
            "flushdb",
            "swapdb",
            "restore",
            "config",
            "config|set",
            "replicaof",
            "slaveof",
            "shutdown",
            "debug",
            "module",
            "del",
            "unlink",
            "expire",
            "pexpire",
            "set",
            "eval",
            "failover",
            "migrate",
            "move",
        ] {
            assert!(
                !rules.contains(&format!("+{dropping}").as_str()),
                "{dropping} allowed"
            );
        }
    }

    use super::*;

    fn creds() -> Credentials {
        Credentials::new("adminpw".into(), "clientpw".into(), probe_password_of("adminpw"))
    }

    #[test]
    fn the_client_secret_carries_one_list_in_three_forms() {
        let cluster = crate::fixtures::cluster(serde_json::json!({"instances": 3}));
        let secret = client_secret(&cluster, &creds(), 3);
        let data = secret.data.expect("data");
        let text = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
        let lines: Vec<String> = text("urls").lines().map(str::to_owned).collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[2].starts_with("redis://redlock-client:"), "{lines:?}");
        assert!(lines[2].ends_with("@locks-2.team.svc:6379"), "{lines:?}");
        let csv: Vec<String> = text(URLS_CSV).split(',').map(str::to_owned).collect();
        assert_eq!(csv, lines);
        let json: Vec<String> = serde_json::from_str(&text(URLS_JSON)).unwrap();
        assert_eq!(json, lines);
        // Auth off: no password in any of them.
        let open = crate::fixtures::cluster(serde_json::json!({"instances": 1, "auth": {"enabled": false}}));
        let data = client_secret(&open, &creds(), 1).data.expect("data");
        assert_eq!(
            String::from_utf8(data[URLS_JSON].0.clone()).unwrap(),
            r#"["redis://locks-0.team.svc:6379"]"#
        );
        assert!(!data.contains_key("password"));
    }

    #[test]
    fn passwords_are_random_hex() {
        let a = generate_password();
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, generate_password());
    }

    #[test]
    fn acl_file_fences_the_client_and_never_holds_clear_passwords() {
        let acl = acl_file(true, &creds());
        let client = acl
            .lines()
            .find(|l| l.starts_with("user redlock-client "))
            .unwrap();
        assert!(client.starts_with("user redlock-client off #"), "{client}");
        assert!(acl.lines().any(|l| l.starts_with("user default off ")));
        let admin = acl
            .lines()
            .find(|l| l.starts_with("user redlock-admin on #"))
            .unwrap();
        assert!(admin.ends_with(&format!(" {ADMIN_RULES}")), "{admin}");
        assert!(!acl.contains("adminpw") && !acl.contains("clientpw"));
        assert!(acl.contains(&password_hash("clientpw")));
        // sha256("clientpw")
        assert_eq!(
            password_hash("abc"),
            "#ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn without_auth_the_default_user_is_the_fenced_client() {
        let acl = acl_file(false, &creds());
        assert!(
            acl.lines()
                .any(|l| l.starts_with("user default off nopass ~* &* +@all"))
        );
        assert!(!acl.contains("redlock-client"));
    }

    #[test]
    fn release_rules_name_only_what_the_server_knows() {
        for (version, no_debug, setinfo) in [
            ("7.2.0", true, true),
            ("7.2.4", true, true),
            ("7.4.1", true, true),
            ("8.0.0", true, true),
            ("255.255.255", true, true),
            ("7.0.15", true, false),
            ("7.1.242", true, false),
            ("6.2.14", false, false),
            ("6", false, false),
            ("", false, false),
            ("seven.two", false, false),
        ] {
            let rules = release_rules(version);
            assert_eq!(rules[0], "on", "{version}");
            assert_eq!(rules.contains(&"-script|debug"), no_debug, "{version}: {rules:?}");
            assert_eq!(
                rules.contains(&"+client|setinfo"),
                setinfo,
                "{version}: {rules:?}"
            );
            assert_eq!(
                rules.len(),
                1 + usize::from(no_debug) + usize::from(setinfo),
                "{version}: {rules:?}"
            );
        }
    }

    #[test]
    fn the_acl_file_names_no_command_newer_than_redis_6_2() {
        // Subcommands added after 6.2 (client|setinfo 7.2, client|no-touch 7.2, ...) would make
        // older servers refuse the file; they belong in `release_rules`.
        for newer in ["setinfo", "no-touch", "no-evict", "waitaof", "function"] {
            assert!(!CLIENT_RULES.contains(newer), "{newer} in {CLIENT_RULES}");
        }
        assert!(!acl_file(true, &creds()).contains("setinfo"));
    }

    #[test]
    fn debug_output_hides_passwords() {
        assert!(!format!("{:?}", creds()).contains("pw"));
    }

    fn stored_secret(pairs: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn acl_of(auth: bool, c: &Credentials) -> Secret {
        stored_secret(&[(ACL_FILE_KEY, &acl_file(auth, c))])
    }

    fn recover(
        admin: Option<&Secret>,
        client: Option<&Secret>,
        acl: Option<&Secret>,
    ) -> Result<Credentials, CredentialsProblem> {
        recover_credentials("locks", admin, client, acl, || "fresh".to_owned())
    }

    /// Issue 14: `<name>-admin` deleted (by hand, or by the garbage collector after a
    /// re-created cluster adopted `<name>-acl`) or edited while the operator that knows the
    /// passwords runs: written back from its memory, only if that explains the ACL files.
    #[test]
    fn a_lost_or_edited_admin_secret_is_restored_from_memory_that_the_acl_files_confirm() {
        let c = creds();
        let admin = stored_secret(&[
            ("password", "adminpw"),
            (CLIENT_PASSWORD_KEY, "clientpw"),
            (PROBE_PASSWORD_KEY, &probe_password_of("adminpw")),
        ]);
        let edited = stored_secret(&[("password", "rotated-by-hand"), (CLIENT_PASSWORD_KEY, "clientpw")]);
        let client = stored_secret(&[("password", "clientpw")]);
        let acl = acl_of(true, &c);
        let other = Credentials::new("otherpw".into(), "clientpw".into(), probe_password_of("otherpw"));
        let restore = |admin: Option<&Secret>, remembered: Option<&Credentials>| {
            recover_or_restore("locks", admin, Some(&client), Some(&acl), remembered, || {
                "fresh".to_owned()
            })
            .map(|(found, overcame)| (found, overcame.map(|p| p.reason())))
        };
        // Nothing to overcome: what is stored is used, whatever the memory says.
        assert_eq!(restore(Some(&admin), Some(&other)), Ok((c.clone(), None)));
        // Deleted or edited: restored from a memory the ACL files confirm.
        assert_eq!(
            restore(None, Some(&c)),
            Ok((c.clone(), Some(ClusterReason::CredentialsMissing)))
        );
        assert_eq!(
            restore(Some(&edited), Some(&c)),
            Ok((c.clone(), Some(ClusterReason::CredentialsMismatch)))
        );
        // No memory (the operator restarted), or one the ACL files contradict: reported.
        for remembered in [None, Some(&other)] {
            assert_eq!(
                restore(None, remembered).map_err(|p| p.reason()),
                Err(ClusterReason::CredentialsMissing)
            );
            assert_eq!(
                restore(Some(&edited), remembered).map_err(|p| p.reason()),
                Err(ClusterReason::CredentialsMismatch)
            );
        }
        // Mid-rotation, the memory's rotation explains both client hashes; without it, the
        // new one is unexplained and nothing is restored.
        let rotating = Credentials {
            rotation: Some(Rotation {
                token: "t1".into(),
                phase: RotationPhase::Adding {
                    next: "nextpw".into(),
                },
            }),
            ..c.clone()
        };
        let acl = acl_of(true, &rotating);
        let restore = |remembered: &Credentials| {
            recover_or_restore("locks", None, Some(&client), Some(&acl), Some(remembered), || {
                "fresh".to_owned()
            })
        };
        assert_eq!(restore(&rotating).map(|(found, _)| found), Ok(rotating.clone()));
        assert!(restore(&c).is_err());
    }

    #[test]
    fn a_new_cluster_gets_new_passwords() {
        let got = recover(None, None, None).unwrap();
        assert_eq!(
            (got.admin_password.as_str(), got.client_password.as_str()),
            ("fresh", "fresh")
        );
    }

    #[test]
    fn passwords_are_read_back_and_either_secret_alone_may_go() {
        let c = creds();
        let probe = probe_password_of("adminpw");
        let admin = stored_secret(&[
            ("password", "adminpw"),
            (CLIENT_PASSWORD_KEY, "clientpw"),
            (PROBE_PASSWORD_KEY, &probe),
        ]);
        let client = stored_secret(&[("password", "clientpw")]);
        let acl = acl_of(true, &c);
        assert_eq!(recover(Some(&admin), Some(&client), Some(&acl)), Ok(c.clone()));
        // The client Secret deleted: re-created from the operator's copy.
        assert_eq!(recover(Some(&admin), None, Some(&acl)), Ok(c.clone()));
        // A cluster from before the second copy (and the probe's password) existed reads the
        // client Secret, and gets the probe's password (its processes get it added); so does
        // one whose `<name>-admin` lost that key (a rollback, a backup restore): the same one.
        let old_admin = stored_secret(&[("password", "adminpw")]);
        let old_acl = acl_of(
            true,
            &Credentials::new("adminpw".into(), "clientpw".into(), String::new()),
        );
        assert_eq!(
            recover(Some(&old_admin), Some(&client), Some(&old_acl)),
            Ok(c.clone())
        );
        assert_eq!(
            recover(Some(&old_admin), Some(&client), Some(&acl)),
            Ok(c.clone())
        );
        // A different probe password stored earlier is kept while the ACL files name it:
        // running readiness probes have it in their environment.
        let earlier = stored_secret(&[
            ("password", "adminpw"),
            (CLIENT_PASSWORD_KEY, "clientpw"),
            (PROBE_PASSWORD_KEY, "earlier"),
        ]);
        let with_earlier = acl_of(
            true,
            &Credentials::new("adminpw".into(), "clientpw".into(), "earlier".into()),
        );
        assert_eq!(
            recover(Some(&earlier), None, Some(&with_earlier)),
            Ok(Credentials {
                probe_password: "earlier".into(),
                ..c.clone()
            })
        );
        // Named nowhere in them (a hand edit): derived from the admin password again.
        assert_eq!(recover(Some(&earlier), None, Some(&acl)), Ok(c.clone()));
        // A client Secret edited by accident does not win over the operator's copy.
        let edited = stored_secret(&[("password", "typo")]);
        assert_eq!(recover(Some(&admin), Some(&edited), Some(&acl)), Ok(c));
    }

    #[test]
    fn a_lost_password_is_never_replaced_while_processes_may_know_the_old_one() {
        let c = creds();
        let acl = acl_of(true, &c);
        let client = stored_secret(&[("password", "clientpw")]);
        assert_eq!(
            recover(None, Some(&client), Some(&acl)),
            Err(CredentialsProblem::Missing {
                user: ADMIN_USER,
                secret: "locks-admin".into(),
                acl: "locks-acl".into(),
            })
        );
        let old_admin = stored_secret(&[("password", "adminpw")]);
        assert_eq!(
            recover(Some(&old_admin), None, Some(&acl)),
            Err(CredentialsProblem::Missing {
                user: CLIENT_USER,
                secret: "locks-client".into(),
                acl: "locks-acl".into(),
            })
        );
        // Without the ACL Secret nothing can know the old passwords: new ones.
        assert_eq!(recover(None, None, None).unwrap().admin_password, "fresh");
    }

    #[test]
    fn a_changed_password_is_refused() {
        let acl = acl_of(true, &creds());
        let admin = stored_secret(&[("password", "rotated"), (CLIENT_PASSWORD_KEY, "clientpw")]);
        let err = recover(Some(&admin), None, Some(&acl)).unwrap_err();
        assert_eq!(err.reason(), ClusterReason::CredentialsMismatch);
        assert!(err.to_string().contains("locks-admin"), "{err}");
        let admin = stored_secret(&[("password", "adminpw"), (CLIENT_PASSWORD_KEY, "rotated")]);
        assert_eq!(
            recover(Some(&admin), None, Some(&acl)),
            Err(CredentialsProblem::Mismatch {
                user: CLIENT_USER,
                secret: "locks-admin".into(),
                acl: "locks-acl".into(),
            })
        );
    }

    /// `<name>-admin` restored from a backup taken before a rotation: its copy of the client
    /// password is the old one, but `<name>-client` holds the one the processes accept.
    #[test]
    fn a_stale_operator_copy_of_the_client_password_gives_way_to_the_clients_matching_one() {
        let rotated = Credentials::new("adminpw".into(), "rotated".into(), probe_password_of("adminpw"));
        let acl = acl_of(true, &rotated);
        let restored = stored_secret(&[("password", "adminpw"), (CLIENT_PASSWORD_KEY, "clientpw")]);
        let client = stored_secret(&[("password", "rotated")]);
        let got = recover(Some(&restored), Some(&client), Some(&acl)).unwrap();
        assert_eq!(got.client_password, "rotated");
        // Neither copy matches: still refused, naming the operator's copy.
        let edited = stored_secret(&[("password", "edited")]);
        assert_eq!(
            recover(Some(&restored), Some(&edited), Some(&acl)),
            Err(CredentialsProblem::Mismatch {
                user: CLIENT_USER,
                secret: "locks-admin".into(),
                acl: "locks-acl".into(),
            })
        );
    }

    #[test]
    fn without_auth_the_client_password_has_no_hash_to_match() {
        // The client user is `default nopass`: a client password kept for a later switch to
        // auth, or generated, is free.
        let acl = acl_of(false, &creds());
        let admin = stored_secret(&[("password", "adminpw")]);
        let got = recover(Some(&admin), None, Some(&acl)).unwrap();
        assert_eq!(got.admin_password, "adminpw");
        assert_eq!(got.client_password, "fresh");
    }

    #[test]
    fn the_acl_secret_holds_a_file_for_each_auth_mode() {
        let cluster: RedlockCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "redlock.dev/v1alpha1", "kind": "RedlockCluster",
            "metadata": {"name": "locks", "namespace": "team"},
            "spec": {"maxLockTTL": "30s", "auth": {"enabled": false}}
        }))
        .unwrap();
        let data = acl_secret(&cluster, &creds()).data.unwrap();
        let text = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
        assert_eq!(text(ACL_FILE_KEY), acl_file(false, &creds()), "the spec's mode");
        assert_eq!(text(acl_file_key(false)), acl_file(false, &creds()));
        assert_eq!(text(acl_file_key(true)), acl_file(true, &creds()));
        // A client password edited while auth is off is still caught: the auth file holds
        // its hash.
        let acl = stored_secret(&[(acl_file_key(true), &text(acl_file_key(true)))]);
        let admin = stored_secret(&[("password", "adminpw"), (CLIENT_PASSWORD_KEY, "edited")]);
        assert_eq!(
            recover(Some(&admin), None, Some(&acl)).unwrap_err().reason(),
            ClusterReason::CredentialsMismatch
        );
    }

    #[test]
    fn the_acl_entry_parser_finds_only_the_named_users_hashes() {
        let acl = acl_file(true, &creds());
        assert_eq!(
            acl_password_entries(&acl, ADMIN_USER),
            vec![password_hash("adminpw").as_str()]
        );
        let mut client = vec![
            password_hash("clientpw"),
            password_hash(&probe_password_of("adminpw")),
        ];
        client.sort();
        assert_eq!(acl_password_entries(&acl, CLIENT_USER), client);
        assert!(acl_password_entries(&acl, "default").is_empty());
        assert!(acl_password_entries(&acl, "redlock").is_empty());
    }

    fn published_at() -> k8s_openapi::jiff::Timestamp {
        k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap()
    }

    fn rotating(phase: RotationPhase) -> Credentials {
        Credentials {
            rotation: Some(Rotation {
                token: "t1".into(),
                phase,
            }),
            ..creds()
        }
    }

    #[test]
    fn a_rotation_names_both_passwords_until_it_is_confirmed() {
        let adding = rotating(RotationPhase::Adding { next: "newpw".into() });
        let published = rotating(RotationPhase::Published {
            next: "newpw".into(),
            at: published_at(),
        });
        for c in [&adding, &published] {
            let acl = acl_file(true, c);
            let mut both = vec![
                password_hash("clientpw"),
                password_hash("newpw"),
                password_hash(&probe_password_of("adminpw")),
            ];
            both.sort();
            assert_eq!(acl_password_entries(&acl, CLIENT_USER), both);
            assert_eq!(c.accepted_client_hashes(), both);
        }
        // Clients are told the new one only once every process accepts it.
        assert_eq!(adding.told_client_password(), "clientpw");
        assert_eq!(published.told_client_password(), "newpw");
        // Confirmed: the new password is the current one, the only one.
        let revoking = Credentials {
            client_password: "newpw".into(),
            ..rotating(RotationPhase::Revoking {
                previous: "clientpw".into(),
            })
        };
        let mut new_and_probe = vec![
            password_hash("newpw"),
            password_hash(&probe_password_of("adminpw")),
        ];
        new_and_probe.sort();
        assert_eq!(revoking.accepted_client_hashes(), new_and_probe);
        assert_eq!(revoking.told_client_password(), "newpw");
        assert!(!format!("{published:?}").contains("newpw"));
    }

    fn admin_rotating(phase: AdminRotationPhase) -> Credentials {
        Credentials {
            admin_rotation: Some(AdminRotation {
                token: "a1".into(),
                phase,
            }),
            ..creds()
        }
    }

    /// An operator restarted at any point of an admin rotation recovers its phase from the
    /// Secrets, also when it stopped between writing `<name>-admin` and the ACL Secret, and the
    /// readiness probe's password (in running containers' environment) never changes.
    #[test]
    fn an_admin_rotation_is_read_back_from_the_secrets_in_every_phase() {
        let cluster = crate::fixtures::cluster(serde_json::json!({}));
        let before = creds();
        let adding = admin_rotating(AdminRotationPhase::Adding {
            next: "adminpw2".into(),
        });
        let revoking = Credentials {
            admin_password: "adminpw2".into(),
            ..admin_rotating(AdminRotationPhase::Revoking {
                previous: "adminpw".into(),
                at: published_at(),
            })
        };
        let done = Credentials {
            admin_password: "adminpw2".into(),
            admin_rotated_token: Some("a1".into()),
            ..creds()
        };
        // The ACL file names both admin hashes only while the new one is added.
        let admin_entries = |c: &Credentials| acl_password_entries(&acl_file(true, c), ADMIN_USER).len();
        assert_eq!(
            [&before, &adding, &revoking, &done].map(admin_entries),
            [1, 2, 1, 1]
        );
        // (previous step's ACL Secret, this step's Credentials): each step is written to
        // `<name>-admin` before the ACL Secret.
        for (acl_before, c) in [(&before, &adding), (&adding, &revoking), (&revoking, &done)] {
            let admin = admin_secret(&cluster, c);
            for acl in [acl_secret(&cluster, acl_before), acl_secret(&cluster, c)] {
                let found = recover(Some(&admin), None, Some(&acl)).unwrap();
                assert_eq!(found, *c);
                assert_eq!(found.probe_password, probe_password_of("adminpw"));
            }
        }
        // Without its rotation keys, `<name>-admin` does not explain the ACL file's hashes:
        // reported, never a new password.
        let bare = admin_secret(
            &cluster,
            &Credentials::new("adminpw2".into(), "clientpw".into(), String::new()),
        );
        assert!(matches!(
            recover(Some(&bare), None, Some(&acl_secret(&cluster, &adding))),
            Err(CredentialsProblem::Mismatch { user: ADMIN_USER, .. })
        ));
        // The clear passwords are not in the Debug output.
        assert!(!format!("{adding:?}").contains("adminpw2"));

        // After the rotation the ACL Secret is deleted (or not ours): the readiness probes'
        // password, in every running container's environment, is kept, not derived from the
        // new admin password.
        let after = recover(Some(&admin_secret(&cluster, &done)), None, None).unwrap();
        assert_eq!(after.probe_password, probe_password_of("adminpw"));
        assert_eq!(after.admin_password, "adminpw2");

        // A rotation whose phase lost a key: reported, not taken as finished (which would
        // drop the old password before its grace and rotate the same token again).
        let mut torn = admin_secret(&cluster, &revoking);
        torn.data.as_mut().unwrap().remove(ADMIN_ROTATION_SWITCHED_AT_KEY);
        for acl in [acl_secret(&cluster, &revoking), acl_secret(&cluster, &done)] {
            assert!(matches!(
                recover(Some(&torn), None, Some(&acl)),
                Err(CredentialsProblem::Mismatch { user: ADMIN_USER, .. })
            ));
        }
    }

    #[test]
    fn a_rotation_is_read_back_from_the_admin_secret_in_every_phase() {
        let cluster: RedlockCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "redlock.dev/v1alpha1", "kind": "RedlockCluster",
            "metadata": {"name": "locks", "namespace": "team"},
            "spec": {"maxLockTTL": "30s"}
        }))
        .unwrap();
        let done = Credentials {
            client_password: "newpw".into(),
            rotated_token: Some("t1".into()),
            ..creds()
        };
        for c in [
            rotating(RotationPhase::Adding { next: "newpw".into() }),
            rotating(RotationPhase::Published {
                next: "newpw".into(),
                at: published_at(),
            }),
            Credentials {
                client_password: "newpw".into(),
                ..rotating(RotationPhase::Revoking {
                    previous: "clientpw".into(),
                })
            },
            done,
        ] {
            let admin = admin_secret(&cluster, &c);
            let acl = acl_secret(&cluster, &c);
            assert_eq!(recover(Some(&admin), None, Some(&acl)), Ok(c.clone()));
            // A crash between the admin Secret and the ACL Secret: the ACL Secret still names
            // the previous phase's hashes, all of which the stored passwords explain.
            let both = acl_of(
                true,
                &rotating(RotationPhase::Published {
                    next: "newpw".into(),
                    at: published_at(),
                }),
            );
            if c.rotation.is_some() {
                assert_eq!(recover(Some(&admin), None, Some(&both)), Ok(c.clone()));
            }
        }
        // The new password lost from the admin Secret while processes may know it: reported.
        let published = rotating(RotationPhase::Published {
            next: "newpw".into(),
            at: published_at(),
        });
        let acl = acl_secret(&cluster, &published);
        let admin = admin_secret(&cluster, &creds());
        assert_eq!(
            recover(Some(&admin), None, Some(&acl)).unwrap_err().reason(),
            ClusterReason::CredentialsMismatch
        );
    }
}
