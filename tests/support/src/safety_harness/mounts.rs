//! What a worker pod would have mounted: the `<name>-client` Secret and the
//! `<name>-endpoints` ConfigMap as directories of files (one file per key), and an
//! `/etc/hosts` that resolves the published Service names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;

#[derive(Clone, Debug)]
pub struct Mounts {
    pub secret_dir: PathBuf,
    pub config_dir: PathBuf,
    pub hosts_file: PathBuf,
    pub counter_addr: String,
}

fn write_dir(dir: &Path, files: &BTreeMap<String, String>) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for (k, v) in files {
        std::fs::write(dir.join(k), v).with_context(|| format!("write {}", dir.join(k).display()))?;
    }
    Ok(())
}

pub fn write(
    dir: &Path,
    secret: &BTreeMap<String, String>,
    config: &BTreeMap<String, String>,
    extra_hosts: &str,
    counter_addr: &str,
) -> Result<Mounts> {
    let m = Mounts {
        secret_dir: dir.join("secret"),
        config_dir: dir.join("config"),
        hosts_file: dir.join("hosts"),
        counter_addr: counter_addr.to_owned(),
    };
    write_dir(&m.secret_dir, secret)?;
    write_dir(&m.config_dir, config)?;
    std::fs::write(
        &m.hosts_file,
        format!("{}{extra_hosts}", super::forwarder::HOSTS_HEADER),
    )?;
    Ok(m)
}

/// Mounts of another published Secret and ConfigMap in `dir`, sharing `base`'s hosts file and
/// counter server.
pub fn write_beside(
    dir: &Path,
    secret: &BTreeMap<String, String>,
    config: &BTreeMap<String, String>,
    base: &Mounts,
) -> Result<Mounts> {
    let m = Mounts {
        secret_dir: dir.join("secret"),
        config_dir: dir.join("config"),
        hosts_file: base.hosts_file.clone(),
        counter_addr: base.counter_addr.clone(),
    };
    write_dir(&m.secret_dir, secret)?;
    write_dir(&m.config_dir, config)?;
    Ok(m)
}

/// The Secret's and ConfigMap's data as the API server has them.
pub async fn read_published(
    client: kube::Client,
    ns: &str,
    name: &str,
) -> Result<(BTreeMap<String, String>, BTreeMap<String, String>)> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get(&format!("{name}-client"))
        .await?
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| Ok((k, String::from_utf8(v.0)?)))
        .collect::<Result<BTreeMap<_, _>>>()?;
    let config = Api::<ConfigMap>::namespaced(client, ns)
        .get(&format!("{name}-endpoints"))
        .await?
        .data
        .unwrap_or_default();
    Ok((secret, config))
}
