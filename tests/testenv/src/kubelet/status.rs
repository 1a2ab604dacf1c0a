//! Pod status from the kubelet's view of its containers, computed the way the kubelet does
//! (`getPhase`, `GeneratePodReadyCondition`, …). Pure: the caller passes `now`, and the
//! previous status so a condition's `lastTransitionTime` only moves when it flips.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// One container as the kubelet currently sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerView {
    pub name: String,
    pub image: String,
    pub image_id: String,
    pub container_id: Option<String>,
    pub state: ContainerState,
    pub last_terminated: Option<ContainerStateTerminated>,
    pub restart_count: i32,
    pub ready: bool,
    pub started: bool,
}

/// The pod as the kubelet currently sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodView {
    pub host_ip: String,
    pub pod_ip: Option<String>,
    pub start_time: Timestamp,
    /// Volumes are set up and the address is assigned (the "sandbox").
    pub sandbox_ready: bool,
    pub init_containers: Vec<ContainerView>,
    pub containers: Vec<ContainerView>,
    /// The pod was deleted and everything in it has stopped: the phase becomes terminal.
    pub terminated: bool,
}

fn terminated(c: &ContainerView) -> Option<&ContainerStateTerminated> {
    c.state.terminated.as_ref()
}

fn init_complete(c: &ContainerView) -> bool {
    terminated(c).is_some_and(|t| t.exit_code == 0)
}

/// The kubelet's `getPhase`.
pub fn phase(restart_policy: &str, view: &PodView) -> &'static str {
    let init_failed = restart_policy == "Never"
        && view
            .init_containers
            .iter()
            .any(|c| terminated(c).is_some_and(|t| t.exit_code != 0));
    if init_failed {
        return "Failed";
    }
    let init_pending = !view.init_containers.iter().all(init_complete);
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for c in &view.containers {
        if c.state.running.is_some() {
            running += 1;
        } else if let Some(t) = terminated(c) {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if c.last_terminated.is_some() {
            stopped += 1;
        } else {
            waiting += 1;
        }
    }
    if (init_pending && !view.terminated) || waiting > 0 {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped == 0 {
        return "Pending";
    }
    if view.terminated {
        return if stopped == succeeded {
            "Succeeded"
        } else {
            "Failed"
        };
    }
    match restart_policy {
        "Always" => "Running",
        _ if stopped == succeeded => "Succeeded",
        "Never" => "Failed",
        _ => "Running",
    }
}

fn condition(type_: &str, ok: bool, reason: Option<String>, message: Option<String>) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason,
        message,
        ..Default::default()
    }
}

fn names(list: &[&ContainerView]) -> String {
    let names: Vec<&str> = list.iter().map(|c| c.name.as_str()).collect();
    format!("[{}]", names.join(" "))
}

/// The four conditions the kubelet owns, in the kubelet's order.
fn conditions(pod: &Pod, view: &PodView, phase: &str) -> Vec<PodCondition> {
    let completed = phase == "Succeeded";
    let sandbox = condition(
        "PodReadyToStartContainers",
        view.sandbox_ready && !view.terminated,
        None,
        None,
    );

    let incomplete: Vec<&ContainerView> = view
        .init_containers
        .iter()
        .filter(|c| !init_complete(c))
        .collect();
    let initialized = if incomplete.is_empty() {
        condition(
            "Initialized",
            true,
            completed.then(|| "PodCompleted".into()),
            None,
        )
    } else {
        condition(
            "Initialized",
            false,
            Some("ContainersNotInitialized".into()),
            Some(format!(
                "containers with incomplete status: {}",
                names(&incomplete)
            )),
        )
    };

    let unready: Vec<&ContainerView> = view.containers.iter().filter(|c| !c.ready).collect();
    let containers_ready = if unready.is_empty() && !completed {
        condition("ContainersReady", true, None, None)
    } else if completed {
        condition("ContainersReady", false, Some("PodCompleted".into()), None)
    } else {
        condition(
            "ContainersReady",
            false,
            Some("ContainersNotReady".into()),
            Some(format!("containers with unready status: {}", names(&unready))),
        )
    };

    let ready = if containers_ready.status != "True" {
        PodCondition {
            type_: "Ready".into(),
            ..containers_ready.clone()
        }
    } else {
        match readiness_gates_problem(pod) {
            None => condition("Ready", true, None, None),
            Some(message) => condition(
                "Ready",
                false,
                Some("ReadinessGatesNotReady".into()),
                Some(message),
            ),
        }
    };
    vec![sandbox, initialized, ready, containers_ready]
}

/// Why the pod's readiness gates hold it back, if they do: every gate's condition (set
/// by some controller) must be present and True.
fn readiness_gates_problem(pod: &Pod) -> Option<String> {
    let gates = pod.spec.as_ref()?.readiness_gates.as_ref()?;
    let existing = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    let problems: Vec<String> = gates
        .iter()
        .filter_map(|g| {
            let c = existing.and_then(|cs| cs.iter().find(|c| c.type_ == g.condition_type));
            match c {
                None => Some(format!(
                    "corresponding condition of pod readiness gate {:?} does not exist.",
                    g.condition_type
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate {:?} is not \"True\", but {}",
                    g.condition_type, c.status
                )),
                Some(_) => None,
            }
        })
        .collect();
    (!problems.is_empty()).then(|| problems.join(", "))
}

fn container_status(c: &ContainerView) -> ContainerStatus {
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone(),
        image_id: c.image_id.clone(),
        container_id: c.container_id.clone(),
        state: Some(c.state.clone()),
        last_state: Some(ContainerState {
            terminated: c.last_terminated.clone(),
            ..Default::default()
        }),
        restart_count: c.restart_count,
        ready: c.ready,
        started: Some(c.started),
        ..Default::default()
    }
}

/// The status the kubelet reports. `previous` (the last status written, else the one in
/// the API) supplies `lastTransitionTime`s of conditions that did not flip.
pub fn build_status(pod: &Pod, view: &PodView, previous: Option<&PodStatus>, now: Timestamp) -> PodStatus {
    let restart_policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.clone())
        .unwrap_or_else(|| "Always".into());
    let phase = phase(&restart_policy, view);
    let previous_conditions = previous.and_then(|s| s.conditions.as_ref());
    let conditions = conditions(pod, view, phase)
        .into_iter()
        .map(|mut c| {
            let before = previous_conditions.and_then(|cs| cs.iter().find(|p| p.type_ == c.type_));
            c.last_transition_time = match before {
                Some(b) if b.status == c.status && b.last_transition_time.is_some() => {
                    b.last_transition_time.clone()
                }
                _ => Some(Time(now)),
            };
            c
        })
        .collect();
    let mut containers: Vec<ContainerStatus> = view.containers.iter().map(container_status).collect();
    // The kubelet sorts regular containers by name; init containers stay in spec order.
    containers.sort_by(|a, b| a.name.cmp(&b.name));
    let init: Vec<ContainerStatus> = view.init_containers.iter().map(container_status).collect();
    PodStatus {
        phase: Some(phase.into()),
        conditions: Some(conditions),
        host_ip: Some(view.host_ip.clone()),
        host_ips: Some(vec![HostIP {
            ip: view.host_ip.clone(),
        }]),
        pod_ip: view.pod_ip.clone(),
        pod_ips: view.pod_ip.clone().map(|ip| vec![PodIP { ip }]),
        start_time: Some(Time(view.start_time)),
        container_statuses: Some(containers),
        init_container_statuses: (!init.is_empty()).then_some(init),
        ..Default::default()
    }
}

/// The status as a strategic-merge patch body. Conditions merge by type, so conditions of
/// other writers (readiness gates, DisruptionTarget) survive; `reason` and `message` are
/// sent as explicit nulls when absent so an old reason does not outlive its condition.
pub fn status_patch(status: &PodStatus) -> serde_json::Value {
    let mut value = serde_json::to_value(status).unwrap_or_default();
    if let Some(conditions) = value.get_mut("conditions").and_then(|c| c.as_array_mut()) {
        for c in conditions {
            if let Some(obj) = c.as_object_mut() {
                for key in ["reason", "message"] {
                    obj.entry(key).or_insert(serde_json::Value::Null);
                }
            }
        }
    }
    serde_json::json!({ "status": value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerStateRunning, ContainerStateWaiting, PodReadinessGate, PodSpec,
    };

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn running(name: &str, ready: bool) -> ContainerView {
        ContainerView {
            name: name.into(),
            image: "redis:7.4".into(),
            image_id: "process:///usr/bin/redis-server".into(),
            container_id: Some("process://42".into()),
            state: ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(Time(ts(1))),
                }),
                ..Default::default()
            },
            last_terminated: None,
            restart_count: 0,
            ready,
            started: true,
        }
    }

    fn waiting(name: &str, reason: &str) -> ContainerView {
        ContainerView {
            container_id: None,
            state: ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.into()),
                    message: None,
                }),
                ..Default::default()
            },
            ready: false,
            started: false,
            ..running(name, false)
        }
    }

    fn exited(name: &str, code: i32) -> ContainerView {
        ContainerView {
            state: ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: code,
                    ..Default::default()
                }),
                ..Default::default()
            },
            ready: false,
            started: false,
            ..running(name, false)
        }
    }

    fn view(init: Vec<ContainerView>, containers: Vec<ContainerView>) -> PodView {
        PodView {
            host_ip: "127.1.0.1".into(),
            pod_ip: Some("127.1.1.1".into()),
            start_time: ts(0),
            sandbox_ready: true,
            init_containers: init,
            containers,
            terminated: false,
        }
    }

    #[test]
    fn phases_like_the_kubelet() {
        let cases: Vec<(&str, PodView, &str)> = vec![
            ("Always", view(vec![], vec![running("a", true)]), "Running"),
            (
                "Always",
                view(vec![], vec![waiting("a", "ImageNotMapped")]),
                "Pending",
            ),
            (
                "Always",
                view(vec![waiting("i", "PodInitializing")], vec![waiting("a", "x")]),
                "Pending",
            ),
            (
                "Never",
                view(vec![exited("i", 1)], vec![waiting("a", "x")]),
                "Failed",
            ),
            (
                "OnFailure",
                view(vec![exited("i", 1)], vec![waiting("a", "x")]),
                "Pending",
            ),
            (
                "Never",
                view(vec![], vec![exited("a", 0), exited("b", 0)]),
                "Succeeded",
            ),
            (
                "Never",
                view(vec![], vec![exited("a", 0), exited("b", 2)]),
                "Failed",
            ),
            (
                "Never",
                view(vec![], vec![exited("a", 0), running("b", true)]),
                "Running",
            ),
            ("OnFailure", view(vec![], vec![exited("a", 0)]), "Succeeded"),
            ("Always", view(vec![], vec![exited("a", 0)]), "Running"),
        ];
        for (policy, v, want) in cases {
            assert_eq!(phase(policy, &v), want, "{policy} {v:?}");
        }
        let mut crash = waiting("a", "CrashLoopBackOff");
        crash.last_terminated = Some(ContainerStateTerminated {
            exit_code: 137,
            ..Default::default()
        });
        assert_eq!(phase("Always", &view(vec![], vec![crash])), "Running");
        let mut deleted = view(vec![], vec![exited("a", 0)]);
        deleted.terminated = true;
        assert_eq!(phase("Always", &deleted), "Succeeded");
    }

    fn pod(gates: &[&str], existing: Vec<PodCondition>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                readiness_gates: (!gates.is_empty()).then(|| {
                    gates
                        .iter()
                        .map(|g| PodReadinessGate {
                            condition_type: g.to_string(),
                        })
                        .collect()
                }),
                ..Default::default()
            }),
            status: Some(PodStatus {
                conditions: Some(existing),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn cond<'a>(s: &'a PodStatus, t: &str) -> &'a PodCondition {
        s.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == t)
            .unwrap()
    }

    #[test]
    fn ready_needs_ready_containers_and_true_gates() {
        let v = view(vec![], vec![running("b", true), running("a", false)]);
        let s = build_status(&pod(&[], vec![]), &v, None, ts(5));
        assert_eq!(cond(&s, "Ready").status, "False");
        assert_eq!(
            cond(&s, "ContainersReady").message.as_deref(),
            Some("containers with unready status: [a]")
        );
        let names: Vec<&str> = s
            .container_statuses
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["a", "b"], "sorted by name");

        let v = view(vec![], vec![running("a", true)]);
        let s = build_status(&pod(&["example.com/gate"], vec![]), &v, None, ts(5));
        assert_eq!(cond(&s, "ContainersReady").status, "True");
        assert_eq!(
            cond(&s, "Ready").reason.as_deref(),
            Some("ReadinessGatesNotReady")
        );
        let gate_false = vec![condition("example.com/gate", false, None, None)];
        let s = build_status(&pod(&["example.com/gate"], gate_false), &v, None, ts(5));
        assert!(
            cond(&s, "Ready")
                .message
                .as_deref()
                .unwrap()
                .contains("but False")
        );
        let gate_true = vec![condition("example.com/gate", true, None, None)];
        let s = build_status(&pod(&["example.com/gate"], gate_true), &v, None, ts(5));
        assert_eq!(cond(&s, "Ready").status, "True");
        assert_eq!(s.pod_ip.as_deref(), Some("127.1.1.1"));
        assert_eq!(s.phase.as_deref(), Some("Running"));
    }

    #[test]
    fn transition_times_move_only_on_flips() {
        let p = pod(&[], vec![]);
        let s1 = build_status(&p, &view(vec![], vec![running("a", false)]), None, ts(1));
        let s2 = build_status(&p, &view(vec![], vec![running("a", false)]), Some(&s1), ts(2));
        assert_eq!(s1, s2, "nothing changed, nothing to write");
        let s3 = build_status(&p, &view(vec![], vec![running("a", true)]), Some(&s2), ts(3));
        assert_eq!(cond(&s3, "Ready").last_transition_time, Some(Time(ts(3))));
        assert_eq!(cond(&s3, "Initialized").last_transition_time, Some(Time(ts(1))));
    }

    #[test]
    fn init_containers_gate_initialized() {
        let v = view(
            vec![exited("a", 0), waiting("b", "PodInitializing")],
            vec![waiting("c", "PodInitializing")],
        );
        let s = build_status(&pod(&[], vec![]), &v, None, ts(1));
        assert_eq!(
            cond(&s, "Initialized").message.as_deref(),
            Some("containers with incomplete status: [b]")
        );
        assert_eq!(s.init_container_statuses.as_ref().unwrap().len(), 2);
    }

    #[test]
    fn patch_nulls_absent_reasons() {
        let s = build_status(
            &pod(&[], vec![]),
            &view(vec![], vec![running("a", true)]),
            None,
            ts(1),
        );
        let patch = status_patch(&s);
        let ready = patch["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert!(ready["reason"].is_null() && ready.as_object().unwrap().contains_key("reason"));
        assert_eq!(patch["status"]["podIPs"][0]["ip"], "127.1.1.1");
    }
}
