//! How a container becomes a process: its argv (image mapping, `$(VAR)` expansion, the
//! redis image's entrypoint rules, and the per-pod address), and the mount namespace that
//! puts its volumes at their `mountPath`s.
//!
//! A container runs as `unshare --mount -- sh -c '<bind mounts>; exec "$@"' sh <argv>`:
//! the mounts are private to the container, and both `unshare` (without `--fork`) and the
//! final `exec` keep the PID, so the PID the kubelet spawned is the container's process.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::core::v1::Container;

use super::env::Env;
use super::image::{Flavor, MappedImage, resolve_program};

/// Port a Redis container listens on when it declares none.
pub const DEFAULT_REDIS_PORT: i32 = 6379;

/// `PATH` of container processes and exec probes (after the kubelet's alias directory).
pub const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A materialised volume as mounts see it.
#[derive(Debug, Clone)]
pub struct VolumeDir {
    pub host_path: PathBuf,
    /// ConfigMap, Secret, downward-API and projected volumes are always read-only.
    pub always_read_only: bool,
}

/// One bind mount of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub source: PathBuf,
    pub target: String,
    pub read_only: bool,
    /// A file is bound onto a file (a `subPath` to a key), everything else onto a directory.
    pub is_file: bool,
}

fn safe_relative(path: &str) -> bool {
    Path::new(path)
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// The bind mounts of `container`, parents before children so nested mount paths work.
pub fn mounts_for(
    container: &Container,
    volumes: &BTreeMap<String, VolumeDir>,
    env: &Env,
) -> Result<Vec<Mount>, String> {
    let mut mounts = Vec::new();
    for vm in container.volume_mounts.iter().flatten() {
        let volume = volumes
            .get(&vm.name)
            .ok_or_else(|| format!("volumeMount {:?} refers to no volume of the pod", vm.name))?;
        let sub_path = match (&vm.sub_path, &vm.sub_path_expr) {
            (Some(p), _) if !p.is_empty() => p.clone(),
            (_, Some(expr)) if !expr.is_empty() => env.expand(expr),
            _ => String::new(),
        };
        if !safe_relative(&sub_path) {
            return Err(format!(
                "subPath {sub_path:?} of volumeMount {:?} must stay inside the volume",
                vm.name
            ));
        }
        if !vm.mount_path.starts_with('/') {
            return Err(format!("mountPath {:?} must be absolute", vm.mount_path));
        }
        let source = if sub_path.is_empty() {
            volume.host_path.clone()
        } else {
            volume.host_path.join(&sub_path)
        };
        // As the kubelet does, a missing subPath becomes an empty directory in the volume.
        if !source.exists() {
            std::fs::create_dir_all(&source)
                .map_err(|e| format!("create subPath {}: {e}", source.display()))?;
        }
        mounts.push(Mount {
            is_file: source.is_file(),
            source,
            target: vm.mount_path.clone(),
            read_only: vm.read_only.unwrap_or(false) || volume.always_read_only,
        });
    }
    mounts.sort_by_key(|m| Path::new(&m.target).components().count());
    Ok(mounts)
}

/// Where a path inside the container is on the host: under the mount that covers it, or
/// the same path (containers share the host's root file system).
pub fn host_path_of(path: &str, mounts: &[Mount]) -> PathBuf {
    let p = Path::new(path);
    mounts
        .iter()
        .rev()
        .find_map(|m| p.strip_prefix(&m.target).ok().map(|rest| m.source.join(rest)))
        .unwrap_or_else(|| p.to_path_buf())
}

/// The official redis and valkey images' `docker-entrypoint.sh`, which runs when a pod
/// sets only `args`: options or a `.conf` first mean `redis-server` was meant, and
/// `--protected-mode no` is added unless a given config file sets `protected-mode`
/// (protected mode would refuse every client not on 127.0.0.1).
pub fn redis_entrypoint(mut args: Vec<String>, config_sets: impl Fn(&str, &str) -> bool) -> Vec<String> {
    if args.is_empty() {
        args.push("redis-server".into());
    }
    if args[0].starts_with('-') || args[0].ends_with(".conf") {
        args.insert(0, "redis-server".into());
    }
    if !matches!(args[0].as_str(), "redis-server" | "valkey-server") {
        return args;
    }
    let config = args.get(1).filter(|a| !a.starts_with('-')).cloned();
    if config
        .as_deref()
        .is_some_and(|c| config_sets(c, "protected-mode"))
    {
        return args;
    }
    let at = if config.is_some() { 2 } else { 1 };
    args.splice(at..at, ["--protected-mode".to_string(), "no".to_string()]);
    args
}

/// The container's port: its first declared `containerPort`, else Redis' default.
pub fn first_port(container: &Container) -> i32 {
    container
        .ports
        .iter()
        .flatten()
        .next()
        .map(|p| p.container_port)
        .unwrap_or(DEFAULT_REDIS_PORT)
}

/// The argv of `container`. A Redis server always gets `--bind <podIP> --port <port>`
/// appended: every pod has its own loopback address, and the options win over any config
/// file. A server whose config file serves TLS (`tls-port`) gets `--port 0 --tls-port <port>`
/// instead, so it stays TLS only. `--daemonize no` keeps it in the foreground as in a
/// container. `config_sets(path, directive)` tells whether a config file sets a directive.
pub fn container_argv(
    container: &Container,
    mapped: &MappedImage,
    env: &Env,
    pod_ip: &str,
    config_sets: impl Fn(&str, &str) -> bool,
) -> Vec<String> {
    let command: Vec<String> = container
        .command
        .iter()
        .flatten()
        .map(|c| env.expand(c))
        .collect();
    let args: Vec<String> = container.args.iter().flatten().map(|a| env.expand(a)).collect();
    let mut argv = if !command.is_empty() {
        command.into_iter().chain(args).collect()
    } else {
        match mapped.flavor {
            Flavor::RedisServer => redis_entrypoint(args, &config_sets),
            Flavor::Extra => std::iter::once(mapped.program.display().to_string())
                .chain(args)
                .collect(),
        }
    };
    argv[0] = resolve_program(&argv[0], mapped);
    if mapped.flavor == Flavor::RedisServer && Path::new(&argv[0]) == mapped.program {
        let port = first_port(container).to_string();
        // The command line overrides the config file: its last `--tls-port` decides.
        let tls_arg = argv
            .windows(2)
            .rfind(|w| w[0] == "--tls-port")
            .map(|w| w[1] != "0");
        let tls = tls_arg.unwrap_or_else(|| {
            argv.get(1)
                .filter(|a| a.ends_with(".conf"))
                .is_some_and(|c| config_sets(c, "tls-port"))
        });
        argv.extend(["--bind".to_string(), pod_ip.to_string()]);
        if tls {
            argv.extend(["--port".into(), "0".into(), "--tls-port".into(), port]);
        } else {
            argv.extend(["--port".into(), port]);
        }
        argv.extend(["--daemonize".to_string(), "no".to_string()]);
    }
    argv
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The `sh -c` script that sets up the mounts inside the new mount namespace, changes to
/// the working directory and execs the container's argv (passed as `"$@"`).
pub fn wrapper_script(mounts: &[Mount], workdir: &str) -> String {
    let mut script = String::from("set -e\n");
    for m in mounts {
        let target = shell_quote(&m.target);
        if m.is_file {
            let parent = Path::new(&m.target).parent().map(|p| p.display().to_string());
            let parent = shell_quote(parent.as_deref().unwrap_or("/"));
            script.push_str(&format!(
                "[ -e {target} ] || {{ mkdir -p {parent}; : > {target}; }}\n"
            ));
        } else {
            script.push_str(&format!("mkdir -p {target}\n"));
        }
        script.push_str(&format!(
            "mount --bind {} {target}\n",
            shell_quote(&m.source.display().to_string())
        ));
        if m.read_only {
            script.push_str(&format!("mount -o remount,bind,ro {target}\n"));
        }
    }
    let workdir = shell_quote(workdir);
    script.push_str(&format!("mkdir -p {workdir}\ncd {workdir}\nexec \"$@\"\n"));
    script
}

/// Everything needed to start one container process.
#[derive(Debug, Clone)]
pub struct Launch {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub mounts: Vec<Mount>,
    pub workdir: String,
}

/// The working directory of a container: its `workingDir`, else the image's when a volume
/// is mounted there (the redis image's `/data`), else a private directory on the host.
pub fn workdir_for(
    container: &Container,
    mapped: Option<&MappedImage>,
    mounts: &[Mount],
    private: &Path,
) -> String {
    if let Some(dir) = container.working_dir.as_ref().filter(|d| !d.is_empty()) {
        return dir.clone();
    }
    if let Some(image_dir) = mapped.and_then(|m| m.workdir)
        && mounts.iter().any(|m| m.target.trim_end_matches('/') == image_dir)
    {
        return image_dir.to_string();
    }
    private.display().to_string()
}

/// The command that starts a container process.
pub fn container_command(launch: &Launch) -> Command {
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
        .arg(wrapper_script(&launch.mounts, &launch.workdir))
        .arg("sh")
        .args(&launch.argv)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)));
    cmd
}

/// The command that runs an exec probe inside the mount namespace `mount_ns` of its
/// container (what `kubectl exec` does in a real runtime), with the container's environment.
///
/// The child joins the namespace itself between fork and exec (`setns`), instead of running
/// `nsenter --target=<pid>`: that was one more program per probe (though the probes' CPU at
/// 600 pods barely moved, 59 % to 57 % of a core: `sh`, `redis-cli` and `grep` are most of
/// it), and it named the container by a PID that could have been reaped and reused by the
/// time it ran. The namespace file is opened by the process table while the
/// container is its unreaped child ([`super::proc_table::ProcTable::mount_namespace`]).
pub fn exec_probe_command(mount_ns: std::fs::File, argv: &[String], env: &[(String, String)]) -> Command {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)));
    // SAFETY: setns is a plain system call, safe between fork and exec; the forked child is
    // single-threaded, as joining a mount namespace requires. The file stays open (owned by
    // the closure) until the command is dropped, and is close-on-exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(mount_ns.as_raw_fd(), libc::CLONE_NEWNS) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::image::map_image;
    use k8s_openapi::api::core::v1::{ContainerPort, VolumeMount};

    fn env() -> Env {
        let mut env = Env::default();
        env.set("CONF", "/etc/redis/redis.conf".into());
        env
    }

    fn redis() -> MappedImage {
        map_image("redis:7.4", &[]).unwrap()
    }

    #[test]
    fn entrypoint_rules_of_the_redis_image() {
        let no = |_: &str, _: &str| false;
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            redis_entrypoint(vec![], no),
            s(&["redis-server", "--protected-mode", "no"])
        );
        assert_eq!(
            redis_entrypoint(s(&["/etc/r.conf", "--maxclients", "5"]), no),
            s(&[
                "redis-server",
                "/etc/r.conf",
                "--protected-mode",
                "no",
                "--maxclients",
                "5"
            ])
        );
        assert_eq!(
            redis_entrypoint(s(&["--appendonly", "no"]), no),
            s(&["redis-server", "--protected-mode", "no", "--appendonly", "no"])
        );
        assert_eq!(
            redis_entrypoint(s(&["redis-server", "/c.conf"]), |p, d| p == "/c.conf"
                && d == "protected-mode"),
            s(&["redis-server", "/c.conf"])
        );
        assert_eq!(redis_entrypoint(s(&["sh", "-c", "x"]), no), s(&["sh", "-c", "x"]));
    }

    #[test]
    fn redis_argv_gets_the_pod_address() {
        let c = Container {
            command: Some(vec!["redis-server".into(), "$(CONF)".into()]),
            ports: Some(vec![ContainerPort {
                container_port: 7000,
                ..Default::default()
            }]),
            ..Default::default()
        };
        let argv = container_argv(&c, &redis(), &env(), "127.3.1.1", |_, _| false);
        assert_eq!(
            argv,
            [
                "/usr/bin/redis-server",
                "/etc/redis/redis.conf",
                "--bind",
                "127.3.1.1",
                "--port",
                "7000",
                "--daemonize",
                "no"
            ]
        );
        let default = container_argv(&Container::default(), &redis(), &env(), "127.3.1.2", |_, _| false);
        assert_eq!(
            default,
            [
                "/usr/bin/redis-server",
                "--protected-mode",
                "no",
                "--bind",
                "127.3.1.2",
                "--port",
                "6379",
                "--daemonize",
                "no"
            ]
        );
    }

    #[test]
    fn a_tls_config_keeps_the_server_tls_only() {
        let c = Container {
            command: Some(vec!["redis-server".into(), "/etc/redis/redis.conf".into()]),
            ..Default::default()
        };
        let argv = container_argv(&c, &redis(), &env(), "127.3.1.1", |p, d| {
            p == "/etc/redis/redis.conf" && d == "tls-port"
        });
        assert_eq!(
            argv,
            [
                "/usr/bin/redis-server",
                "/etc/redis/redis.conf",
                "--bind",
                "127.3.1.1",
                "--port",
                "0",
                "--tls-port",
                "6379",
                "--daemonize",
                "no"
            ]
        );
    }

    #[test]
    fn the_command_line_decides_tls_over_the_config_file() {
        let with = |extra: &[&str]| Container {
            command: Some(
                ["redis-server", "/etc/redis/redis.conf"]
                    .iter()
                    .chain(extra)
                    .map(|a| a.to_string())
                    .collect(),
            ),
            ..Default::default()
        };
        let tls_conf = |p: &str, d: &str| p == "/etc/redis/redis.conf" && d == "tls-port";
        // A TLS config file, a plain process: plain.
        let argv = container_argv(
            &with(&["--port", "6379", "--tls-port", "0"]),
            &redis(),
            &env(),
            "127.3.1.1",
            tls_conf,
        );
        assert_eq!(&argv[argv.len() - 4..], ["--port", "6379", "--daemonize", "no"]);
        // A plain config file, a TLS process: TLS only.
        let argv = container_argv(
            &with(&["--port", "0", "--tls-port", "6379"]),
            &redis(),
            &env(),
            "127.3.1.1",
            |_, _| false,
        );
        assert_eq!(
            &argv[argv.len() - 6..],
            ["--port", "0", "--tls-port", "6379", "--daemonize", "no"]
        );
    }

    #[test]
    fn other_programs_get_no_redis_options() {
        let c = Container {
            command: Some(vec!["sh".into(), "-c".into(), "echo $(CONF)".into()]),
            ..Default::default()
        };
        assert_eq!(
            container_argv(&c, &redis(), &env(), "127.3.1.1", |_, _| false),
            ["sh", "-c", "echo /etc/redis/redis.conf"]
        );
        let extra = map_image("op:1", &[("op:".into(), PathBuf::from("/bin/op"))]).unwrap();
        let c = Container {
            args: Some(vec!["--x".into()]),
            ..Default::default()
        };
        assert_eq!(
            container_argv(&c, &extra, &env(), "127.3.1.1", |_, _| false),
            ["/bin/op", "--x"]
        );
    }

    #[test]
    fn mounts_resolve_sub_paths_and_read_only_volumes() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = tmp.path().join("cfg");
        std::fs::create_dir_all(&cfg).unwrap();
        std::fs::write(cfg.join("redis.conf"), "x").unwrap();
        let data = tmp.path().join("data");
        let volumes: BTreeMap<String, VolumeDir> = [
            (
                "cfg".to_string(),
                VolumeDir {
                    host_path: cfg.clone(),
                    always_read_only: true,
                },
            ),
            (
                "data".to_string(),
                VolumeDir {
                    host_path: data.clone(),
                    always_read_only: false,
                },
            ),
        ]
        .into();
        let vm = |name: &str, path: &str, sub: Option<&str>| VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            sub_path: sub.map(Into::into),
            ..Default::default()
        };
        let c = Container {
            volume_mounts: Some(vec![
                vm("cfg", "/etc/redis/redis.conf", Some("redis.conf")),
                vm("data", "/data", None),
                vm("data", "/data/sub", Some("x/y")),
            ]),
            ..Default::default()
        };
        let mounts = mounts_for(&c, &volumes, &env()).unwrap();
        assert_eq!(mounts[0].target, "/data");
        assert!(!mounts[0].read_only && !mounts[0].is_file);
        let conf = mounts
            .iter()
            .find(|m| m.target == "/etc/redis/redis.conf")
            .unwrap();
        assert!(conf.read_only && conf.is_file);
        assert!(data.join("x/y").is_dir(), "missing subPath created");
        assert_eq!(host_path_of("/data/sub/f", &mounts), data.join("x/y/f"));
        assert_eq!(
            host_path_of("/etc/redis/redis.conf", &mounts),
            cfg.join("redis.conf")
        );
        assert_eq!(host_path_of("/tmp/x", &mounts), PathBuf::from("/tmp/x"));

        let bad = Container {
            volume_mounts: Some(vec![vm("data", "/d", Some("../escape"))]),
            ..Default::default()
        };
        assert!(mounts_for(&bad, &volumes, &env()).is_err());
        assert_eq!(workdir_for(&c, Some(&redis()), &mounts, Path::new("/p")), "/data");
        assert_eq!(
            workdir_for(&Container::default(), Some(&redis()), &[], Path::new("/p")),
            "/p"
        );
    }

    #[test]
    fn wrapper_script_quotes_and_remounts_read_only() {
        let m = Mount {
            source: PathBuf::from("/w/it's"),
            target: "/etc/x.conf".into(),
            read_only: true,
            is_file: true,
        };
        let script = wrapper_script(&[m], "/data");
        assert!(
            script.contains("mount --bind '/w/it'\\''s' '/etc/x.conf'"),
            "{script}"
        );
        assert!(script.contains("mount -o remount,bind,ro '/etc/x.conf'"));
        assert!(script.contains("[ -e '/etc/x.conf' ] || { mkdir -p '/etc'; : > '/etc/x.conf'; }"));
        assert!(script.ends_with("cd '/data'\nexec \"$@\"\n"));
    }

    /// A container running `argv` with `<dir>/src` (holding `hello`) mounted read-only at
    /// `<dir>/target`, privately.
    fn mounting_hello(dir: &Path, argv: Vec<String>) -> Launch {
        let src = dir.join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("hello"), "hi").unwrap();
        Launch {
            argv,
            env: vec![("PATH".into(), SYSTEM_PATH.into())],
            mounts: vec![Mount {
                source: src,
                target: dir.join("target").display().to_string(),
                read_only: true,
                is_file: false,
            }],
            workdir: dir.display().to_string(),
        }
    }

    /// Runs a real process through the wrapper: the mount is visible inside only, and the
    /// PID spawned is the PID of the final program.
    #[test]
    fn wrapper_binds_privately_and_keeps_the_pid() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root for mount namespaces");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("target");
        let launch = mounting_hello(
            tmp.path(),
            vec![
                "sh".into(),
                "-c".into(),
                format!("echo $$; cat {}/hello", target.display()),
            ],
        );
        let log = tmp.path().join("log");
        let mut child =
            crate::procs::ManagedChild::spawn("wrapper", container_command(&launch), &log).unwrap();
        let pid = child.pid();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while child.exited().is_none() {
            assert!(std::time::Instant::now() < deadline, "wrapper did not finish");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let out = std::fs::read_to_string(&log).unwrap();
        assert_eq!(out, format!("{pid}\nhi"));
        assert!(!target.join("hello").exists(), "mount stays private");
    }

    #[test]
    fn an_exec_probe_sees_its_containers_mounts_and_a_reaped_container_gets_none() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root for mount namespaces");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("target");
        let launch = mounting_hello(tmp.path(), vec!["sleep".into(), "30".into()]);
        let table = crate::kubelet::proc_table::ProcTable::default();
        let log = tmp.path().join("log");
        let (id, pid) = table
            .spawn("pod", "container", container_command(&launch), &log)
            .unwrap();
        let probe = |file: &str| {
            let argv = [
                "test".to_string(),
                "-f".into(),
                target.join(file).display().to_string(),
            ];
            let env = [("PATH".to_string(), SYSTEM_PATH.to_string())];
            let ns = table.mount_namespace(pid)?;
            let (probe, _) = table.spawn("pod", "probe", exec_probe_command(ns, &argv, &env), &log)?;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                if let Some(status) = table.exited(probe) {
                    return anyhow::Ok(status.success());
                }
                assert!(std::time::Instant::now() < deadline, "probe did not finish");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        };
        // The wrapper mounts before it execs `sleep`, under the same PID.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !probe("hello").unwrap() {
            assert!(
                std::time::Instant::now() < deadline,
                "the container's mount never showed"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!probe("missing").unwrap(), "a failing command fails the probe");
        assert!(
            !target.join("hello").exists(),
            "the probe's view is the container's, not ours"
        );

        table.kill(id);
        let err = probe("hello").unwrap_err();
        assert!(err.to_string().contains(&format!("no process {pid}")), "{err}");
    }
}
