//! Wiring of the operator: watches, the controller loop, the HTTP server, shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::channel::mpsc::UnboundedSender;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{Controller, WatchStreamExt, reflector, watcher};
use kube::{Client, Resource};
use tokio_util::sync::CancellationToken;

use crate::children::index::InstanceIndex;
use crate::children::names::managed_selector;
use crate::children::trim::Trim;
use crate::children::versions::ChildVersions;
use crate::cli::RunArgs;
use crate::crd::{RedlockCluster, schema_check};
use crate::error::{Error, Result};
use crate::reconcile::context::{Caches, Context, Memory, Settings};
use crate::reconcile::{error_policy, reconcile};
use crate::runtime::clock_check::ClockCheck;
use crate::runtime::heap_trim;
use crate::runtime::http::{self, HttpState};
use crate::runtime::leader::{self, Elector, Leadership, LeaseConfig, LeaseTiming, Role};
use crate::runtime::metrics::Metrics;
use crate::runtime::node_zones::NodeZones;
use crate::runtime::recorder::{Recorder, Reporter};

/// Runs the operator until SIGTERM/SIGINT (or `shutdown` is cancelled). The start-up in its
/// order (API check, clock check, HTTP, election, watches, context, controller) in one place.
pub async fn run(args: RunArgs, shutdown: CancellationToken) -> Result<()> {
    let client = Client::try_default().await.map_err(Error::ClientConfig)?;
    let ns = args.namespace.as_deref();
    let clusters: Api<RedlockCluster> = scoped(&client, ns);
    ensure_crd_installed(&clusters).await?;
    ensure_crd_current(&client).await?;

    let election = election_config(&args, &client)?;

    let metrics = Arc::new(Metrics::default());
    metrics.clock_offset_limit(Duration::from_millis(args.max_clock_offset_ms).as_secs_f64());
    // The clock check runs from the start (also on a standby), so a new leader knows its
    // offset before its first reconcile.
    let clock = Arc::new(ClockCheck::new(
        Duration::from_millis(args.max_clock_offset_ms),
        Duration::from_millis(args.clock_check_period_ms),
    ));
    tokio::spawn(
        clock
            .clone()
            .run(client.clone(), metrics.clone(), shutdown.clone()),
    );
    tokio::spawn(heap_trim::every(heap_trim::PERIOD, shutdown.clone()));
    let ready = Arc::new(AtomicBool::new(false));
    let standby = Arc::new(AtomicBool::new(false));
    let http = tokio::spawn(http::serve(
        args.http_addr,
        HttpState {
            ready: ready.clone(),
            standby: standby.clone(),
            metrics: metrics.clone(),
        },
        shutdown.clone(),
    ));

    // Nothing is watched before the lease is ours: a standby costs the API server nothing.
    let elected = match election {
        None => None,
        Some(config) => match elect(&client, config, &standby, &shutdown).await {
            Some(elected) => Some(elected),
            None => return join_http(http, &args).await,
        },
    };
    metrics.leading(true);
    let leadership = elected
        .as_ref()
        .map_or_else(Leadership::unconditional, |(_, l)| l.clone());

    let (caches, controller) = watch(&client, ns, clusters, ready);
    let (wake, woken) = futures::channel::mpsc::unbounded();
    let controller = controller.reconcile_on(woken);
    let controller = controller.with_config(
        kube::runtime::controller::Config::default().concurrency(args.max_concurrent_reconciles),
    );
    let controller = controller.graceful_shutdown_on(shutdown.clone().cancelled_owned());
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "redlock-operator".into(),
            instance: std::env::var("POD_NAME").unwrap_or_else(|_| "redlock-operator".into()),
        },
    );
    let ctx = Arc::new(Context {
        client,
        metrics,
        recorder,
        caches,
        settings: Settings {
            operator_namespace: args.operator_namespace.clone(),
            probe_period: Duration::from_millis(args.probe_period_ms),
            probe_timeout: Duration::from_millis(args.probe_timeout_ms),
            password_rotation_grace: Duration::from_millis(args.password_rotation_grace_ms),
            ttl_audit_period: Duration::from_millis(args.ttl_audit_period_ms),
            ttl_audit_keys: args.ttl_audit_keys,
            lease: elected.as_ref().map(|(e, _)| {
                crate::runtime::lease_owner::lease_key(&e.config().namespace, &e.config().name)
            }),
        },
        leadership,
        clock,
        wake,
        memory: Memory::default(),
    });
    tracing::info!(namespace = ns.unwrap_or("<all>"), "operator started");
    let refused = crate::runtime::permissions::gate_writes_refused(&ctx.client, ns).await;
    if let Some(why) = &refused {
        tracing::error!("{why}");
    }
    ctx.memory
        .gate_writes_refused
        .set(refused)
        .expect("checked once, at start");
    if drive(controller, ctx, elected).await == Ended::LeaseLost {
        shutdown.cancel();
        http.abort();
        return Err(Error::NotLeader);
    }
    tracing::info!("controller stopped");
    shutdown.cancel();
    join_http(http, &args).await
}

/// Waits until this process holds the Lease (reporting standby meanwhile); `None` when
/// shut down first.
async fn elect(
    client: &Client,
    config: LeaseConfig,
    standby: &Arc<AtomicBool>,
    shutdown: &CancellationToken,
) -> Option<(Elector, Leadership)> {
    let mut elector = Elector::new(client.clone(), config);
    let standby_flag = standby.clone();
    let leadership = elector
        .acquire(shutdown, |role| {
            standby_flag.store(matches!(role, Role::Standby { .. }), Ordering::Release)
        })
        .await;
    standby.store(false, Ordering::Release);
    leadership.map(|l| (elector, l))
}

/// The watches: caches of everything the operator manages (only objects labelled as ours:
/// it never caches foreign Secrets) feeding the controller, node metadata for zones, and
/// `ready` set once every cache has its first list.
// Long because it is a list: one watch per kind, whose cache and event stream are handed on
// side by side (`Caches`, the controller's triggers); split, the pairs would drift apart.
fn watch(
    client: &Client,
    ns: Option<&str>,
    clusters: Api<RedlockCluster>,
    ready: Arc<AtomicBool>,
) -> (Caches, Controller<RedlockCluster>) {
    let managed = watcher::Config::default().labels(&managed_selector());
    // A re-list's end reconciles every cluster: the controller is not told of objects deleted
    // while a watch was down, and a cluster at rest would otherwise see its missing child only
    // at its resync (`at_rest::RESYNC`).
    let (relisted, relists) = futures::channel::mpsc::unbounded::<()>();
    let pod_index = Arc::new(InstanceIndex::default());
    let index = pod_index.clone();
    let pods_relisted = relisted.clone();
    let (pods, pod_events) = cached_watch(scoped::<Pod>(client, ns), managed.clone(), move |e| {
        index.apply(e);
        tell_relist(&pods_relisted, e);
    });
    // Any change to a child other than a pod, per cluster: what `Caches::child_versions` counts.
    let child_versions = Arc::new(ChildVersions::default());
    let (secrets, secret_events) = cached_watch(
        scoped::<Secret>(client, ns),
        managed.clone(),
        counted(&child_versions, &relisted),
    );
    let (config_maps, config_map_events) = cached_watch(
        scoped::<ConfigMap>(client, ns),
        managed.clone(),
        counted(&child_versions, &relisted),
    );
    let (services, service_events) = cached_watch(
        scoped::<Service>(client, ns),
        managed.clone(),
        counted(&child_versions, &relisted),
    );
    let (pdbs, pdb_events) = cached_watch(
        scoped::<PodDisruptionBudget>(client, ns),
        managed.clone(),
        counted(&child_versions, &relisted),
    );
    let (netpols, netpol_events) = cached_watch(
        scoped::<NetworkPolicy>(client, ns),
        managed.clone(),
        counted(&child_versions, &relisted),
    );
    let (nodes, node_writer) = reflector::store();
    // Metadata only: zone labels are all that is needed, and node status changes constantly.
    // Only a known node's new zone reconciles the clusters (their failure domains); the
    // controller drives this stream, and with it the node cache.
    let mut zones = NodeZones::default();
    let zone_changes = watcher(
        Api::<PartialObjectMeta<Node>>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(node_writer)
    .filter_map(move |event| {
        let changed = event.is_ok_and(|e| zones.changed(&e));
        async move { changed.then_some(()) }
    });

    let (cluster_cache, cluster_events) = cached_watch(clusters, watcher::Config::default(), |_| {});
    let controller = Controller::for_stream(cluster_events, cluster_cache.clone())
        .owns_stream(pod_events)
        .owns_stream(secret_events)
        .owns_stream(config_map_events)
        .owns_stream(service_events)
        .owns_stream(pdb_events)
        .owns_stream(netpol_events)
        .reconcile_all_on(zone_changes)
        .reconcile_all_on(relists);
    let caches = Caches {
        pods,
        pod_index,
        child_versions,
        secrets,
        config_maps,
        services,
        pod_disruption_budgets: pdbs,
        network_policies: netpols,
        nodes,
        caches_synced: ready.clone(),
    };
    let stores = (
        caches.pods.clone(),
        caches.secrets.clone(),
        caches.config_maps.clone(),
        caches.services.clone(),
        caches.pod_disruption_budgets.clone(),
        caches.nodes.clone(),
        caches.network_policies.clone(),
    );
    tokio::spawn(async move {
        wait_synced(&cluster_cache).await;
        wait_synced(&stores.0).await;
        wait_synced(&stores.1).await;
        wait_synced(&stores.2).await;
        wait_synced(&stores.3).await;
        wait_synced(&stores.4).await;
        wait_synced(&stores.5).await;
        wait_synced(&stores.6).await;
        ready.store(true, Ordering::Release);
        tracing::info!("caches synced; ready");
    });
    (caches, controller)
}

#[derive(PartialEq)]
enum Ended {
    /// Shut down: every reconcile finished, the Lease released.
    Gracefully,
    /// The Lease could not be renewed in time: the controller was dropped mid-reconcile.
    LeaseLost,
}

/// Runs the controller until shutdown, or, with election, until the Lease is lost.
async fn drive(
    controller: Controller<RedlockCluster>,
    ctx: Arc<Context>,
    elected: Option<(Elector, Leadership)>,
) -> Ended {
    let metrics = ctx.metrics.clone();
    let gone_ctx = ctx.clone();
    let controller = controller.run(reconcile, error_policy, ctx).for_each(move |res| {
        // A deleted cluster is not reconciled again (it is no longer in the cache): what is
        // kept about it goes here.
        if let Err(kube::runtime::controller::Error::ObjectNotFound(gone)) = &res {
            crate::reconcile::forget(
                &gone_ctx,
                gone.namespace.as_deref().unwrap_or_default(),
                &gone.name,
                gone.extra.uid.as_deref(),
            );
        }
        async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "controller event");
            }
        }
    });
    let Some((mut elector, leadership)) = elected else {
        controller.await;
        return Ended::Gracefully;
    };
    // Renewal continues through a graceful shutdown, until the last reconcile ended.
    let lost = tokio::select! {
        _ = controller => false,
        _ = elector.keep(&leadership) => true,
    };
    metrics.leading(false);
    if lost {
        // The controller future was dropped above, in-flight reconciles with it: no write of
        // this process can land after the renew deadline. The caller exits, and the pod
        // restarts as a standby.
        return Ended::LeaseLost;
    }
    // Graceful shutdown finished every reconcile: now a successor may start at once.
    elector.release().await;
    Ended::Gracefully
}

async fn join_http(http: tokio::task::JoinHandle<Result<()>>, args: &RunArgs) -> Result<()> {
    match http.await {
        Ok(result) => result,
        Err(join) => Err(Error::Http {
            addr: args.http_addr.to_string(),
            source: std::io::Error::other(join),
        }),
    }
}

/// The Lease to elect a leader with, or `None` when election is off.
fn election_config(args: &RunArgs, client: &Client) -> Result<Option<LeaseConfig>> {
    if !args.leader_elect {
        return Ok(None);
    }
    let timing = LeaseTiming::new(
        Duration::from_secs(args.lease_duration_seconds),
        Duration::from_millis(args.lease_renew_deadline_ms),
        Duration::from_millis(args.lease_retry_period_ms),
    )?;
    Ok(Some(LeaseConfig {
        name: args.lease_name.clone(),
        // One setting for "where the operator runs" (POD_NAMESPACE): the Lease lives there
        // unless placed elsewhere on purpose.
        namespace: args
            .lease_namespace
            .clone()
            .or_else(|| args.operator_namespace.clone())
            .unwrap_or_else(|| client.default_namespace().to_owned()),
        identity: args
            .leader_identity
            .clone()
            .filter(|i| !i.is_empty())
            .unwrap_or_else(leader::default_identity),
        timing,
    }))
}

/// One watch that both fills a cache the reconciler reads and triggers the controller;
/// `on_event` sees each event once the cache shows it (indexes, change counters).
fn cached_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    on_event: impl Fn(&watcher::Event<K>) + Send + 'static,
) -> (
    reflector::Store<K>,
    impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()>
        + Trim
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let events = watcher(api, config)
        .default_backoff()
        .modify(Trim::trim)
        .reflect(writer)
        .inspect_ok(move |event| on_event(event))
        .touched_objects();
    (store, events)
}

/// A watch event handler that counts events into `versions`, and tells `relisted` when a
/// re-list ends.
fn counted<K: Resource<DynamicType = ()>>(
    versions: &Arc<ChildVersions>,
    relisted: &UnboundedSender<()>,
) -> impl Fn(&watcher::Event<K>) + Send + 'static {
    let versions = versions.clone();
    let relisted = relisted.clone();
    move |event| {
        versions.apply(event);
        tell_relist(&relisted, event);
    }
}

fn tell_relist<K>(relisted: &UnboundedSender<()>, event: &watcher::Event<K>) {
    if matches!(event, watcher::Event::InitDone) {
        // The receiver lives as long as the controller.
        let _ = relisted.unbounded_send(());
    }
}

/// Waits until `store` has its first full list.
///
/// Re-polls instead of awaiting `wait_until_ready()` once: kube-runtime's readiness signal
/// is a oneshot receiver that remembers only the last waker, and the controller's runner
/// already waits on the main store, so a second single await may never wake.
async fn wait_synced<K>(store: &reflector::Store<K>)
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    while tokio::time::timeout(Duration::from_millis(100), store.wait_until_ready())
        .await
        .is_err()
    {}
}

/// An `Api` over one namespace, or all of them.
fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// A missing CRD would make every watch fail forever with 404s; refuse to start instead,
/// with one line that says how to fix it.
async fn ensure_crd_installed(clusters: &Api<RedlockCluster>) -> Result<()> {
    match clusters.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        // An unknown API group answers with a bare 404 ("page not found"), not a Status.
        Err(kube::Error::Api(status)) if status.is_not_found() || status.code == 404 => {
            Err(Error::CrdNotInstalled)
        }
        Err(e) => Err(e.into()),
    }
}

/// An installed CRD older than this operator would prune fields the operator writes from
/// every write (`crd::schema_check`): refuse to start, naming them. Without permission to
/// read CRDs (RBAC kept from an older chart) the check cannot run: said once, and the start
/// goes on, as it did before the check existed.
async fn ensure_crd_current(client: &Client) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let ours = crate::crd::crd();
    let name = ours.metadata.name.as_deref().expect("our CRD has a name");
    match crds.get(name).await {
        Ok(installed) => {
            let missing = schema_check::missing_from_installed(&installed, &ours);
            if missing.is_empty() {
                Ok(())
            } else {
                Err(Error::CrdOutdated(missing))
            }
        }
        Err(kube::Error::Api(status)) if status.code == 403 => {
            tracing::warn!(
                crd = name,
                "cannot read the installed CRD to check its schema (RBAC: get on \
                 apiextensions.k8s.io customresourcedefinitions {name}); starting without \
                 the check: an older CRD would drop fields this operator writes"
            );
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Cancels `token` on SIGTERM or SIGINT.
pub fn cancel_on_signals(token: CancellationToken) {
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler cannot fail on unix");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        }
        token.cancel();
    });
}
