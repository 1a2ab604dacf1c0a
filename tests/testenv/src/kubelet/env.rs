//! Container environment as the kubelet builds it: `envFrom` first, then `env` in order,
//! each value `$(VAR)`-expanded against what is defined before it; `command`/`args` are
//! expanded against the complete environment. Object lookups are done by the caller
//! (`Sources`), so everything here is pure.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, ResourceRequirements, Secret};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Node capacity reported by the process kubelet; also the default for
/// `resourceFieldRef: limits.*` of containers without limits (as in Kubernetes).
pub const NODE_CPU: &str = "8";
pub const NODE_MEMORY: &str = "32Gi";
pub const NODE_EPHEMERAL_STORAGE: &str = "100Gi";

/// Pod facts the downward API can expose that are not in the pod object yet.
#[derive(Debug, Clone)]
pub struct PodFacts<'a> {
    pub pod: &'a Pod,
    pub pod_ip: String,
    pub host_ip: String,
}

/// ConfigMaps and Secrets of the pod's namespace, by name; `None` = does not exist.
#[derive(Debug, Default, Clone)]
pub struct Sources {
    pub config_maps: BTreeMap<String, Option<ConfigMap>>,
    pub secrets: BTreeMap<String, Option<Secret>>,
}

impl Sources {
    pub fn config_map_data(&self, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
        let cm = self.config_maps.get(name)?.as_ref()?;
        let mut data: BTreeMap<String, Vec<u8>> = cm
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_bytes().to_vec()))
            .collect();
        data.extend(
            cm.binary_data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.0.clone())),
        );
        Some(data)
    }

    pub fn secret_data(&self, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
        let secret = self.secrets.get(name)?.as_ref()?;
        let mut data: BTreeMap<String, Vec<u8>> = secret
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect();
        // stringData is write-only in the API, but fixtures built in memory may use it.
        data.extend(
            secret
                .string_data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_bytes().to_vec())),
        );
        Some(data)
    }
}

/// Names of the ConfigMaps and Secrets a container's environment refers to.
pub fn referenced_sources(container: &Container) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut cms = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    for from in container.env_from.iter().flatten() {
        if let Some(r) = &from.config_map_ref {
            cms.insert(r.name.clone());
        }
        if let Some(r) = &from.secret_ref {
            secrets.insert(r.name.clone());
        }
    }
    for var in container.env.iter().flatten() {
        let Some(from) = &var.value_from else { continue };
        if let Some(r) = &from.config_map_key_ref {
            cms.insert(r.name.clone());
        }
        if let Some(r) = &from.secret_key_ref {
            secrets.insert(r.name.clone());
        }
    }
    (cms, secrets)
}

/// An ordered environment where a later definition replaces an earlier one in place.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Env(Vec<(String, String)>);

impl Env {
    pub fn set(&mut self, name: &str, value: String) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name.to_string(), value)),
        }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub fn vars(&self) -> &[(String, String)] {
        &self.0
    }

    /// `$(VAR)` expansion against this environment.
    pub fn expand(&self, input: &str) -> String {
        expand(input, |name| self.get(name).map(str::to_string))
    }
}

/// Kubernetes' `$(VAR)` expansion (k8s.io/kubernetes third_party/forked/golang/expansion):
/// `$(NAME)` becomes the value when NAME is defined and stays as written otherwise, `$$`
/// is an escaped `$`, and any other `$` is literal.
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut checkpoint = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            out.push_str(&input[checkpoint..i]);
            let rest = &input[i + 1..];
            let consumed = match rest.as_bytes()[0] {
                b'$' => {
                    out.push('$');
                    1
                }
                b'(' => match rest.find(')') {
                    Some(close) => {
                        let name = &rest[1..close];
                        match lookup(name) {
                            Some(v) => out.push_str(&v),
                            None => {
                                out.push_str("$(");
                                out.push_str(name);
                                out.push(')');
                            }
                        }
                        close + 1
                    }
                    None => {
                        out.push_str("$(");
                        1
                    }
                },
                _ => {
                    // Keep `$` and the following character (which may be multi-byte).
                    let ch = rest.chars().next().unwrap_or('$');
                    out.push('$');
                    out.push(ch);
                    ch.len_utf8()
                }
            };
            i += 1 + consumed;
            checkpoint = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&input[checkpoint..]);
    out
}

/// Builds a container's environment. `service_env` are variables the kubelet adds for
/// names the pod does not define itself (like `KUBERNETES_SERVICE_HOST`). The error is
/// the message of the container's `CreateContainerConfigError`.
pub fn build_env(
    facts: &PodFacts<'_>,
    container: &Container,
    sources: &Sources,
    service_env: &[(String, String)],
) -> Result<Env, String> {
    let ns = facts.pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut env = Env::default();
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (data, optional, what) = if let Some(r) = &from.config_map_ref {
            let data = sources.config_map_data(&r.name);
            (
                data,
                r.optional.unwrap_or(false),
                format!("configmap {:?}", r.name),
            )
        } else if let Some(r) = &from.secret_ref {
            let data = sources.secret_data(&r.name);
            (data, r.optional.unwrap_or(false), format!("secret {:?}", r.name))
        } else {
            continue;
        };
        match data {
            Some(data) => {
                for (k, v) in data {
                    let name = format!("{prefix}{k}");
                    // The kubelet skips keys that are not valid variable names (with an event).
                    if is_env_name(&name) {
                        env.set(&name, String::from_utf8_lossy(&v).into_owned());
                    }
                }
            }
            None if optional => {}
            None => return Err(format!("{what} not found")),
        }
    }
    let defined_before = |env: &Env, name: &str| {
        env.get(name).map(str::to_string).or_else(|| {
            service_env
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        })
    };
    for var in container.env.iter().flatten() {
        let value = if let Some(from) = &var.value_from {
            if let Some(f) = &from.field_ref {
                field_value(facts, &f.field_path)?
            } else if let Some(r) = &from.resource_field_ref {
                resource_value(container, &r.resource, r.divisor.as_ref())?
            } else if let Some(r) = &from.config_map_key_ref {
                match key_value(sources.config_map_data(&r.name), &r.key) {
                    KeyLookup::Found(v) => v,
                    _ if r.optional.unwrap_or(false) => continue,
                    KeyLookup::NoObject => return Err(format!("configmap {:?} not found", r.name)),
                    KeyLookup::NoKey => {
                        return Err(format!(
                            "couldn't find key {} in ConfigMap {ns}/{}",
                            r.key, r.name
                        ));
                    }
                }
            } else if let Some(r) = &from.secret_key_ref {
                match key_value(sources.secret_data(&r.name), &r.key) {
                    KeyLookup::Found(v) => v,
                    _ if r.optional.unwrap_or(false) => continue,
                    KeyLookup::NoObject => return Err(format!("secret {:?} not found", r.name)),
                    KeyLookup::NoKey => {
                        return Err(format!("couldn't find key {} in Secret {ns}/{}", r.key, r.name));
                    }
                }
            } else {
                String::new()
            }
        } else {
            let raw = var.value.clone().unwrap_or_default();
            expand(&raw, |name| defined_before(&env, name))
        };
        env.set(&var.name, value);
    }
    for (name, value) in service_env {
        if env.get(name).is_none() {
            env.set(name, value.clone());
        }
    }
    Ok(env)
}

enum KeyLookup {
    Found(String),
    NoObject,
    NoKey,
}

fn key_value(data: Option<BTreeMap<String, Vec<u8>>>, key: &str) -> KeyLookup {
    match data {
        None => KeyLookup::NoObject,
        Some(d) => match d.get(key) {
            Some(v) => KeyLookup::Found(String::from_utf8_lossy(v).into_owned()),
            None => KeyLookup::NoKey,
        },
    }
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
}

/// A downward-API `fieldRef` value.
pub fn field_value(facts: &PodFacts<'_>, path: &str) -> Result<String, String> {
    let meta = &facts.pod.metadata;
    let spec = facts.pod.spec.as_ref();
    let subscripted = |prefix: &str, map: Option<&BTreeMap<String, String>>| -> Option<String> {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(map.and_then(|m| m.get(key)).cloned().unwrap_or_default())
    };
    if let Some(v) = subscripted("metadata.labels['", meta.labels.as_ref()) {
        return Ok(v);
    }
    if let Some(v) = subscripted("metadata.annotations['", meta.annotations.as_ref()) {
        return Ok(v);
    }
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.podIPs" => facts.pod_ip.clone(),
        "status.hostIP" | "status.hostIPs" => facts.host_ip.clone(),
        other => return Err(format!("unsupported fieldRef fieldPath {other:?}")),
    })
}

/// `key="value"` lines, sorted, as the downward API writes labels and annotations.
fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A downward-API `resourceFieldRef` value: the container's limit (node capacity when it
/// has none) or request, divided by `divisor` and rounded up, as Kubernetes does.
pub fn resource_value(
    container: &Container,
    resource: &str,
    divisor: Option<&Quantity>,
) -> Result<String, String> {
    let (kind, name) = resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported resource {resource:?}"))?;
    let lookup = |r: &ResourceRequirements| {
        let map = if kind == "limits" { &r.limits } else { &r.requests };
        map.as_ref().and_then(|m| m.get(name)).map(|q| q.0.clone())
    };
    let value = container.resources.as_ref().and_then(lookup);
    let value = match (kind, value) {
        (_, Some(v)) => v,
        ("limits", None) => match name {
            "cpu" => NODE_CPU.into(),
            "memory" => NODE_MEMORY.into(),
            "ephemeral-storage" => NODE_EPHEMERAL_STORAGE.into(),
            _ => return Err(format!("unsupported resource {resource:?}")),
        },
        ("requests", None) => "0".into(),
        _ => return Err(format!("unsupported resource {resource:?}")),
    };
    let value = parse_quantity(&value).ok_or_else(|| format!("bad quantity {value:?}"))?;
    let divisor = match divisor {
        Some(d) => parse_quantity(&d.0).ok_or_else(|| format!("bad divisor {:?}", d.0))?,
        None => 1.0,
    };
    if divisor <= 0.0 {
        return Err(format!("bad divisor for {resource}"));
    }
    Ok(format!("{}", (value / divisor).ceil() as i64))
}

/// Parses a Kubernetes quantity (`500m`, `2`, `32Gi`, `1k`, `1e3`) to a number.
pub fn parse_quantity(q: &str) -> Option<f64> {
    const SUFFIXES: &[(&str, f64)] = &[
        ("Ki", 1024.0),
        ("Mi", 1024.0 * 1024.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0),
        ("Ti", 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("Pi", 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("Ei", 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    let q = q.trim();
    for (suffix, factor) in SUFFIXES {
        if let Some(num) = q.strip_suffix(suffix) {
            return num.parse::<f64>().ok().map(|n| n * factor);
        }
    }
    q.parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ConfigMapEnvSource, ConfigMapKeySelector, EnvFromSource, EnvVar, EnvVarSource, ObjectFieldSelector,
        PodSpec, ResourceFieldSelector, SecretKeySelector,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn lookup(name: &str) -> Option<String> {
        match name {
            "A" => Some("a".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expansion_follows_kubernetes() {
        let cases = [
            ("$(A)", "a"),
            ("x$(A)y", "xay"),
            ("$(A)$(A)", "aa"),
            ("$(B)", "$(B)"),
            ("$$(A)", "$(A)"),
            ("$$$(A)", "$a"),
            ("$(EMPTY)x", "x"),
            ("$A", "$A"),
            ("$", "$"),
            ("x$", "x$"),
            ("$(A", "$(A"),
            ("$()", "$()"),
            ("€$(A)€", "€a€"),
            ("$€", "$€"),
            ("no vars", "no vars"),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, lookup), want, "{input}");
        }
    }

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                uid: Some("u-1".into()),
                labels: Some([("app".to_string(), "x".to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n-0".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn field(path: &str) -> Option<EnvVarSource> {
        Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn var(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            ..Default::default()
        }
    }

    fn sources() -> Sources {
        let cm = ConfigMap {
            data: Some(
                [
                    ("K".to_string(), "cm".to_string()),
                    ("bad key".to_string(), "x".to_string()),
                ]
                .into(),
            ),
            ..Default::default()
        };
        let secret = Secret {
            data: Some([("pw".to_string(), k8s_openapi::ByteString(b"s3cret".to_vec()))].into()),
            ..Default::default()
        };
        Sources {
            config_maps: [("cm".to_string(), Some(cm)), ("gone".to_string(), None)].into(),
            secrets: [("sec".to_string(), Some(secret))].into(),
        }
    }

    #[test]
    fn builds_env_in_kubernetes_order() {
        let pod = pod();
        let facts = PodFacts {
            pod: &pod,
            pod_ip: "127.1.1.1".into(),
            host_ip: "127.1.0.1".into(),
        };
        let container = Container {
            env_from: Some(vec![EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource {
                    name: "cm".into(),
                    optional: None,
                }),
                prefix: Some("CM_".into()),
                ..Default::default()
            }]),
            env: Some(vec![
                EnvVar {
                    name: "POD_IP".into(),
                    value_from: field("status.podIP"),
                    ..Default::default()
                },
                EnvVar {
                    name: "APP".into(),
                    value_from: field("metadata.labels['app']"),
                    ..Default::default()
                },
                var("ADDR", "$(POD_IP):$(PORT)"),
                var("PORT", "6379"),
                var("CM_K", "override $(CM_K)"),
                EnvVar {
                    name: "PW".into(),
                    value_from: Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: "sec".into(),
                            key: "pw".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                EnvVar {
                    name: "CPU".into(),
                    value_from: Some(EnvVarSource {
                        resource_field_ref: Some(ResourceFieldSelector {
                            resource: "limits.cpu".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                var("NS", "x"),
            ]),
            ..Default::default()
        };
        let service_env = [
            ("NS".to_string(), "svc".to_string()),
            ("SVC".to_string(), "1".to_string()),
        ];
        let env = build_env(&facts, &container, &sources(), &service_env).unwrap();
        let got: Vec<(&str, &str)> = env.vars().iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            got,
            [
                ("CM_K", "override cm"),
                ("POD_IP", "127.1.1.1"),
                ("APP", "x"),
                ("ADDR", "127.1.1.1:$(PORT)"),
                ("PORT", "6379"),
                ("PW", "s3cret"),
                ("CPU", "8"),
                ("NS", "x"),
                ("SVC", "1"),
            ]
        );
        assert_eq!(env.expand("--port $(PORT)"), "--port 6379");
    }

    #[test]
    fn missing_references_fail_unless_optional() {
        let pod = pod();
        let facts = PodFacts {
            pod: &pod,
            pod_ip: String::new(),
            host_ip: String::new(),
        };
        let key_ref = |name: &str, key: &str, optional| EnvVar {
            name: "X".into(),
            value_from: Some(EnvVarSource {
                config_map_key_ref: Some(ConfigMapKeySelector {
                    name: name.into(),
                    key: key.into(),
                    optional,
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let with = |v: EnvVar| Container {
            env: Some(vec![v]),
            ..Default::default()
        };
        let err = build_env(&facts, &with(key_ref("gone", "K", None)), &sources(), &[]).unwrap_err();
        assert_eq!(err, "configmap \"gone\" not found");
        let err = build_env(&facts, &with(key_ref("cm", "nope", None)), &sources(), &[]).unwrap_err();
        assert_eq!(err, "couldn't find key nope in ConfigMap ns/cm");
        let env = build_env(&facts, &with(key_ref("gone", "K", Some(true))), &sources(), &[]).unwrap();
        assert!(env.vars().is_empty());
    }

    #[test]
    fn quantities_and_resource_values() {
        assert_eq!(parse_quantity("500m"), Some(0.5));
        assert_eq!(parse_quantity("32Gi"), Some(32.0 * 1024.0 * 1024.0 * 1024.0));
        assert_eq!(parse_quantity("1e3"), Some(1000.0));
        let c = Container::default();
        assert_eq!(
            resource_value(&c, "limits.memory", Some(&Quantity("1Mi".into()))).unwrap(),
            "32768"
        );
        assert_eq!(resource_value(&c, "requests.cpu", None).unwrap(), "0");
    }

    #[test]
    fn labels_are_formatted_like_the_downward_api() {
        let pod = pod();
        let facts = PodFacts {
            pod: &pod,
            pod_ip: String::new(),
            host_ip: String::new(),
        };
        assert_eq!(field_value(&facts, "metadata.labels").unwrap(), "app=\"x\"");
        assert_eq!(field_value(&facts, "metadata.labels['missing']").unwrap(), "");
        assert!(field_value(&facts, "spec.bogus").is_err());
    }
}
