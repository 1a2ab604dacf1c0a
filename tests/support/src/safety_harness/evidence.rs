//! The operator run's evidence, kept in its output directory (`<out>/operator/evidence/`)
//! whether the run passes, fails or breaks off, before the control plane and its directory
//! go: the operator's logs (every process of the run: `operator.log`, and the
//! `operator-N.log` / `operator-N-skewed.log` / `operator-N-second-lease.log` that the
//! operator-kill, operator-skew and two-operators faults start), every Kubernetes event of the run's namespace and of `default` (the nodes'), and
//! the RedlockCluster's status at each change, both watched while the run goes on and written
//! a line at a time, so that even a run that panics leaves them.
//!
//! `Recorder::finish` is the path every run that returns takes (its result ok or an error);
//! `Drop` is the one a panicking run takes: it copies the operator's logs and writes the
//! events table from what the watches saw (no API call: it cannot await).

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use redlock_operator::crd::RedlockCluster;
use redlock_safety::clock::mono_ns;
use redlock_safety::clock_jumps::ClockJumpSighting;
use redlock_safety::evidence::{EventRow, events_table, status_brief, status_significant};
use redlock_safety::report::EvidenceFile;
use redlock_safety::violation::{WallClock, utc};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::Env;

pub const STATUS_HISTORY: &str = "status-history.jsonl";
pub const EVENTS: &str = "events.jsonl";
pub const EVENTS_TABLE: &str = "events.txt";
pub const DESCRIBE: &str = "describe.txt";
pub const CLOCK: &str = "clock.json";
/// The host clock's steps against CLOCK_MONOTONIC (`super::host::HostClock`), both phases.
pub const HOST_CLOCK_STEPS: &str = "host-clock-steps.jsonl";
/// Written instead of `describe.txt` when the run panicked.
pub const UNFINISHED: &str = "UNFINISHED.txt";

/// Now on both clocks: history.json's times (CLOCK_MONOTONIC) to UTC and back.
pub fn wall_clock() -> WallClock {
    let mono = mono_ns();
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    WallClock {
        mono_ns: mono,
        unix_ns: unix,
    }
}

fn now_utc() -> String {
    let c = wall_clock();
    utc(c.unix_ns)
}

/// Appends `line` and a newline to `file`; a write that fails is said once on stderr.
fn append(file: &mut File, line: &serde_json::Value, what: &str) {
    if let Err(e) = writeln!(file, "{line}") {
        eprintln!("safety evidence: cannot write {what}: {e}");
    }
}

/// The events seen so far: every version once in `events.jsonl`, the latest of each by uid,
/// and every version of the operator's `ClockJump` events in the order seen.
struct EventLog {
    file: File,
    seen: HashSet<(String, String)>,
    latest: BTreeMap<String, EventRow>,
    clock_jumps: Vec<ClockJumpSighting>,
}

impl EventLog {
    fn new(file: File) -> Self {
        Self {
            file,
            seen: HashSet::new(),
            latest: BTreeMap::new(),
            clock_jumps: Vec::new(),
        }
    }
}

impl EventLog {
    fn record(&mut self, e: &Event) {
        let row = event_row(e);
        if !self.seen.insert((row.uid.clone(), row.resource_version.clone())) {
            return;
        }
        append(
            &mut self.file,
            &serde_json::to_value(&row).unwrap_or_default(),
            EVENTS,
        );
        if row.reason == "ClockJump" {
            self.clock_jumps.push(ClockJumpSighting {
                uid: row.uid.clone(),
                resource_version: row.resource_version.clone(),
                count: row.count,
                observed_mono_ns: row.observed_mono_ns,
                stated_unix_ns: stated_unix_ns(e),
                pod: e.related.as_ref().and_then(|r| r.name.clone()),
                message: row.message.clone(),
            });
        }
        self.latest.insert(row.uid.clone(), row);
    }
}

/// When the event's latest occurrence happened by its reporter's clock (ns since the Unix
/// epoch): the series' last time, else the event's time, else its first timestamp.
fn stated_unix_ns(e: &Event) -> Option<i128> {
    e.series
        .as_ref()
        .map(|s| s.last_observed_time.0.as_nanosecond())
        .or_else(|| e.event_time.as_ref().map(|t| t.0.as_nanosecond()))
        .or_else(|| e.deprecated_last_timestamp.as_ref().map(|t| t.0.as_nanosecond()))
        .or_else(|| e.deprecated_first_timestamp.as_ref().map(|t| t.0.as_nanosecond()))
}

fn time_utc(t: &k8s_openapi::jiff::Timestamp) -> String {
    utc(t.as_nanosecond())
}

fn object(r: Option<&ObjectReference>) -> Option<String> {
    let r = r?;
    Some(format!(
        "{}/{}",
        r.kind.as_deref().unwrap_or("?"),
        r.name.as_deref().unwrap_or("?")
    ))
}

fn event_row(e: &Event) -> EventRow {
    let first = e
        .event_time
        .as_ref()
        .map(|t| time_utc(&t.0))
        .or_else(|| e.deprecated_first_timestamp.as_ref().map(|t| time_utc(&t.0)))
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| time_utc(&t.0)));
    let last = e
        .series
        .as_ref()
        .map(|s| time_utc(&s.last_observed_time.0))
        .or_else(|| e.deprecated_last_timestamp.as_ref().map(|t| time_utc(&t.0)));
    let count = e
        .series
        .as_ref()
        .map(|s| s.count)
        .or(e.deprecated_count)
        .unwrap_or(1)
        .max(1);
    let reporter = match (&e.reporting_controller, &e.reporting_instance) {
        (Some(c), Some(i)) if !i.is_empty() => format!("{c} ({i})"),
        (Some(c), _) => c.clone(),
        (None, _) => e
            .deprecated_source
            .as_ref()
            .and_then(|s| s.component.clone())
            .unwrap_or_default(),
    };
    EventRow {
        observed: now_utc(),
        observed_mono_ns: mono_ns(),
        namespace: e.metadata.namespace.clone().unwrap_or_default(),
        uid: e.metadata.uid.clone().unwrap_or_default(),
        resource_version: e.metadata.resource_version.clone().unwrap_or_default(),
        first,
        last,
        type_: e.type_.clone().unwrap_or_default(),
        reason: e.reason.clone().unwrap_or_default(),
        object: object(e.regarding.as_ref()).unwrap_or_default(),
        related: object(e.related.as_ref()),
        message: e.note.clone().unwrap_or_default(),
        count,
        reporter,
    }
}

/// What `Recorder::finish` kept.
pub struct Kept {
    pub files: Vec<EvidenceFile>,
    /// Every version of the operator's `ClockJump` events, in the order seen.
    pub clock_jumps: Vec<ClockJumpSighting>,
}

/// Watches a phase's control plane and keeps what it says (see the module's doc).
pub struct Recorder {
    dir: PathBuf,
    cp_dir: PathBuf,
    client: kube::Client,
    namespaces: Vec<String>,
    events: Arc<Mutex<EventLog>>,
    tasks: Vec<JoinHandle<()>>,
    finished: bool,
}

impl Recorder {
    /// Starts the watches of `env`'s events and of the RedlockCluster `cluster`, writing into
    /// `dir` (emptied first: the files are this run's).
    pub fn start(env: &Env, cluster: &str, dir: &Path) -> anyhow::Result<Self> {
        if dir.exists() {
            std::fs::remove_dir_all(dir)?;
        }
        std::fs::create_dir_all(dir)?;
        let clock = wall_clock();
        std::fs::write(
            dir.join(CLOCK),
            serde_json::to_string_pretty(&json!({
                "what": "one instant on both clocks: history.json's and report.json's times are CLOCK_MONOTONIC ns; utc = this utc + (t - mono_ns)",
                "mono_ns": clock.mono_ns,
                "unix_ns": clock.unix_ns.to_string(),
                "utc": utc(clock.unix_ns),
            }))?,
        )?;
        let events = Arc::new(Mutex::new(EventLog::new(File::create(dir.join(EVENTS))?)));
        let client = env.cp.client();
        // The operator's, the kubelets' and the scheduler's events of the cluster's pods, and
        // the node lifecycle's of the nodes (in `default`).
        let namespaces = vec![env.ns.clone(), "default".to_owned()];
        let mut tasks = Vec::new();
        for ns in &namespaces {
            let api: Api<Event> = Api::namespaced(client.clone(), ns);
            let log = events.clone();
            tasks.push(tokio::spawn(async move {
                let mut stream = watcher(api, watcher::Config::default()).default_backoff().boxed();
                let mut last_error = String::new();
                while let Some(ev) = stream.next().await {
                    match ev {
                        Ok(watcher::Event::Apply(e) | watcher::Event::InitApply(e)) => {
                            log.lock().unwrap().record(&e)
                        }
                        // An event that expired (the API server keeps them an hour) stays in
                        // the file and the table.
                        Ok(_) => {}
                        Err(e) if e.to_string() != last_error => {
                            last_error = e.to_string();
                            eprintln!("safety evidence: event watch: {last_error}");
                        }
                        Err(_) => {}
                    }
                }
            }));
        }
        let status_file = File::create(dir.join(STATUS_HISTORY))?;
        tasks.push(tokio::spawn(watch_status(
            client.clone(),
            env.ns.clone(),
            cluster.to_owned(),
            status_file,
        )));
        Ok(Self {
            dir: dir.to_owned(),
            cp_dir: env.cp.dir().to_owned(),
            client,
            namespaces,
            events,
            tasks,
            finished: false,
        })
    }

    /// Lists the events once more (what the watches may not have delivered yet), stops the
    /// watches, writes `events.txt` and `describe.txt`, copies the operator's logs; returns the
    /// files kept and every version of the `ClockJump` events seen. Never fails: what cannot be
    /// kept is said on stderr and in the list.
    pub async fn finish(mut self, env: &Env) -> Kept {
        for ns in &self.namespaces {
            let api: Api<Event> = Api::namespaced(self.client.clone(), ns);
            match tokio::time::timeout(Duration::from_secs(15), api.list(&ListParams::default())).await {
                Ok(Ok(list)) => {
                    let mut log = self.events.lock().unwrap();
                    for e in &list.items {
                        log.record(e);
                    }
                }
                Ok(Err(e)) => eprintln!("safety evidence: listing the events of {ns}: {e}"),
                Err(_) => eprintln!("safety evidence: listing the events of {ns}: no answer in 15 s"),
            }
        }
        // The last status change needs a moment to arrive over the watch.
        tokio::time::sleep(Duration::from_millis(300)).await;
        for t in &self.tasks {
            t.abort();
        }
        self.write_events_table();
        let describe = env.describe().await;
        if let Err(e) = std::fs::write(self.dir.join(DESCRIBE), describe) {
            eprintln!("safety evidence: cannot write {DESCRIBE}: {e}");
        }
        copy_operator_logs(&self.cp_dir, &self.dir);
        self.finished = true;
        let clock_jumps = self
            .events
            .lock()
            .map_or_else(|p| p.into_inner().clock_jumps.clone(), |l| l.clock_jumps.clone());
        Kept {
            files: operator_files(&self.dir),
            clock_jumps,
        }
    }

    fn write_events_table(&self) {
        let rows: Vec<EventRow> = self.events.lock().map_or_else(
            |poisoned| poisoned.into_inner().latest.values().cloned().collect(),
            |log| log.latest.values().cloned().collect(),
        );
        if let Err(e) = std::fs::write(self.dir.join(EVENTS_TABLE), events_table(&rows)) {
            eprintln!("safety evidence: cannot write {EVENTS_TABLE}: {e}");
        }
    }
}

impl Drop for Recorder {
    /// A run that panicked: keep what can be kept without the API server's help.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        for t in &self.tasks {
            t.abort();
        }
        self.write_events_table();
        copy_operator_logs(&self.cp_dir, &self.dir);
        let _ = std::fs::write(
            self.dir.join(UNFINISHED),
            "The run ended before the harness finished it (a panic): the events and the status \
             history are what the watches saw until then, the operator's logs were copied, \
             describe.txt was not written.\n",
        );
        eprintln!(
            "safety evidence (run broke off): operator logs, events and status history in {}",
            self.dir.display()
        );
    }
}

/// Watches the RedlockCluster `name` and appends its status to `file` at each change
/// ([`status_significant`]), with when it was seen and a one-line brief.
async fn watch_status(client: kube::Client, ns: String, name: String, mut file: File) {
    let resource = ApiResource::erase::<RedlockCluster>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(client, &ns, &resource);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher(api, config).default_backoff().boxed();
    let mut last: Option<serde_json::Value> = None;
    let mut last_error = String::new();
    while let Some(ev) = stream.next().await {
        let line = match ev {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                let status = o.data.get("status").cloned().unwrap_or(serde_json::Value::Null);
                let key = status_significant(&status);
                if last.as_ref() == Some(&key) {
                    continue;
                }
                last = Some(key);
                json!({
                    "t": now_utc(),
                    "mono_ns": mono_ns(),
                    "uid": o.metadata.uid,
                    "resource_version": o.metadata.resource_version,
                    "generation": o.metadata.generation,
                    "brief": status_brief(&status),
                    "status": status,
                })
            }
            Ok(watcher::Event::Delete(o)) => {
                last = None;
                json!({
                    "t": now_utc(),
                    "mono_ns": mono_ns(),
                    "uid": o.metadata.uid,
                    "resource_version": o.metadata.resource_version,
                    "deleted": true,
                })
            }
            Ok(_) => continue,
            Err(e) => {
                let text = e.to_string();
                if text == last_error {
                    continue;
                }
                last_error = text.clone();
                json!({"t": now_utc(), "mono_ns": mono_ns(), "watch_error": text})
            }
        };
        append(&mut file, &line, STATUS_HISTORY);
    }
}

/// Every operator log of the control plane (`operator*.log` in its directory: the first
/// process's and those the faults started) into `dir`.
fn copy_operator_logs(cp_dir: &Path, dir: &Path) {
    let entries = match std::fs::read_dir(cp_dir) {
        Ok(e) => e,
        Err(e) => {
            eprintln!(
                "safety evidence: cannot read {} for the operator's logs: {e}",
                cp_dir.display()
            );
            return;
        }
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("operator")
            && name.ends_with(".log")
            && let Err(e) = std::fs::copy(entry.path(), dir.join(&name))
        {
            eprintln!("safety evidence: cannot copy {name}: {e}");
        }
    }
}

/// The operator run's evidence files in `dir`, each with what it holds; those missing are
/// named as such.
pub fn operator_files(dir: &Path) -> Vec<EvidenceFile> {
    let item = |path: &Path, what: &str| EvidenceFile {
        phase: "operator".into(),
        path: path.display().to_string(),
        what: what.into(),
    };
    let mut out = Vec::new();
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("operator") && n.ends_with(".log"))
                })
                .collect()
        })
        .unwrap_or_default();
    logs.sort();
    if logs.is_empty() {
        out.push(item(
            &dir.join("operator*.log"),
            "MISSING: no operator log was found to copy",
        ));
    }
    for log in logs {
        let name = log.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let what = if name == "operator.log" {
            "the operator's log: the run's first operator process".to_owned()
        } else if name.ends_with("-skewed.log") {
            "the operator's log: the process an operator-skew fault started with its clock 20 s ahead"
                .to_owned()
        } else if name.ends_with("-second-lease.log") {
            "the operator's log: the second operator a two-operators fault ran beside the first, on another Lease"
                .to_owned()
        } else {
            "the operator's log: a process an operator-kill, operator-skew or two-operators fault started again"
                .to_owned()
        };
        out.push(item(&log, &what));
    }
    for (name, what) in [
        (
            STATUS_HISTORY,
            "the RedlockCluster's status at each change (members' clock readings aside), watched: t (UTC), mono_ns (history.json's clock), resource_version, a one-line brief of every member, the full status; deletions as {deleted: true}",
        ),
        (
            EVENTS,
            "every version of every Kubernetes event of the run's namespace and of default (nodes'), as watched: observed (UTC) and observed_mono_ns, namespace, first/last (UTC), type, reason, object, related, message, count, reporter",
        ),
        (
            EVENTS_TABLE,
            "the same events as kubectl shows them, the latest version of each, oldest first (events the API server let expire included)",
        ),
        (
            DESCRIBE,
            "kubectl get pods, nodes, the latest events and the RedlockCluster (YAML) at the run's end",
        ),
        (
            CLOCK,
            "one instant on CLOCK_MONOTONIC and UTC: history.json's times to the logs' and events' times",
        ),
        (HOST_CLOCK_STEPS, HOST_CLOCK_STEPS_WHAT),
    ] {
        let path = dir.join(name);
        out.push(item(
            &path,
            &if path.exists() {
                what.to_owned()
            } else {
                format!("MISSING: {what}")
            },
        ));
    }
    out
}

const HOST_CLOCK_STEPS_WHAT: &str = "every step of this machine's wall clock against CLOCK_MONOTONIC larger than 5 ms (read every 100 ms over the phase), one a line: at_mono_ns, utc, step_ns, since_previous_ns; empty when it never stepped";

/// The control run's evidence in `dir` (its output directory): the members' history, their
/// logs and the host clock's steps; it has no operator, no Kubernetes events and no
/// RedlockCluster.
pub fn control_files(dir: &Path) -> Vec<EvidenceFile> {
    let item = |path: &Path, what: &str| EvidenceFile {
        phase: "control".into(),
        path: path.display().to_string(),
        what: what.into(),
    };
    let history = dir.join(super::naive::MEMBER_HISTORY);
    let mut out = vec![item(
        &history,
        if history.exists() {
            "each member's history (started with its pid, signalled, clock set): t (UTC), mono_ns, member, port, event; no operator, no events and no RedlockCluster in the control"
        } else {
            "MISSING: the members' history"
        },
    )];
    out.push(item(
        &dir.join("naive-*.log"),
        "each member's redis-server log, every process of the member appended",
    ));
    let steps = dir.join(HOST_CLOCK_STEPS);
    out.push(item(
        &steps,
        &if steps.exists() {
            HOST_CLOCK_STEPS_WHAT.to_owned()
        } else {
            format!("MISSING: {HOST_CLOCK_STEPS_WHAT}")
        },
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary one.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("safety-evidence-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// What a run that panicked leaves: the recorder dropped unfinished copies every operator
    /// log (the first process's and those the faults started, nothing else), writes the events
    /// table from what it saw and says the run broke off; the file list names what is missing.
    #[test]
    fn a_recorder_dropped_unfinished_keeps_the_operator_logs_and_the_events() {
        let cp = scratch("cp");
        let dir = scratch("out");
        for (name, text) in [
            ("operator.log", "first"),
            ("operator-1.log", "after operator-kill"),
            ("operator-2-skewed.log", "20 s ahead"),
            ("kube-apiserver.log", "not the operator's"),
        ] {
            std::fs::write(cp.join(name), text).unwrap();
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _in_runtime = rt.enter();
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let events = Arc::new(Mutex::new(EventLog::new(File::create(dir.join(EVENTS)).unwrap())));
        let mut e = Event {
            reason: Some("UnstoppedProcessFenced".into()),
            type_: Some("Warning".into()),
            note: Some("locks-3: process outlived its pod".into()),
            ..Default::default()
        };
        e.metadata.uid = Some("u1".into());
        e.metadata.resource_version = Some("7".into());
        e.metadata.namespace = Some("lifecycle-x".into());
        events.lock().unwrap().record(&e);
        // The same version again (a watch's relist): once.
        events.lock().unwrap().record(&e);
        // A ClockJump event is kept as a sighting too, with its pod and its series' count and
        // last time.
        let mut jump = Event {
            reason: Some("ClockJump".into()),
            note: Some("locks-2: its clock jumped 0.8 s forward".into()),
            related: Some(ObjectReference {
                kind: Some("Pod".into()),
                name: Some("locks-2".into()),
                ..Default::default()
            }),
            series: Some(k8s_openapi::api::events::v1::EventSeries {
                count: 2,
                last_observed_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                    k8s_openapi::jiff::Timestamp::from_second(1_767_225_600).unwrap(),
                ),
            }),
            ..Default::default()
        };
        jump.metadata.uid = Some("u2".into());
        jump.metadata.resource_version = Some("9".into());
        events.lock().unwrap().record(&jump);
        {
            let log = events.lock().unwrap();
            assert_eq!(log.clock_jumps.len(), 1);
            let s = &log.clock_jumps[0];
            assert_eq!(
                (s.uid.as_str(), s.count, s.pod.as_deref(), s.stated_unix_ns),
                ("u2", 2, Some("locks-2"), Some(1_767_225_600_000_000_000))
            );
        }
        drop(Recorder {
            dir: dir.clone(),
            cp_dir: cp.clone(),
            client,
            namespaces: vec![],
            events,
            tasks: vec![],
            finished: false,
        });
        for (name, text) in [
            ("operator.log", "first"),
            ("operator-1.log", "after operator-kill"),
            ("operator-2-skewed.log", "20 s ahead"),
        ] {
            assert_eq!(std::fs::read_to_string(dir.join(name)).unwrap(), text);
        }
        assert!(!dir.join("kube-apiserver.log").exists());
        assert!(dir.join(UNFINISHED).exists());
        assert_eq!(
            std::fs::read_to_string(dir.join(EVENTS)).unwrap().lines().count(),
            2
        );
        let table = std::fs::read_to_string(dir.join(EVENTS_TABLE)).unwrap();
        assert!(
            table.contains("UnstoppedProcessFenced") && table.contains("locks-3: process outlived its pod"),
            "{table}"
        );
        let files = operator_files(&dir);
        let what = |suffix: &str| {
            files
                .iter()
                .find(|f| f.path.ends_with(suffix))
                .map(|f| f.what.clone())
                .unwrap_or_default()
        };
        assert!(what("/operator.log").contains("first operator process"));
        assert!(what("/operator-1.log").contains("started again"));
        assert!(what("/operator-2-skewed.log").contains("20 s ahead"));
        assert!(what(EVENTS).starts_with("every version"));
        assert!(what(DESCRIBE).starts_with("MISSING"), "{files:?}");
        assert!(what(STATUS_HISTORY).starts_with("MISSING"), "{files:?}");
        assert!(files.iter().all(|f| f.phase == "operator"));
        // Nothing copied at all: said so.
        let empty = scratch("empty");
        assert!(
            operator_files(&empty)[0]
                .what
                .starts_with("MISSING: no operator log")
        );
        for d in [cp, dir, empty] {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
