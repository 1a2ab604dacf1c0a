//! What the machine does while a phase runs: the load the harness puts on it (`SAFETY_LOAD`)
//! and the host's own clock.
//!
//! - [`Load`]: `SAFETY_LOAD` busy processes per core (`sh -c 'while :; do :; done'`, at nice
//!   0, each in a process group of its own that dies with the harness), started before a
//!   phase's first fault and killed and reaped when it ends, also on an error or a panic
//!   (`Drop`); the load average (`/proc/loadavg`) is read at the start, every 10 s and at the
//!   end, with or without busy processes.
//! - [`HostClock`]: CLOCK_REALTIME − CLOCK_MONOTONIC every 100 ms over the whole phase; a step
//!   larger than 5 ms goes to `host-clock-steps.jsonl` at once. A `ClockJump` event near such
//!   a step is a true jump, not an operator false positive (`redlock_safety::clock_jumps`).

use std::fs::File;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use redlock_safety::clock::mono_ns;
use redlock_safety::host::{
    HostClockRecord, HostClockStep, LoadRecord, LoadSample, StepFinder, parse_loadavg,
};
use redlock_testenv::procs::ManagedChild;

/// How often the load average is read while a phase runs.
const LOAD_EVERY: Duration = Duration::from_secs(10);
/// How often the host clock is read.
const CLOCK_EVERY: Duration = Duration::from_millis(100);

/// `SAFETY_LOAD`: busy processes per core (unset, empty or 0: none).
pub fn per_core_from_env() -> usize {
    match std::env::var("SAFETY_LOAD") {
        Err(_) => 0,
        Ok(v) if v.trim().is_empty() => 0,
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("SAFETY_LOAD={v:?}: expected a number of busy processes per core")),
    }
}

/// The cores this process may run on (`nproc`).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A thread that runs `tick` every `every` until stopped; joined on `stop` and on drop.
struct Ticker<T: Send + 'static> {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<T>>,
}

impl<T: Send + 'static> Ticker<T> {
    fn start<S: Send + 'static>(
        name: &str,
        every: Duration,
        mut state: S,
        mut tick: impl FnMut(&mut S) + Send + 'static,
        end: impl FnOnce(S) -> T + Send + 'static,
    ) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                tick(&mut state);
                let mut next = Instant::now() + every;
                while !stopped.load(Ordering::Relaxed) {
                    // Short sleeps: a stop is seen within 50 ms.
                    let now = Instant::now();
                    if now >= next {
                        tick(&mut state);
                        next = (next + every).max(now);
                    } else {
                        std::thread::sleep((next - now).min(Duration::from_millis(50)));
                    }
                }
                end(state)
            })
            .with_context(|| format!("start the {name} thread"))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    fn stop(mut self) -> Option<T> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take()?.join().ok()
    }
}

impl<T: Send + 'static> Drop for Ticker<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `/proc/loadavg` now.
fn read_loadavg() -> Option<LoadSample> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    parse_loadavg(&text, mono_ns())
}

/// The nice value of process `pid` (`/proc/<pid>/stat`, field 19).
fn nice_of(pid: u32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(16)?.parse().ok()
}

/// The busy processes of one phase and the load average read meanwhile (see the module's
/// doc). Dropped unfinished (an error, a panic), it stops the readings and kills and reaps
/// every busy process.
pub struct Load {
    per_core: usize,
    cores: usize,
    busy: Vec<ManagedChild>,
    readings: Option<Ticker<Vec<LoadSample>>>,
    from: u64,
}

impl Load {
    /// `per_core` busy processes on each core (none for 0), their output in `log`; the load
    /// average is read from now on.
    pub fn start(per_core: usize, log: &Path, phase: &str) -> Result<Self> {
        let cores = cores();
        let from = mono_ns();
        let mut busy = Vec::new();
        for i in 0..per_core * cores {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", "while :; do :; done"]);
            // Normal priority, whatever the harness runs at: they must compete with the
            // operator and the control plane as a loaded CI machine's jobs do. (Raising
            // priority back from a niced harness needs CAP_SYS_NICE; the nice read back at the
            // end says what they got.)
            // SAFETY: setpriority is async-signal-safe; its failure is not fatal.
            unsafe {
                cmd.pre_exec(|| {
                    libc::setpriority(libc::PRIO_PROCESS, 0, 0);
                    Ok(())
                });
            }
            busy.push(ManagedChild::spawn(&format!("busy-{phase}-{i}"), cmd, log)?);
        }
        if per_core > 0 {
            eprintln!(
                "[{phase}] load: {} busy processes ({per_core} per core × {cores} cores) until the phase ends",
                busy.len()
            );
        }
        let readings = Ticker::start(
            "safety-loadavg",
            LOAD_EVERY,
            Vec::new(),
            |samples: &mut Vec<LoadSample>| samples.extend(read_loadavg()),
            |mut samples| {
                samples.extend(read_loadavg());
                samples
            },
        )?;
        Ok(Self {
            per_core,
            cores,
            busy,
            readings: Some(readings),
            from,
        })
    }

    /// Stops the readings (the last one now), reads each busy process's nice value, kills and
    /// reaps them all.
    pub fn finish(mut self) -> LoadRecord {
        let samples = self.readings.take().and_then(Ticker::stop).unwrap_or_default();
        let to = mono_ns();
        let mut died_early = 0;
        let nice = self
            .busy
            .iter_mut()
            .map(|p| {
                if p.exited().is_some() {
                    died_early += 1;
                    None
                } else {
                    nice_of(p.pid())
                }
            })
            .collect();
        for mut p in std::mem::take(&mut self.busy) {
            p.stop(Duration::from_secs(2));
        }
        LoadRecord::new(
            self.per_core,
            self.cores,
            nice,
            died_early,
            samples,
            (self.from, to),
        )
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        if !self.busy.is_empty() {
            eprintln!(
                "safety load: the phase ended early; killing its {} busy processes",
                self.busy.len()
            );
        }
        // Each ManagedChild kills and reaps its process group as it drops; the ticker joins.
        self.busy.clear();
        self.readings.take();
    }
}

/// The host clock's readings over a phase (see the module's doc).
pub struct HostClock {
    ticker: Option<Ticker<HostClockRecord>>,
}

/// The wall clock's offset from CLOCK_MONOTONIC now, as (mono_ns, unix_ns): of a few tries the
/// one whose two CLOCK_MONOTONIC reads around the wall clock's are nearest (a reader
/// preempted between two reads would otherwise see a step that is only its own delay).
fn clock_reading() -> (u64, i128) {
    let mut best: Option<(u64, u64, i128)> = None;
    for _ in 0..5 {
        let before = mono_ns();
        let unix = realtime_ns();
        let after = mono_ns();
        let width = after.saturating_sub(before);
        if best.is_none_or(|(w, _, _)| width < w) {
            best = Some((width, before + width / 2, unix));
        }
        if width < 100_000 {
            break;
        }
    }
    let (_, mono, unix) = best.unwrap_or((0, mono_ns(), realtime_ns()));
    (mono, unix)
}

/// CLOCK_REALTIME in ns since the Unix epoch.
fn realtime_ns() -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec we own; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

struct ClockState {
    finder: StepFinder,
    steps: Vec<HostClockStep>,
    file: File,
}

impl HostClock {
    /// Reads the host clock every 100 ms from now on; each step goes to `file` (created
    /// empty) at once.
    pub fn start(file: &Path, phase: &str) -> Result<Self> {
        let out = File::create(file).with_context(|| format!("create {}", file.display()))?;
        let phase = phase.to_owned();
        let ticker = Ticker::start(
            "safety-host-clock",
            CLOCK_EVERY,
            ClockState {
                finder: StepFinder::default(),
                steps: Vec::new(),
                file: out,
            },
            move |s: &mut ClockState| {
                let (mono, unix) = clock_reading();
                if let Some(step) = s.finder.observe(mono, unix) {
                    eprintln!(
                        "[{phase}] host clock stepped {:+.3} s at {}",
                        step.step_ns as f64 / 1e9,
                        step.utc
                    );
                    let line = serde_json::to_string(&step).unwrap_or_default();
                    if let Err(e) = writeln!(s.file, "{line}").and_then(|()| s.file.flush()) {
                        eprintln!("safety evidence: cannot write a host clock step: {e}");
                    }
                    s.steps.push(step);
                }
            },
            |s| HostClockRecord::new(&s.finder, s.steps),
        )?;
        Ok(Self { ticker: Some(ticker) })
    }

    /// Stops the readings: what they found.
    pub fn finish(mut self) -> Option<HostClockRecord> {
        self.ticker.take()?.stop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The busy processes spin at nice 0 until finished, and none is left afterwards; one
    /// dropped unfinished (an error, a panic) is killed and reaped too.
    #[test]
    fn busy_processes_spin_at_nice_0_and_are_gone_after_the_phase() {
        let dir = std::env::temp_dir().join(format!("safety-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("load.log");
        let load = Load::start(1, &log, "test").unwrap();
        let pids: Vec<u32> = load.busy.iter().map(ManagedChild::pid).collect();
        assert_eq!(pids.len(), cores());
        std::thread::sleep(Duration::from_millis(300));
        let alive = |pid: u32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| !s[s.rfind(')').unwrap() + 1..].trim_start().starts_with('Z'))
        };
        assert!(pids.iter().all(|p| alive(*p)));
        let r = load.finish();
        assert_eq!((r.busy_processes, r.died_early, r.per_core), (cores(), 0, 1));
        // The harness's own nice is what a child gets back when it may not lower it.
        let own = nice_of(std::process::id()).unwrap();
        assert!(
            r.nice
                .iter()
                .all(|n| *n == Some(0) || (own > 0 && *n == Some(own))),
            "{r:?}"
        );
        assert!(r.samples.len() >= 2, "{r:?}");
        assert!(pids.iter().all(|p| !alive(*p)), "busy processes left behind");

        let dropped = Load::start(1, &log, "test").unwrap();
        let pids: Vec<u32> = dropped.busy.iter().map(ManagedChild::pid).collect();
        drop(dropped);
        assert!(
            pids.iter().all(|p| !alive(*p)),
            "busy processes left behind by a drop"
        );
        // No load: no process, the load average still read.
        let none = Load::start(0, &log, "test").unwrap().finish();
        assert_eq!(none.busy_processes, 0);
        assert!(!none.samples.is_empty());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_host_clock_is_read_until_finished() {
        let file = std::env::temp_dir().join(format!("safety-host-clock-{}.jsonl", std::process::id()));
        let clock = HostClock::start(&file, "test").unwrap();
        std::thread::sleep(Duration::from_millis(350));
        let r = clock.finish().unwrap();
        assert!(r.readings >= 3, "{r:?}");
        assert_eq!(r.threshold_ms, 5);
        assert!(file.exists());
        let _ = std::fs::remove_file(file);
    }
}
