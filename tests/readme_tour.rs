//! The README's five-minute tour, run as a reader runs it: its lines, verbatim, against a
//! local control plane with the operator and the example cluster (what `make dev-up` starts),
//! with the locally built `kubectl` and `kubectl-redlock` on the PATH. The lines it does not
//! run are those whose part it plays itself: `make` (the environment and the plugin are
//! already built), `export` (the environment is passed to every line) and the background
//! watch (nobody would be there to stop it). A tour that no longer works, or says what the
//! operator no longer does, fails here.

use std::time::Duration;

use redlock_test_support::{readme_step, start_operator_with, tour_steps, wait_for};
use redlock_testenv::{ControlPlane, ControlPlaneConfig};

/// The tour's lines this test runs, in order.
fn runnable() -> Vec<String> {
    tour_steps()
        .into_iter()
        .filter(|l| !l.starts_with("make ") && !l.starts_with("export "))
        .filter(|l| !l.split('#').next().unwrap().trim_end().ends_with('&'))
        .collect()
}

#[test]
fn the_tour_kills_a_member_and_reads_its_hold() {
    let steps = runnable();
    assert!(steps.iter().any(|l| l.starts_with("pkill -9 ")), "{steps:?}");
    assert!(
        steps.iter().any(|l| l.starts_with("kubectl redlock status ")),
        "{steps:?}"
    );
    assert!(
        tour_steps().iter().any(|l| l.starts_with("make dev-up")),
        "the tour starts the environment the test stands in for"
    );
}

/// One tour line under `sh` with the plugin's directory first on the PATH.
async fn step(cp: &ControlPlane, line: &str) -> (bool, String) {
    let plugin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_kubectl-redlock"))
        .parent()
        .unwrap()
        .display()
        .to_string();
    let line = format!("PATH={plugin_dir}:$PATH; {line}");
    let out = readme_step(cp, &line).await;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test]
async fn the_readme_tour_runs_as_written() {
    // The process kubelet: `pkill -f pod=<uid>` finds the member's redis-server by its process
    // title, as in `make dev-up`'s environment.
    let cp = ControlPlane::start(ControlPlaneConfig {
        nodes: 5,
        real_nodes: false,
        ..Default::default()
    })
    .await
    .expect("control plane starts");
    cp.install_crd(&redlock_operator::crd::crd()).await.unwrap();
    let operator = start_operator_with(&cp, "operator.log", &[]).await;
    // What `make dev-up` applies, in the kubeconfig's namespace (default).
    let (ok, out) = step(&cp, "kubectl apply -f examples/redlockcluster.yaml").await;
    assert!(ok, "{out}");

    let mut before_kill = true;
    for line in runnable() {
        // Typed right after the kill, these two show what the operator's next probe (a second)
        // finds and the events that follow its status write: run until they show it.
        let out = if line.starts_with("kubectl get rlc locks -o jsonpath") {
            let out = step_until(
                &cp,
                &line,
                "the tour's member shown Held",
                Duration::from_secs(20),
                |out| out.contains(r#""state":"Held""#),
            )
            .await;
            assert!(out.contains("heldUntil"), "{out}");
            out
        } else if line.starts_with("kubectl describe rlc ") {
            let out = step_until(&cp, &line, "the loss's events", Duration::from_secs(10), |out| {
                out.contains("InstanceLost")
            })
            .await;
            assert!(out.contains("HoldStarted"), "{out}");
            out
        } else {
            let (ok, out) = step(&cp, &line).await;
            assert!(
                ok,
                "tour line failed: {line}\n{out}\noperator log:\n{}",
                operator.log()
            );
            out
        };
        println!("$ {line}\n{out}");
        if line.starts_with("kubectl wait ") {
            assert!(out.contains("condition met"), "{out}");
        }
        if line.starts_with("pkill ") {
            before_kill = false;
        }
        if line.starts_with("kubectl redlock status ") {
            assert!(!before_kill);
            assert!(member_row(&out).contains("Held"), "locks-0 is held:\n{out}");
        }
    }
    // "Ready once it has run": the hold (31.3 s for the example) ends and locks-0 serves again.
    // (Every slot's first process was held and released too, so an InstanceReleased event
    // alone would prove nothing: the member's own row says it.)
    let out = step_until(
        &cp,
        "kubectl redlock status locks",
        "locks-0 Ready again",
        Duration::from_secs(60),
        |out| member_row(out).contains("Ready"),
    )
    .await;
    println!("{out}");
}

/// `line` run every half second until it succeeds with an output `done` accepts: that output.
async fn step_until(
    cp: &ControlPlane,
    line: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&str) -> bool,
) -> String {
    wait_for(what, timeout, async || {
        let (ok, out) = step(cp, line).await;
        if ok && done(&out) {
            return Ok(Some(out));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok(None)
    })
    .await
}

/// The row of `kubectl redlock status` that shows locks-0 (its members table comes first).
fn member_row(out: &str) -> &str {
    out.lines().find(|l| l.contains("locks-0")).unwrap_or_default()
}
