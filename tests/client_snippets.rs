//! The snippets `kubectl redlock client-config` prints, run as printed by the client libraries
//! they name, against a real cluster: pottery and redlock-py (Python) and node-redlock with
//! ioredis (Node), installed by `make clients`. Of each snippet one line is replaced, its
//! critical section: it says `held` and waits. Meanwhile this test, as a second client, tries
//! to take the same key on every member and must be refused on each; once the snippet goes on,
//! it must have released the key on every member and exited 0. The environment variable it
//! reads is the Secret's `urls` with each Service name replaced by its pod's IP (the test's
//! resolver is not the pods').
//!
//! The other languages' snippets (go, rust, java, ruby, php, dotnet) are not run here;
//! docs/clients.md says which are tested.

use std::process::Stdio;
use std::time::Duration;

use redlock_test_support::helm_chart::tool;
use redlock_test_support::*;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const PLUGIN: &str = env!("CARGO_BIN_EXE_kubectl-redlock");
const NAME: &str = "locks";
/// The resource every snippet locks.
const RESOURCE: &str = "orders:42";
/// A language whose printed snippet this test runs: the interpreter (a `make clients` tool),
/// how it is given a program on its command line, and the snippet's critical section with
/// what runs in its place (say `held`, then wait for a line on stdin).
struct Runner {
    tool: &'static str,
    eval_flag: &'static str,
    critical: &'static str,
    held: &'static str,
}

const PYTHON: Runner = Runner {
    tool: "clients-python",
    eval_flag: "-c",
    critical: "...  # critical section",
    held: "print(\"held\", flush=True); input()",
};

const NODE: Runner = Runner {
    tool: "clients-node",
    eval_flag: "-e",
    critical: "/* critical section */",
    held: "console.log(\"held\"); await new Promise((r) => process.stdin.once(\"data\", r));",
};

async fn client_config(env: &Env, lang: &str) -> String {
    let out = tokio::process::Command::new(PLUGIN)
        .env("KUBECONFIG", env.cp.kubeconfig())
        .args(["-n", &env.ns, "client-config", NAME, "--lang", lang])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "client-config --lang {lang}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The snippet's code (below its comment header) with its critical section replaced.
fn program(snippet: &str, critical: &str, held: &str) -> String {
    let (_, code) = snippet
        .split_once("\n\n")
        .expect("a comment header, then the code");
    assert_eq!(
        code.matches(critical).count(),
        1,
        "one critical section in:\n{code}"
    );
    code.replace(critical, held)
}

/// The Secret's `urls`, each Service name replaced by the IP of its slot's pod.
async fn urls_by_ip(env: &Env, instances: i32) -> String {
    let urls = env.secret(&format!("{NAME}-client"), "urls").await;
    let mut lines: Vec<String> = urls.lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), instances as usize, "{urls}");
    for (slot, line) in lines.iter_mut().enumerate() {
        let service = format!("{NAME}-{slot}.{}.svc", env.ns);
        let ip = env.pod_ip(NAME, slot as i32).await;
        assert!(line.contains(&service), "{line}");
        *line = line.replace(&service, &ip.to_string());
    }
    lines.join("\n") + "\n"
}

/// Runs `lang`'s snippet with `runner`; while it holds the lock, a second client is refused
/// `key` (the Redis key the library keeps the lock under) on every member; after, the
/// snippet has released it everywhere.
async fn a_snippet_locks_and_a_second_client_is_refused(
    env: &Env,
    lang: &str,
    runner: &Runner,
    key: &str,
    instances: i32,
) {
    let code = program(&client_config(env, lang).await, runner.critical, runner.held);
    let urls = urls_by_ip(env, instances).await;
    let login = env.client_login(NAME).await;
    let mut ips = Vec::new();
    for slot in 0..instances {
        ips.push(env.pod_ip(NAME, slot).await);
    }
    let mut child = tokio::process::Command::new(tool(runner.tool, "clients"))
        .arg(runner.eval_flag)
        .arg(&code)
        .env("REDLOCK_URLS", &urls)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let held = tokio::time::timeout(Duration::from_secs(30), stdout.next_line()).await;
    if !matches!(held, Ok(Ok(Some(ref l))) if l == "held") {
        let _ = child.start_kill();
        let out = child.wait_with_output().await.unwrap();
        panic!(
            "{lang}: the snippet did not take the lock ({held:?}); stderr:\n{}\ncode:\n{code}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for ip in &ips {
        let taken = lock(*ip, &login, key, "second", Duration::from_secs(1)).await;
        assert!(
            matches!(taken, Ok(false)),
            "{lang}: a second client got {key} on {ip} while the snippet held it: {taken:?}"
        );
    }
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"\n").await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("the snippet ends once its critical section does")
        .unwrap();
    assert!(
        out.status.success(),
        "{lang}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for ip in &ips {
        let taken = lock(*ip, &login, key, "after", Duration::from_millis(200)).await;
        assert!(
            matches!(taken, Ok(true)),
            "{lang}: {key} on {ip} was not released by the snippet: {taken:?}"
        );
    }
    // The test's own keys expire in 200 ms; the next snippet finds none.
    tokio::time::sleep(Duration::from_millis(300)).await;
}

#[tokio::test]
async fn the_python_and_node_snippets_lock_as_printed_and_a_second_client_is_refused() {
    let env = Env::start(3).await;
    env.create_cluster(NAME, json!({"instances": 3, "maxLockTTL": "30s"}))
        .await;
    env.wait_ready(NAME, 3, Duration::from_secs(60)).await;
    // pottery keeps a lock under `redlock:<key>`, redlock-py and node-redlock under the key
    // itself: pottery and the others never exclude each other (docs/clients.md says so).
    let pottery = format!("redlock:{RESOURCE}");
    for (lang, runner, key) in [
        ("python", &PYTHON, pottery.as_str()),
        ("python-redlock", &PYTHON, RESOURCE),
        ("node", &NODE, RESOURCE),
    ] {
        a_snippet_locks_and_a_second_client_is_refused(&env, lang, runner, key, 3).await;
    }
}
