//! `RedlockCluster.spec`: what the user asks for.

// Each printer column repeats `type_ = "integer"` inside its own `printcolumn(...)`; clippy
// reads those as duplicated attributes of the struct, which they are not.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, LocalObjectReference, PodSecurityContext, ResourceRequirements, Toleration,
    TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::Duration;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::RedlockClusterStatus;

/// Redis settings a spec may set in `redisConfig`. Everything else is either enforced by the
/// operator (persistence, eviction, replication, ACLs: each would break the hold rule) or
/// irrelevant to a lock server. Kept short on purpose: a key joins only when it is safe.
pub(crate) const ALLOWED_REDIS_CONFIG: &[&str] = &[
    "maxclients",
    "timeout",
    "tcp-keepalive",
    "hz",
    "dynamic-hz",
    "loglevel",
    "slowlog-log-slower-than",
    "slowlog-max-len",
    "latency-monitor-threshold",
    "lazyfree-lazy-expire",
    "lazyfree-lazy-user-del",
    "lazyfree-lazy-server-del",
    "busy-reply-threshold",
    "lua-time-limit",
    "client-output-buffer-limit",
];

/// What a `redisConfig` value may consist of: printable ASCII without `"` and `'` (RE2 syntax,
/// for the CEL rule; the operator applies the same class in `resources::config::entry_problem`).
pub(crate) const REDIS_CONFIG_VALUE_PATTERN: &str = "^[ !#-&(-~]*$";

/// The largest maxLockTTL a spec may ask for (its CEL rule says the same).
pub(crate) const MAX_LOCK_TTL_LIMIT: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// A set of N independent Redis masters serving Redlock clients, with the Redlock
/// "delayed restart" rule enforced: an instance that lost its keys serves again only after
/// every lock it could have granted has expired.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "redlock.dev",
    version = "v1alpha1",
    kind = "RedlockCluster",
    namespaced,
    shortname = "rlc",
    status = "RedlockClusterStatus",
    derive = "PartialEq",
    doc = "A Redlock server set: N independent Redis masters without persistence or replicas, each held back from lock clients after losing its keys until the longest lock TTL (plus drift and margin) has passed.",
    printcolumn(
        name = "Instances",
        type_ = "integer",
        description = "Instances asked for (N)",
        json_path = ".spec.instances"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        description = "Instances serving lock clients now",
        json_path = ".status.readyInstances"
    ),
    printcolumn(
        name = "Held",
        type_ = "integer",
        description = "Instances held back after losing their keys",
        json_path = ".status.heldInstances"
    ),
    printcolumn(
        name = "Quorum",
        type_ = "integer",
        description = "Instances a client must lock (N/2+1)",
        json_path = ".status.quorum"
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        description = "At least a quorum of instances serves clients",
        json_path = ".status.conditions[?(@.type==\"Available\")].status"
    ),
    printcolumn(
        name = "Updated",
        type_ = "integer",
        description = "Instances running the current spec (a rolling replacement is done when it equals Instances)",
        json_path = ".status.updatedInstances",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct RedlockClusterSpec {
    /// Number of independent Redis masters (N). Clients lock a majority, N/2+1 of them.
    /// Odd numbers are recommended: an even N tolerates no more failures than N-1.
    #[serde(default = "default_instances")]
    #[schemars(range(min = 1, max = 99))]
    pub instances: i32,

    /// The longest lock TTL any client of this cluster will ever use, as a duration such as
    /// `500ms`, `30s` or `1m30s` (greater than 0, at most 24h). An instance that lost its keys
    /// is held back from clients for this long plus clock drift and `holdMargin`, so every lock
    /// it could have granted has expired. There is no safe default: a client using a longer TTL
    /// than this can hold a lock that a restarted instance grants a second time.
    #[x_kube(validation = kube::core::Rule::new("duration(self) > duration('0s') && duration(self) <= duration('24h')").message("maxLockTTL must be a duration greater than 0s and at most 24h, such as 30s or 1m30s"))]
    #[schemars(length(max = 32))]
    #[serde(rename = "maxLockTTL")]
    pub max_lock_ttl: Duration,

    /// Clock drift allowed per unit of time, as in the Redlock reference clients (0.01 = 1%).
    /// The hold adds ceil(maxLockTTL x clockDriftFactor). Must be at least 0 and less than 1.
    #[serde(default = "default_clock_drift_factor")]
    #[x_kube(validation = kube::core::Rule::new("self >= 0.0 && self < 1.0").message("clockDriftFactor must be at least 0 and less than 1, such as 0.01"))]
    pub clock_drift_factor: f64,

    /// Extra time added to every hold, as a duration such as `1s` or `250ms` (0s to 1h).
    /// Covers the time between a crash and the operator observing it.
    #[serde(default = "default_hold_margin")]
    #[x_kube(validation = kube::core::Rule::new("duration(self) >= duration('0s') && duration(self) <= duration('1h')").message("holdMargin must be a duration from 0s to 1h, such as 1s or 500ms"))]
    #[schemars(length(max = 32))]
    pub hold_margin: Duration,

    /// Container image of every instance: any Redis 6.2 or newer, or Valkey.
    #[serde(default = "default_image")]
    #[schemars(length(min = 1, max = 512))]
    pub image: String,

    /// CPU and memory requests and limits of the Redis container. When a memory limit is set,
    /// Redis `maxmemory` is derived from it so Redis refuses writes before the kernel kills it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// How lock clients authenticate.
    #[serde(default)]
    pub auth: AuthSpec,

    /// Extra redis.conf settings, limited to keys that cannot weaken lock safety (see the
    /// docs/spec.md for the list). Persistence, eviction, replication and ACL settings are enforced
    /// by the operator and cannot be set here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "redis_config_schema")]
    pub redis_config: BTreeMap<String, String>,

    /// Where instances run. By default at most one instance per node (`spread: host`).
    #[serde(default)]
    pub scheduling: SchedulingSpec,

    /// Extra metadata and pod-level settings for the instance pods.
    #[serde(default)]
    pub pod_template: PodTemplateSpec,

    /// Serve lock clients over TLS only. Unset: plain TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,

    /// Who may reach the instances' Redis port. Unset or disabled: no NetworkPolicy is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<NetworkPolicySpec>,
}

/// TLS for the Redis port: every instance serves TLS only (no plain port), the operator and
/// the readiness probe connect with TLS, and the client Secret's URLs are `rediss://`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    /// Secret in the cluster's namespace holding `tls.crt` and `tls.key` (the instances'
    /// certificate and key, PEM) and `ca.crt` (the CA that issued it), as cert-manager writes
    /// them. The certificate must name `<name>-<i>.<namespace>.svc` for every slot (a wildcard
    /// `*.<namespace>.svc` does). Changing the Secret's name replaces the instances one by one.
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
}

/// A NetworkPolicy `<name>` that admits to the Redis port only the operator's pods and the
/// lock clients selected here. Takes effect only where the cluster's network plugin enforces
/// NetworkPolicies.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    /// Create the NetworkPolicy. Turning it off deletes it.
    #[serde(default)]
    pub enabled: bool,

    /// Client pods that may connect. Alone: those pods in the cluster's namespace. With
    /// `clientNamespaceSelector`: those pods in the selected namespaces. When both selectors are
    /// unset, every pod in the cluster's namespace may connect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_pod_selector: Option<LabelSelector>,

    /// Namespaces whose pods (all of them, or those matching `clientPodSelector`) may connect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_namespace_selector: Option<LabelSelector>,
}

/// How lock clients authenticate to the instances.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AuthSpec {
    /// When true (the default), clients log in as a generated ACL user whose credentials are
    /// published in the `<name>-client` Secret. When false, clients use the default user
    /// without a password. Either way every instance starts fenced and is released by the
    /// operator.
    #[serde(default = "default_true")]
    pub enabled: bool,
}

impl Default for AuthSpec {
    fn default() -> Self {
        Self { enabled: true }
    }
}

/// Placement of the instance pods.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingSpec {
    /// Failure domain to spread instances over: `host` (at most one instance per node, the
    /// default), `zone` (spread evenly over `topology.kubernetes.io/zone`), or `none`.
    #[serde(default)]
    pub spread: Spread,

    /// Node labels an instance pod's node must have.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Tolerations of the instance pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,

    /// Affinity rules of the instance pods, added to those `spread` implies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// Topology spread constraints of the instance pods, added to those `spread` implies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
}

/// Failure domain over which instances are spread.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Spread {
    /// At most one instance per node.
    #[default]
    Host,
    /// Instances spread evenly over zones.
    Zone,
    /// No spreading.
    None,
}

/// Metadata and pod-level settings copied into every instance pod.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplateSpec {
    /// Labels added to every instance pod (the operator's own labels win on conflict).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,

    /// Annotations added to every instance pod.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,

    /// PriorityClass of the instance pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,

    /// Pod security context of the instance pods; a restricted one is used when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,

    /// Secrets (in the cluster's namespace) the kubelet uses to pull `spec.image` from a
    /// private registry. A change replaces the pods one at a time, like any pod-shaping field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub image_pull_secrets: Vec<LocalObjectReference>,
}

fn default_instances() -> i32 {
    5
}

fn default_clock_drift_factor() -> f64 {
    0.01
}

fn default_hold_margin() -> Duration {
    std::time::Duration::from_secs(1).into()
}

fn default_image() -> String {
    "redis:7.4".to_owned()
}

fn default_true() -> bool {
    true
}

/// `redisConfig` is a bounded string map whose keys must be on [`ALLOWED_REDIS_CONFIG`] and
/// whose values cannot smuggle in extra directives (a newline or quote would end the line in
/// redis.conf). Built by hand because the rules depend on the allow-list.
fn redis_config_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let allowed = ALLOWED_REDIS_CONFIG
        .iter()
        .map(|k| format!("'{k}'"))
        .collect::<Vec<_>>()
        .join(", ");
    schemars::json_schema!({
        "type": "object",
        "description": "Extra redis.conf settings, limited to keys that cannot weaken lock safety. Persistence, eviction, replication and ACL settings are enforced by the operator and cannot be set here.",
        "maxProperties": 32,
        "additionalProperties": {"type": "string", "maxLength": 256},
        "x-kubernetes-validations": [
            {
                "rule": format!("self.all(k, k in [{allowed}])"),
                "message": format!("redisConfig may only set these keys: {}", ALLOWED_REDIS_CONFIG.join(", ")),
            },
            {
                "rule": format!("self.all(k, self[k].matches('{REDIS_CONFIG_VALUE_PATTERN}'))"),
                "message": "redisConfig values may not contain newlines, quotes, control or non-ASCII characters (they could inject redis.conf directives); use a plain value such as 1000, yes or 'normal 0 0 0'",
            },
            {
                "rule": "self.all(k, self[k].matches('[!-~]'))",
                "message": "redisConfig values may not be empty; remove the key to keep the Redis default",
            },
        ],
    })
}
