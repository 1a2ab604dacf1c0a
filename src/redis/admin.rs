//! The operator's own connections to its Redis processes, as the admin ACL user: probing
//! (which process runs, is it fenced) and the guarded release.

use std::net::IpAddr;
use std::time::Duration;

use redis::Value;

use crate::clock::member::TimeSample;
use crate::redis::connection::{AdminConnection, KnownProcess, Login};
// ProbeFailure is data the pure side reads (decide/observe.rs); it is named here too, where
// probes make it, so `redis_admin::ProbeFailure` keeps working.
use crate::children::names::{CLIENT_USER, CLIENT_USERS, POD_UID_TAG};
use crate::children::secrets::release_rules;
pub(crate) use crate::decide::observe::ProbeFailure;
use crate::decide::observe::{RedisInfo, SlotObservation};
use crate::hold::ttl_audit::SampledKey;
use crate::redis::probe_connections::{ConnectionKey, ProbeConnections};
use crate::redis::resp::{self, Reply};

/// Credentials and timeouts for admin connections.
#[derive(Clone)]
pub struct AdminAccess {
    pub admin_user: String,
    pub admin_password: String,
    /// Tried when a process refuses `admin_password`: the old one while an admin rotation
    /// removes it (a process restarted from an ACL file its kubelet had not updated yet may
    /// still know only that one).
    pub admin_fallback_password: Option<String>,
    /// The ACL user lock clients log in as (`default` when auth is disabled).
    pub client_user: String,
    pub port: u16,
    pub timeout: Duration,
    /// The CA (PEM) of `spec.tls`; `Some` means the instances serve TLS only.
    pub tls_ca: Option<Vec<u8>>,
}

impl std::fmt::Debug for AdminAccess {
    // Never print the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminAccess")
            .field("admin_user", &self.admin_user)
            .field("client_user", &self.client_user)
            .field("port", &self.port)
            .field("tls", &self.tls_ca.is_some())
            .finish_non_exhaustive()
    }
}

impl ProbeFailure {
    fn of(e: &redis::RedisError) -> Self {
        Self {
            why: e.to_string(),
            // ECONNREFUSED (for a TCP connect; redis counts a missing Unix socket too).
            refused: e.is_connection_refusal(),
        }
    }
}

/// Why a probe got no answer.
#[derive(Debug, thiserror::Error)]
enum ProbeError {
    #[error("{0}")]
    Redis(#[from] redis::RedisError),
    #[error("{0}")]
    Invalid(&'static str),
}

impl ProbeError {
    fn timed_out(&self) -> bool {
        matches!(self, Self::Redis(e) if e.is_timeout())
    }
}

/// Why a command guarded by a run-id check (release, re-fence) was not carried out.
#[derive(Debug, thiserror::Error)]
pub enum GuardedError {
    #[error("cannot reach {0}: {1}")]
    Unreachable(IpAddr, #[source] redis::RedisError),
    #[error("{addr} now runs process {found}, not {expected}: not done")]
    OtherProcess {
        addr: IpAddr,
        expected: String,
        found: String,
    },
    #[error("{addr} runs a process of pod {found}, not of pod {expected}: not done")]
    OtherPod {
        addr: IpAddr,
        expected: String,
        found: String,
    },
    #[error("command on {0} failed: {1}")]
    Command(IpAddr, String),
}

impl AdminAccess {
    /// This access for a process whose lock clients log in as `client_user` (read from its
    /// pod: the user it was started with, which the spec may no longer name).
    pub fn for_client_user(&self, client_user: Option<&str>) -> std::borrow::Cow<'_, AdminAccess> {
        match client_user {
            Some(user) if user != self.client_user => std::borrow::Cow::Owned(AdminAccess {
                client_user: user.to_owned(),
                ..self.clone()
            }),
            _ => std::borrow::Cow::Borrowed(self),
        }
    }

    /// This access for the process of the pod `o` shows, addressed as that pod was built: its
    /// client user, and TLS exactly when the pod mounts a certificate (with that Secret's CA;
    /// an unknown CA fails the connection, never falls back to plain). Without a pod, as the
    /// spec says.
    pub fn for_slot(&self, o: &SlotObservation) -> std::borrow::Cow<'_, AdminAccess> {
        let access = self.for_client_user(o.client_user.as_deref());
        if o.pod_uid.is_none() {
            return access;
        }
        let tls_ca = o
            .tls_secret
            .as_ref()
            .map(|_| o.tls_ca.clone().unwrap_or_default());
        match access {
            std::borrow::Cow::Borrowed(a) => a.with_tls(tls_ca),
            std::borrow::Cow::Owned(a) => std::borrow::Cow::Owned(a.with_tls(tls_ca).into_owned()),
        }
    }

    /// This access in the mode `tls_ca` says: `Some(ca)` is TLS only, trusting `ca` (an empty
    /// one trusts nothing: the connection fails), `None` plain text.
    pub fn with_tls(&self, tls_ca: Option<Vec<u8>>) -> std::borrow::Cow<'_, AdminAccess> {
        if tls_ca == self.tls_ca {
            return std::borrow::Cow::Borrowed(self);
        }
        std::borrow::Cow::Owned(AdminAccess {
            tls_ca,
            ..self.clone()
        })
    }

    /// A fresh, dedicated connection (never a reconnecting one: if the process restarts, the
    /// connection dies with it and nothing sent on it can reach the new process).
    async fn connect(&self, ip: IpAddr) -> redis::RedisResult<AdminConnection> {
        let login = |password| Login {
            user: &self.admin_user,
            password,
            tls_ca: self.tls_ca.as_deref(),
            timeout: self.timeout,
        };
        match AdminConnection::open(ip, self.port, &login(&self.admin_password)).await {
            Err(e) if refused_login(&e) => match &self.admin_fallback_password {
                Some(old) => AdminConnection::open(ip, self.port, &login(old)).await,
                None => Err(e),
            },
            found => found,
        }
    }

    /// Which process runs at `ip`, whether lock clients may use it, and its clock (`TIME`,
    /// timed on this process's monotonic clock), on a fresh connection. The failure says
    /// whether the connection was refused: the search for a process that outlived its pod
    /// takes a refusal (nothing listens there) as evidence that it is gone, and nothing else.
    pub async fn probe(&self, ip: IpAddr) -> Result<(RedisInfo, TimeSample), ProbeFailure> {
        let mut conn = self.connect(ip).await.map_err(|e| ProbeFailure::of(&e))?;
        self.probe_on(&mut conn).await.map_err(|e| ProbeFailure {
            why: e.to_string(),
            refused: false,
        })
    }

    /// The key of the connections `probe_kept` keeps for `ip`.
    pub fn connection_key(&self, ip: IpAddr) -> ConnectionKey {
        ConnectionKey::new(
            ip,
            self.port,
            &self.admin_user,
            &self.admin_password,
            self.tls_ca.as_deref(),
        )
    }

    /// Like [`Self::probe`], on the connection kept for `ip` in `kept` (cluster `uid`) when
    /// there is one (see [`crate::redis::probe_connections`]). A kept connection that fails (its
    /// process restarted, the connection broke) is dropped and the probe is made again at once
    /// on a fresh connection, so a restart is seen by the same probe; one that timed out is
    /// not retried (a fresh connection to a process that does not answer would wait as long).
    pub async fn probe_kept(
        &self,
        ip: IpAddr,
        kept: &ProbeConnections,
        uid: &str,
    ) -> Result<(RedisInfo, TimeSample), ProbeFailure> {
        let key = self.connection_key(ip);
        let failed = |e: ProbeError| ProbeFailure {
            why: e.to_string(),
            refused: false,
        };
        if let Some(mut conn) = kept.take(uid, &key) {
            match self.probe_on(&mut conn).await {
                Ok(found) => {
                    kept.keep(uid, key, conn);
                    return Ok(found);
                }
                // Dropped: the connection is not put back.
                Err(e) if e.timed_out() => return Err(failed(e)),
                Err(_) => {}
            }
        }
        let mut conn = self.connect(ip).await.map_err(|e| ProbeFailure::of(&e))?;
        let found = self.probe_on(&mut conn).await.map_err(failed)?;
        kept.keep(uid, key, conn);
        Ok(found)
    }

    async fn probe_on(&self, conn: &mut AdminConnection) -> Result<(RedisInfo, TimeSample), ProbeError> {
        // One round trip for what identifies the process, its fence and its clock (this runs
        // for every member every probe period). `TIME` is read somewhere between the sending
        // of the request and the arrival of its replies, which is all the clock check assumes
        // (`member_clock`: half the round trip is its uncertainty). Both users a lock client
        // could log in as: a process of either auth mode must let neither in while it is
        // held, and `default` turned on behind the operator's back serves clients as well as
        // the client user would. `INFO server` (the run id) only on a connection that has
        // not read it yet (`KnownProcess`): it is the longest reply, and on a kept connection
        // it could only say again what it said.
        // Then what the hold rule relies on staying as the process started (safety review 3,
        // N1): no eviction, no persistence, a master of its own dataset, nothing evicted. One
        // `CONFIG GET` each: Redis 6.2 takes one pattern per call (and one `INFO` section).
        let checks: [&[&str]; 11] = [
            &["ACL", "GETUSER", &self.client_user],
            &["ACL", "GETUSER", self.other_client_user()],
            &["CONFIG", "GET", PROC_TITLE_TEMPLATE],
            &["TIME"],
            &["ACL", "GETUSER", &self.admin_user],
            &["CONFIG", "GET", "maxmemory-policy"],
            &["CONFIG", "GET", "save"],
            &["CONFIG", "GET", "appendonly"],
            &["ROLE"],
            &["INFO", "stats"],
            &["INFO", "commandstats"],
        ];
        let known = conn.process.clone();
        let request = match known {
            Some(_) => resp::pack(&checks),
            None => {
                let mut commands: Vec<&[&str]> = vec![&["INFO", "server"]];
                commands.extend(checks);
                resp::pack(&commands)
            }
        };
        let first = known.is_none();
        let replies = checks.len() + usize::from(first);
        let sent = std::time::Instant::now();
        let (info, member_micros, received) = conn
            .query_with(&request, replies, |replies| {
                let received = std::time::Instant::now();
                self.read_probe(replies, known)
                    .map(|(info, micros)| (info, micros, received))
            })
            .await??;
        if first {
            conn.process = Some(KnownProcess {
                run_id: info.run_id.clone(),
                version: info.version.clone(),
            });
        }
        Ok((
            info,
            TimeSample {
                member_micros,
                sent,
                received,
            },
        ))
    }

    /// What a probe's replies say: the process (from `INFO server`, the first reply, unless
    /// it is `known`), and its clock (µs).
    fn read_probe(
        &self,
        replies: &[Reply<'_>],
        known: Option<KnownProcess>,
    ) -> Result<(RedisInfo, i64), ProbeError> {
        let (process, checks) = match known {
            Some(known) => (known, replies),
            None => {
                let [info, checks @ ..] = replies else {
                    return Err(ProbeError::Invalid("no replies"));
                };
                let (run_id, version) = parse_info_server(info.checked()?.text()?)
                    .ok_or(ProbeError::Invalid("INFO server has no run_id"))?;
                (KnownProcess { run_id, version }, checks)
            }
        };
        let [
            user,
            other_user,
            title,
            time,
            admin,
            policy,
            save,
            appendonly,
            role,
            stats,
            commandstats,
        ] = checks
        else {
            return Err(ProbeError::Invalid("not eleven replies to the checks"));
        };
        let setting = |reply: &Reply<'_>| -> Result<Option<String>, ProbeError> {
            Ok(match reply.checked()?.items()? {
                [_, value] => Some(value.text()?.to_owned()),
                _ => None,
            })
        };
        let role = match role.checked()?.items()? {
            [first, ..] => first.text()?.to_owned(),
            [] => String::new(),
        };
        let deviations = deviations(
            setting(policy)?.as_deref(),
            setting(save)?.as_deref(),
            setting(appendonly)?.as_deref(),
            &role,
            stats.checked()?.text()?,
            commandstats.checked()?.text()?,
        );
        let (user, other_user) = (user.checked()?, other_user.checked()?);
        // `CONFIG GET` answers [name, value], or nothing for an unknown setting.
        let pod_uid = match title.checked()?.items()? {
            [_, value] => pod_uid_of_title(value.text()?),
            _ => None,
        };
        let [secs, micros] = time.checked()?.items()? else {
            return Err(ProbeError::Invalid("TIME is not two numbers"));
        };
        let info = RedisInfo {
            run_id: process.run_id,
            version: process.version,
            client_enabled: user_is_enabled(user) || user_is_enabled(other_user),
            pod_uid,
            // A process without the user (`Nil`) has no passwords to set: creating the user
            // is not the sync's business (as a fence does not create one either).
            client_password_hashes: (self.client_user == CLIENT_USER && *user != Reply::Nil)
                .then(|| user_password_hashes(user)),
            admin_password_hashes: Some(user_password_hashes(admin.checked()?)),
            deviations,
        };
        Ok((info, secs.int()? * 1_000_000 + micros.int()?))
    }

    /// A fresh connection to `ip` that has checked the process is `expected_run_id`, and that
    /// process's version. Commands sent on it can only reach that process: if it restarts,
    /// the connection dies with it.
    async fn connect_to_process(
        &self,
        ip: IpAddr,
        expected_run_id: &str,
    ) -> Result<(AdminConnection, String), GuardedError> {
        let mut conn = self
            .connect(ip)
            .await
            .map_err(|e| GuardedError::Unreachable(ip, e))?;
        let info: String = conn
            .ask(&redis::cmd("INFO").arg("server").get_packed_command())
            .await
            .map_err(|e| GuardedError::Unreachable(ip, e))?;
        let (run_id, version) = parse_info_server(&info)
            .ok_or_else(|| GuardedError::Command(ip, "INFO server has no run_id".into()))?;
        if run_id != expected_run_id {
            return Err(GuardedError::OtherProcess {
                addr: ip,
                expected: expected_run_id.to_owned(),
                found: run_id,
            });
        }
        Ok((conn, version))
    }

    /// Lets lock clients in — only if `ip` still runs `expected_run_id`, started for the pod
    /// `expected_pod` (an address reused by another slot's process is never released). The
    /// checks and the command travel on one fresh connection, so a restart in between makes
    /// the command fail instead of unfencing the new, empty process. `passwords` (hashes,
    /// `#<sha256 hex>`), when given, become exactly the client user's passwords in the same
    /// command (empty: its passwords are left as they are, e.g. `default` with auth off).
    pub async fn release(
        &self,
        ip: IpAddr,
        expected_run_id: &str,
        expected_pod: Option<&str>,
        passwords: &[String],
    ) -> Result<(), GuardedError> {
        let (mut conn, version) = self.connect_to_process(ip, expected_run_id).await?;
        if let Some(expected) = expected_pod {
            let found = process_pod_uid(&mut conn)
                .await
                .map_err(|e| GuardedError::Command(ip, e.to_string()))?;
            if found.as_deref().is_some_and(|f| f != expected) {
                return Err(GuardedError::OtherPod {
                    addr: ip,
                    expected: expected.to_owned(),
                    found: found.unwrap_or_default(),
                });
            }
        }
        // The passwords on record go in the same command as `on`: a process whose last
        // password sync failed (or that someone gave another password) never serves with
        // passwords other than those on record, not even until the next probe syncs it.
        let passwords = (!passwords.is_empty())
            .then_some(
                ["resetpass"]
                    .into_iter()
                    .chain(passwords.iter().map(String::as_str)),
            )
            .into_iter()
            .flatten();
        let release = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(&self.client_user)
            .arg(passwords.collect::<Vec<_>>())
            .arg(release_rules(&version))
            .get_packed_command();
        let () = conn
            .ask(&release)
            .await
            .map_err(|e| GuardedError::Command(ip, e.to_string()))?;
        Ok(())
    }

    /// Shuts lock clients out of `expected_run_id` again: the client user `off` (no new
    /// logins) and its connections killed (`off` alone leaves logged-in connections working).
    /// The other user a lock client could log in as (`default` with auth on, the client user
    /// with auth off) likewise, if the process has it: it must never serve while held either.
    /// Sent on a connection that checked the run id, like a release.
    pub async fn fence(&self, ip: IpAddr, expected_run_id: &str) -> Result<(), GuardedError> {
        let (mut conn, _) = self.connect_to_process(ip, expected_run_id).await?;
        let command = |e: redis::RedisError| GuardedError::Command(ip, e.to_string());
        let getuser = redis::cmd("ACL")
            .arg("GETUSER")
            .arg(self.other_client_user())
            .get_packed_command();
        let other: Value = conn.ask(&getuser).await.map_err(command)?;
        let mut users = vec![self.client_user.as_str()];
        // `ACL SETUSER` would create a user the process does not have; `CLIENT KILL USER`
        // fails on one.
        if !matches!(other, redis::Value::Nil) {
            users.push(self.other_client_user());
        }
        for user in users {
            let off = redis::cmd("ACL")
                .arg("SETUSER")
                .arg(user)
                .arg("off")
                .get_packed_command();
            let () = conn.ask(&off).await.map_err(command)?;
            let kill = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("USER")
                .arg(user)
                .get_packed_command();
            let _killed: i64 = conn.ask(&kill).await.map_err(command)?;
        }
        Ok(())
    }

    /// Sets the client user of `expected_run_id` to accept exactly the passwords `hashes`
    /// (`#<sha256 hex>`): `resetpass` and the hashes in one command, so no moment has none or
    /// a mix. Never touches `on`/`off`: a fenced process stays fenced. Sent on a connection
    /// that checked the run id, like a release.
    pub async fn set_client_passwords(
        &self,
        ip: IpAddr,
        expected_run_id: &str,
        hashes: &[String],
    ) -> Result<(), GuardedError> {
        self.set_passwords(ip, expected_run_id, &self.client_user, hashes)
            .await
    }

    /// Sets the admin user of `expected_run_id` to accept exactly the passwords `hashes`
    /// (`#<sha256 hex>`), in one command (an admin password rotation). Connections already
    /// logged in stay logged in, the operator's kept probe connections too. Sent on a
    /// connection that checked the run id.
    pub async fn set_admin_passwords(
        &self,
        ip: IpAddr,
        expected_run_id: &str,
        hashes: &[String],
    ) -> Result<(), GuardedError> {
        self.set_passwords(ip, expected_run_id, &self.admin_user, hashes)
            .await
    }

    /// `user` of `expected_run_id` accepts exactly `hashes`: `resetpass` and the hashes in one
    /// command, on a connection that checked the run id.
    async fn set_passwords(
        &self,
        ip: IpAddr,
        expected_run_id: &str,
        user: &str,
        hashes: &[String],
    ) -> Result<(), GuardedError> {
        let (mut conn, _) = self.connect_to_process(ip, expected_run_id).await?;
        let set = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(user)
            .arg("resetpass")
            .arg(hashes)
            .get_packed_command();
        let () = conn
            .ask(&set)
            .await
            .map_err(|e| GuardedError::Command(ip, e.to_string()))?;
        Ok(())
    }

    /// Of the two users lock clients log in as (`default`, the client user), the one this
    /// access's processes do not use.
    fn other_client_user(&self) -> &'static str {
        CLIENT_USERS
            .into_iter()
            .find(|u| *u != self.client_user)
            .unwrap_or(CLIENT_USERS[0])
    }

    /// Continues a `SCAN` from `cursor` for about `budget` keys and reads each key's `PTTL`
    /// (read-only commands). Returns the batch and the cursor to continue from (0: the
    /// keyspace has been swept). On the connection kept for probes of `ip` when there is one
    /// (the probe just before used it; these commands only read, see
    /// [`crate::redis::probe_connections`]), else on a fresh one.
    pub async fn sample_ttls(
        &self,
        ip: IpAddr,
        kept: &ProbeConnections,
        uid: &str,
        cursor: u64,
        budget: u64,
    ) -> Result<(Vec<SampledKey>, u64), String> {
        let key = self.connection_key(ip);
        let (mut conn, was_kept) = match kept.take(uid, &key) {
            Some(conn) => (conn, true),
            None => (self.connect(ip).await.map_err(|e| e.to_string())?, false),
        };
        let sampled = sample_on(&mut conn, cursor, budget)
            .await
            .map_err(|e| e.to_string())?;
        // Put back only after a complete exchange: a failed one leaves replies unread.
        if was_kept {
            kept.keep(uid, key, conn);
        }
        Ok(sampled)
    }
}

/// The TTL audit's `SCAN` from `cursor` for about `budget` keys, with each key's `PTTL`.
async fn sample_on(
    conn: &mut AdminConnection,
    mut cursor: u64,
    budget: u64,
) -> redis::RedisResult<(Vec<SampledKey>, u64)> {
    let mut sampled = Vec::new();
    loop {
        let count = (budget - sampled.len() as u64).clamp(1, 250);
        let scan = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(count)
            .get_packed_command();
        let (next, keys): (u64, Vec<Vec<u8>>) = conn.ask(&scan).await?;
        let mut pipe = redis::pipe();
        for k in &keys {
            pipe.cmd("PTTL").arg(k);
        }
        let ttls = if keys.is_empty() {
            Vec::new()
        } else {
            let ints = |replies: &[Reply<'_>]| -> redis::RedisResult<Vec<i64>> {
                replies.iter().map(|r| r.checked()?.int()).collect()
            };
            conn.query_with(&pipe.get_packed_pipeline(), keys.len(), ints)
                .await??
        };
        for (key, pttl_ms) in keys.into_iter().zip(ttls) {
            sampled.push(SampledKey { key, pttl_ms });
        }
        cursor = next;
        if cursor == 0 || sampled.len() as u64 >= budget {
            return Ok((sampled, cursor));
        }
    }
}

/// `run_id` and `redis_version` from an `INFO server` reply.
pub fn parse_info_server(info: &str) -> Option<(String, String)> {
    let field = |name: &str| {
        info.lines().find_map(|l| {
            l.trim_end()
                .strip_prefix(name)?
                .strip_prefix(':')
                .map(str::to_owned)
        })
    };
    Some((field("run_id")?, field("redis_version").unwrap_or_default()))
}

/// Whether `e` is a refused login (a wrong password), not an unreachable process.
fn refused_login(e: &redis::RedisError) -> bool {
    e.code() == Some("WRONGPASS") || e.to_string().contains("WRONGPASS")
}

/// The list field `name` of an `ACL GETUSER` reply (a flat list of name/value pairs); empty
/// when the user or the field is missing.
fn user_field<'a>(reply: &Reply<'a>, name: &str) -> Vec<&'a str> {
    let Reply::Array(items) = reply else {
        return Vec::new();
    };
    items
        .chunks(2)
        .find_map(|kv| match kv {
            [key, Reply::Array(values)] if key.text().ok() == Some(name) => {
                Some(values.iter().filter_map(|v| v.text().ok()).collect())
            }
            _ => None,
        })
        .unwrap_or_default()
}

/// Whether an `ACL GETUSER` reply has the `on` flag.
fn user_is_enabled(reply: &Reply<'_>) -> bool {
    user_field(reply, "flags").contains(&"on")
}

/// The passwords an `ACL GETUSER` reply lists (SHA-256 hex), as the ACL file names them
/// (`#<hex>`), sorted.
fn user_password_hashes(reply: &Reply<'_>) -> Vec<String> {
    let mut hashes: Vec<String> = user_field(reply, "passwords")
        .into_iter()
        .map(|h| format!("#{h}"))
        .collect();
    hashes.sort();
    hashes
}

/// What a process's `proc-title-template` says about the pod it was started for: the
/// `pod=<uid>` word the pod's command line puts there ([`crate::children::pod`]).
async fn process_pod_uid(conn: &mut AdminConnection) -> redis::RedisResult<Option<String>> {
    let get = redis::cmd("CONFIG")
        .arg("GET")
        .arg(PROC_TITLE_TEMPLATE)
        .get_packed_command();
    let pair: Vec<String> = conn.ask(&get).await?;
    Ok(pod_uid_of_config(&pair))
}

const PROC_TITLE_TEMPLATE: &str = "proc-title-template";

/// The pod a `CONFIG GET proc-title-template` answer (`[name, value]`) names.
fn pod_uid_of_config(pair: &[String]) -> Option<String> {
    pair.get(1).and_then(|t| pod_uid_of_title(t))
}

/// `pod=<uid>` in a process title template.
pub(crate) fn pod_uid_of_title(template: &str) -> Option<String> {
    template
        .split_whitespace()
        .find_map(|w| w.strip_prefix(POD_UID_TAG))
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
}

/// What a probe's settings and counters show that the hold rule cannot stand (pure; see
/// [`RedisInfo::deviations`]): the settings every process starts with
/// (`resources::config`: `maxmemory-policy noeviction`, `save ""`, `appendonly no`, a master)
/// changed while it runs, keys evicted, or a command run that drops or replaces keys wholesale
/// ([`KEY_DROPPING_COMMANDS`]). A setting the server does not report is no deviation (every
/// Redis the spec allows reports these).
pub(crate) fn deviations(
    policy: Option<&str>,
    save: Option<&str>,
    appendonly: Option<&str>,
    role: &str,
    info_stats: &str,
    info_commandstats: &str,
) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(p) = policy.filter(|p| *p != "noeviction") {
        found.push(format!(
            "maxmemory-policy is {p} (keys, locks among them, may be evicted)"
        ));
    }
    if let Some(s) = save.filter(|s| !s.trim().is_empty()) {
        found.push(format!("save is \"{s}\" (snapshots on)"));
    }
    if let Some(a) = appendonly.filter(|a| *a != "no") {
        found.push(format!("appendonly is {a}"));
    }
    if !role.is_empty() && role != "master" {
        found.push(format!(
            "its replication role is {role} (its dataset follows another server)"
        ));
    }
    let evicted = info_stats
        .lines()
        .find_map(|l| l.trim().strip_prefix("evicted_keys:"))
        .and_then(|n| n.trim().parse::<u64>().ok())
        .unwrap_or(0);
    if evicted > 0 {
        found.push(format!("it evicted {evicted} keys"));
    }
    for (command, calls) in key_dropping_calls(info_commandstats) {
        found.push(format!("{command} ran {calls} times"));
    }
    found
}

/// Commands that drop, move or replace keys without a lock client's own `DEL` (which a
/// release script sends and the counters cannot tell apart): neither a lock client (its ACL
/// has `-@dangerous -flushall -flushdb -swapdb -replicaof -slaveof -debug`) nor the operator
/// (`ADMIN_RULES`) may send one, so a call on record means an insider widened a user. Every
/// process starts with all counters at zero, and a process found with one is never released
/// again (`plan::tampered`), so a counter that stays up costs nothing more. `CONFIG SET` is not
/// here: Redis 6.2 counts it together with the operator's own `CONFIG GET`, and what it could
/// change is read directly.
pub(crate) const KEY_DROPPING_COMMANDS: [&str; 9] = [
    "flushall",
    "flushdb",
    "swapdb",
    "restore",
    "restore-asking",
    "migrate",
    "debug",
    "replicaof",
    "slaveof",
];

/// `(command, calls)` of every [`KEY_DROPPING_COMMANDS`] entry `INFO commandstats` shows run
/// (`cmdstat_flushall:calls=1,usec=…`). Calls an ACL refused are not `calls` (newer servers
/// count them as `rejected_calls`): only commands that ran count.
fn key_dropping_calls(commandstats: &str) -> Vec<(&str, u64)> {
    commandstats
        .lines()
        .filter_map(|line| {
            let (name, fields) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let command = KEY_DROPPING_COMMANDS
                .iter()
                .find(|c| c.eq_ignore_ascii_case(name))?;
            let calls = fields
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))?
                .parse::<u64>()
                .ok()?;
            (calls > 0).then_some((*command, calls))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn deviations_from_what_the_hold_rule_relies_on_are_named() {
        let stats = "# Stats\r\nexpired_keys:12\r\nevicted_keys:0\r\n";
        // What the operator and lock clients send, and a FLUSHALL an ACL refused (counted as
        // rejected, not as a call).
        let commands = "# Commandstats\r\n\
            cmdstat_set:calls=40,usec=80,usec_per_call=2.00,rejected_calls=0,failed_calls=3\r\n\
            cmdstat_evalsha:calls=12,usec=60,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_del:calls=7,usec=7,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_flushall:calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0\r\n";
        let clean = |commands: &str| {
            deviations(
                Some("noeviction"),
                Some(""),
                Some("no"),
                "master",
                stats,
                commands,
            )
        };
        assert!(clean(commands).is_empty(), "{:?}", clean(commands));
        let all = deviations(
            Some("allkeys-lru"),
            Some("3600 1"),
            Some("yes"),
            "slave",
            "evicted_keys:3\r\n",
            "cmdstat_flushdb:calls=2,usec=9,usec_per_call=4.50\r\n",
        );
        assert_eq!(all.len(), 6, "{all:?}");
        assert!(
            all[0].contains("allkeys-lru")
                && all[4].contains("evicted 3 keys")
                && all[5] == "flushdb ran 2 times",
            "{all:?}"
        );
        // Lines without rejected_calls (older servers), and every command of the list.
        for command in KEY_DROPPING_COMMANDS {
            let line = format!("cmdstat_{command}:calls=1,usec=3,usec_per_call=3.00\r\n");
            assert_eq!(clean(&line), [format!("{command} ran 1 times")], "{line}");
        }
        // Settings a server does not report prove nothing either way.
        assert!(deviations(None, None, None, "", "", "").is_empty());
    }

    #[test]
    fn the_pod_uid_is_read_from_the_process_title_template() {
        assert_eq!(
            pod_uid_of_title("{title} {listen-addr} {server-mode} pod=0f1e-22").as_deref(),
            Some("0f1e-22")
        );
        assert_eq!(pod_uid_of_title("{title} {listen-addr} {server-mode}"), None);
        // An unexpanded variable or an empty tag names no pod.
        assert_eq!(pod_uid_of_title("{title} pod="), None);
    }
    use super::*;

    #[test]
    fn parses_run_id_and_version() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\ntcp_port:6379\r\n";
        assert_eq!(parse_info_server(info), Some(("abc123".into(), "7.0.15".into())));
        assert_eq!(parse_info_server("# Server\r\n"), None);
    }

    fn getuser(flags: &[&'static str]) -> Reply<'static> {
        Reply::Array(vec![
            Reply::Bulk(b"flags"),
            Reply::Array(flags.iter().map(|f| Reply::Bulk(f.as_bytes())).collect()),
            Reply::Bulk(b"passwords"),
            Reply::Array(vec![]),
        ])
    }

    #[test]
    fn reads_the_on_flag() {
        assert!(user_is_enabled(&getuser(&["on", "allkeys"])));
        assert!(!user_is_enabled(&getuser(&["off", "allkeys"])));
        assert!(!user_is_enabled(&Reply::Nil));
    }

    #[test]
    fn reads_the_password_hashes() {
        let reply = Reply::Array(vec![
            Reply::Bulk(b"flags"),
            Reply::Array(vec![Reply::Bulk(b"off")]),
            Reply::Bulk(b"passwords"),
            Reply::Array(vec![Reply::Bulk(b"bb"), Reply::Bulk(b"aa")]),
        ]);
        assert_eq!(user_password_hashes(&reply), vec!["#aa", "#bb"]);
        assert!(user_password_hashes(&getuser(&["on"])).is_empty());
        assert!(user_password_hashes(&Reply::Nil).is_empty());
    }

    #[test]
    fn reads_a_probe() {
        let access = AdminAccess {
            admin_user: "redlock-admin".into(),
            admin_password: "pw".into(),
            admin_fallback_password: None,
            client_user: CLIENT_USER.into(),
            port: 6379,
            timeout: Duration::from_secs(1),
            tls_ca: None,
        };
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\n";
        let replies = vec![
            Reply::Bulk(info.as_bytes()),
            Reply::Array(vec![
                Reply::Bulk(b"flags"),
                Reply::Array(vec![Reply::Bulk(b"off")]),
                Reply::Bulk(b"passwords"),
                Reply::Array(vec![Reply::Bulk(b"aa")]),
            ]),
            Reply::Nil,
            Reply::Array(vec![
                Reply::Bulk(b"proc-title-template"),
                Reply::Bulk(b"{title} pod=0f1e"),
            ]),
            Reply::Array(vec![Reply::Bulk(b"1700000000"), Reply::Bulk(b"250")]),
            Reply::Array(vec![
                Reply::Bulk(b"passwords"),
                Reply::Array(vec![Reply::Bulk(b"cc"), Reply::Bulk(b"bb")]),
            ]),
            Reply::Array(vec![Reply::Bulk(b"maxmemory-policy"), Reply::Bulk(b"noeviction")]),
            Reply::Array(vec![Reply::Bulk(b"save"), Reply::Bulk(b"")]),
            Reply::Array(vec![Reply::Bulk(b"appendonly"), Reply::Bulk(b"no")]),
            Reply::Array(vec![Reply::Bulk(b"master"), Reply::Int(0), Reply::Array(vec![])]),
            Reply::Bulk(b"# Stats\r\nevicted_keys:0\r\n"),
            Reply::Bulk(b"# Commandstats\r\ncmdstat_time:calls=4,usec=4,usec_per_call=1.00\r\n"),
        ];
        let (info, micros) = access.read_probe(&replies, None).unwrap();
        assert!(info.deviations.is_empty(), "{:?}", info.deviations);
        let mut evicting = replies.clone();
        evicting[6] = Reply::Array(vec![
            Reply::Bulk(b"maxmemory-policy"),
            Reply::Bulk(b"volatile-ttl"),
        ]);
        let (tampered, _) = access.read_probe(&evicting, None).unwrap();
        assert_eq!(tampered.deviations.len(), 1, "{:?}", tampered.deviations);
        assert_eq!(
            info.admin_password_hashes,
            Some(vec!["#bb".to_owned(), "#cc".to_owned()])
        );
        assert_eq!(info.run_id, "abc123");
        assert_eq!(info.version, "7.0.15");
        assert!(!info.client_enabled);
        assert_eq!(info.pod_uid.as_deref(), Some("0f1e"));
        assert_eq!(info.client_password_hashes, Some(vec!["#aa".to_owned()]));
        assert_eq!(micros, 1_700_000_000_000_250);
        // An error reply fails the probe.
        let mut failed = replies.clone();
        failed[1] = Reply::Error(b"-NOPERM no\r\n");
        assert!(access.read_probe(&failed, None).is_err());

        // On a connection that has read the process: no `INFO server`, the process as known.
        let known = KnownProcess {
            run_id: "abc123".into(),
            version: "7.0.15".into(),
        };
        let (again, micros_again) = access.read_probe(&replies[1..], Some(known.clone())).unwrap();
        assert_eq!((again, micros_again), (info, micros));
        // Replies that do not match the request (an `INFO` where the checks begin) fail.
        assert!(access.read_probe(&replies, Some(known)).is_err());
        assert!(access.read_probe(&replies[1..], None).is_err());
    }
}
