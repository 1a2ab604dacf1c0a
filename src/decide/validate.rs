//! Checks of a spec that the CRD schema cannot express (or that objects stored under an older
//! schema may fail). A rejected spec is reported — condition `SpecAccepted=False` and a Warning
//! event naming the field and the fix — and the operator then changes nothing that runs: no
//! pod is created or deleted and no child object is re-applied. Holds and releases go on, so
//! the members that exist stay safe and serving.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::children::config::{entry_problem, quantity_bytes, quantity_value};
use crate::children::names::{LABEL_INSTANCE, LABEL_MANAGED_BY, LABEL_NAME, LABEL_SLOT};
use crate::crd::RedlockClusterSpec;

/// Below this memory limit Redis cannot start and serve reliably (its own baseline is a few MiB
/// and `maxmemory` gets only part of the limit).
const MIN_MEMORY_LIMIT_BYTES: u64 = 16 * 1024 * 1024;

/// One problem: the field's path and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Every problem of `spec`, in a stable order (empty when the spec is accepted).
pub(crate) fn validate(spec: &RedlockClusterSpec) -> Vec<Rejection> {
    let mut out = Vec::new();
    redis_config(spec, &mut out);
    resources(spec, &mut out);
    pod_template_labels(spec, &mut out);
    out
}

fn reject(out: &mut Vec<Rejection>, field: impl Into<String>, message: impl Into<String>) {
    out.push(Rejection {
        field: field.into(),
        message: message.into(),
    });
}

/// The CRD refuses these too, but an object stored before a rule existed (or under an older
/// CRD) must not reach redis.conf.
fn redis_config(spec: &RedlockClusterSpec, out: &mut Vec<Rejection>) {
    for (key, value) in &spec.redis_config {
        if let Some(problem) = entry_problem(key, value) {
            reject(out, format!("spec.redisConfig.{key}"), problem);
        }
    }
}

/// Kubernetes refuses a pod whose request exceeds its limit; say so on the cluster instead of
/// failing every pod creation.
fn resources(spec: &RedlockClusterSpec, out: &mut Vec<Rejection>) {
    let Some(r) = &spec.resources else { return };
    let get = |map: &Option<std::collections::BTreeMap<String, Quantity>>, k: &str| {
        map.as_ref().and_then(|m| m.get(k)).cloned()
    };
    for resource in ["cpu", "memory"] {
        let request = get(&r.requests, resource);
        let limit = get(&r.limits, resource);
        for (q, kind) in [(&request, "requests"), (&limit, "limits")] {
            if let Some(q) = q
                && quantity_value(q).is_none()
            {
                reject(
                    out,
                    format!("spec.resources.{kind}.{resource}"),
                    format!("{:?} is not a quantity; use a value such as 500m or 256Mi", q.0),
                );
            }
        }
        if let (Some(req), Some(lim)) = (&request, &limit)
            && let (Some(rb), Some(lb)) = (quantity_value(req), quantity_value(lim))
            && rb > lb
        {
            reject(
                out,
                format!("spec.resources.requests.{resource}"),
                format!(
                    "the request {} exceeds the limit {}; lower the request or raise spec.resources.limits.{resource}",
                    req.0, lim.0
                ),
            );
        }
    }
    if let Some(limit) = get(&r.limits, "memory")
        && let Some(bytes) = quantity_bytes(&limit)
        && bytes < MIN_MEMORY_LIMIT_BYTES
    {
        reject(
            out,
            "spec.resources.limits.memory",
            format!("{} is too small for Redis; use at least 16Mi", limit.0),
        );
    }
}

/// The operator's labels decide which pods a Service selects and which pods belong to which
/// slot; a template label overriding one would be silently ignored, so refuse it.
fn pod_template_labels(spec: &RedlockClusterSpec, out: &mut Vec<Rejection>) {
    for key in spec.pod_template.labels.keys() {
        if [LABEL_NAME, LABEL_INSTANCE, LABEL_MANAGED_BY, LABEL_SLOT].contains(&key.as_str()) {
            reject(
                out,
                format!("spec.podTemplate.labels.{key}"),
                "this label is set by the operator (it selects the cluster's pods); remove it",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: serde_json::Value) -> RedlockClusterSpec {
        let mut v = serde_json::json!({"maxLockTTL": "30s"});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(v).unwrap()
    }

    fn fields(spec: &RedlockClusterSpec) -> Vec<String> {
        validate(spec).into_iter().map(|r| r.field).collect()
    }

    #[test]
    fn a_plain_spec_is_accepted() {
        assert!(validate(&spec(serde_json::json!({}))).is_empty());
        let s = spec(serde_json::json!({
            "redisConfig": {"maxclients": "1000", "client-output-buffer-limit": "normal 0 0 0"},
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                          "limits": {"cpu": "1", "memory": "128Mi"}},
            "podTemplate": {"labels": {"team": "payments"}},
        }));
        assert_eq!(validate(&s), vec![]);
    }

    #[test]
    fn each_problem_names_its_field() {
        let cases = [
            (
                serde_json::json!({"redisConfig": {"save": "60 1"}}),
                "spec.redisConfig.save",
            ),
            (
                serde_json::json!({"redisConfig": {"maxclients": "10\nsave 1 1"}}),
                "spec.redisConfig.maxclients",
            ),
            (
                serde_json::json!({"redisConfig": {"loglevel": "notice\u{7}"}}),
                "spec.redisConfig.loglevel",
            ),
            (
                serde_json::json!({"redisConfig": {"loglevel": "'notice'"}}),
                "spec.redisConfig.loglevel",
            ),
            (
                serde_json::json!({"redisConfig": {"timeout": "0\u{0}"}}),
                "spec.redisConfig.timeout",
            ),
            (
                serde_json::json!({"redisConfig": {"timeout": "\u{a0}0"}}),
                "spec.redisConfig.timeout",
            ),
            (
                serde_json::json!({"redisConfig": {"timeout": "  "}}),
                "spec.redisConfig.timeout",
            ),
            (
                serde_json::json!({"resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "512Mi"}}}),
                "spec.resources.requests.memory",
            ),
            (
                serde_json::json!({"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "500m"}}}),
                "spec.resources.requests.cpu",
            ),
            (
                serde_json::json!({"resources": {"limits": {"memory": "4Mi"}}}),
                "spec.resources.limits.memory",
            ),
            (
                serde_json::json!({"resources": {"limits": {"memory": "lots"}}}),
                "spec.resources.limits.memory",
            ),
            (
                serde_json::json!({"podTemplate": {"labels": {"redlock.dev/slot": "0"}}}),
                "spec.podTemplate.labels.redlock.dev/slot",
            ),
        ];
        for (extra, field) in cases {
            let s = spec(extra.clone());
            assert_eq!(fields(&s), vec![field.to_owned()], "{extra}");
            let r = &validate(&s)[0];
            assert!(r.to_string().starts_with(field), "{r}");
        }
    }

    #[test]
    fn a_request_equal_to_the_limit_is_fine() {
        let s = spec(serde_json::json!({"resources": {
            "requests": {"cpu": "500m", "memory": "256Mi"},
            "limits": {"cpu": "0.5", "memory": "256Mi"}}}));
        assert_eq!(validate(&s), vec![]);
    }
}
