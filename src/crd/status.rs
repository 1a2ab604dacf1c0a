//! `RedlockCluster.status`: what the operator observed and decided.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::crd::model::Slot;

/// Observed state of a RedlockCluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RedlockClusterStatus {
    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The Lease (`<namespace>/<name>`) of the operator that writes this status: an operator
    /// elected with another Lease leaves the cluster alone while this one is held, so no two
    /// leaders act on one cluster (a renamed Lease during an upgrade, two installs). Remove it
    /// (`kubectl patch --subresource=status`) to hand the cluster to a running operator whose
    /// Lease cannot read this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,

    /// Instances asked for (N).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<i32>,

    /// Instances in the server list clients are told (`servers`/`quorum` of `<name>-endpoints`,
    /// `urls`/`quorum` of `<name>-client`). A scale-down keeps the old list until the removed
    /// members have been fenced for one full hold; a scale-up publishes the longer list at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_instances: Option<i32>,

    /// Slots below this may serve lock clients. A scale-up's new members stay fenced above it
    /// until the annotation `redlock.dev/clients-use-instances` confirms that every client uses
    /// the new list (so any quorum of the new list still needs a quorum of the old members).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmed_instances: Option<i32>,

    /// While a scale-up waits for its confirmation: the value of the annotation
    /// `redlock.dev/clients-use-instances` that confirms it (`<N>-<generation>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation_token: Option<String>,

    /// Instances serving lock clients now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_instances: Option<i32>,

    /// Instances held back from clients after losing their keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_instances: Option<i32>,

    /// Instances a client must lock to hold a lock: N/2+1, computed from N, never from the
    /// instances that happen to be up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<i32>,

    /// Members running the current spec (pod-affecting fields: image, resources, redisConfig,
    /// auth, scheduling, podTemplate). Below `instances` while a rolling replacement runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_instances: Option<i32>,

    /// The hold the operator applies now, and the maxLockTTL it was computed from. This is the
    /// longest TTL a client may still be using, which is not always `spec.maxLockTTL`: a raise
    /// applies at once, a lowering only once every lock taken under the old value has expired,
    /// and a spec the operator rejects changes nothing here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<HoldPolicy>,

    /// Where the members run and how many node or zone failures leave a quorum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domains: Option<FailureDomains>,

    /// One entry per slot, in slot order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["name".into()]))]
    pub members: Vec<MemberStatus>,

    /// Standard conditions: `Available` (at least a quorum serves clients), `Progressing`
    /// (instances starting or held), `Degraded` (some instance does not serve; the message
    /// says which and how many more may fail), `SpecAccepted` (False names the field of a spec
    /// the operator refuses to act on), `TTLPolicy` (False when the TTL audit found keys
    /// without expiry or with a TTL above maxLockTTL).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// The hold rule's parameters in force (`status.hold`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HoldPolicy {
    /// The maxLockTTL holds are computed from: the longest TTL a client may still use.
    #[serde(rename = "maxLockTTL")]
    pub max_lock_ttl: kube::core::Duration,

    /// The clock drift factor of the last accepted spec.
    pub clock_drift_factor: f64,

    /// The hold margin of the last accepted spec.
    pub hold_margin: kube::core::Duration,

    /// How long an instance that lost its keys is held:
    /// maxLockTTL + ceil(maxLockTTL x clockDriftFactor) + holdMargin.
    pub duration: kube::core::Duration,

    /// The maxLockTTL clients are told (`<name>-endpoints`, key `maxLockTTL`), as last seen by
    /// the operator; absent until it has been published.
    #[serde(
        default,
        rename = "publishedMaxLockTTL",
        skip_serializing_if = "Option::is_none"
    )]
    pub published_max_lock_ttl: Option<kube::core::Duration>,

    /// While the published maxLockTTL is lower than the one in force: when the lower value
    /// takes effect (every lock taken under an older, longer TTL has expired by then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lowers_at: Option<MicroTime>,
}

/// Placement of the members over failure domains.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomains {
    /// Members per node.
    #[serde(default)]
    pub nodes: std::collections::BTreeMap<String, i32>,

    /// Members per zone (`topology.kubernetes.io/zone` of their nodes).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub zones: std::collections::BTreeMap<String, i32>,

    /// How many nodes, the fullest first, can fail with a quorum left.
    pub tolerated_node_failures: i32,

    /// How many zones, the fullest first, can fail with a quorum left (when nodes have zones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerated_zone_failures: Option<i32>,
}

/// State of one slot's Redis instance. The operator persists this before acting on it
/// (write-ahead): a hold is recorded before anything can be released, and `Ready` with the
/// run id is recorded before the process is released.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// Pod name of the slot, `<cluster>-<slot>`.
    pub name: String,

    /// Slot index, 0 to N-1 (higher while a removed slot's hold runs out).
    pub slot: Slot,

    /// Stable address clients use for this slot, `host:port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,

    /// Starting, Held, Ready or Lost.
    pub state: MemberState,

    /// Redis `run_id` of the process this state is about (a new id on every process start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,

    /// Container ID the kubelet reported for that process; a restart changes it.
    #[serde(default, rename = "containerID", skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,

    /// While Held or Lost: the instant the slot may serve clients again (microseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_until: Option<MicroTime>,

    /// While Held or Lost: when the running hold started (the observation it counts from).
    /// `heldUntil` is never earlier than this plus the hold in force, so raising maxLockTTL
    /// lengthens running holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_started_at: Option<MicroTime>,

    /// When the member entered its current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<MicroTime>,

    /// `Lost` on a refusal: since when the address of the released process has refused the
    /// operator's connections while its pod shows the container running. The process is
    /// presumed crashed and not serving, but nothing has shown its keys gone yet: no hold
    /// runs, and the record is still about that process. The same process answering again
    /// makes it `Ready` again; a replacement, or its container or pod reported stopped, starts
    /// a full hold from that observation, as for any released member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_since: Option<MicroTime>,

    /// Human-readable detail about the state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// The pod IP of the process this record is about: where it would still answer if it
    /// outlived its pod.
    #[serde(default, rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,

    /// How that process listens (TLS or plain text), as its pod was built; recorded with its
    /// address. Absent on records made before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listener: Option<Listener>,

    /// The UID of the pod that process runs in, and the node it runs on: should the pod
    /// vanish while the process runs, its node's kubelet is asked whether it still runs a
    /// container of that pod (docs/design.md §9.5). Absent on records made before they were
    /// kept.
    #[serde(default, rename = "podUID", skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// The node that process runs on (see `podUID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,

    /// A process of this slot that was never seen to stop: its pod vanished while it ran (its
    /// node deleted or tainted out-of-service, the pod force-deleted) and it may still serve
    /// clients that reach it. Looked for at its last address before the slot is released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unstopped: Option<UnstoppedProcess>,

    /// While Held or Lost: when a probe first saw the process on record (`runId`) fenced (no
    /// user a lock client could log in as is on) during this hold: the fence landed. Absent
    /// while the hold's fence is not confirmed (not probed since, the process unreachable, or
    /// found serving), and once released. `kubectl redlock fence` waits for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence_seen_at: Option<MicroTime>,

    /// Fenced on purpose (`kubectl redlock fence`, annotation `redlock.dev/fenced-members`):
    /// the reason given. The member is held as after a loss and not released, even once its
    /// hold has run, until it is unfenced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<String>,

    /// The process's wall clock against the API server's, as last put on record: another
    /// operator leader compares its own first reading with it, so that a forward jump of the
    /// member's clock while no leader probed it is found too. Written when the process is
    /// first read, after a jump, as the clocks drift apart, and at least hourly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockRecord>,
}

/// A member process's clock minus the API server's clock: somewhere in
/// `[offsetLowMillis, offsetHighMillis]` at `readAt` (the API server's time then, roughly).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClockRecord {
    /// The Redis `run_id` of the process it was read from.
    pub run_id: String,
    /// The least the member's clock was ahead of the API server's (negative: behind), ms.
    pub offset_low_millis: i64,
    /// The most the member's clock was ahead of the API server's, ms.
    pub offset_high_millis: i64,
    /// When it was read, on the API server's clock.
    pub read_at: MicroTime,
}

/// A process that outlived its pod object as far as the operator knows.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UnstoppedProcess {
    /// Its Redis `run_id`.
    pub run_id: String,
    /// Its last pod IP.
    #[serde(rename = "podIP")]
    pub pod_ip: String,
    /// How it listens, recorded with its address: it is looked for (and fenced) in its own
    /// mode, which during a TLS toggle's rollout is not the spec's. Absent on records made
    /// before it was kept: then the spec's mode is assumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listener: Option<Listener>,
    /// Seen fenced there (it grants no lock; it starts fenced again if restarted).
    #[serde(default)]
    pub fenced: bool,
    /// The UID of the pod it ran in: its node's kubelet is asked whether a container of that
    /// pod still runs. Absent on records made before it was kept.
    #[serde(default, rename = "podUID", skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// The node it ran on. Absent on records made before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// How a Redis process listens, as its pod was built.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    /// The Secret whose certificate it serves with when it listens with TLS only; absent when
    /// it listens in plain text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_secret: Option<String>,
}

impl MemberStatus {
    /// The process this record is about, as a process that may outlive its pod is recorded
    /// (`unstopped`, the ledger), if its run id and address are known.
    pub fn process_record(&self) -> Option<UnstoppedProcess> {
        Some(UnstoppedProcess {
            run_id: self.run_id.clone()?,
            pod_ip: self.pod_ip.clone()?,
            listener: self.listener.clone(),
            fenced: false,
            pod_uid: self.pod_uid.clone(),
            node: self.node.clone(),
        })
    }

    /// `Lost` on a refusal (`refusedSince`, no hold): shown out of service, but the released
    /// process may still serve (the refusal may come from a rule against the operator alone),
    /// so every decision treats it as the `Ready` member it was (`plan::ready::refused`).
    pub fn lost_on_refusal(&self) -> bool {
        self.state == MemberState::Lost && self.refused_since.is_some() && self.held_until.is_none()
    }

    /// A record of `name` (slot `slot`) in `state`, with nothing else known yet.
    pub fn new(name: String, slot: impl Into<Slot>, state: MemberState) -> Self {
        Self {
            name,
            slot: slot.into(),
            endpoint: None,
            state,
            run_id: None,
            container_id: None,
            held_until: None,
            hold_started_at: None,
            since: None,
            refused_since: None,
            message: None,
            pod_ip: None,
            listener: None,
            pod_uid: None,
            node: None,
            unstopped: None,
            fence_seen_at: None,
            maintenance: None,
            clock: None,
        }
    }
}

/// Lifecycle state of a member.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberState {
    /// The pod or its Redis process is not up yet.
    Starting,
    /// A replacement process is up but fenced until `heldUntil`: the slot lost its keys.
    Held,
    /// Released: lock clients may use it.
    Ready,
    /// The released process is gone and no replacement is up yet; the hold runs from when
    /// the loss was observed. With `refusedSince`: its address refuses connections while its
    /// pod runs (a crash the kubelet has not reported yet); the hold starts once the loss is
    /// seen (a replacement, or the container or pod reported stopped).
    Lost,
}

impl MemberState {
    /// Whether the state carries a hold (`heldUntil`): the slot may not serve clients yet.
    pub fn is_holding(self) -> bool {
        matches!(self, MemberState::Held | MemberState::Lost)
    }
}
