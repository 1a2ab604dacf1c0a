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

/// Key of the ACL file in the `<name>-acl` Secret.
pub const ACL_FILE_KEY: &str = "users.acl";

/// The two generated passwords. Generated once; afterwards always read back from the Secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub admin_password: String,
    pub client_password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials(<redacted>)")
    }
}

/// 32 random bytes as 64 hex characters: no quoting issues in ACL files, URLs or shells.
pub fn generate_password() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    hex(&bytes)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// ACL password entry: `#<sha256 hex>`, so the file never holds a password in clear.
pub fn password_hash(password: &str) -> String {
    format!("#{}", hex(&Sha256::digest(password.as_bytes())))
}

/// Name of the ACL user lock clients use.
pub fn client_user(cluster: &RedlockCluster) -> &'static str {
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
pub const CLIENT_RULES: &str = "~* &* +@all -@admin -@dangerous +ping +info +hello +client|setname +client|getname +client|id -flushall -flushdb -swapdb -config -shutdown -replicaof -slaveof -debug -module -acl -monitor -save -bgsave -bgrewriteaof -failover";

/// The `ACL SETUSER <client>` arguments of a release on a server reporting `redis_version`:
/// `on`, plus `+client|setinfo` where it exists (7.2 and newer; Valkey reports 7.2.4). Modern
/// clients (go-redis 9, redis-py 5, ioredis 5) send `CLIENT SETINFO` on connect; older servers
/// answer it with "unknown subcommand", which those clients ignore, and naming it in an ACL rule
/// there would be refused. Added in the same command as `on`, so a released user never lacks it.
pub fn release_rules(redis_version: &str) -> Vec<&'static str> {
    let mut rules = vec!["on"];
    if version_at_least(redis_version, (7, 2)) {
        rules.push("+client|setinfo");
    }
    rules
}

/// Whether `version` (`7.2.4`, `7.0.15`, `255.255.255` for unstable builds) is at least
/// `major.minor`. An unreadable version is treated as old: the rule is then left out, which
/// costs a client at most a refused `CLIENT SETINFO`, whereas an unknown rule would fail the
/// release.
fn version_at_least(version: &str, (major, minor): (u32, u32)) -> bool {
    let mut parts = version.trim().split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(ma), Some(mi)) => (ma, mi) >= (major, minor),
        _ => false,
    }
}

/// The ACL file. The client user is `off`: a process started from this file serves no lock
/// client until the operator releases it.
pub fn acl_file(auth_enabled: bool, credentials: &Credentials) -> String {
    let admin = format!(
        "user {ADMIN_USER} on {} ~* &* +@all",
        password_hash(&credentials.admin_password)
    );
    let (default, client) = if auth_enabled {
        (
            "user default off nopass resetkeys resetchannels -@all".to_owned(),
            Some(format!(
                "user {CLIENT_USER} off {} {CLIENT_RULES}",
                password_hash(&credentials.client_password)
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
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k, ByteString(v.into_bytes())))
                .collect(),
        ),
        ..Default::default()
    }
}

pub fn admin_secret(cluster: &RedlockCluster, credentials: &Credentials) -> Secret {
    let name = admin_secret_name(&cluster.metadata.name.clone().unwrap_or_default());
    secret(
        cluster,
        name,
        BTreeMap::from([
            ("username".into(), ADMIN_USER.into()),
            ("password".into(), credentials.admin_password.clone()),
        ]),
    )
}

/// The `<name>-client` Secret for the published list of `instances` servers: `urls` and
/// `quorum` come from that one number, so a client that reads this one object never mixes a
/// list with another list's quorum.
pub fn client_secret(cluster: &RedlockCluster, credentials: &Credentials, instances: i32) -> Secret {
    let name = client_secret_name(&cluster.metadata.name.clone().unwrap_or_default());
    let username = client_user(cluster);
    let password = cluster
        .spec
        .auth
        .enabled
        .then_some(credentials.client_password.as_str());
    let urls = endpoints::client_urls(cluster, instances, username, password);
    let mut data = BTreeMap::from([
        ("username".to_owned(), username.to_owned()),
        ("urls".to_owned(), endpoints::lines(&urls)),
        ("quorum".to_owned(), crate::model::quorum(instances).to_string()),
    ]);
    if let Some(password) = password {
        data.insert("password".into(), password.to_owned());
    }
    secret(cluster, name, data)
}

pub fn acl_secret(cluster: &RedlockCluster, credentials: &Credentials) -> Secret {
    let name = acl_secret_name(&cluster.metadata.name.clone().unwrap_or_default());
    secret(
        cluster,
        name,
        BTreeMap::from([(
            ACL_FILE_KEY.into(),
            acl_file(cluster.spec.auth.enabled, credentials),
        )]),
    )
}

/// The password stored under `password` in a Secret, if any.
pub fn stored_password(secret: Option<&Secret>) -> Option<String> {
    let bytes = secret?.data.as_ref()?.get("password")?;
    String::from_utf8(bytes.0.clone()).ok().filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds() -> Credentials {
        Credentials {
            admin_password: "adminpw".into(),
            client_password: "clientpw".into(),
        }
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
        assert!(acl.lines().any(|l| l.starts_with("user redlock-admin on #")));
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
    fn client_setinfo_is_allowed_only_where_the_server_knows_it() {
        for (version, setinfo) in [
            ("7.2.0", true),
            ("7.2.4", true),
            ("7.4.1", true),
            ("8.0.0", true),
            ("255.255.255", true),
            ("7.0.15", false),
            ("7.1.242", false),
            ("6.2.14", false),
            ("6", false),
            ("", false),
            ("seven.two", false),
        ] {
            let rules = release_rules(version);
            assert_eq!(rules[0], "on", "{version}");
            assert_eq!(
                rules.contains(&"+client|setinfo"),
                setinfo,
                "{version}: {rules:?}"
            );
            assert_eq!(rules.len(), 1 + usize::from(setinfo), "{version}: {rules:?}");
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
}
