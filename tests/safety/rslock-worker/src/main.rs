//! Safety-suite worker for rslock (crates.io).
//!
//! Configured the way a user's pod is: the cluster's `<name>-client` Secret and
//! `<name>-endpoints` ConfigMap mounted as directories (`REDLOCK_SECRET_DIR`,
//! `REDLOCK_CONFIG_DIR`), servers reached by their published Service names. Driven by the
//! harness over the line protocol of `tests/safety/src/protocol.rs`; timestamps are
//! CLOCK_MONOTONIC nanoseconds, the clock the harness and the other workers read too.
//!
//! It sends no `reply` lines (each member's reply): rslock 0.10 folds every server's answer
//! into a count inside `LockManager::lock` (its per-server calls and their `redis::Client`s
//! are private), so which members granted a lock is not known to this worker. Reading the
//! key back from each member afterwards would be another question at another time, not the
//! reply the lock rested on, and is not done.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn emit(line: String) {
    // One write per line: println! locks stdout and flushes on the newline.
    println!("{line}");
}

fn fatal(msg: String) -> ! {
    emit(format!("error {msg}"));
    std::process::exit(1)
}

fn read(dir: &str, key: &str) -> String {
    std::fs::read_to_string(Path::new(dir).join(key))
        .unwrap_or_else(|e| fatal(format!("read {key}: {e}")))
        .trim()
        .to_owned()
}

fn one_line(e: impl std::fmt::Display) -> String {
    e.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let secret_dir = std::env::var("REDLOCK_SECRET_DIR").unwrap_or_default();
    let config_dir = std::env::var("REDLOCK_CONFIG_DIR").unwrap_or_default();
    let urls: Vec<String> = read(&secret_dir, "urls")
        .split_whitespace()
        .map(String::from)
        .collect();
    let servers = read(&config_dir, "servers").split_whitespace().count();
    let quorum: usize = read(&config_dir, "quorum").parse().unwrap_or(0);
    let max_ttl: u64 = read(&config_dir, "maxLockTTLMillis").parse().unwrap_or(0);
    // rslock computes its quorum from the servers it is given: all N, as the README requires.
    if urls.len() != servers || urls.len() / 2 + 1 != quorum {
        fatal(format!(
            "urls ({}) and servers ({servers}) disagree with quorum {quorum}",
            urls.len()
        ));
    }
    let mut locks = rslock::LockManager::new(urls);
    // One try per command: the harness retries, so acquire_invoke is the start of the attempt
    // whose validity the client computes.
    locks.set_retry(1, Duration::from_millis(1));
    let counter_addr = std::env::var("COUNTER_ADDR").unwrap_or_default();
    let mut counter = redis::Client::open(format!("redis://{counter_addr}"))
        .and_then(|c| c.get_connection())
        .unwrap_or_else(|e| fatal(format!("counter: {e}")));

    emit("ready rslock".into());
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f == ["quit"] {
            return;
        }
        let [_, seq, key, ttl, hold] = f[..] else {
            fatal(format!("bad command {line:?}"));
        };
        let (Ok(ttl), Ok(hold)) = (ttl.parse::<u64>(), hold.parse::<u64>()) else {
            fatal(format!("bad command {line:?}"));
        };
        if ttl > max_ttl {
            fatal(format!("ttl {ttl} above maxLockTTLMillis {max_ttl}"));
        }
        emit(format!("acquire_invoke {seq} {}", mono_ns()));
        // rslock has no overall deadline; its per-command timeouts (redis-rs defaults) bound
        // each server, and this bounds the attempt so a wedged connection cannot stall the run.
        let attempt = tokio::time::timeout(
            Duration::from_millis(ttl),
            locks.lock(key.as_bytes(), Duration::from_millis(ttl)),
        )
        .await;
        let lock = match attempt {
            Ok(Ok(lock)) => lock,
            Ok(Err(e)) => {
                emit(format!(
                    "acquire_fail {seq} {} {}",
                    mono_ns(),
                    one_line(format!("{e:?}"))
                ));
                emit(format!("done {seq}"));
                continue;
            }
            Err(_) => {
                emit(format!("acquire_fail {seq} {} attempt timed out", mono_ns()));
                emit(format!("done {seq}"));
                continue;
            }
        };
        emit(format!("acquire_ok {seq} {} {}", mono_ns(), lock.validity_time));

        // The critical section: a read-modify-write that loses an update when two overlap.
        let count_key = format!("count:{key}");
        let v: Option<i64> = redis::cmd("GET")
            .arg(&count_key)
            .query(&mut counter)
            .unwrap_or_else(|e| fatal(format!("counter get: {e}")));
        tokio::time::sleep(Duration::from_millis(hold)).await;
        redis::cmd("SET")
            .arg(&count_key)
            .arg(v.unwrap_or(0) + 1)
            .exec(&mut counter)
            .unwrap_or_else(|e| fatal(format!("counter set: {e}")));

        emit(format!("release_invoke {seq} {}", mono_ns()));
        // rslock's unlock is best effort and reports nothing: release_ok means "returned".
        locks.unlock(&lock).await;
        emit(format!("release_ok {seq} {}", mono_ns()));
        emit(format!("done {seq}"));
    }
}
