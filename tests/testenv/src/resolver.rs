//! Resolves published Service names (`<svc>.<ns>.svc[.cluster.local]:<port>`) to the
//! addresses a client in the cluster would reach through cluster DNS and kube-proxy.
//!
//! Why not read EndpointSlices: the API server refuses loopback addresses in Endpoints and
//! EndpointSlices (`ValidateEndpointIP`: "may not be in the loopback range"), and every pod
//! IP here is loopback, so the endpointslice controller can never publish them. This
//! resolver applies that controller's rules instead, to the same Service and Pod objects:
//! pods matched by the Service's selector, with an IP, not terminating, and Ready (unless
//! `publishNotReadyAddresses`), port resolved through `targetPort` (number or container port
//! name). A Service with no such pod resolves to nothing, so a client sees a refused
//! connection exactly as in a cluster.

use std::net::{IpAddr, SocketAddr};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

#[derive(Clone)]
pub struct Resolver {
    client: Client,
}

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
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    /// Addresses of the Service's serving endpoints; empty when none serves.
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
