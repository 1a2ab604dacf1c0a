//! Observation: what exists now for one RedlockCluster. Pods come from the watch cache (no
//! API calls); the Redis side comes from admin probes the reconciler runs in parallel.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
use kube::ResourceExt;

use crate::children::hash::SPEC_HASH;
use crate::children::names::{
    CLIENT_USER_ENV, LABEL_INSTANCE, LABEL_SLOT, REDIS_CONTAINER, SERVING_CONDITION, slot_name,
};
use crate::children::pod::UNSTOPPED_PREDECESSOR;
use crate::crd::model::Slot;
use crate::crd::{MemberState, MemberStatus, RedlockCluster, UnstoppedProcess};

/// What the pod of a slot says about its Redis process.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PodState {
    /// No pod for the slot.
    #[default]
    Missing,
    /// Phase Failed or Succeeded: the process is gone for good.
    Finished { reason: String },
    /// The pod exists but its Redis container is not running (not started yet, waiting,
    /// terminated, crash-looping).
    NotRunning { reason: String },
    /// A pod with the slot's name exists that this cluster object does not control: an
    /// earlier incarnation's pod awaiting garbage collection, an orphan, someone else's pod. It
    /// may serve lock clients; the operator creates, releases and replaces nothing for the slot
    /// while it exists.
    Foreign {
        /// Who controls it, for the message ("no controller", or kind/name/uid).
        owner: String,
    },
    /// The Redis container runs (as last reported by the kubelet).
    Running {
        container_id: Option<String>,
        /// The pod's Ready condition: the client user can log in.
        ready: bool,
        terminating: bool,
    },
}

/// What an admin probe of a slot's Redis found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisInfo {
    pub run_id: String,
    pub version: String,
    /// Whether the client ACL user is `on` (the process is released).
    pub client_enabled: bool,
    /// The UID of the pod the process was started for (its `proc-title-template` carries
    /// `pod=<uid>`); `None` for processes started before the tag existed.
    pub pod_uid: Option<String>,
    /// The passwords (`#<sha256 hex>`, sorted) the client user `redlock-client` accepts;
    /// `None` where lock clients log in as `default` (auth off), which has none.
    pub client_password_hashes: Option<Vec<String>>,
    /// The passwords (`#<sha256 hex>`, sorted) the admin user accepts (an admin password
    /// rotation brings each process to those on record).
    pub admin_password_hashes: Option<Vec<String>>,
    /// What the process's settings or counters show that the hold rule cannot stand, as
    /// sentences (safety review 3, N1): eviction on or keys evicted, persistence on, a
    /// replica's role. Empty when none. A process that can drop keys while it runs, or replace
    /// its dataset, loses locks the way a crash does (`plan::ready`: fenced and held in full;
    /// never released while any remains).
    pub deviations: Vec<String>,
}

/// What this reconcile's admin probe of a slot's process found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Probe {
    /// Not probed: the pod is not running or has no address yet.
    #[default]
    NotProbed,
    /// The slot's own process answered.
    Answered(RedisInfo),
    /// A process answered at the pod's address, but it is another pod's (the address was
    /// reused, see [`foreign_process`]): why, as a sentence. Counts as no answer.
    ForeignProcess(String),
    /// Nothing answered, or the probe failed: why, as a sentence.
    Failed(String),
    /// The pod's address refused the connection (nothing listens on the port): why, as a
    /// sentence. While the pod shows its container running, the process has most likely
    /// crashed and the kubelet has not restarted it yet (`plan::ready`).
    Refused(String),
}

impl Probe {
    /// What the slot's own process said, if it answered.
    pub fn answered(&self) -> Option<&RedisInfo> {
        match self {
            Probe::Answered(info) => Some(info),
            _ => None,
        }
    }

    /// Mutable access to the answer, if the slot's own process answered.
    pub fn answered_mut(&mut self) -> Option<&mut RedisInfo> {
        match self {
            Probe::Answered(info) => Some(info),
            _ => None,
        }
    }

    pub fn is_answered(&self) -> bool {
        matches!(self, Probe::Answered(_))
    }

    /// Why the probe got no answer from the slot's own process, when it was probed and got
    /// none (a failure or a foreign process); `None` when it answered or was not probed.
    pub fn failure(&self) -> Option<&str> {
        match self {
            Probe::ForeignProcess(why) | Probe::Failed(why) | Probe::Refused(why) => Some(why),
            Probe::NotProbed | Probe::Answered(_) => None,
        }
    }
}

/// Why a kept-connection probe ([`AdminAccess::probe_kept`]) got no answer: a sentence (it
/// becomes a member's status message), and whether the process's address refused the
/// connection. A refusal means nothing listens on the port: the process is gone (or something
/// in between rejects the operator); a timeout or a broken exchange proves less.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeFailure {
    pub why: String,
    pub refused: bool,
}

impl std::fmt::Display for ProbeFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// What looking for a process that outlived its pod found (docs/design.md §9.5): the facts a
/// release of its slot may rest on (`plan::unstopped::gone_evidence`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnstoppedSearch {
    /// What answered at its last address, or why nothing did: `refused` only when every way
    /// of reaching it was refused (nothing listens on the port there).
    pub answer: Result<RedisInfo, ProbeFailure>,
    /// What its node's kubelet says of its pod.
    pub kubelet: KubeletAnswer,
    /// Its node carries the taint `node.kubernetes.io/out-of-service`: an admin asserts, as
    /// Kubernetes' non-graceful node shutdown demands, that the node is shut down.
    pub out_of_service: bool,
}

impl UnstoppedSearch {
    /// Found answering at its address (whatever process it is), nothing asked of a kubelet.
    pub fn answered(info: RedisInfo) -> Self {
        Self {
            answer: Ok(info),
            kubelet: KubeletAnswer::NotAsked,
            out_of_service: false,
        }
    }

    /// Nothing answered (`refused`: the connection was refused), nothing asked of a kubelet.
    pub fn unanswered(why: &str, refused: bool) -> Self {
        Self {
            answer: Err(ProbeFailure {
                why: why.to_owned(),
                refused,
            }),
            kubelet: KubeletAnswer::NotAsked,
            out_of_service: false,
        }
    }
}

/// Whether the kubelet of the node a vanished pod ran on still runs a container of that pod,
/// from the kubelet's own list of the pods its container runtime runs (`/runningpods/`,
/// through the API server's node proxy).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum KubeletAnswer {
    /// Not asked: the record names no node or pod UID (made before they were kept).
    #[default]
    NotAsked,
    /// It runs a container of that pod.
    Runs,
    /// It answered and runs no container of that pod.
    RunsNone,
    /// It could not be asked, or gave no usable answer (its node deleted or cut off): why.
    Unknown(String),
}

/// Everything known about one slot now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlotObservation {
    pub pod: PodState,
    pub pod_ip: Option<IpAddr>,
    /// What the admin probe of the slot's process found.
    pub probe: Probe,
    /// The spec hash the pod was built from (`redlock.dev/spec-hash`); `None` for pods from
    /// before the annotation existed.
    pub spec_hash: Option<String>,
    /// Node the pod is bound to.
    pub node: Option<String>,
    /// The pod's UID: deletes are made conditional on it, so a decision about one pod never
    /// deletes a newer pod of the same name.
    pub pod_uid: Option<String>,
    /// What this probe's `TIME` said about the member's clock.
    pub clock: Option<crate::clock::member::Verdict>,
    /// What the member's record should carry of its clock against the API server's
    /// (`crate::clock::record`); `None` when nothing is known.
    pub clock_record: Option<crate::crd::ClockRecord>,
    /// The recorded process that was never seen to stop (`unstopped`), looked for at its last
    /// address and asked about at its node's kubelet: what was found.
    pub unstopped: Option<UnstoppedSearch>,
    /// The ACL user lock clients use on this pod's process, as the pod was built
    /// (`REDIS_CLIENT_USER`); `None` for a pod without it (then the spec's user is assumed).
    pub client_user: Option<String>,
    /// The `<name>-admin` key the pod's readiness probe takes its password from
    /// (`REDISCLI_AUTH`); `None` without auth. Pods built before the probe had its own
    /// password log in with the client password, which a rotation removes.
    pub probe_password_key: Option<String>,
    /// How this pod's process listens, as the pod was built: `Some(secret)` when TLS only,
    /// with the certificate of that Secret; `None` when plain or when there is no pod.
    pub tls_secret: Option<String>,
    /// The CA of `tls_secret`, found for this observation (`None` while unknown).
    pub tls_ca: Option<Vec<u8>>,
    /// The operator's readiness gate on the pod ([`SERVING_CONDITION`]), as the pod shows it.
    pub serving_gate: ServingGate,
    /// How long the pod's process has gone without answering the operator's probes
    /// ([`crate::decide::silences`]); `None` while it answers (or was not probed).
    pub silent_for: Option<std::time::Duration>,
    /// The pod is `Finished` but no kubelet reported its container terminated: the control
    /// plane marked it failed (the pod garbage collector does so for a pod whose node was
    /// deleted), which proves nothing about its process, as with a pod that vanished.
    pub stop_unconfirmed: bool,
    /// The process the pod's slot had before it that was never seen to stop, as recorded on
    /// the pod when it was made (`children::pod::UNSTOPPED_PREDECESSOR`): what a status wiped
    /// or restored without its `unstopped` record is planned from. `None` for a pod that
    /// replaced nothing such (or whose annotation does not parse: then only the status speaks).
    pub predecessor: Option<UnstoppedProcess>,
}

/// The operator's readiness gate ([`SERVING_CONDITION`]) as a pod shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ServingGate {
    /// The pod has no such gate (built by an operator from before the gate): its readiness
    /// probe logs in as a lock client itself, and nothing is written to it.
    #[default]
    NotDeclared,
    /// Declared; the condition is not set yet (a new pod).
    Unset,
    /// Declared, and the condition says this (`True`: serving).
    Set(bool),
}

/// The cluster's pods by slot, as the watch cache shows them: only pods controlled by this
/// cluster object (owner UID), so a same-named cluster recreated meanwhile never adopts stale
/// pods. The cache is filtered by label, so a slot missing here is not yet known to be free:
/// see [`by_name`].
pub(crate) fn pods_by_slot(
    cluster: &RedlockCluster,
    pods: &[std::sync::Arc<Pod>],
) -> BTreeMap<Slot, SlotObservation> {
    let ns = cluster.metadata.namespace.as_deref();
    let name = cluster.name_any();
    pods.iter()
        .filter(|p| p.metadata.namespace.as_deref() == ns && p.labels().get(LABEL_INSTANCE) == Some(&name))
        .filter(|p| is_controlled_by(p, cluster))
        .filter_map(|p| {
            let slot: Slot = p.labels().get(LABEL_SLOT)?.parse().ok()?;
            // The slot label alone could be edited to name another slot: a pod is a slot's
            // only under that slot's name (one under another name is looked up by name).
            (p.name_any() == slot_name(&name, slot)).then(|| (slot, slot_observation(p)))
        })
        .collect()
}

fn is_controlled_by(pod: &Pod, cluster: &RedlockCluster) -> bool {
    let uid = cluster.metadata.uid.as_deref();
    pod.owner_references()
        .iter()
        .any(|o| Some(o.uid.as_str()) == uid && o.controller == Some(true))
}

/// A slot's observation from the pod found under the slot's name (a GET, not the filtered
/// cache), or `None` when no pod has the name. "Missing" is decided by name: a pod of ours
/// whose labels were edited is still the slot's pod, and a pod that is not ours is reported.
pub(crate) fn by_name(cluster: &RedlockCluster, pod: Option<&Pod>) -> Option<SlotObservation> {
    let pod = pod?;
    if is_controlled_by(pod, cluster) {
        return Some(slot_observation(pod));
    }
    let owner = pod
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map_or_else(
            || "no controller".to_owned(),
            |o| format!("controlled by {} {} uid {}", o.kind, o.name, o.uid),
        );
    Some(SlotObservation {
        pod: PodState::Foreign { owner },
        pod_uid: pod.uid(),
        ..SlotObservation::default()
    })
}

/// The pod side of a slot's observation.
pub(crate) fn slot_observation(pod: &Pod) -> SlotObservation {
    let none = PodStatus::default();
    let status = pod.status.as_ref().unwrap_or(&none);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let container = status
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == REDIS_CONTAINER);
    let phase = status.phase.as_deref().unwrap_or("Pending");
    let finished = phase == "Failed" || phase == "Succeeded";
    let stop_unconfirmed = finished
        && container
            .and_then(|c| c.state.as_ref())
            .is_none_or(|s| s.terminated.is_none());
    let state = if finished {
        PodState::Finished {
            reason: match status.reason.as_deref() {
                Some(r) => format!("{phase} ({r})"),
                None => phase.to_lowercase(),
            },
        }
    } else {
        container_state(status, container, phase, ready, terminating)
    };
    SlotObservation {
        pod: state,
        pod_ip: status.pod_ip.as_deref().and_then(|ip| ip.parse().ok()),
        probe: Probe::NotProbed,
        spec_hash: pod.annotations().get(SPEC_HASH).cloned(),
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        pod_uid: pod.uid(),
        clock: None,
        clock_record: None,
        unstopped: None,
        client_user: client_user_of(pod),
        probe_password_key: probe_password_key_of(pod),
        tls_secret: tls_secret_of(pod),
        tls_ca: None,
        serving_gate: serving_gate_of(pod),
        silent_for: None,
        stop_unconfirmed,
        predecessor: pod
            .annotations()
            .get(UNSTOPPED_PREDECESSOR)
            .and_then(|a| serde_json::from_str(a).ok()),
    }
}

/// Pods in the watch cache keep what an observation reads, and no more.
impl crate::children::trim::Trim for Pod {
    fn trim(&mut self) {
        crate::children::trim::trim_metadata(self);
        trim_to_observed(self);
    }
}

/// Keeps of a pod only what [`slot_observation`] and [`pods_by_slot`] read (the watch cache
/// holds every pod for the life of the process; the rest of a pod, its command line, probes,
/// mounts, resources and the other containers' and conditions' details, is most of it): the
/// metadata, the node, the readiness gates, the `tls` volume, the Redis container's two environment variables read
/// here, and of the status the phase, reason, address, the `Ready`, `PodScheduled` and
/// [`SERVING_CONDITION`] conditions and the Redis container's state and id. A unit test checks that the
/// observation of a trimmed pod is the observation of the pod.
pub(crate) fn trim_to_observed(pod: &mut Pod) {
    if let Some(spec) = pod.spec.as_mut() {
        let redis = spec
            .containers
            .iter_mut()
            .find(|c| c.name == REDIS_CONTAINER)
            .map(|c| k8s_openapi::api::core::v1::Container {
                name: std::mem::take(&mut c.name),
                env: c.env.take().map(|env| {
                    env.into_iter()
                        .filter(|e| e.name == CLIENT_USER_ENV || e.name == PROBE_PASSWORD_ENV)
                        .collect()
                }),
                ..Default::default()
            });
        *spec = k8s_openapi::api::core::v1::PodSpec {
            node_name: spec.node_name.take(),
            readiness_gates: spec.readiness_gates.take(),
            volumes: spec
                .volumes
                .take()
                .map(|v| v.into_iter().filter(|v| v.name == TLS_VOLUME).collect()),
            containers: redis.into_iter().collect(),
            ..Default::default()
        };
    }
    if let Some(status) = pod.status.as_mut() {
        *status = PodStatus {
            phase: status.phase.take(),
            reason: status.reason.take(),
            pod_ip: status.pod_ip.take(),
            conditions: status.conditions.take().map(|c| {
                c.into_iter()
                    .filter(|c| {
                        c.type_ == "Ready" || c.type_ == "PodScheduled" || c.type_ == SERVING_CONDITION
                    })
                    .map(|c| k8s_openapi::api::core::v1::PodCondition {
                        type_: c.type_,
                        status: c.status,
                        reason: c.reason,
                        message: c.message,
                        ..Default::default()
                    })
                    .collect()
            }),
            container_statuses: status.container_statuses.take().map(|s| {
                s.into_iter()
                    .filter(|s| s.name == REDIS_CONTAINER)
                    .map(|s| ContainerStatus {
                        name: s.name,
                        state: s.state,
                        container_id: s.container_id,
                        // Named when it cannot be pulled.
                        image: s.image,
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        };
    }
}

/// The pod volume of the certificate a TLS-only pod listens with.
const TLS_VOLUME: &str = "tls";
/// The readiness probe's password variable of the Redis container.
const PROBE_PASSWORD_ENV: &str = "REDISCLI_AUTH";

/// Waiting reasons of a container whose image the kubelet cannot pull (or may not, or cannot
/// parse): it never starts until the image or the registry is fixed.
const IMAGE_PULL_FAILURES: [&str; 4] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
];

/// What a member whose image cannot be pulled says. One text for every pull failure: the
/// kubelet alternates `ErrImagePull` and `ImagePullBackOff`, and a text that followed it would
/// rewrite the status (and tell the user again) at each turn. The pod's events have the
/// kubelet's own words.
fn image_not_pulled(image: &str) -> String {
    let image = if image.is_empty() { "(unnamed)" } else { image };
    format!("{NOT_PULLED_PREFIX}{image}{NOT_PULLED_SUFFIX}")
}

/// The two ends of [`image_not_pulled`]'s text, which [`image_pull_failure`] recognises.
const NOT_PULLED_PREFIX: &str = "image ";
const NOT_PULLED_SUFFIX: &str = " cannot be pulled; the pod's events say why";

/// The message of a slot whose container waits for an image that cannot be pulled.
pub(crate) fn image_pull_failure(obs: &SlotObservation) -> Option<&str> {
    match &obs.pod {
        PodState::NotRunning { reason }
            if reason.starts_with(NOT_PULLED_PREFIX) && reason.ends_with(NOT_PULLED_SUFFIX) =>
        {
            Some(reason)
        }
        _ => None,
    }
}

/// The state of a pod that has not finished, from its Redis container's state.
fn container_state(
    status: &PodStatus,
    container: Option<&ContainerStatus>,
    phase: &str,
    ready: bool,
    terminating: bool,
) -> PodState {
    match container.and_then(|c| c.state.as_ref()) {
        Some(s) if s.running.is_some() => PodState::Running {
            container_id: container.and_then(|c| c.container_id.clone()),
            ready: ready && !terminating,
            terminating,
        },
        Some(s) => PodState::NotRunning {
            reason: s
                .waiting
                .as_ref()
                .and_then(|w| w.reason.clone())
                .map(|r| match IMAGE_PULL_FAILURES.contains(&r.as_str()) {
                    true => image_not_pulled(container.map(|c| c.image.as_str()).unwrap_or_default()),
                    false => r,
                })
                .or_else(|| {
                    s.terminated.as_ref().map(|t| {
                        t.reason
                            .clone()
                            .unwrap_or_else(|| format!("exit code {}", t.exit_code))
                    })
                })
                .unwrap_or_else(|| "not started".into()),
        },
        None => PodState::NotRunning {
            reason: unschedulable(status)
                .unwrap_or_else(|| format!("{} (not started)", phase.to_lowercase())),
        },
    }
}

/// The pod's readiness gate of the operator, and the condition's value.
fn serving_gate_of(pod: &Pod) -> ServingGate {
    let declared = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.condition_type == SERVING_CONDITION));
    if !declared {
        return ServingGate::NotDeclared;
    }
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == SERVING_CONDITION))
        .map_or(ServingGate::Unset, |c| ServingGate::Set(c.status == "True"))
}

/// The Secret the pod's `tls` volume mounts: the pod was built TLS only.
fn tls_secret_of(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == TLS_VOLUME)?
        .secret
        .as_ref()?
        .secret_name
        .clone()
}

/// The environment variable `name` of the pod's Redis container.
fn redis_env<'a>(pod: &'a Pod, name: &str) -> Option<&'a k8s_openapi::api::core::v1::EnvVar> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == REDIS_CONTAINER)?
        .env
        .iter()
        .flatten()
        .find(|e| e.name == name)
}

/// The Secret key `REDISCLI_AUTH` of the pod's Redis container reads.
fn probe_password_key_of(pod: &Pod) -> Option<String> {
    let from = redis_env(pod, PROBE_PASSWORD_ENV)?.value_from.as_ref()?;
    from.secret_key_ref.as_ref().map(|r| r.key.clone())
}

/// The value of `REDIS_CLIENT_USER` in the pod's Redis container.
fn client_user_of(pod: &Pod) -> Option<String> {
    redis_env(pod, CLIENT_USER_ENV)?.value.clone()
}

/// The scheduler's explanation of a pod it cannot place.
fn unschedulable(status: &k8s_openapi::api::core::v1::PodStatus) -> Option<String> {
    let c = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
    Some(format!(
        "cannot be placed: {}",
        c.message
            .as_deref()
            .or(c.reason.as_deref())
            .unwrap_or("unschedulable")
    ))
}

/// Slots whose member is released and whose pod is Ready: what clients can lock right now.
pub(crate) fn serving_slots(
    members: &[MemberStatus],
    observed: &BTreeMap<Slot, SlotObservation>,
    instances: i32,
) -> Vec<Slot> {
    members
        .iter()
        .filter(|m| m.slot.within(instances) && m.state == MemberState::Ready)
        .filter(|m| {
            matches!(
                observed.get(&m.slot).map(|o| &o.pod),
                Some(PodState::Running { ready: true, .. })
            )
        })
        .map(|m| m.slot)
        .collect()
}

/// Why the process that answered at a slot's pod IP is not that pod's process, if it is not:
/// it names another pod (a stale cache pointing at an address the CNI gave to another slot's
/// pod). Processes that name no pod (started before the tag existed) are judged by run id.
pub(crate) fn foreign_process(slot: &SlotObservation, answer: &RedisInfo) -> Option<String> {
    let (Some(expected), Some(found)) = (slot.pod_uid.as_deref(), answer.pod_uid.as_deref()) else {
        return None;
    };
    (expected != found).then(|| {
        format!(
            "the process at {} belongs to pod {found}, not to this slot's pod {expected} (the address was reused)",
            slot.pod_ip.map(|i| i.to_string()).unwrap_or_default()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_process_naming_another_pod_is_not_the_slots() {
        let slot = SlotObservation {
            pod_uid: Some("uid-3".into()),
            pod_ip: Some("127.1.1.9".parse().unwrap()),
            ..Default::default()
        };
        let answer = |uid: Option<&str>| RedisInfo {
            run_id: "R0".into(),
            version: "7.0.15".into(),
            client_enabled: false,
            pod_uid: uid.map(str::to_owned),
            client_password_hashes: None,
            admin_password_hashes: None,
            deviations: Vec::new(),
        };
        let why = foreign_process(&slot, &answer(Some("uid-0"))).unwrap();
        assert!(
            why.contains("127.1.1.9 belongs to pod uid-0, not to this slot's pod uid-3"),
            "{why}"
        );
        assert_eq!(foreign_process(&slot, &answer(Some("uid-3"))), None);
        // A process started before the tag existed names no pod: judged by run id alone.
        assert_eq!(foreign_process(&slot, &answer(None)), None);
    }

    #[test]
    fn the_client_user_and_listener_are_read_from_the_pod_as_it_was_built() {
        let cluster: RedlockCluster = serde_json::from_value(json!({
            "apiVersion": "redlock.dev/v1alpha1", "kind": "RedlockCluster",
            "metadata": {"name": "locks", "namespace": "team"},
            "spec": {"maxLockTTL": "30s"}
        }))
        .unwrap();
        let built = crate::children::pod::pod(&cluster, Slot::new(0));
        assert_eq!(
            slot_observation(&built).client_user.as_deref(),
            Some(crate::children::names::CLIENT_USER)
        );
        let mut off = cluster.clone();
        off.spec.auth.enabled = false;
        let built = crate::children::pod::pod(&off, Slot::new(0));
        assert_eq!(slot_observation(&built).client_user.as_deref(), Some("default"));
        // A pod without the variable (not built by this operator): unknown.
        assert_eq!(slot_observation(&pod(json!({}))).client_user, None);
        // The listener too: plain, or TLS with the Secret the pod mounts.
        assert_eq!(slot_observation(&built).tls_secret, None);
        let mut tls = cluster.clone();
        tls.spec.tls = serde_json::from_value(json!({"secretName": "locks-tls"})).unwrap();
        let built = crate::children::pod::pod(&tls, Slot::new(0));
        assert_eq!(slot_observation(&built).tls_secret.as_deref(), Some("locks-tls"));
    }

    #[test]
    fn a_replacement_pod_is_observed_with_the_process_it_replaced_even_trimmed() {
        let cluster = crate::fixtures::cluster(json!({}));
        let old = UnstoppedProcess {
            run_id: "r1".into(),
            pod_ip: "10.1.0.7".into(),
            pod_uid: Some("pod-old".into()),
            node: Some("node-0".into()),
            ..Default::default()
        };
        let built = crate::children::pod::replacement(&cluster, Slot::new(0), Some(&old));
        assert_eq!(slot_observation(&built).predecessor, Some(old));
        let mut trimmed = built.clone();
        trim_to_observed(&mut trimmed);
        assert_eq!(slot_observation(&trimmed), slot_observation(&built));
        // Nothing replaced: no annotation, as `pod` builds it.
        let plain = crate::children::pod::replacement(&cluster, Slot::new(0), None);
        assert_eq!(plain, crate::children::pod::pod(&cluster, Slot::new(0)));
        assert_eq!(slot_observation(&plain).predecessor, None);
        // An annotation that does not parse records nothing (the status alone speaks).
        let mut garbled = plain.clone();
        garbled
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                crate::children::pod::UNSTOPPED_PREDECESSOR.into(),
                "{not json".into(),
            );
        assert_eq!(slot_observation(&garbled).predecessor, None);
    }

    #[test]
    fn a_trimmed_pod_is_observed_as_the_pod() {
        let cluster: RedlockCluster = serde_json::from_value(json!({
            "apiVersion": "redlock.dev/v1alpha1", "kind": "RedlockCluster",
            "metadata": {"name": "locks", "namespace": "team", "uid": "u1"},
            "spec": {"maxLockTTL": "30s", "tls": {"secretName": "locks-tls"}}
        }))
        .unwrap();
        let statuses = [
            json!({"phase": "Running", "podIP": "127.1.1.2",
                "conditions": [
                    {"type": "Initialized", "status": "True"},
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                    {"type": "redlock.dev/serving", "status": "True", "reason": "Released"},
                    {"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [
                    {"name": "other", "image": "x", "imageID": "", "ready": true, "restartCount": 0,
                        "state": {"waiting": {"reason": "Nope"}}},
                    {"name": "redis", "image": "redis:7.4", "imageID": "sha", "ready": true,
                        "restartCount": 2, "containerID": "cri://abc",
                        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                        "lastState": {"terminated": {"exitCode": 137, "reason": "Error"}}}]}),
            json!({"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "0/3 nodes are available"}]}),
            json!({"phase": "Running", "conditions": [
                    {"type": "redlock.dev/serving", "status": "False", "reason": "Held"}],
                "containerStatuses": [
                {"name": "redis", "image": "", "imageID": "", "ready": false, "restartCount": 1,
                    "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}),
            json!({"phase": "Failed", "reason": "NodeLost"}),
        ];
        for auth in [true, false] {
            for status in &statuses {
                let mut c = cluster.clone();
                c.spec.auth.enabled = auth;
                let mut pod = crate::children::pod::pod(&c, Slot::new(0));
                pod.metadata.uid = Some("p1".into());
                pod.spec.as_mut().unwrap().node_name = Some("node-1".into());
                pod.status = Some(serde_json::from_value(status.clone()).unwrap());
                let mut trimmed = pod.clone();
                trim_to_observed(&mut trimmed);
                assert_eq!(slot_observation(&trimmed), slot_observation(&pod), "{status}");
                let one = |p: Pod| pods_by_slot(&cluster, &[std::sync::Arc::new(p)]);
                assert_eq!(one(trimmed.clone()), one(pod.clone()));
                let size = |p: &Pod| serde_json::to_vec(p).unwrap().len();
                assert!(
                    size(&trimmed) * 2 < size(&pod),
                    "{} of {}",
                    size(&trimmed),
                    size(&pod)
                );
            }
        }
    }

    #[test]
    fn the_serving_gate_is_read_only_from_pods_that_declare_it() {
        let cluster = crate::fixtures::cluster(json!({}));
        let with = |conditions: serde_json::Value| {
            let mut pod = crate::children::pod::pod(&cluster, Slot::new(0));
            pod.status = Some(serde_json::from_value(json!({"conditions": conditions})).unwrap());
            pod
        };
        assert_eq!(
            slot_observation(&with(json!([]))).serving_gate,
            ServingGate::Unset
        );
        let on = json!([{"type": "redlock.dev/serving", "status": "True"}]);
        let off = json!([{"type": "redlock.dev/serving", "status": "False"}]);
        let unknown = json!([{"type": "redlock.dev/serving", "status": "Unknown"}]);
        assert_eq!(
            slot_observation(&with(on.clone())).serving_gate,
            ServingGate::Set(true)
        );
        assert_eq!(slot_observation(&with(off)).serving_gate, ServingGate::Set(false));
        assert_eq!(
            slot_observation(&with(unknown)).serving_gate,
            ServingGate::Set(false)
        );
        // A pod built before the gate: the condition, should anyone set it, means nothing.
        let mut old = with(on);
        old.spec.as_mut().unwrap().readiness_gates = None;
        assert_eq!(slot_observation(&old).serving_gate, ServingGate::NotDeclared);
    }

    #[test]
    fn a_pod_is_a_slots_only_under_that_slots_name() {
        let cluster: RedlockCluster = serde_json::from_value(json!({
            "apiVersion": "redlock.dev/v1alpha1", "kind": "RedlockCluster",
            "metadata": {"name": "locks", "namespace": "team", "uid": "u1"},
            "spec": {"maxLockTTL": "30s"}
        }))
        .unwrap();
        let mut relabelled = crate::children::pod::pod(&cluster, Slot::new(0));
        relabelled
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(LABEL_SLOT.into(), "1".into());
        relabelled.metadata.uid = Some("uid-0".into());
        let mut one = crate::children::pod::pod(&cluster, Slot::new(1));
        one.metadata.uid = Some("uid-1".into());
        let pods = [std::sync::Arc::new(one), std::sync::Arc::new(relabelled)];
        let slots = pods_by_slot(&cluster, &pods);
        assert_eq!(slots.keys().copied().collect::<Vec<_>>(), [1]);
        assert_eq!(slots[&Slot::new(1)].pod_uid.as_deref(), Some("uid-1"));
    }

    #[test]
    fn a_pod_marked_failed_without_a_stopped_container_does_not_prove_its_process_stopped() {
        let running = json!({"name": "redis", "image": "redis", "imageID": "", "ready": true,
            "restartCount": 0, "state": {"running": {}}});
        let marked = pod(json!({"phase": "Failed", "reason": "DeletionByPodGC",
            "containerStatuses": [running]}));
        let o = slot_observation(&marked);
        assert!(matches!(o.pod, PodState::Finished { .. }), "{o:?}");
        assert!(o.stop_unconfirmed);
        let terminated = json!({"name": "redis", "image": "redis", "imageID": "", "ready": false,
            "restartCount": 0, "state": {"terminated": {"exitCode": 137}}});
        let stopped = pod(json!({"phase": "Failed", "containerStatuses": [terminated]}));
        assert!(!slot_observation(&stopped).stop_unconfirmed);
        // A running pod is not finished at all.
        let live = pod(json!({"phase": "Running", "containerStatuses": [running]}));
        assert!(!slot_observation(&live).stop_unconfirmed);
    }

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "locks-0"}, "status": status})).unwrap()
    }

    #[test]
    fn running_container_with_id_and_readiness() {
        let p = pod(json!({
            "phase": "Running", "podIP": "127.9.1.1",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "redis", "image": "redis", "imageID": "", "ready": true, "restartCount": 0,
                "containerID": "process://42", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}],
        }));
        let o = slot_observation(&p);
        assert_eq!(
            o.pod,
            PodState::Running {
                container_id: Some("process://42".into()),
                ready: true,
                terminating: false
            }
        );
        assert_eq!(o.pod_ip, Some("127.9.1.1".parse().unwrap()));
    }

    #[test]
    fn a_container_whose_image_cannot_be_pulled_names_the_image_in_one_text_for_every_pull_failure() {
        let waiting = |reason: &str| {
            pod(
                json!({"phase": "Pending", "containerStatuses": [{"name": "redis", "image": "redis:7.4", "imageID": "",
                "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": "Back-off pulling image \"redis:7.4\""}}}]}),
            )
        };
        let want = "image redis:7.4 cannot be pulled; the pod's events say why";
        for reason in IMAGE_PULL_FAILURES {
            let mut p = waiting(reason);
            let o = slot_observation(&p);
            assert_eq!(o.pod, PodState::NotRunning { reason: want.into() }, "{reason}");
            assert_eq!(image_pull_failure(&o), Some(want), "{reason}");
            // The watch cache's trimmed copy says the same.
            trim_to_observed(&mut p);
            assert_eq!(slot_observation(&p).pod, o.pod, "{reason}");
        }
        let creating = slot_observation(&waiting("ContainerCreating"));
        assert_eq!(
            creating.pod,
            PodState::NotRunning {
                reason: "ContainerCreating".into()
            }
        );
        assert_eq!(image_pull_failure(&creating), None);
    }

    #[test]
    fn waiting_terminated_pending_and_failed() {
        let waiting = pod(
            json!({"phase": "Running", "containerStatuses": [{"name": "redis", "image": "", "imageID": "", "ready": false, "restartCount": 1,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
        );
        assert_eq!(
            slot_observation(&waiting).pod,
            PodState::NotRunning {
                reason: "CrashLoopBackOff".into()
            }
        );
        let terminated = pod(
            json!({"phase": "Running", "containerStatuses": [{"name": "redis", "image": "", "imageID": "", "ready": false, "restartCount": 1,
            "state": {"terminated": {"exitCode": 137}}}]}),
        );
        assert_eq!(
            slot_observation(&terminated).pod,
            PodState::NotRunning {
                reason: "exit code 137".into()
            }
        );
        let pending = pod(json!({"phase": "Pending"}));
        assert_eq!(
            slot_observation(&pending).pod,
            PodState::NotRunning {
                reason: "pending (not started)".into()
            }
        );
        let unschedulable = pod(
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."}]}),
        );
        assert_eq!(
            slot_observation(&unschedulable).pod,
            PodState::NotRunning {
                reason: "cannot be placed: 0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules.".into()
            }
        );
        let failed = pod(json!({"phase": "Failed", "reason": "Evicted"}));
        assert_eq!(
            slot_observation(&failed).pod,
            PodState::Finished {
                reason: "Failed (Evicted)".into()
            }
        );
    }
}
