//! `kubectl redlock`: a kubectl plugin to look at and operate RedlockClusters (the binary
//! `kubectl-redlock`). The views and decisions are pure (`status_view`, `fence`,
//! `client_config`, `operator_lease`); this file reads and writes the API server and turns
//! its errors into messages that say what to do.

pub(crate) mod client_config;
pub(crate) mod fence;
pub(crate) mod operator_lease;
pub(crate) mod status_view;

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;

use crate::children::names::{client_secret_name, endpoints_config_map_name, slot_name};
use crate::crd::model::Slot;
use crate::crd::{MemberState, MemberStatus, RedlockCluster};
use crate::hold::maintenance::{self, FENCED_MEMBERS};

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-redlock",
    version,
    about = "Look at and operate RedlockClusters"
)]
pub struct Cli {
    /// Namespace of the cluster (default: the kubeconfig context's).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// The cluster at a glance: members, holds, quorum, maxLockTTL, conditions, recent events.
    Status {
        name: String,
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// The operator's leader-election Lease, NAMESPACE/NAME (default: any Lease named
        /// redlock-operator).
        #[arg(long)]
        lease: Option<String>,
    },
    /// Take a member out of service for maintenance: fenced now and held in full, until unfenced.
    Fence {
        name: String,
        slot: i32,
        /// Why (recorded in status and the event).
        #[arg(long)]
        reason: String,
        /// Fence even when fewer than a quorum would serve (no client could take a lock).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Put a fenced member back: it serves again once a full hold has run since it was fenced.
    Unfence {
        name: String,
        slot: i32,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// A client configuration for the cluster, read from what the operator publishes.
    ClientConfig {
        name: String,
        #[arg(long, value_enum)]
        lang: client_config::Lang,
    },
}

#[derive(clap::Args, Debug)]
pub struct WaitArgs {
    /// How long to wait for the operator to record the change (0: do not wait).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub wait: Duration,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let d: kube::core::Duration = s.parse().map_err(|e| format!("{e}"))?;
    Ok(Duration::from(d))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// What went wrong, in words that say what to do.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("cannot reach the Kubernetes API: {0}")]
    Config(String),
    #[error("RedlockCluster {name} not found in namespace {namespace}")]
    NotFound { name: String, namespace: String },
    #[error(
        "the RedlockCluster resource is not installed in this cluster (kubectl apply -f crds/redlockcluster.yaml, or install the chart)"
    )]
    CrdMissing,
    #[error("no permission to {action}: {message}")]
    Forbidden { action: String, message: String },
    #[error("{0}")]
    Refused(#[from] fence::Refusal),
    #[error("{what} changed while this command ran; run it again")]
    Conflict { what: String },
    #[error(
        "the operator has not recorded it within {waited:?}: {detail}. The request stays in annotation {FENCED_MEMBERS} and takes effect as soon as the operator can act on it"
    )]
    NotRecorded { waited: Duration, detail: String },
    #[error("{object} is not published yet: has the operator reconciled {name}?")]
    NotPublished { object: String, name: String },
    #[error("{action}: {source}")]
    Api { action: String, source: kube::Error },
}

type Result<T, E = PluginError> = std::result::Result<T, E>;

/// Turns an API error for `action` into a message the user can act on.
fn api_error(action: &str, e: kube::Error) -> PluginError {
    match &e {
        kube::Error::Api(s) if s.code == 403 => PluginError::Forbidden {
            action: action.into(),
            message: s.message.clone(),
        },
        _ => PluginError::Api {
            action: action.into(),
            source: e,
        },
    }
}

// One arm per subcommand, each a few lines of calls: the dispatch reads best as one match.
pub async fn run(cli: Cli) -> Result<String> {
    let config = kube::Config::infer()
        .await
        .map_err(|e| PluginError::Config(e.to_string()))?;
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config).map_err(|e| PluginError::Config(e.to_string()))?;
    let clusters: Api<RedlockCluster> = Api::namespaced(client.clone(), &namespace);
    match cli.command {
        Command::Status { name, output, lease } => {
            let cluster = get_cluster(&clusters, &name, &namespace).await?;
            let view = status(&client, &cluster, lease.as_deref()).await?;
            Ok(match output {
                Output::Json => serde_json::to_string_pretty(&view).expect("a view serializes") + "\n",
                Output::Text => status_view::render_text(
                    &view,
                    status_view::Style {
                        colour: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
                    },
                ),
            })
        }
        Command::Fence {
            name,
            slot,
            reason,
            force,
            wait,
        } => {
            let cluster = get_cluster(&clusters, &name, &namespace).await?;
            let slots = fence::fence(&cluster, slot, &reason, force)?;
            write_request(&clusters, &cluster, &slots).await?;
            let member = slot_name(&name, slot);
            let recorded = wait_recorded(&clusters, &name, slot, Some(reason.trim()), wait.wait).await?;
            Ok(match recorded {
                Some(until) => format!(
                    "{member} fenced for maintenance: shut out of lock clients and held; unfence it when done (it serves again after {until} at the earliest)\n"
                ),
                None => format!("{member}: fence requested ({FENCED_MEMBERS})\n"),
            })
        }
        Command::Unfence { name, slot, wait } => {
            let cluster = get_cluster(&clusters, &name, &namespace).await?;
            let slots = fence::unfence(&cluster, slot)?;
            write_request(&clusters, &cluster, &slots).await?;
            let member = slot_name(&name, slot);
            let recorded = wait_recorded(&clusters, &name, slot, None, wait.wait).await?;
            Ok(match recorded {
                Some(until) => {
                    format!("{member} unfenced: serves lock clients again once its hold ends ({until})\n")
                }
                None => format!("{member} unfenced\n"),
            })
        }
        Command::ClientConfig { name, lang } => {
            let cluster = get_cluster(&clusters, &name, &namespace).await?;
            let published = published(&client, &cluster, &namespace).await?;
            Ok(client_config::snippet(lang, &published))
        }
    }
}

async fn get_cluster(clusters: &Api<RedlockCluster>, name: &str, namespace: &str) -> Result<RedlockCluster> {
    match clusters.get(name).await {
        Ok(c) => Ok(c),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            // An unknown resource type answers 404 too; tell the two apart.
            match clusters.list_metadata(&ListParams::default().limit(1)).await {
                Err(kube::Error::Api(s)) if s.code == 404 => Err(PluginError::CrdMissing),
                _ => Err(PluginError::NotFound {
                    name: name.into(),
                    namespace: namespace.into(),
                }),
            }
        }
        Err(e) => Err(api_error(&format!("get RedlockCluster {name} in {namespace}"), e)),
    }
}

async fn status(
    client: &kube::Client,
    cluster: &RedlockCluster,
    lease: Option<&str>,
) -> Result<status_view::StatusView> {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let ns = cluster.metadata.namespace.clone().unwrap_or_default();
    let selector = format!("{}={name}", crate::children::names::LABEL_INSTANCE);
    let pods = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| api_error(&format!("list pods in {ns}"), e))?
        .items;
    // Zones are a nicety: without permission to read nodes they are left out.
    let zones: status_view::Zones = match Api::<PartialObjectMeta<Node>>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await
    {
        Ok(nodes) => nodes
            .items
            .into_iter()
            .filter_map(|n| {
                let zone = n.metadata.labels?.get("topology.kubernetes.io/zone")?.clone();
                Some((n.metadata.name?, zone))
            })
            .collect(),
        Err(_) => BTreeMap::new(),
    };
    let events = Api::<Event>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().fields(&format!(
            "involvedObject.kind=RedlockCluster,involvedObject.name={name}"
        )))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let operator = match leases(client, lease).await {
        Ok(leases) => operator_lease::operator_state(&leases, Timestamp::now()),
        Err(detail) => status_view::OperatorState::Unknown { detail },
    };
    Ok(status_view::view(
        cluster,
        &pods,
        &zones,
        &events,
        operator,
        Timestamp::now(),
    ))
}

/// The operator's Lease(s): the one named, or every Lease named `redlock-operator`.
async fn leases(client: &kube::Client, lease: Option<&str>) -> Result<Vec<Lease>, String> {
    let denied = |e: kube::Error| match e {
        kube::Error::Api(s) if s.code == 403 => format!("no permission to read Leases ({})", s.message),
        e => format!("cannot read Leases: {e}"),
    };
    match lease {
        Some(at) => {
            let (ns, name) = at
                .split_once('/')
                .ok_or_else(|| format!("--lease {at}: expected NAMESPACE/NAME"))?;
            match Api::<Lease>::namespaced(client.clone(), ns).get_opt(name).await {
                Ok(l) => Ok(l.into_iter().collect()),
                Err(e) => Err(denied(e)),
            }
        }
        None => Api::<Lease>::all(client.clone())
            .list(&ListParams::default().fields("metadata.name=redlock-operator"))
            .await
            .map(|l| l.items)
            .map_err(denied),
    }
}

/// Writes the fence annotation, only onto the version the request was computed from.
async fn write_request(
    clusters: &Api<RedlockCluster>,
    cluster: &RedlockCluster,
    slots: &BTreeMap<Slot, String>,
) -> Result<()> {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let value = (!slots.is_empty()).then(|| maintenance::render(slots));
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": cluster.metadata.resource_version,
            "annotations": { FENCED_MEMBERS: value },
        }
    });
    match clusters
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Err(PluginError::Conflict {
            what: format!("RedlockCluster {name}"),
        }),
        Err(e) => Err(api_error(&format!("annotate RedlockCluster {name}"), e)),
    }
}

/// Waits until the operator's status records the member with `maintenance` as asked: fenced
/// and held with the reason (a member not started yet: marked), or no longer marked. Returns
/// when the member may serve again (`heldUntil`, or "now"), `None` when not waiting.
async fn wait_recorded(
    clusters: &Api<RedlockCluster>,
    name: &str,
    slot: i32,
    maintenance: Option<&str>,
    wait: Duration,
) -> Result<Option<String>> {
    if wait.is_zero() {
        return Ok(None);
    }
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let c = clusters
            .get(name)
            .await
            .map_err(|e| api_error(&format!("get RedlockCluster {name}"), e))?;
        let member = c
            .status
            .as_ref()
            .and_then(|s| s.members.iter().find(|m| m.slot.index() == slot).cloned());
        if let Some(serves_again) = member
            .as_ref()
            .and_then(|m| recorded(m, maintenance, Timestamp::now()))
        {
            return Ok(Some(serves_again));
        }
        if tokio::time::Instant::now() >= deadline {
            let detail = match &member {
                Some(m) => format!(
                    "{} is {:?}{}{}{}",
                    m.name,
                    m.state,
                    match (maintenance, m.state.is_holding() && m.fence_seen_at.is_none()) {
                        (Some(_), true) =>
                            ", its fence not seen in place (it may still serve lock clients: see the FenceFailed events)",
                        _ => "",
                    },
                    m.maintenance
                        .as_deref()
                        .map(|r| format!(", marked for maintenance ({r})"))
                        .unwrap_or_default(),
                    m.message
                        .as_deref()
                        .map(|msg| format!(": {msg}"))
                        .unwrap_or_default()
                ),
                None => format!("no member record of slot {slot} yet"),
            };
            return Err(PluginError::NotRecorded {
                waited: wait,
                detail: format!(
                    "{detail}. kubectl redlock status {name} shows the operator's Lease and the conditions"
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Whether `m` shows the request as recorded: held with the reason and its fence seen in
/// place by a probe since (`fenceSeenAt`; a record about no process, or a member not started
/// yet: marked), or no longer marked. Then: when it may serve again (`heldUntil`, or "now"
/// once that has passed). A held record alone is not enough (safety review 3, N5): it is
/// written before the fence is sent, and a fence can fail (the operator's fresh logins
/// refused while its kept probe connection still works).
fn recorded(m: &MemberStatus, maintenance: Option<&str>, now: Timestamp) -> Option<String> {
    let fenced = m.fence_seen_at.is_some() || m.run_id.is_none();
    let done = m.maintenance.as_deref() == maintenance
        && (maintenance.is_none()
            || (m.state.is_holding() && !m.lost_on_refusal() && fenced)
            || m.state == MemberState::Starting);
    done.then(|| match (&m.held_until, m.state.is_holding()) {
        (Some(u), true) if u.0 > now => u.0.to_string(),
        _ => "now".to_owned(),
    })
}

/// What the operator published for clients, from `<name>-endpoints` (and `<name>-client`
/// must exist: the snippets read it).
async fn published(
    client: &kube::Client,
    cluster: &RedlockCluster,
    ns: &str,
) -> Result<client_config::Published> {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let cm_name = endpoints_config_map_name(&name);
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(&cm_name)
        .await
        .map_err(|e| api_error(&format!("get ConfigMap {cm_name}"), e))?
        .ok_or_else(|| PluginError::NotPublished {
            object: format!("ConfigMap {cm_name}"),
            name: name.clone(),
        })?;
    let secret_name = client_secret_name(&name);
    let secret = Api::<PartialObjectMeta<Secret>>::namespaced(client.clone(), ns)
        .get_metadata_opt(&secret_name)
        .await
        .map_err(|e| api_error(&format!("get Secret {secret_name}"), e))?;
    if secret.is_none() {
        return Err(PluginError::NotPublished {
            object: format!("Secret {secret_name}"),
            name,
        });
    }
    let data = cm.data.unwrap_or_default();
    let get = |k: &str| data.get(k).cloned().unwrap_or_default();
    Ok(client_config::Published {
        servers: get("servers").lines().map(str::to_owned).collect(),
        quorum: get("quorum").trim().parse().unwrap_or(0),
        max_lock_ttl: get("maxLockTTL"),
        max_lock_ttl_millis: get(crate::children::endpoints::MAX_LOCK_TTL_MILLIS)
            .trim()
            .parse()
            .unwrap_or(0),
        tls_secret: cluster.spec.tls.as_ref().map(|t| t.secret_name.clone()),
        name,
        namespace: ns.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn member(state: MemberState, maintenance: Option<&str>, until: Option<i64>) -> MemberStatus {
        MemberStatus {
            maintenance: maintenance.map(str::to_owned),
            held_until: until.map(|s| MicroTime(Timestamp::from_second(s).unwrap())),
            ..MemberStatus::new("locks-1".into(), 1, state)
        }
    }

    #[test]
    fn a_fence_is_recorded_once_seen_in_place_or_starting_with_the_reason() {
        let now = Timestamp::from_second(100).unwrap();
        let mut held = member(MemberState::Held, Some("disk"), Some(130));
        held.run_id = Some("r1".into());
        // Held with the reason, but no probe has seen its fence in place: not fenced yet.
        assert_eq!(recorded(&held, Some("disk"), now), None);
        held.fence_seen_at = Some(MicroTime(Timestamp::from_second(99).unwrap()));
        assert_eq!(
            recorded(&held, Some("disk"), now).as_deref(),
            Some("1970-01-01T00:02:10Z")
        );
        assert_eq!(recorded(&held, Some("other"), now), None);
        // A record about no process (its pod gone): nothing serves to be fenced.
        assert_eq!(
            recorded(
                &member(MemberState::Lost, Some("disk"), Some(130)),
                Some("disk"),
                now
            )
            .as_deref(),
            Some("1970-01-01T00:02:10Z")
        );
        // Marked but not fenced (it does not answer): not recorded yet.
        assert_eq!(
            recorded(&member(MemberState::Ready, Some("disk"), None), Some("disk"), now),
            None
        );
        // Not started yet: it starts fenced, so the mark is enough.
        assert_eq!(
            recorded(
                &member(MemberState::Starting, Some("disk"), None),
                Some("disk"),
                now
            )
            .as_deref(),
            Some("now")
        );
    }

    #[test]
    fn an_unfence_is_recorded_once_the_mark_is_gone_and_a_past_hold_end_reads_now() {
        let now = Timestamp::from_second(100).unwrap();
        assert_eq!(
            recorded(&member(MemberState::Held, Some("disk"), Some(130)), None, now),
            None
        );
        assert_eq!(
            recorded(&member(MemberState::Held, None, Some(130)), None, now).as_deref(),
            Some("1970-01-01T00:02:10Z")
        );
        assert_eq!(
            recorded(&member(MemberState::Held, None, Some(90)), None, now).as_deref(),
            Some("now")
        );
        assert_eq!(
            recorded(&member(MemberState::Ready, None, None), None, now).as_deref(),
            Some("now")
        );
    }
}
