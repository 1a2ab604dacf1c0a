//! What a reconcile reads before it can look at the instances: the spec's validity, the
//! credentials, and the TLS CA the operator's connections trust.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::children::config;
use crate::children::names::{
    ADMIN_USER, REDIS_PORT, acl_secret_name, admin_secret_name, client_secret_name,
};
use crate::children::secrets::{self, Credentials, client_user, generate_password};
use crate::crd::reasons::ClusterReason;
use crate::crd::{RedlockCluster, UnstoppedProcess};
use crate::credentials::memo::Versions;
use crate::decide::validate::{self, Rejection};
use crate::error::{Error, Result};
use crate::reconcile::apply::{Ownership, ownership};
use crate::reconcile::context::Context;
use crate::redis::admin::AdminAccess;
use crate::runtime::events;

pub(crate) struct Inputs {
    /// Why the spec cannot be acted on; empty when it is accepted.
    pub rejections: Vec<Rejection>,
    pub credentials: Credentials,
    pub access: AdminAccess,
}

impl Inputs {
    pub fn accepted(&self) -> bool {
        self.rejections.is_empty()
    }
}

pub(crate) async fn read(ctx: &Context, cluster: &RedlockCluster, ns: &str) -> Result<Inputs> {
    let rejections = validate::validate(&cluster.spec);
    let credentials = match credentials(ctx, cluster, ns).await {
        Err(Error::Credentials(problem)) => {
            let note = format!("{problem}; no instance is probed, released or replaced until it is fixed");
            events::publish_for_cluster(&ctx.recorder, cluster, problem.reason(), note, true).await;
            return Err(problem.into());
        }
        other => other?,
    };
    let tls_ca = match tls_ca(ctx, cluster, ns).await {
        // Without the CA nothing can be probed or released safely, so the reconcile stops
        // here; say why where the user looks (`kubectl describe`), not only in our log.
        Err(e @ Error::TlsSecret(_)) => {
            let note = format!("{e}; no instance is probed, released or replaced until it is fixed");
            events::publish_for_cluster(
                &ctx.recorder,
                cluster,
                ClusterReason::TlsSecretInvalid,
                note,
                true,
            )
            .await;
            return Err(e);
        }
        other => other?,
    };
    let access = AdminAccess {
        admin_user: ADMIN_USER.into(),
        admin_password: credentials.admin_password.clone(),
        admin_fallback_password: credentials.admin_fallback_password().map(str::to_owned),
        client_user: client_user(cluster).into(),
        port: REDIS_PORT,
        timeout: ctx.settings.probe_timeout,
        tls_ca,
    };
    Ok(Inputs {
        rejections,
        credentials,
        access,
    })
}

/// The CA of `spec.tls.secretName`, which the operator's connections trust. Missing means the
/// instances cannot start either; the reconcile fails and is retried with backoff, and
/// nothing is released meanwhile.
async fn tls_ca(ctx: &Context, cluster: &RedlockCluster, ns: &str) -> Result<Option<Vec<u8>>> {
    let Some(tls) = &cluster.spec.tls else {
        return Ok(None);
    };
    let ca = read_ca(ctx, ns, &tls.secret_name).await?.ok_or_else(|| {
        Error::TlsSecret(format!(
            "Secret {ns}/{} is missing or has no {}",
            tls.secret_name,
            config::TLS_CA_KEY
        ))
    })?;
    Ok(Some(ca))
}

/// The CA (`ca.crt`) of a user's TLS Secret: kept from an earlier read unless a connection
/// made with it failed since (`tls_cas`: no GET per reconcile); `None` when the Secret is
/// missing or has no CA.
pub(crate) async fn read_ca(ctx: &Context, ns: &str, secret: &str) -> Result<Option<Vec<u8>>> {
    let now = std::time::Instant::now();
    if let Some(ca) = ctx.memory.tls_cas.get(ns, secret, now) {
        return Ok(Some(ca));
    }
    let ca = Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .get_opt(secret)
        .await?
        .and_then(|s| s.data)
        .and_then(|mut d| d.remove(config::TLS_CA_KEY))
        .map(|ca| ca.0)
        .filter(|ca| !ca.is_empty());
    if let Some(ca) = &ca {
        ctx.memory.tls_cas.keep(ns, secret, ca.clone(), now);
    }
    Ok(ca)
}

/// The ways to reach a process that outlived its pod, to be tried in order: the mode it was
/// recorded listening in (during a TLS toggle's rollout not the spec's), then the spec's when
/// that differs. The spec's mode stays a fallback because the recorded one can fail where the
/// spec's works (its Secret deleted meanwhile, a CA that cannot be read now, a record made
/// before listeners were kept): a process seen or suspected serving must be looked for (and
/// fenced) every way the operator has, and an extra attempt costs one connection.
pub(crate) async fn accesses_for_unstopped<'a>(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    access: &'a AdminAccess,
    unstopped: &UnstoppedProcess,
) -> Vec<Cow<'a, AdminAccess>> {
    let spec = Cow::Borrowed(access);
    let Some(listener) = &unstopped.listener else {
        return vec![spec];
    };
    let spec_secret = cluster.spec.tls.as_ref().map(|t| t.secret_name.as_str());
    let tls_ca = match listener.tls_secret.as_deref() {
        None => Ok(None),
        Some(secret) if Some(secret) == spec_secret => Ok(access.tls_ca.clone()),
        Some(secret) => read_ca(ctx, ns, secret)
            .await
            .map(|ca| Some(ca.unwrap_or_default())),
    };
    match tls_ca {
        // A Secret without a CA: nothing can be verified in that mode.
        Ok(Some(ca)) if ca.is_empty() => vec![spec],
        Ok(tls_ca) if tls_ca == access.tls_ca => vec![spec],
        Ok(tls_ca) => vec![access.with_tls(tls_ca), spec],
        Err(e) => {
            tracing::warn!(run_id = %unstopped.run_id, error = %e, "the CA of the mode a process that outlived its pod listens in could not be read; trying the spec's mode");
            vec![spec]
        }
    }
}

/// Passwords are generated once and then always read back: from the cache, or from the API
/// when the cache has not caught up, so a lagging cache never rotates them. A Secret this
/// cluster adopts (an earlier incarnation's, an orphan) keeps its password; one that another
/// owner controls is not read: it will not be overwritten either, and nothing of ours uses it.
/// A password that is lost or edited while processes may know the old one is never replaced
/// by a new one: it is written back from this process's memory when the ACL files confirm
/// that (`secrets::recover_or_restore`), else reported, and the reconcile stops here, as
/// without a TLS CA.
async fn credentials(ctx: &Context, cluster: &RedlockCluster, ns: &str) -> Result<Credentials> {
    let name = cluster.name_any();
    let uid = cluster.metadata.uid.as_deref().unwrap_or_default();
    // Steady state: the same three Secrets cached as when the credentials were last recovered
    // from them (`credentials_memo`).
    let versions = cached_versions(&ctx.caches.secrets, ns, &name);
    let memo = versions.as_ref().and_then(|v| ctx.memory.credentials.get(uid, v));
    let generated = AtomicBool::new(false);
    let recover = async |fresh: bool| -> Result<Credentials> {
        // Built here, not per reconcile: a memo hit (steady state) needs no owner to compare.
        let owner = secrets::admin_secret(
            cluster,
            &Credentials::new(String::new(), String::new(), String::new()),
        );
        let foreign = |s: &Arc<Secret>| matches!(ownership(s.as_ref(), &owner), Ownership::Other(_));
        let read_any = async |secret: String| -> Result<Option<Arc<Secret>>> {
            Ok(if fresh {
                Api::<Secret>::namespaced(ctx.client.clone(), ns)
                    .get_opt(&secret)
                    .await?
                    .map(Arc::new)
            } else {
                cached_or_get(&ctx.caches.secrets, &ctx.client, ns, &secret).await?
            })
        };
        let read = async |secret: String| -> Result<Option<Arc<Secret>>> {
            Ok(read_any(secret).await?.filter(|s| !foreign(s)))
        };
        let admin_found = read_any(admin_secret_name(&name)).await?;
        // Another owner's `<name>-admin` cannot be written back: no restore (it would be
        // refused each time); the name conflict is reported by the children step.
        let admin_foreign = admin_found.as_ref().is_some_and(&foreign);
        let admin = admin_found.filter(|s| !foreign(s));
        let client = read(client_secret_name(&name)).await?;
        // Evidence of processes that know the passwords only if it is this very object's: an
        // earlier incarnation's ACL Secret (a delete + re-create, where the garbage collector
        // may remove the old `<name>-admin` first) speaks for that incarnation's pods, which
        // this cluster never adopts; its clients keep their password from `<name>-client`.
        let acl = read(acl_secret_name(&name))
            .await?
            .filter(|s| matches!(ownership(s.as_ref(), &owner), Ownership::Ours));
        let remembered = known(ctx, cluster).filter(|_| !admin_foreign);
        let (mut credentials, overcame) = secrets::recover_or_restore(
            &name,
            admin.as_deref(),
            client.as_deref(),
            acl.as_deref(),
            remembered.as_ref(),
            || {
                generated.store(true, Ordering::Relaxed);
                generate_password()
            },
        )?;
        if let Some(problem) = overcame {
            let note = format!(
                "{problem}; writing it back from the passwords this operator recovered earlier, which the ACL files confirm"
            );
            tracing::warn!("{note}");
            events::publish_for_cluster(
                &ctx.recorder,
                cluster,
                ClusterReason::CredentialsRestored,
                note,
                true,
            )
            .await;
        }
        if fresh {
            credentials.admin_read_at = admin.and_then(|s| s.metadata.resource_version.clone());
        }
        Ok(credentials)
    };
    let mut recovered = match memo {
        Some(credentials) => credentials,
        None => {
            let recovered = recover(false).await?;
            let after = cached_versions(&ctx.caches.secrets, ns, &name);
            if let Some(v) = rememberable(versions, after, generated.load(Ordering::Relaxed)) {
                ctx.memory.credentials.keep(uid, v, recovered.clone());
            }
            // A memo hit was remembered when it was recovered: nothing to keep per reconcile.
            remember(ctx, cluster, &recovered);
            recovered
        }
    };
    // A client password rotation moves in steps kept in `<name>-admin`: read from the cache,
    // one that lags this process's last write would take a step back (a new password
    // generated twice). Only while one runs or is asked for.
    let admin_token = crate::credentials::admin_rotation::requested(cluster);
    if crate::credentials::client_rotation::active(
        &recovered,
        crate::credentials::client_rotation::request(cluster),
    ) || crate::credentials::admin_rotation::active(&recovered, admin_token)
    {
        recovered = recover(true).await?;
        remember(ctx, cluster, &recovered);
    }
    Ok(recovered)
}

/// Keeps `credentials` as the ones this process knows for the cluster object: recovered from
/// its Secrets, or just written there (a rotation step).
pub(crate) fn remember(ctx: &Context, cluster: &RedlockCluster, credentials: &Credentials) {
    if let Some(uid) = cluster.uid() {
        ctx.memory
            .known_credentials
            .lock()
            .expect("credentials lock is never poisoned")
            .insert(uid, credentials.clone());
    }
}

/// The credentials this process last recovered for this very cluster object (by UID).
fn known(ctx: &Context, cluster: &RedlockCluster) -> Option<Credentials> {
    let uid = cluster.uid()?;
    ctx.memory
        .known_credentials
        .lock()
        .expect("credentials lock is never poisoned")
        .get(&uid)
        .cloned()
}

/// The UIDs and resourceVersions of the cluster's three Secrets in the cache; `None` unless
/// all three are there (a missing one is read from the API server).
fn cached_versions(store: &Store<Secret>, ns: &str, name: &str) -> Option<Versions> {
    let version = |secret: String| {
        let s = store.get(&ObjectRef::new(&secret).within(ns))?;
        Some((s.metadata.uid.clone()?, s.metadata.resource_version.clone()?))
    };
    Some([
        version(admin_secret_name(name))?,
        version(client_secret_name(name))?,
        version(acl_secret_name(name))?,
    ])
}

/// What credentials just recovered may be remembered under: the cached Secrets they were
/// recovered from, only if the cache showed all three before and after recovering (none was
/// read from the API server, none changed meanwhile) and no password was generated (a new
/// one each time until it is written).
fn rememberable(before: Option<Versions>, after: Option<Versions>, generated: bool) -> Option<Versions> {
    before.filter(|b| !generated && after.as_ref() == Some(b))
}

async fn cached_or_get(
    store: &Store<Secret>,
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<Option<Arc<Secret>>> {
    if let Some(s) = store.get(&ObjectRef::new(name).within(ns)) {
        return Ok(Some(s));
    }
    Ok(Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await?
        .map(Arc::new))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::{reflector, watcher};

    fn secret(name: &str, uid: &str, version: &str) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some("team".into());
        s.metadata.uid = Some(uid.into());
        s.metadata.resource_version = Some(version.into());
        s
    }

    /// Every change to one of the three Secrets (an edit, a delete, a delete and create again)
    /// gives other versions, and so misses the credentials memo.
    #[test]
    fn the_cached_versions_change_with_each_secret() {
        let (store, mut writer) = reflector::store::<Secret>();
        let mut apply = |s: Secret| writer.apply_watcher_event(&watcher::Event::Apply(s));
        apply(secret("locks-admin", "a", "1"));
        apply(secret("locks-client", "c", "2"));
        assert_eq!(
            cached_versions(&store, "team", "locks"),
            None,
            "the ACL Secret is not cached"
        );
        apply(secret("locks-acl", "l", "3"));
        let first = cached_versions(&store, "team", "locks").unwrap();
        assert_eq!(first[0], ("a".to_owned(), "1".to_owned()));
        assert_eq!(
            cached_versions(&store, "team", "other"),
            None,
            "another cluster's"
        );
        apply(secret("locks-client", "c", "4"));
        let edited = cached_versions(&store, "team", "locks").unwrap();
        assert_ne!(edited, first, "the client Secret edited");
        apply(secret("locks-acl", "l2", "3"));
        let recreated = cached_versions(&store, "team", "locks").unwrap();
        assert_ne!(recreated, edited, "the ACL Secret created again");
        writer.apply_watcher_event(&watcher::Event::Delete(secret("locks-admin", "a", "1")));
        assert_eq!(
            cached_versions(&store, "team", "locks"),
            None,
            "the admin Secret deleted"
        );
    }

    #[test]
    fn only_credentials_recovered_from_unchanged_cached_secrets_are_remembered() {
        let v = |admin: &str| -> Versions {
            [
                ("a".into(), admin.into()),
                ("c".into(), "2".into()),
                ("l".into(), "3".into()),
            ]
        };
        assert_eq!(rememberable(Some(v("1")), Some(v("1")), false), Some(v("1")));
        assert_eq!(
            rememberable(Some(v("1")), Some(v("1")), true),
            None,
            "a password generated"
        );
        assert_eq!(
            rememberable(Some(v("1")), Some(v("5")), false),
            None,
            "changed meanwhile"
        );
        assert_eq!(rememberable(Some(v("1")), None, false), None, "deleted meanwhile");
        assert_eq!(
            rememberable(None, Some(v("1")), false),
            None,
            "one was read from the API server"
        );
    }
}
