//! Resolves published Service names (`<svc>.<ns>.svc[.cluster.local]:<port>`) to the
//! addresses a client in the cluster would reach through cluster DNS and kube-proxy.
//!
//! On real nodes ([`Resolver::for_control_plane`]) it reads what kube-proxy reads: the
//! Service's EndpointSlices, as the real endpointslice controller wrote them, with kube-proxy's
//! choice of endpoints (ready ones; when none is, the serving ones that are terminating).
//!
//! Under the process kubelet it cannot: the API server refuses loopback addresses in Endpoints
//! and EndpointSlices (`ValidateEndpointIP`: "may not be in the loopback range"), every pod IP
//! there is loopback, and that control plane runs without the endpointslice controller. There
//! the resolver applies that controller's rules instead, to the same Service and Pod objects:
//! pods matched by the Service's selector, with an IP, not terminating, and Ready (unless
//! `publishNotReadyAddresses`), port resolved through `targetPort` (number or container port
//! name). Either way a Service with no serving endpoint resolves to nothing, so a client sees
//! a refused connection exactly as in a cluster.

use std::net::{IpAddr, SocketAddr};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Pod, Service, ServicePort};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use crate::ControlPlane;

#[derive(Clone)]
pub struct Resolver {
    client: Client,
    source: Source,
}

/// Where the endpoints come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The endpointslice controller's EndpointSlices (real nodes).
    EndpointSlices,
    /// That controller's rules applied to Pods (process kubelet: loopback pod IPs).
    PodRules,
}

/// The label the endpointslice controller puts on every slice of a Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// A parsed `<svc>.<ns>.svc[.cluster.local]:<port>`.
#[derive(Debug, PartialEq, Eq)]
pub struct ServiceAddress {
    pub service: String,
    pub namespace: String,
    pub port: i32,
}

impl ServiceAddress {
    pub fn parse(hostport: &str) -> Result<Self> {
        let (host, port) = hostport.rsplit_once(':').context("address needs a :port")?;
        let port: i32 = port.parse().with_context(|| format!("bad port in {hostport}"))?;
        let host = host.strip_suffix(".cluster.local").unwrap_or(host);
        let host = host.strip_suffix('.').unwrap_or(host);
        let parts: Vec<&str> = host.split('.').collect();
        match parts.as_slice() {
            [service, namespace, "svc"] => Ok(Self {
                service: (*service).to_owned(),
                namespace: (*namespace).to_owned(),
                port,
            }),
            _ => bail!("{hostport} is not <service>.<namespace>.svc[.cluster.local]:<port>"),
        }
    }
}

impl Resolver {
    pub fn new(client: Client, source: Source) -> Self {
        Self { client, source }
    }

    /// What a client of `cp`'s cluster reaches: EndpointSlices where nodes are real, the
    /// controller's rules on Pods under the process kubelet.
    pub fn for_control_plane(cp: &ControlPlane) -> Self {
        let source = if cp.has_real_nodes() {
            Source::EndpointSlices
        } else {
            Source::PodRules
        };
        Self::new(cp.client(), source)
    }

    pub fn source(&self) -> Source {
        self.source
    }

    /// Addresses of the Service's serving endpoints, sorted; empty when none serves.
    pub async fn resolve(&self, hostport: &str) -> Result<Vec<SocketAddr>> {
        let addr = ServiceAddress::parse(hostport)?;
        let services: Api<Service> = Api::namespaced(self.client.clone(), &addr.namespace);
        let Some(svc) = services.get_opt(&addr.service).await? else {
            return Ok(vec![]);
        };
        let spec = svc.spec.clone().unwrap_or_default();
        let Some(port) = spec.ports.iter().flatten().find(|p| p.port == addr.port).cloned() else {
            return Ok(vec![]);
        };
        if self.source == Source::EndpointSlices {
            let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), &addr.namespace);
            let slices = slices
                .list(&ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}={}", addr.service)))
                .await?;
            // A headless name is answered by cluster DNS, which gives ready endpoints only;
            // kube-proxy (a ClusterIP) falls back to serving terminating ones.
            let headless = spec.cluster_ip.as_deref() == Some("None");
            return Ok(endpoints_from_slices(
                &slices.items,
                port.name.as_deref().unwrap_or(""),
                !headless,
            ));
        }
        let Some(selector) = spec.selector.filter(|s| !s.is_empty()) else {
            return Ok(vec![]);
        };
        let label_selector = selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &addr.namespace);
        let pods = pods.list(&ListParams::default().labels(&label_selector)).await?;
        let publish_not_ready = spec.publish_not_ready_addresses.unwrap_or(false);
        let mut out: Vec<SocketAddr> = pods
            .items
            .iter()
            .filter_map(|p| endpoint_of(p, &port, publish_not_ready))
            .collect();
        out.sort();
        Ok(out)
    }
}

/// kube-proxy's endpoints for the Service port named `port_name` ("" for an unnamed one), from
/// the Service's slices: the ready ones; when none is ready and `terminating_fallback`, the
/// serving ones that are terminating (kube-proxy's fallback, so connections drain; cluster DNS
/// for a headless Service has none). One address per endpoint (the API says consumers use the
/// first), duplicates across slices (a slice being rewritten) once.
pub fn endpoints_from_slices(
    slices: &[EndpointSlice],
    port_name: &str,
    terminating_fallback: bool,
) -> Vec<SocketAddr> {
    let mut ready = Vec::new();
    let mut terminating = Vec::new();
    for slice in slices {
        if !matches!(slice.address_type.as_str(), "IPv4" | "IPv6") {
            continue;
        }
        let Some(port) = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref().unwrap_or("") == port_name)
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        for e in &slice.endpoints {
            let Some(ip) = e.addresses.first().and_then(|a| a.parse::<IpAddr>().ok()) else {
                continue;
            };
            let c = e.conditions.clone().unwrap_or_default();
            // An unset `ready` means ready, `serving` defaults to `ready` (the API's rules).
            let is_ready = c.ready.unwrap_or(true);
            let serving = c.serving.unwrap_or(is_ready);
            if is_ready {
                ready.push(SocketAddr::new(ip, port));
            } else if serving && c.terminating == Some(true) {
                terminating.push(SocketAddr::new(ip, port));
            }
        }
    }
    let mut out = if ready.is_empty() && terminating_fallback {
        terminating
    } else {
        ready
    };
    out.sort();
    out.dedup();
    out
}

/// The endpointslice controller's view of one pod for one service port.
pub fn endpoint_of(pod: &Pod, port: &ServicePort, publish_not_ready: bool) -> Option<SocketAddr> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?;
    let ip: IpAddr = status.pod_ip.as_deref()?.parse().ok()?;
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if !ready && !publish_not_ready {
        return None;
    }
    let target = match &port.target_port {
        None => port.port,
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(name)) => pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port)?,
    };
    Some(SocketAddr::new(ip, u16::try_from(target).ok()?))
}

/// Name of the pod, for messages.
pub fn pod_name(p: &Pod) -> String {
    p.name_any()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ContainerPort, PodCondition, PodSpec, PodStatus};

    fn pod(ip: Option<&str>, ready: bool) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "redis".into(),
                    ports: Some(vec![ContainerPort {
                        name: Some("redis".into()),
                        container_port: 6379,
                        ..Default::default()
                    }]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                pod_ip: ip.map(str::to_owned),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn port(target: Option<IntOrString>) -> ServicePort {
        ServicePort {
            port: 6379,
            target_port: target,
            ..Default::default()
        }
    }

    /// An endpoint's address and its (ready, serving, terminating) conditions.
    type TestEndpoint<'a> = (&'a str, Option<bool>, Option<bool>, Option<bool>);

    fn slice(port: Option<(&str, i32)>, endpoints: &[TestEndpoint<'_>]) -> EndpointSlice {
        use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
        EndpointSlice {
            address_type: "IPv4".into(),
            endpoints: endpoints
                .iter()
                .map(|&(ip, ready, serving, terminating)| Endpoint {
                    addresses: vec![ip.into()],
                    conditions: Some(EndpointConditions {
                        ready,
                        serving,
                        terminating,
                    }),
                    ..Default::default()
                })
                .collect(),
            ports: port.map(|(name, n)| {
                vec![EndpointPort {
                    name: Some(name.into()),
                    port: Some(n),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }
    }

    #[test]
    fn slices_give_kube_proxys_endpoints() {
        let a = |s: &str| -> SocketAddr { s.parse().unwrap() };
        let t = Some(true);
        let f = Some(false);
        // Ready ones only, sorted and once across slices; the port by the Service port's name.
        let slices = [
            slice(
                Some(("redis", 6379)),
                &[("10.0.0.2", t, t, f), ("10.0.0.3", f, f, f)],
            ),
            slice(
                Some(("redis", 6379)),
                &[("10.0.0.1", None, None, None), ("10.0.0.2", t, t, f)],
            ),
        ];
        assert_eq!(
            endpoints_from_slices(&slices, "redis", true),
            [a("10.0.0.1:6379"), a("10.0.0.2:6379")]
        );
        assert!(endpoints_from_slices(&slices, "other", true).is_empty());
        // No ready endpoint: the serving terminating ones; not the not-serving ones.
        let draining = [slice(
            Some(("", 7000)),
            &[
                ("10.0.0.4", f, t, t),
                ("10.0.0.5", f, f, t),
                ("10.0.0.6", f, t, f),
            ],
        )];
        assert_eq!(endpoints_from_slices(&draining, "", true), [a("10.0.0.4:7000")]);
        // A headless name (cluster DNS): ready ones only, no fallback.
        assert!(endpoints_from_slices(&draining, "", false).is_empty());
        // A held member's slice: its endpoint not ready, nothing to reach.
        let held = [slice(Some(("", 6379)), &[("10.0.0.7", f, f, f)])];
        assert!(endpoints_from_slices(&held, "", true).is_empty());
        // A slice without ports (no selector match yet) gives nothing.
        assert!(endpoints_from_slices(&[slice(None, &[("10.0.0.8", t, t, f)])], "", true).is_empty());
    }

    #[test]
    fn parses_service_names() {
        let a = ServiceAddress::parse("locks-0.ns1.svc.cluster.local:6379").unwrap();
        assert_eq!(
            a,
            ServiceAddress {
                service: "locks-0".into(),
                namespace: "ns1".into(),
                port: 6379
            }
        );
        assert_eq!(ServiceAddress::parse("locks-0.ns1.svc:1").unwrap().port, 1);
        assert!(ServiceAddress::parse("locks-0:6379").is_err());
        assert!(ServiceAddress::parse("locks-0.ns1.svc").is_err());
    }

    #[test]
    fn only_ready_pods_with_an_ip_serve() {
        let p = port(None);
        assert_eq!(
            endpoint_of(&pod(Some("127.9.1.1"), true), &p, false),
            Some("127.9.1.1:6379".parse().unwrap())
        );
        assert_eq!(endpoint_of(&pod(Some("127.9.1.1"), false), &p, false), None);
        assert!(endpoint_of(&pod(Some("127.9.1.1"), false), &p, true).is_some());
        assert_eq!(endpoint_of(&pod(None, true), &p, false), None);
        let mut terminating = pod(Some("127.9.1.1"), true);
        terminating.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ));
        assert_eq!(endpoint_of(&terminating, &p, false), None);
    }

    #[test]
    fn target_port_by_number_or_name() {
        let ready = pod(Some("127.9.1.1"), true);
        assert_eq!(
            endpoint_of(&ready, &port(Some(IntOrString::Int(7000))), false)
                .unwrap()
                .port(),
            7000
        );
        assert_eq!(
            endpoint_of(&ready, &port(Some(IntOrString::String("redis".into()))), false)
                .unwrap()
                .port(),
            6379
        );
        assert_eq!(
            endpoint_of(&ready, &port(Some(IntOrString::String("nope".into()))), false),
            None
        );
    }
}
