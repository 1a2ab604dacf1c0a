//! `make demo` / `make dev-up`: the local control plane with the process kubelet, the CRD,
//! the operator and the example RedlockCluster, kept running until SIGINT/SIGTERM.
//!
//!   devenv [--nodes N] [--no-example] [--ready-file PATH]
//!
//! Writes the admin kubeconfig to target/dev/kubeconfig; state and logs go to target/dev/state.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use redlock_testenv::controlplane::{ControlPlane, ControlPlaneConfig, repo_root};
use redlock_testenv::operator::OperatorProcess;

struct Args {
    nodes: usize,
    example: bool,
    ready_file: Option<PathBuf>,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        // The example asks for 5 instances and `spread: host` allows one per node.
        nodes: 5,
        example: true,
        ready_file: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--nodes" => args.nodes = it.next().context("--nodes needs a number")?.parse()?,
            "--no-example" => args.example = false,
            "--ready-file" => args.ready_file = Some(it.next().context("--ready-file needs a path")?.into()),
            other => bail!(
                "unknown argument {other:?}; usage: devenv [--nodes N] [--no-example] [--ready-file PATH]"
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

#[tokio::main]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let root = repo_root();
    let dev = root.join("target/dev");
    let state = dev.join("state");
    // A previous run's state belongs to processes that are gone: start clean.
    let _ = std::fs::remove_dir_all(&state);
    let started = Instant::now();
    let cp = ControlPlane::start(ControlPlaneConfig {
        nodes: args.nodes,
        dir: Some(state.clone()),
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
    let mut operator = OperatorProcess::start(
        &operator_bin,
        cp.kubeconfig(),
        &state.join("logs/operator.log"),
        &[],
    )?;
    operator.wait_ready(Duration::from_secs(60)).await?;
    eprintln!(
        "operator ready (metrics on http://127.0.0.1:{}/metrics)",
        operator.http_port()
    );

    if args.example {
        run(cp
            .kubectl()
            .args(["apply", "-n", "default", "-f"])
            .arg(root.join("examples/redlockcluster.yaml")))?;
        // Wait until the example serves a quorum, then show what kubectl shows.
        if let Err(e) = run(cp.kubectl().args([
            "wait",
            "-n",
            "default",
            "--for=condition=Available",
            "rlc/locks",
            "--timeout=90s",
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
        dev.join("bin").display(),
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
