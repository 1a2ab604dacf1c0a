//! The Pod of one slot. Pods are managed directly (no StatefulSet): the operator decides
//! when each instance is created, and every instance starts fenced.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, ExecAction, ObjectFieldSelector, Pod, PodAffinityTerm, PodAntiAffinity, PodReadinessGate,
    PodSecurityContext, PodSpec, Probe, SeccompProfile, SecretKeySelector, SecretVolumeSource,
    SecurityContext, TCPSocketAction, TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use kube::api::ObjectMeta;

use super::config::{ACL_DIR, CONFIG_DIR, DATA_DIR, REDIS_CONF_KEY, TLS_CA_KEY, TLS_DIR, listener_args};
use super::hash::{SPEC_HASH, spec_hash};
use super::names::{
    CLIENT_USER_ENV, LABEL_INSTANCE, POD_UID_TAG, REDIS_CONTAINER, REDIS_PORT, SERVING_CONDITION,
    acl_secret_name, admin_secret_name, config_map_name, slot_labels, slot_name,
};
use super::secrets::{PROBE_PASSWORD_KEY, acl_file_key, client_user};
use crate::crd::model::Slot;
use crate::crd::{RedlockCluster, Spread, UnstoppedProcess};

const HOSTNAME_KEY: &str = "kubernetes.io/hostname";
const ZONE_KEY: &str = "topology.kubernetes.io/zone";

/// How often the kubelet runs the startup probe (the client login) while a container has not
/// passed it yet: while its process is held, and once after its release.
pub(crate) const STARTUP_PERIOD_SECONDS: i32 = 5;

/// The startup probe's check, "a lock client can log in and PING". `redis-cli` exits 0 even
/// on NOAUTH, WRONGPASS or NOPERM, so the reply itself is checked. The password comes from
/// `REDISCLI_AUTH`, never the command line.
/// With TLS the probe checks the server's certificate against the cluster's CA (redis-cli
/// does not match the host name, so the pod IP works).
pub(crate) fn login_check_command(auth_enabled: bool, tls: bool) -> Vec<String> {
    let login = if auth_enabled {
        " --user \"$REDIS_CLIENT_USER\" --no-auth-warning"
    } else {
        ""
    };
    let tls = if tls {
        format!(" --tls --cacert {TLS_DIR}/{TLS_CA_KEY}")
    } else {
        String::new()
    };
    vec![
        "sh".into(),
        "-c".into(),
        format!("redis-cli{tls} -h \"$POD_IP\" -p {REDIS_PORT}{login} ping 2>/dev/null | grep -q '^PONG$'"),
    ]
}

/// Annotation of a replacement pod: the record (JSON, as `status.members[].unstopped` spells
/// it) of the process its slot's previous pod left behind, never seen to stop, when the pod
/// was made. It is the second record of that process: a status wiped or restored without it
/// would otherwise forget it, and release the replacement after one hold while the old
/// process may still grant locks (docs/model-check.md, "Findings").
pub const UNSTOPPED_PREDECESSOR: &str = "redlock.dev/unstopped-predecessor";

/// The pod of `slot`, built to replace one whose process was never seen to stop
/// (`predecessor`), which it records in [`UNSTOPPED_PREDECESSOR`]; [`pod`] when there is none.
pub fn replacement(cluster: &RedlockCluster, slot: Slot, predecessor: Option<&UnstoppedProcess>) -> Pod {
    let mut p = pod(cluster, slot);
    if let Some(u) = predecessor {
        let record = serde_json::to_string(u).expect("an UnstoppedProcess always serializes");
        p.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(UNSTOPPED_PREDECESSOR.into(), record);
    }
    p
}

pub(crate) fn pod(cluster: &RedlockCluster, slot: Slot) -> Pod {
    let cluster_name = cluster.metadata.name.clone().unwrap_or_default();
    let spec = &cluster.spec;
    let template = &spec.pod_template;
    let mut labels = template.labels.clone();
    labels.extend(slot_labels(&cluster_name, slot));
    let (affinity, mut spread) = placement(cluster, &cluster_name);
    spread.extend(spec.scheduling.topology_spread_constraints.iter().cloned());
    Pod {
        metadata: ObjectMeta {
            name: Some(slot_name(&cluster_name, slot)),
            namespace: cluster.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some({
                let mut a = template.annotations.clone();
                a.insert(SPEC_HASH.into(), spec_hash(spec));
                a
            }),
            owner_references: cluster.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![redis_container(cluster, &cluster_name)],
            // Ready only while the operator has this pod's process released (`serving_gate`).
            readiness_gates: Some(vec![PodReadinessGate {
                condition_type: SERVING_CONDITION.into(),
            }]),
            restart_policy: Some("Always".into()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(10),
            priority_class_name: template.priority_class_name.clone(),
            image_pull_secrets: (!template.image_pull_secrets.is_empty())
                .then(|| template.image_pull_secrets.clone()),
            security_context: Some(pod_security(template.security_context.as_ref())),
            node_selector: (!spec.scheduling.node_selector.is_empty())
                .then(|| spec.scheduling.node_selector.clone()),
            tolerations: (!spec.scheduling.tolerations.is_empty())
                .then(|| spec.scheduling.tolerations.clone()),
            affinity,
            topology_spread_constraints: (!spread.is_empty()).then_some(spread),
            volumes: Some(volumes(cluster, &cluster_name)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The one container: `redis-server` with this pod's config, ACL file and listener.
fn redis_container(cluster: &RedlockCluster, cluster_name: &str) -> Container {
    let spec = &cluster.spec;
    Container {
        name: REDIS_CONTAINER.into(),
        image: Some(spec.image.clone()),
        command: Some(
            vec![
                "redis-server".into(),
                format!("{CONFIG_DIR}/{REDIS_CONF_KEY}"),
                // The process names its pod: the operator's probe and release read it back on the
                // connection that checks the run id, so an address reused by another pod's process
                // is never taken for this one (docs/design.md §9.6). The kubelet expands $(POD_UID).
                "--proc-title-template".into(),
                format!("{{title}} {{listen-addr}} {{server-mode}} {POD_UID_TAG}$(POD_UID)"),
                // The ACL file of this pod's auth mode, not the one redis.conf names (the spec's
                // now): a restart during an auth toggle's rollout keeps the process's users.
                "--aclfile".into(),
                format!("{ACL_DIR}/{}", acl_file_key(spec.auth.enabled)),
            ]
            .into_iter()
            .chain(listener_args(spec.tls.is_some()))
            .collect(),
        ),
        ports: Some(vec![ContainerPort {
            name: Some("redis".into()),
            container_port: i32::from(REDIS_PORT),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        env: Some(env_vars(cluster, cluster_name)),
        resources: spec.resources.clone(),
        startup_probe: Some(startup_probe(spec.auth.enabled, spec.tls.is_some())),
        readiness_probe: Some(readiness_probe()),
        liveness_probe: Some(liveness_probe()),
        // The restricted Pod Security Standard, at container level so that a pod-level
        // `podTemplate.securityContext` cannot loosen it. The root file system is read-only:
        // Redis writes only to its `dir`, the `data` emptyDir (and with no persistence, not
        // even there).
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Default::default()
            }),
            seccomp_profile: Some(runtime_default_seccomp()),
            ..Default::default()
        }),
        volume_mounts: Some(volume_mounts(spec.tls.is_some())),
        ..Default::default()
    }
}

/// The pod's address and UID (the process names its pod), the client user, and with auth the
/// password the startup probe logs in with.
fn env_vars(cluster: &RedlockCluster, cluster_name: &str) -> Vec<EnvVar> {
    let spec = &cluster.spec;
    let mut env = vec![
        EnvVar {
            name: "POD_IP".into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "status.podIP".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
        EnvVar {
            name: "POD_UID".into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.uid".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
        EnvVar {
            name: CLIENT_USER_ENV.into(),
            value: Some(client_user(cluster).into()),
            ..Default::default()
        },
    ];
    if spec.auth.enabled {
        env.push(EnvVar {
            name: "REDISCLI_AUTH".into(),
            value_from: Some(EnvVarSource {
                // The probe's own password of the client user, from the operator's Secret,
                // which exists whatever the spec says now (a container of this pod restarting
                // during an auth rollout must still start). Not a lock client's password: an
                // environment is fixed when the container starts, and a client password
                // rotation must not fail the probes of the containers started before it.
                // Optional: should the key be missing (an older operator's apply removed it),
                // the container still starts, held and fenced as always; only its probe fails
                // until the key is back.
                secret_key_ref: Some(SecretKeySelector {
                    name: admin_secret_name(cluster_name),
                    key: PROBE_PASSWORD_KEY.into(),
                    optional: Some(true),
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    env
}

/// Readiness is the operator's readiness gate ([`SERVING_CONDITION`]) plus two kubelet checks
/// that cost no process in the pod:
///
/// - The startup probe logs in as a lock client: a container is not started, so not Ready,
///   until its process lets lock clients in. Every process starts fenced, so a container
///   restarted while the operator is down (when no one would set the gate `False`) stays out
///   of every Service until a release. It runs only until it passes once per container start:
///   while the process is held, and not at all in steady state (an exec probe is a process,
///   under a real kubelet a `runc exec`: with 30 members on a node, a 1 s exec readiness probe
///   cost about a core). Its failure threshold is never reached (a hold can last as long as a
///   maintenance fence), so a held process is never restarted for refusing the client user;
///   liveness waits for it too.
/// - The readiness probe only asks "does the process accept connections", a dial by the
///   kubelet.
///
/// A fence of a running process (`kubectl redlock fence`, a rollout) clears the gate right
/// after the ACL change; the ACL is the fence, so a member refuses clients from that moment.
fn startup_probe(auth_enabled: bool, tls: bool) -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(login_check_command(auth_enabled, tls)),
        }),
        period_seconds: Some(STARTUP_PERIOD_SECONDS),
        timeout_seconds: Some(2),
        success_threshold: Some(1),
        // "Never": 2^31 periods of 5 s are 340 years.
        failure_threshold: Some(i32::MAX),
        ..Default::default()
    }
}

/// See [`startup_probe`]: the process accepts connections (the gate and the startup probe say
/// whether lock clients may use it).
fn readiness_probe() -> Probe {
    Probe {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::Int(i32::from(REDIS_PORT)),
            ..Default::default()
        }),
        period_seconds: Some(5),
        timeout_seconds: Some(2),
        success_threshold: Some(1),
        failure_threshold: Some(1),
        ..Default::default()
    }
}

/// Liveness only asks "does the process accept connections": a fenced instance must not be
/// restarted for refusing the client user.
fn liveness_probe() -> Probe {
    Probe {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::Int(i32::from(REDIS_PORT)),
            ..Default::default()
        }),
        period_seconds: Some(5),
        timeout_seconds: Some(2),
        failure_threshold: Some(3),
        ..Default::default()
    }
}

/// Where redis.conf, the ACL files, the data directory and (with TLS) the certificate appear.
fn volume_mounts(tls: bool) -> Vec<VolumeMount> {
    let mut mounts = vec![
        VolumeMount {
            name: "config".into(),
            mount_path: CONFIG_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        },
        VolumeMount {
            name: "acl".into(),
            mount_path: ACL_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        },
        VolumeMount {
            name: "data".into(),
            mount_path: DATA_DIR.into(),
            ..Default::default()
        },
    ];
    if tls {
        mounts.push(VolumeMount {
            name: "tls".into(),
            mount_path: TLS_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        });
    }
    mounts
}

/// redis.conf (ConfigMap), the ACL files (Secret, 0440), an emptyDir for Redis's `dir`, and
/// with TLS the user's certificate Secret.
fn volumes(cluster: &RedlockCluster, cluster_name: &str) -> Vec<Volume> {
    let mut volumes = vec![
        Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: config_map_name(cluster_name),
                ..Default::default()
            }),
            ..Default::default()
        },
        Volume {
            name: "acl".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(acl_secret_name(cluster_name)),
                default_mode: Some(0o440),
                ..Default::default()
            }),
            ..Default::default()
        },
        Volume {
            name: "data".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
    ];
    if let Some(tls) = &cluster.spec.tls {
        volumes.push(Volume {
            name: "tls".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(tls.secret_name.clone()),
                default_mode: Some(0o440),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    volumes
}

/// User and group of the `redis` account in the official redis and valkey images. Numeric,
/// because `runAsNonRoot` can only be verified for a numeric user.
const REDIS_UID: i64 = 999;

/// The pod's security context: the user's `podTemplate.securityContext` where it says
/// something, restricted defaults where it does not (non-root numeric user, RuntimeDefault
/// seccomp).
fn pod_security(user: Option<&PodSecurityContext>) -> PodSecurityContext {
    let mut sc = user.cloned().unwrap_or_default();
    sc.run_as_non_root.get_or_insert(true);
    if sc.run_as_user.is_none() {
        sc.run_as_user = Some(REDIS_UID);
        sc.run_as_group.get_or_insert(REDIS_UID);
        sc.fs_group.get_or_insert(REDIS_UID);
    }
    sc.seccomp_profile.get_or_insert_with(runtime_default_seccomp);
    sc
}

fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        ..Default::default()
    }
}

/// Affinity and spread constraints implied by `scheduling.spread`, merged with the user's
/// affinity. Independent failure domains are the point of N masters.
fn placement(
    cluster: &RedlockCluster,
    cluster_name: &str,
) -> (Option<Affinity>, Vec<TopologySpreadConstraint>) {
    let selector = LabelSelector {
        match_labels: Some(BTreeMap::from([(
            LABEL_INSTANCE.to_owned(),
            cluster_name.to_owned(),
        )])),
        ..Default::default()
    };
    let mut affinity = cluster.spec.scheduling.affinity.clone().unwrap_or_default();
    let mut spread = vec![];
    let one_per_node = |affinity: &mut Affinity, selector: LabelSelector| {
        affinity
            .pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(PodAffinityTerm {
                label_selector: Some(selector),
                topology_key: HOSTNAME_KEY.into(),
                ..Default::default()
            });
    };
    match cluster.spec.scheduling.spread {
        Spread::Host => one_per_node(&mut affinity, selector),
        // Even over zones, and never two on one node: a zone spread alone would let the
        // scheduler put two members of one zone on the same node.
        Spread::Zone => {
            one_per_node(&mut affinity, selector.clone());
            spread.push(TopologySpreadConstraint {
                max_skew: 1,
                topology_key: ZONE_KEY.into(),
                when_unsatisfiable: "DoNotSchedule".into(),
                label_selector: Some(selector),
                ..Default::default()
            });
        }
        Spread::None => {}
    }
    let empty = affinity.node_affinity.is_none()
        && affinity.pod_affinity.is_none()
        && affinity.pod_anti_affinity.is_none();
    ((!empty).then_some(affinity), spread)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::fixtures::cluster;

    #[test]
    fn slot_pod_is_owned_labelled_and_fenced_by_its_acl_file() {
        let p = pod(
            &cluster(json!({"maxLockTTL": "30s", "image": "redis:7.2"})),
            Slot::new(3),
        );
        assert_eq!(p.metadata.name.as_deref(), Some("locks-3"));
        let labels = p.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["redlock.dev/slot"], "3");
        assert_eq!(p.metadata.owner_references.as_ref().unwrap()[0].uid, "uid-1");
        let spec = p.spec.unwrap();
        assert_eq!(spec.automount_service_account_token, Some(false));
        let c = &spec.containers[0];
        assert_eq!(c.image.as_deref(), Some("redis:7.2"));
        assert_eq!(
            c.command.as_ref().unwrap(),
            &[
                "redis-server",
                "/etc/redis/redis.conf",
                "--proc-title-template",
                "{title} {listen-addr} {server-mode} pod=$(POD_UID)",
                "--aclfile",
                "/etc/redis-acl/users-auth.acl",
                "--port",
                "6379",
                "--tls-port",
                "0"
            ]
        );
        // The startup probe's login password is the probe's own, from the operator's Secret,
        // which exists in either auth mode (a client password rotation does not touch it).
        let auth = c
            .env
            .iter()
            .flatten()
            .find(|e| e.name == "REDISCLI_AUTH")
            .and_then(|e| e.value_from.as_ref()?.secret_key_ref.as_ref())
            .unwrap();
        assert_eq!(
            (auth.name.as_str(), auth.key.as_str()),
            ("locks-admin", "probePassword")
        );
        // The process names its pod: POD_UID comes from the pod's own UID.
        let uid = c
            .env
            .iter()
            .flatten()
            .find(|e| e.name == "POD_UID")
            .and_then(|e| e.value_from.as_ref()?.field_ref.as_ref())
            .unwrap();
        assert_eq!(uid.field_path, "metadata.uid");
        let startup = c.startup_probe.as_ref().unwrap();
        let probe = startup.exec.as_ref().unwrap().command.as_ref().unwrap();
        // Never given up on: a held process is not restarted for refusing the client user.
        assert_eq!(startup.failure_threshold, Some(i32::MAX));
        // Readiness is a dial plus the operator's gate: no process in the pod per period.
        let readiness = c.readiness_probe.as_ref().unwrap();
        assert!(
            readiness.exec.is_none() && readiness.tcp_socket.is_some(),
            "{readiness:?}"
        );
        let gates = spec.readiness_gates.as_ref().unwrap();
        assert_eq!(gates.len(), 1);
        assert_eq!(gates[0].condition_type, "redlock.dev/serving");
        assert!(probe[2].contains("--user \"$REDIS_CLIENT_USER\""), "{probe:?}");
        assert!(
            probe[2].contains("grep -q '^PONG$'"),
            "the reply is checked, not the exit code"
        );
        assert!(
            !probe[2].contains("REDISCLI_AUTH"),
            "password never on the command line"
        );
        let acl = spec
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == "acl")
            .unwrap();
        assert_eq!(
            acl.secret.as_ref().unwrap().secret_name.as_deref(),
            Some("locks-acl")
        );
    }

    #[test]
    fn the_pod_meets_the_restricted_pod_security_standard() {
        let p = pod(&cluster(json!({"maxLockTTL": "30s"})), Slot::new(0));
        let spec = p.spec.unwrap();
        assert_eq!(spec.automount_service_account_token, Some(false));
        let pod_sc = spec.security_context.unwrap();
        assert_eq!(pod_sc.run_as_non_root, Some(true));
        assert_eq!(pod_sc.run_as_user, Some(999));
        assert_eq!(pod_sc.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let c = &spec.containers[0];
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(
            sc.capabilities.as_ref().unwrap().drop.as_deref(),
            Some(&["ALL".to_owned()][..])
        );
        assert!(sc.capabilities.as_ref().unwrap().add.is_none());
        assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
        // With a read-only root, the one writable directory is Redis's `dir`, an emptyDir.
        let writable: Vec<&str> = c
            .volume_mounts
            .iter()
            .flatten()
            .filter(|m| m.read_only != Some(true))
            .map(|m| m.mount_path.as_str())
            .collect();
        assert_eq!(writable, vec![DATA_DIR]);
        let data = spec.volumes.iter().flatten().find(|v| v.name == "data").unwrap();
        assert!(data.empty_dir.is_some());
        // Only volume types the restricted standard allows, no host namespaces or ports.
        for v in spec.volumes.iter().flatten() {
            assert!(
                v.config_map.is_some() || v.secret.is_some() || v.empty_dir.is_some(),
                "{v:?}"
            );
        }
        assert!(spec.host_network.is_none() && spec.host_pid.is_none() && spec.host_ipc.is_none());
        assert!(c.ports.iter().flatten().all(|p| p.host_port.is_none()));
    }

    #[test]
    fn a_user_security_context_is_kept_and_completed() {
        let p = pod(
            &cluster(json!({"maxLockTTL": "30s", "podTemplate": {"securityContext": {
                "runAsUser": 1000, "supplementalGroups": [5]}}})),
            Slot::new(0),
        );
        let sc = p.spec.unwrap().security_context.unwrap();
        assert_eq!(sc.run_as_user, Some(1000));
        assert_eq!(
            (sc.run_as_group, sc.fs_group),
            (None, None),
            "the user's user, not our group"
        );
        assert_eq!(sc.supplemental_groups, Some(vec![5]));
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.seccomp_profile.unwrap().type_, "RuntimeDefault");
    }

    #[test]
    fn pod_template_fields_reach_the_pod() {
        let p = pod(
            &cluster(json!({"maxLockTTL": "30s", "podTemplate": {
                "priorityClassName": "locks-critical",
                "imagePullSecrets": [{"name": "registry-creds"}],
            }})),
            Slot::new(0),
        );
        let spec = p.spec.unwrap();
        assert_eq!(spec.priority_class_name.as_deref(), Some("locks-critical"));
        let secrets = spec.image_pull_secrets.unwrap();
        assert_eq!(secrets.len(), 1);
        assert_eq!(secrets[0].name, "registry-creds");
        // None asked for: the field stays out of the pod (no empty list to compare).
        let plain = pod(&cluster(json!({"maxLockTTL": "30s"})), Slot::new(0));
        assert_eq!(plain.spec.unwrap().image_pull_secrets, None);
    }

    #[test]
    fn resources_come_from_the_spec() {
        let p = pod(
            &cluster(json!({"maxLockTTL": "30s", "resources": {
                "requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}})),
            Slot::new(0),
        );
        let r = p.spec.unwrap().containers[0].resources.clone().unwrap();
        assert_eq!(r.requests.unwrap()["memory"].0, "64Mi");
        assert_eq!(r.limits.unwrap()["memory"].0, "128Mi");
    }

    #[test]
    fn tls_mounts_the_secret_and_the_probe_speaks_tls() {
        let p = pod(
            &cluster(json!({"maxLockTTL": "30s", "tls": {"secretName": "locks-tls"}})),
            Slot::new(0),
        );
        let spec = p.spec.unwrap();
        let tls = spec.volumes.iter().flatten().find(|v| v.name == "tls").unwrap();
        assert_eq!(
            tls.secret.as_ref().unwrap().secret_name.as_deref(),
            Some("locks-tls")
        );
        let c = &spec.containers[0];
        let mount = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == "tls")
            .unwrap();
        assert_eq!(
            (mount.mount_path.as_str(), mount.read_only),
            ("/etc/redis-tls", Some(true))
        );
        let probe = &c
            .startup_probe
            .as_ref()
            .unwrap()
            .exec
            .as_ref()
            .unwrap()
            .command
            .as_ref()
            .unwrap()[2];
        assert!(
            probe.starts_with("redis-cli --tls --cacert /etc/redis-tls/ca.crt "),
            "{probe}"
        );
        let plain = pod(&cluster(json!({"maxLockTTL": "30s"})), Slot::new(0));
        assert!(
            !plain
                .spec
                .unwrap()
                .volumes
                .iter()
                .flatten()
                .any(|v| v.name == "tls")
        );
    }

    #[test]
    fn spread_host_forbids_two_instances_per_node() {
        let p = pod(&cluster(json!({"maxLockTTL": "30s"})), Slot::new(0));
        let anti = p.spec.unwrap().affinity.unwrap().pod_anti_affinity.unwrap();
        let term = &anti.required_during_scheduling_ignored_during_execution.unwrap()[0];
        assert_eq!(term.topology_key, "kubernetes.io/hostname");
    }

    #[test]
    fn spread_zone_and_none() {
        let z = pod(
            &cluster(json!({"maxLockTTL": "30s", "scheduling": {"spread": "zone"}})),
            Slot::new(0),
        );
        let spec = z.spec.unwrap();
        assert_eq!(
            spec.topology_spread_constraints.unwrap()[0].topology_key,
            "topology.kubernetes.io/zone"
        );
        // And one per node, as with `host`.
        let terms = spec
            .affinity
            .unwrap()
            .pod_anti_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(terms.len(), 1);
        assert_eq!(terms[0].topology_key, "kubernetes.io/hostname");
        let n = pod(
            &cluster(json!({"maxLockTTL": "30s", "scheduling": {"spread": "none"}})),
            Slot::new(0),
        );
        let spec = n.spec.unwrap();
        assert!(spec.affinity.is_none() && spec.topology_spread_constraints.is_none());
    }
}
