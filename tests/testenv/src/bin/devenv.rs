//! `make demo` / `make dev-up`: the local control plane with real nodes (kubelet, containerd,
//! CNI, kube-proxy; `--process-kubelet` for the process kubelet instead), the CRD, the
//! operator and the example RedlockCluster, kept running until SIGINT/SIGTERM.
//!
//!   devenv [--nodes N] [--no-example] [--ready-file PATH] [--process-kubelet] [--dir DIR]
//!
//! Writes the admin kubeconfig to DIR/kubeconfig; state and logs go to DIR/state (DIR:
//! target/dev by default; tests give their own).
//!
//! Real nodes run inside network, mount and PID namespaces of their own (pod subnets and
//! Service IPs never reach the machine). So this program runs twice: outside, it starts itself
//! inside those namespaces and forwards the API server's port from the machine's loopback into
//! them, so that `kubectl` (and `kubectl exec`/`logs`) work from the user's shell; inside, it
//! runs the environment.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use redlock_testenv::NodeImages;
use redlock_testenv::controlplane::{ControlPlane, ControlPlaneConfig, repo_root};
use redlock_testenv::nodes::{namespace, port_forward};
use redlock_testenv::operator::{OperatorProcess, deployment_restarts};

struct Args {
    nodes: usize,
    example: bool,
    ready_file: Option<PathBuf>,
    real_nodes: bool,
    /// Where the kubeconfig and the state go.
    dir: PathBuf,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        // The example asks for 5 instances and `spread: host` allows one per node.
        nodes: 5,
        example: true,
        ready_file: None,
        real_nodes: true,
        dir: repo_root().join("target/dev"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--nodes" => args.nodes = it.next().context("--nodes needs a number")?.parse()?,
            "--no-example" => args.example = false,
            "--ready-file" => args.ready_file = Some(it.next().context("--ready-file needs a path")?.into()),
            "--process-kubelet" => args.real_nodes = false,
            "--dir" => args.dir = it.next().context("--dir needs a path")?.into(),
            other => bail!(
                "unknown argument {other:?}; usage: devenv [--nodes N] [--no-example] [--ready-file PATH] [--process-kubelet] [--dir DIR]"
            ),
        }
    }
    Ok(args)
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("run {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    if args.real_nodes && !namespace::inside() {
        runtime.block_on(outside(&args))
    } else {
        runtime.block_on(environment(args))
    }
}

/// Outside the namespaces: this program again inside them, the API server's port forwarded
/// from this side's loopback, signals passed on; returns when it ends.
async fn outside(args: &Args) -> Result<()> {
    let dev = &args.dir;
    std::fs::create_dir_all(dev)?;
    let inner_ready = dev.join("devenv-inside.ready");
    let _ = std::fs::remove_file(&inner_ready);
    let mut inner_args: Vec<std::ffi::OsString> = vec![];
    let mut it = std::env::args_os().skip(1);
    while let Some(a) = it.next() {
        if a == "--ready-file" {
            it.next();
        } else {
            inner_args.push(a);
        }
    }
    inner_args.extend(["--ready-file".into(), inner_ready.clone().into()]);
    let mut child = namespace::spawn_inside(&inner_args)?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut forwarding = false;
    loop {
        if let Some(status) = child.try_wait()? {
            let _ = std::fs::remove_file(&inner_ready);
            if let Some(f) = &args.ready_file {
                let _ = std::fs::remove_file(f);
            }
            if !status.success() {
                bail!("the environment exited ({status})");
            }
            return Ok(());
        }
        if !forwarding && inner_ready.exists() {
            let port = api_port(&dev.join("kubeconfig"))?;
            let listener = std::net::TcpListener::bind(("127.0.0.1", port)).with_context(|| {
                format!("forward the API server's port {port} to this machine's loopback")
            })?;
            let pid = namespace::program_of(child.id()).context("the environment's process")?;
            port_forward::forward(listener, pid, ([127, 0, 0, 1], port).into())?;
            forwarding = true;
            eprintln!("API server forwarded to https://127.0.0.1:{port} on this machine");
            if let Some(f) = &args.ready_file {
                std::fs::write(f, std::process::id().to_string())?;
            }
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => pass_on(&child),
            _ = term.recv() => pass_on(&child),
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}

/// SIGTERM to the environment inside (`unshare` itself waits for it and ignores SIGTERM).
fn pass_on(child: &std::process::Child) {
    if let Some(pid) = namespace::program_of(child.id()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
}

/// The port of the API server the kubeconfig at `path` names (`https://127.0.0.1:<port>`).
fn api_port(path: &std::path::Path) -> Result<u16> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("server: https://127.0.0.1:"))
        .and_then(|p| p.trim().parse().ok())
        .with_context(|| format!("no https://127.0.0.1 server in {}", path.display()))
}

/// The environment itself (inside the namespaces with real nodes).
async fn environment(args: Args) -> Result<()> {
    let root = repo_root();
    let dev = &args.dir;
    let state = dev.join("state");
    // A previous run's state belongs to processes that are gone: start clean.
    let _ = std::fs::remove_dir_all(&state);
    let started = Instant::now();
    let cp = ControlPlane::start(ControlPlaneConfig {
        nodes: args.nodes,
        dir: Some(state.clone()),
        real_nodes: args.real_nodes,
        // People try any image here (docs/development.md "Tested versions").
        node_images: NodeImages::All,
        ..Default::default()
    })
    .await?;
    let kubeconfig = dev.join("kubeconfig");
    std::fs::copy(cp.kubeconfig(), &kubeconfig)?;
    eprintln!(
        "control plane up in {:.1}s ({})",
        started.elapsed().as_secs_f64(),
        cp.api_url()
    );

    run(cp
        .kubectl()
        .args(["apply", "-f"])
        .arg(root.join("crds/redlockcluster.yaml")))?;
    run(cp.kubectl().args([
        "wait",
        "--for=condition=Established",
        "crd/redlockclusters.redlock.dev",
        "--timeout=30s",
    ]))?;
    // Built by the same `cargo build` into the same target directory as this binary.
    let operator_bin = std::env::current_exe()?.with_file_name("redlock-operator");
    // As a Deployment runs it: started again (kubelet's back-off) should it exit on its own.
    let mut operator = OperatorProcess::start_with_restarts(
        &operator_bin,
        cp.kubeconfig(),
        &state.join("logs/operator.log"),
        &[],
        &[],
        deployment_restarts(),
    )?;
    operator.wait_ready(Duration::from_secs(60)).await?;
    eprintln!(
        "operator ready (metrics on http://127.0.0.1:{}/metrics)",
        operator.http_port()
    );

    if args.example {
        let mut example = root.join("examples/redlockcluster.yaml");
        if args.real_nodes {
            // Real nodes run only images built here (tests/nodes/images.sh, from Debian
            // packages), and Debian carries no redis 7.4: the example runs on redis 7.0.
            let text = std::fs::read_to_string(&example)?;
            let local = state.join("example-redis-7.0.yaml");
            std::fs::write(&local, text.replace("image: redis:7.4", "image: redis:7.0"))?;
            eprintln!("example: image redis:7.0 (built here) instead of redis:7.4");
            example = local;
        }
        run(cp.kubectl().args(["apply", "-n", "default", "-f"]).arg(&example))?;
        // Wait until the example serves a quorum, then show what kubectl shows.
        if let Err(e) = run(cp.kubectl().args([
            "wait",
            "-n",
            "default",
            "--for=condition=Available",
            "rlc/locks",
            "--timeout=180s",
        ])) {
            eprintln!("the example is not Available yet: {e}");
        }
        print!("{}", run(cp.kubectl().args(["get", "rlc", "-A", "-o", "wide"]))?);
    }
    print!(
        "{}",
        run(cp
            .kubectl()
            .args(["get", "nodes", "-L", "topology.kubernetes.io/zone"]))?
    );
    println!(
        "\nkubectl:   export KUBECONFIG={} PATH={}:$PATH\nlogs:      {}\nstop:      Ctrl-C (make demo) or `make dev-down`",
        kubeconfig.display(),
        root.join("target/dev/bin").display(),
        state.join("logs").display()
    );
    if let Some(f) = &args.ready_file {
        std::fs::write(f, std::process::id().to_string())?;
    }

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        status = async { loop {
            if let Some(s) = operator.exited() { break s; }
            tokio::time::sleep(Duration::from_millis(500)).await;
        } } => eprintln!("operator exited ({status}); see {}", state.join("logs/operator.log").display()),
    }
    eprintln!("stopping");
    let _ = operator.terminate(Duration::from_secs(10)).await;
    cp.shutdown().await;
    let _ = std::fs::remove_file(&kubeconfig);
    if let Some(f) = &args.ready_file {
        let _ = std::fs::remove_file(f);
    }
    Ok(())
}
