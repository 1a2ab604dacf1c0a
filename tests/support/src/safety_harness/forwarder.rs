//! kube-proxy and cluster DNS for the workers. Each per-slot Service's ClusterIP is a loopback
//! address here (the control plane's service range is in 127.0.0.0/8), so the harness listens
//! on exactly `<ClusterIP>:6379` and forwards every new connection to one of the Service's
//! serving endpoints as `redlock_testenv::resolver` computes them from the Service and its Pods (the
//! endpointslice controller's rules). A Service with no serving endpoint refuses the
//! connection by closing it, as kube-proxy's REJECT rule does. The hosts lines map the
//! published names (`<name>-<i>.<ns>.svc`) to the ClusterIPs, as cluster DNS would.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use redlock_testenv::resolver::{Resolver, Source};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// How often the endpoints are re-read: kube-proxy, too, follows endpoint changes with a delay.
const REFRESH: Duration = Duration::from_millis(100);

pub struct Forwarders {
    tasks: Vec<JoinHandle<()>>,
    /// `/etc/hosts` lines for the Service names.
    pub hosts: String,
}

impl Drop for Forwarders {
    fn drop(&mut self) {
        // Aborting an accept task drops its JoinSet, which aborts its open connections.
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The hosts lines for `services`, and (with `forward`) a forwarder on each ClusterIP. Real
/// nodes need no forwarder: kube-proxy serves the ClusterIPs there.
pub async fn start(client: kube::Client, ns: &str, services: &[String], forward: bool) -> Result<Forwarders> {
    let api: Api<Service> = Api::namespaced(client.clone(), ns);
    // Only the process kubelet's runs forward (real nodes have kube-proxy), and its pod IPs are
    // loopback, which no EndpointSlice may hold: the endpointslice controller's rules on Pods.
    let resolver = Resolver::new(client, Source::PodRules);
    let mut tasks = Vec::new();
    let hosts = hosts_lines(&api, ns, services).await?;
    if !forward {
        return Ok(Forwarders { tasks, hosts });
    }
    for name in services {
        let ip = cluster_ip(&api, name).await?;
        let host = format!("{name}.{ns}.svc");
        let listener = TcpListener::bind(format!("{ip}:6379"))
            .await
            .with_context(|| format!("bind {ip}:6379 for service {name}"))?;
        let endpoints: Arc<Mutex<Vec<SocketAddr>>> = Arc::default();
        let (eps, r, h) = (endpoints.clone(), resolver.clone(), format!("{host}:6379"));
        tasks.push(tokio::spawn(async move {
            loop {
                // A failed read keeps the last known endpoints, as kube-proxy does.
                if let Ok(found) = r.resolve(&h).await {
                    *eps.lock().unwrap() = found;
                }
                tokio::time::sleep(REFRESH).await;
            }
        }));
        tasks.push(tokio::spawn(accept_loop(listener, endpoints)));
    }
    Ok(Forwarders { tasks, hosts })
}

impl Forwarders {
    /// Cluster DNS on real nodes: the hosts lines in `hosts_file` follow the Services'
    /// ClusterIPs. A Service deleted and created again (the cluster re-created, a slot retired
    /// by a scale-down and back with the scale-up) gets a new ClusterIP, and a client resolving
    /// its name must reach it there. The file is rewritten in place: the workers see it through
    /// a bind mount of this very inode. While a Service is missing the last lines stay (its old
    /// address leads nowhere, as a name without a Service resolves to nothing).
    pub fn follow_cluster_ips(
        &mut self,
        client: kube::Client,
        ns: &str,
        services: &[String],
        hosts_file: PathBuf,
    ) {
        let api: Api<Service> = Api::namespaced(client, ns);
        let (ns, services) = (ns.to_owned(), services.to_vec());
        let mut written = self.hosts.clone();
        self.tasks.push(tokio::spawn(async move {
            loop {
                tokio::time::sleep(DNS_REFRESH).await;
                let Ok(lines) = hosts_lines(&api, &ns, &services).await else {
                    continue;
                };
                if lines != written && std::fs::write(&hosts_file, format!("{HOSTS_HEADER}{lines}")).is_ok() {
                    written = lines;
                }
            }
        }));
    }
}

/// The first line of every hosts file the workers get.
pub const HOSTS_HEADER: &str = "127.0.0.1 localhost\n";

/// How often cluster DNS re-reads the Services on real nodes.
const DNS_REFRESH: Duration = Duration::from_millis(500);

async fn cluster_ip(api: &Api<Service>, name: &str) -> Result<String> {
    api.get(name)
        .await?
        .spec
        .and_then(|s| s.cluster_ip)
        .with_context(|| format!("service {name} has no ClusterIP"))
}

/// `/etc/hosts` lines mapping each Service's names to its ClusterIP, as cluster DNS would.
async fn hosts_lines(api: &Api<Service>, ns: &str, services: &[String]) -> Result<String> {
    let mut hosts = String::new();
    for name in services {
        let ip = cluster_ip(api, name).await?;
        let host = format!("{name}.{ns}.svc");
        hosts.push_str(&format!("{ip} {host} {host}.cluster.local\n"));
    }
    Ok(hosts)
}

async fn accept_loop(listener: TcpListener, endpoints: Arc<Mutex<Vec<SocketAddr>>>) {
    let mut conns = JoinSet::new();
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            continue;
        };
        while conns.try_join_next().is_some() {}
        let target = endpoints.lock().unwrap().first().copied();
        conns.spawn(async move {
            let Some(target) = target else {
                return; // no serving endpoint: the connection is refused
            };
            let Ok(Ok(mut outbound)) =
                tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(target)).await
            else {
                return;
            };
            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
        });
    }
}
