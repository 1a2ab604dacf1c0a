//! Pod volumes materialised as directories under the pod's work directory.
//!
//! ConfigMap, Secret, downward-API and projected volumes are written like the kubelet's
//! atomic writer: the files live in a timestamped directory, `..data` is a symlink to it
//! and every top-level name is a symlink through `..data`. An update swaps `..data` in one
//! rename, so a process never sees half of a new version, and a bind mount of the volume
//! directory shows the update (a `subPath` mount, as in Kubernetes, does not).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, ServiceAccount, Volume,
};
use kube::Api;
use kube::api::PostParams;

use super::env::{PodFacts, Sources, field_value, resource_value};

/// Kubernetes' default file mode for ConfigMap, Secret, downward-API and projected volumes.
pub const DEFAULT_MODE: i32 = 0o644;

/// One file of a volume, relative to the volume root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeFile {
    pub path: String,
    pub data: Vec<u8>,
    pub mode: u32,
}

/// Checks a volume item path as the API server does: relative, no `..` element.
fn checked_path(path: &str) -> Result<String, String> {
    let p = Path::new(path);
    let ok = !path.is_empty()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_)) && !c.as_os_str().to_string_lossy().starts_with(".."));
    if ok {
        Ok(path.to_string())
    } else {
        Err(format!("invalid volume item path {path:?}"))
    }
}

/// The files of a ConfigMap or Secret volume (or projection): every key, or only `items`
/// with their `path` and `mode`. `data == None` means the object does not exist.
pub fn project_keys(
    data: Option<&BTreeMap<String, Vec<u8>>>,
    items: Option<&[KeyToPath]>,
    default_mode: Option<i32>,
    optional: bool,
    what: &str,
) -> Result<Vec<VolumeFile>, String> {
    let mode = default_mode.unwrap_or(DEFAULT_MODE) as u32 & 0o7777;
    let Some(data) = data else {
        return if optional {
            Ok(Vec::new())
        } else {
            Err(format!("{what} not found"))
        };
    };
    match items {
        None => data
            .iter()
            .map(|(k, v)| {
                Ok(VolumeFile {
                    path: checked_path(k)?,
                    data: v.clone(),
                    mode,
                })
            })
            .collect(),
        Some(items) => {
            let mut files = Vec::new();
            for item in items {
                match data.get(&item.key) {
                    Some(v) => files.push(VolumeFile {
                        path: checked_path(&item.path)?,
                        data: v.clone(),
                        mode: item.mode.map(|m| m as u32 & 0o7777).unwrap_or(mode),
                    }),
                    None if optional => {}
                    None => return Err(format!("{what} has no key {:?}", item.key)),
                }
            }
            Ok(files)
        }
    }
}

/// The files of a downward-API volume (or projection).
pub fn downward_files(
    facts: &PodFacts<'_>,
    items: &[DownwardAPIVolumeFile],
    default_mode: Option<i32>,
) -> Result<Vec<VolumeFile>, String> {
    let mode = default_mode.unwrap_or(DEFAULT_MODE) as u32 & 0o7777;
    let containers = facts.pod.spec.iter().flat_map(|s| s.containers.iter());
    let containers: Vec<_> = containers.collect();
    items
        .iter()
        .map(|item| {
            let value = if let Some(f) = &item.field_ref {
                field_value(facts, &f.field_path)?
            } else if let Some(r) = &item.resource_field_ref {
                let name = r.container_name.as_deref().unwrap_or_default();
                let c = containers
                    .iter()
                    .find(|c| c.name == name)
                    .ok_or_else(|| format!("no container {name:?} for resourceFieldRef"))?;
                resource_value(c, &r.resource, r.divisor.as_ref())?
            } else {
                String::new()
            };
            Ok(VolumeFile {
                path: checked_path(&item.path)?,
                data: value.into_bytes(),
                mode: item.mode.map(|m| m as u32 & 0o7777).unwrap_or(mode),
            })
        })
        .collect()
}

/// Names of the ConfigMaps and Secrets the pod's volumes use.
pub fn referenced_sources(pod: &Pod) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut cms = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        if let Some(cm) = &v.config_map {
            cms.insert(cm.name.clone());
        }
        if let Some(s) = &v.secret {
            secrets.extend(s.secret_name.clone());
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(cm) = &src.config_map {
                cms.insert(cm.name.clone());
            }
            if let Some(s) = &src.secret {
                secrets.insert(s.name.clone());
            }
        }
    }
    (cms, secrets)
}

/// Fetches ConfigMaps and Secrets of `ns` by name (a missing one is recorded as `None`).
pub async fn fetch_sources(
    client: &kube::Client,
    ns: &str,
    config_maps: &BTreeSet<String>,
    secrets: &BTreeSet<String>,
) -> Result<Sources> {
    let mut sources = Sources::default();
    let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for name in config_maps {
        let cm = cm_api
            .get_opt(name)
            .await
            .with_context(|| format!("get configmap {ns}/{name}"))?;
        sources.config_maps.insert(name.clone(), cm);
    }
    let secret_api: Api<Secret> = Api::namespaced(client.clone(), ns);
    for name in secrets {
        let s = secret_api
            .get_opt(name)
            .await
            .with_context(|| format!("get secret {ns}/{name}"))?;
        sources.secrets.insert(name.clone(), s);
    }
    Ok(sources)
}

/// Writes `files` into `dir` atomically (see the module comment). Returns whether
/// anything changed; an unchanged volume is not touched, so watchers see no churn.
pub fn write_atomic(dir: &Path, files: &[VolumeFile]) -> std::io::Result<bool> {
    std::fs::create_dir_all(dir)?;
    if current_files(dir)?.as_deref() == Some(files) {
        return Ok(false);
    }
    let stamp = format!(
        "..{}_{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
        std::process::id()
    );
    let data_dir = dir.join(&stamp);
    std::fs::create_dir(&data_dir)?;
    for f in files {
        let path = data_dir.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, &f.data)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(f.mode))?;
    }
    let old_target = std::fs::read_link(dir.join("..data")).ok();
    let tmp_link = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp_link);
    symlink(&stamp, &tmp_link)?;
    std::fs::rename(&tmp_link, dir.join("..data"))?;

    let top: BTreeSet<String> = files
        .iter()
        .filter_map(|f| Path::new(&f.path).components().next())
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    for name in &top {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(Path::new("..data").join(name), &link)?;
        }
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !top.contains(&name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if let Some(old) = old_target {
        let old = dir.join(old);
        if old != data_dir {
            let _ = std::fs::remove_dir_all(old);
        }
    }
    Ok(true)
}

/// The files currently published in `dir` (sorted like `files` is expected to be, by
/// path), or `None` when nothing was written yet.
fn current_files(dir: &Path) -> std::io::Result<Option<Vec<VolumeFile>>> {
    let data = dir.join("..data");
    if std::fs::symlink_metadata(&data).is_err() {
        return Ok(None);
    }
    fn walk(root: &Path, rel: &Path, out: &mut Vec<VolumeFile>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(root.join(rel))? {
            let entry = entry?;
            let rel_path = rel.join(entry.file_name());
            let meta = entry.metadata()?;
            if meta.is_dir() {
                walk(root, &rel_path, out)?;
            } else {
                out.push(VolumeFile {
                    path: rel_path.to_string_lossy().into_owned(),
                    data: std::fs::read(entry.path())?,
                    mode: meta.permissions().mode() & 0o7777,
                });
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(&data, Path::new(""), &mut out)?;
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Some(out))
}

/// Sorts files by path and lets a later file with the same path win, which is how
/// projected sources overlap in Kubernetes.
fn normalised(files: Vec<VolumeFile>) -> Vec<VolumeFile> {
    let mut by_path: BTreeMap<String, VolumeFile> = BTreeMap::new();
    for f in files {
        by_path.insert(f.path.clone(), f);
    }
    by_path.into_values().collect()
}

/// A bound service-account token and when to fetch a new one.
struct CachedToken {
    token: String,
    refresh_at: Instant,
}

/// Materialises and refreshes the volumes of one pod.
pub struct PodVolumes {
    root: PathBuf,
    tokens: HashMap<(String, String, i64), CachedToken>,
}

impl PodVolumes {
    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            tokens: HashMap::new(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Writes every volume of the pod; returns the host directory (or file) of each volume
    /// by name. Errors name the volume, like the kubelet's `FailedMount` events.
    pub async fn materialise(
        &mut self,
        client: &kube::Client,
        facts: &PodFacts<'_>,
        sources: &Sources,
    ) -> Result<BTreeMap<String, PathBuf>> {
        let mut dirs = BTreeMap::new();
        let volumes = facts.pod.spec.iter().flat_map(|s| s.volumes.iter().flatten());
        for volume in volumes {
            let dir = self
                .materialise_one(client, facts, sources, volume)
                .await
                .with_context(|| format!("MountVolume.SetUp failed for volume {:?}", volume.name))?;
            dirs.insert(volume.name.clone(), dir);
        }
        Ok(dirs)
    }

    async fn materialise_one(
        &mut self,
        client: &kube::Client,
        facts: &PodFacts<'_>,
        sources: &Sources,
        v: &Volume,
    ) -> Result<PathBuf> {
        let dir = self.root.join(&v.name);
        let files = if v.empty_dir.is_some() {
            std::fs::create_dir_all(&dir)?;
            return Ok(dir);
        } else if let Some(hp) = &v.host_path {
            let path = PathBuf::from(&hp.path);
            if hp.type_.as_deref() == Some("DirectoryOrCreate") {
                std::fs::create_dir_all(&path)?;
            }
            if !path.exists() {
                bail!("hostPath {} does not exist", path.display());
            }
            return Ok(path);
        } else if let Some(cm) = &v.config_map {
            let what = format!("configmap {:?}", cm.name);
            project_keys(
                sources.config_map_data(&cm.name).as_ref(),
                cm.items.as_deref(),
                cm.default_mode,
                cm.optional.unwrap_or(false),
                &what,
            )
            .map_err(|e| anyhow!(e))?
        } else if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let what = format!("secret {name:?}");
            project_keys(
                sources.secret_data(&name).as_ref(),
                s.items.as_deref(),
                s.default_mode,
                s.optional.unwrap_or(false),
                &what,
            )
            .map_err(|e| anyhow!(e))?
        } else if let Some(d) = &v.downward_api {
            downward_files(facts, d.items.as_deref().unwrap_or_default(), d.default_mode)
                .map_err(|e| anyhow!(e))?
        } else if let Some(p) = &v.projected {
            let mut files = Vec::new();
            for src in p.sources.iter().flatten() {
                if let Some(cm) = &src.config_map {
                    let what = format!("configmap {:?}", cm.name);
                    files.extend(
                        project_keys(
                            sources.config_map_data(&cm.name).as_ref(),
                            cm.items.as_deref(),
                            p.default_mode,
                            cm.optional.unwrap_or(false),
                            &what,
                        )
                        .map_err(|e| anyhow!(e))?,
                    );
                } else if let Some(s) = &src.secret {
                    let what = format!("secret {:?}", s.name);
                    files.extend(
                        project_keys(
                            sources.secret_data(&s.name).as_ref(),
                            s.items.as_deref(),
                            p.default_mode,
                            s.optional.unwrap_or(false),
                            &what,
                        )
                        .map_err(|e| anyhow!(e))?,
                    );
                } else if let Some(d) = &src.downward_api {
                    files.extend(
                        downward_files(facts, d.items.as_deref().unwrap_or_default(), p.default_mode)
                            .map_err(|e| anyhow!(e))?,
                    );
                } else if let Some(t) = &src.service_account_token {
                    let token = self
                        .token(
                            client,
                            facts.pod,
                            t.audience.clone().unwrap_or_default(),
                            t.expiration_seconds,
                        )
                        .await?;
                    files.push(VolumeFile {
                        path: checked_path(&t.path).map_err(|e| anyhow!(e))?,
                        data: token.into_bytes(),
                        mode: p.default_mode.unwrap_or(DEFAULT_MODE) as u32 & 0o7777,
                    });
                } else {
                    bail!("projected volume source not supported by the process kubelet");
                }
            }
            files
        } else {
            bail!(
                "volume type not supported by the process kubelet (supported: configMap, secret, downwardAPI, projected, emptyDir, hostPath)"
            );
        };
        write_atomic(&dir, &normalised(files))?;
        Ok(dir)
    }

    /// A token for the pod's service account, bound to the pod, fetched through the
    /// TokenRequest API and renewed at 80% of its lifetime (as the kubelet does).
    async fn token(
        &mut self,
        client: &kube::Client,
        pod: &Pod,
        audience: String,
        expiration: Option<i64>,
    ) -> Result<String> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let sa = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let expiration = expiration.unwrap_or(3600);
        let key = (sa.clone(), audience.clone(), expiration);
        if let Some(cached) = self.tokens.get(&key)
            && Instant::now() < cached.refresh_at
        {
            return Ok(cached.token.clone());
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: if audience.is_empty() {
                    Vec::new()
                } else {
                    vec![audience]
                },
                expiration_seconds: Some(expiration),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: pod.metadata.name.clone(),
                    uid: pod.metadata.uid.clone(),
                }),
            },
            ..Default::default()
        };
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
        let answer = api
            .create_token_request(&sa, &PostParams::default(), &request)
            .await
            .with_context(|| format!("request token for serviceaccount {ns}/{sa}"))?;
        let token = answer
            .status
            .map(|s| s.token)
            .ok_or_else(|| anyhow!("token request for {ns}/{sa} returned no token"))?;
        let lifetime = Duration::from_secs(expiration.max(1) as u64);
        self.tokens.insert(
            key,
            CachedToken {
                token: token.clone(),
                refresh_at: Instant::now() + lifetime.mul_f64(0.8),
            },
        );
        Ok(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ObjectFieldSelector, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn data() -> BTreeMap<String, Vec<u8>> {
        [
            ("redis.conf".to_string(), b"maxclients 77\n".to_vec()),
            ("users.acl".to_string(), b"user x on\n".to_vec()),
        ]
        .into()
    }

    fn item(key: &str, path: &str, mode: Option<i32>) -> KeyToPath {
        KeyToPath {
            key: key.into(),
            path: path.into(),
            mode,
        }
    }

    #[test]
    fn all_keys_with_the_default_mode() {
        let files = project_keys(Some(&data()), None, None, false, "cm").unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!((files[0].path.as_str(), files[0].mode), ("redis.conf", 0o644));
        let files = project_keys(Some(&data()), None, Some(0o400), false, "cm").unwrap();
        assert!(files.iter().all(|f| f.mode == 0o400));
    }

    #[test]
    fn items_select_keys_paths_and_modes() {
        let items = [item("users.acl", "acl/users.acl", Some(0o600))];
        let files = project_keys(Some(&data()), Some(&items), Some(0o444), false, "s").unwrap();
        assert_eq!(
            files,
            [VolumeFile {
                path: "acl/users.acl".into(),
                data: b"user x on\n".to_vec(),
                mode: 0o600
            }]
        );
    }

    #[test]
    fn missing_objects_and_keys_fail_unless_optional() {
        assert_eq!(
            project_keys(None, None, None, false, "configmap \"x\"").unwrap_err(),
            "configmap \"x\" not found"
        );
        assert!(project_keys(None, None, None, true, "x").unwrap().is_empty());
        let items = [item("nope", "nope", None)];
        assert!(project_keys(Some(&data()), Some(&items), None, false, "x").is_err());
        assert!(
            project_keys(Some(&data()), Some(&items), None, true, "x")
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn rejects_escaping_paths() {
        for bad in ["../x", "/etc/passwd", "a/../../b", "..data"] {
            let items = [item("redis.conf", bad, None)];
            assert!(
                project_keys(Some(&data()), Some(&items), None, false, "x").is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn downward_api_files() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(PodSpec::default()),
            ..Default::default()
        };
        let facts = PodFacts {
            pod: &pod,
            pod_ip: "127.1.1.1".into(),
            host_ip: String::new(),
        };
        let items = [DownwardAPIVolumeFile {
            path: "name".into(),
            field_ref: Some(ObjectFieldSelector {
                field_path: "metadata.name".into(),
                ..Default::default()
            }),
            ..Default::default()
        }];
        let files = downward_files(&facts, &items, None).unwrap();
        assert_eq!(files[0].data, b"p");
    }

    #[test]
    fn atomic_writer_publishes_and_swaps_versions() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("vol");
        let v1 = normalised(project_keys(Some(&data()), None, None, false, "x").unwrap());
        assert!(write_atomic(&dir, &v1).unwrap());
        assert_eq!(std::fs::read(dir.join("redis.conf")).unwrap(), b"maxclients 77\n");
        assert!(
            !write_atomic(&dir, &v1).unwrap(),
            "unchanged content is not rewritten"
        );

        let items = [item("redis.conf", "conf/redis.conf", Some(0o600))];
        let v2 = normalised(project_keys(Some(&data()), Some(&items), None, false, "x").unwrap());
        assert!(write_atomic(&dir, &v2).unwrap());
        assert!(!dir.join("redis.conf").exists(), "stale key removed");
        let f = dir.join("conf/redis.conf");
        assert_eq!(std::fs::read(&f).unwrap(), b"maxclients 77\n");
        assert_eq!(std::fs::metadata(&f).unwrap().permissions().mode() & 0o777, 0o600);
        let versions = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                let n = e.as_ref().unwrap().file_name();
                let n = n.to_string_lossy();
                n.starts_with("..") && n != "..data"
            })
            .count();
        assert_eq!(versions, 1, "old version removed");
    }
}
