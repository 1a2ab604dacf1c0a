//! What the machine did while a phase ran, the pure part: the load the harness put on it
//! (`SAFETY_LOAD`: busy processes on every core) with the load average it measured, and the
//! host's own wall clock against CLOCK_MONOTONIC, whose steps explain a member clock jump
//! the operator reports without a fault (the harness, `safety_harness::host`, samples both).

use serde::Serialize;

use crate::violation::utc;

/// One reading of `/proc/loadavg`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LoadSample {
    /// When it was read (CLOCK_MONOTONIC ns).
    pub t_mono_ns: u64,
    /// The 1, 5 and 15 minute load averages.
    pub load1: f64,
    pub load5: f64,
    pub load15: f64,
    /// Runnable scheduling entities at that moment, and how many exist.
    pub runnable: u32,
    pub tasks: u32,
}

/// `/proc/loadavg` (`0.52 0.58 0.59 3/812 12345`) read at `t_mono_ns`; `None` if it is not in
/// that form.
pub fn parse_loadavg(text: &str, t_mono_ns: u64) -> Option<LoadSample> {
    let mut fields = text.split_whitespace();
    let mut avg = || fields.next()?.parse::<f64>().ok();
    let (load1, load5, load15) = (avg()?, avg()?, avg()?);
    let (runnable, tasks) = fields.next()?.split_once('/')?;
    Some(LoadSample {
        t_mono_ns,
        load1,
        load5,
        load15,
        runnable: runnable.parse().ok()?,
        tasks: tasks.parse().ok()?,
    })
}

/// The load of one phase: the busy processes the harness ran (none without `SAFETY_LOAD`)
/// and the load average read at their start, every 10 s and at their end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadRecord {
    /// `SAFETY_LOAD`: busy processes per core (0: no load added).
    pub per_core: usize,
    /// Cores the harness may run on (`nproc`).
    pub cores: usize,
    pub busy_processes: usize,
    /// Each busy process's nice value, read from `/proc/<pid>/stat` before it was killed
    /// (`None` where it could not be read); 0 is the point: they compete with the operator
    /// and the control plane as a loaded CI machine's jobs do.
    pub nice: Vec<Option<i32>>,
    /// How many busy processes had died before the phase ended (each should spin to the end).
    pub died_early: usize,
    pub samples: Vec<LoadSample>,
    /// The 1-minute load average over `samples`: its highest and its mean.
    pub max_load1: f64,
    pub mean_load1: f64,
    /// From the busy processes' start (before the first fault) to their end (CLOCK_MONOTONIC).
    pub from_mono_ns: u64,
    pub to_mono_ns: u64,
}

impl LoadRecord {
    pub fn new(
        per_core: usize,
        cores: usize,
        nice: Vec<Option<i32>>,
        died_early: usize,
        samples: Vec<LoadSample>,
        (from_mono_ns, to_mono_ns): (u64, u64),
    ) -> Self {
        let max_load1 = samples.iter().map(|s| s.load1).fold(0.0, f64::max);
        let mean_load1 = if samples.is_empty() {
            0.0
        } else {
            samples.iter().map(|s| s.load1).sum::<f64>() / samples.len() as f64
        };
        Self {
            per_core,
            cores,
            busy_processes: nice.len(),
            nice,
            died_early,
            samples,
            max_load1,
            mean_load1,
            from_mono_ns,
            to_mono_ns,
        }
    }

    /// Whether every busy process ran at nice 0 (true without any).
    pub fn all_at_nice_0(&self) -> bool {
        self.nice.iter().all(|n| *n == Some(0))
    }

    /// One line: the busy processes (or none) and the load average measured.
    pub fn text(&self) -> String {
        let busy = if self.busy_processes == 0 {
            "no load added (SAFETY_LOAD unset)".to_owned()
        } else {
            let mut nices: Vec<String> = self
                .nice
                .iter()
                .map(|n| n.map_or("?".into(), |n| n.to_string()))
                .collect();
            nices.sort();
            nices.dedup();
            format!(
                "{} busy processes ({} per core × {} cores, nice {}{})",
                self.busy_processes,
                self.per_core,
                self.cores,
                nices.join("/"),
                if self.died_early > 0 {
                    format!("; {} died before the end", self.died_early)
                } else {
                    String::new()
                }
            )
        };
        format!(
            "{busy}; load average (1 min) max {:.2}, mean {:.2} over {} readings in {:.0} s",
            self.max_load1,
            self.mean_load1,
            self.samples.len(),
            self.to_mono_ns.saturating_sub(self.from_mono_ns) as f64 / 1e9
        )
    }
}

/// A host clock step is a change of CLOCK_REALTIME − CLOCK_MONOTONIC larger than this between
/// two readings 100 ms apart (NTP slewing moves it by at most 0.05 ms in that time).
pub const HOST_STEP_THRESHOLD_NS: i64 = 5_000_000;

/// A step of the host's wall clock against CLOCK_MONOTONIC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostClockStep {
    /// When the reading that showed it was taken (CLOCK_MONOTONIC ns), and that in UTC (the
    /// stepped clock's reading).
    pub at_mono_ns: u64,
    pub utc: String,
    /// How far the wall clock moved against CLOCK_MONOTONIC (positive: forward), ns.
    pub step_ns: i64,
    /// Since the reading before it (the step happened in between), ns.
    pub since_previous_ns: u64,
}

/// Finds host clock steps in a series of readings of the wall clock's offset from
/// CLOCK_MONOTONIC (`unix_ns − mono_ns`).
#[derive(Debug, Clone, Default)]
pub struct StepFinder {
    last: Option<(u64, i128)>,
    pub readings: u64,
    pub longest_gap_ns: u64,
}

impl StepFinder {
    /// The reading at `mono_ns` with the wall clock at `unix_ns`: a step when the offset moved
    /// more than [`HOST_STEP_THRESHOLD_NS`] since the reading before.
    pub fn observe(&mut self, mono_ns: u64, unix_ns: i128) -> Option<HostClockStep> {
        let offset = unix_ns - i128::from(mono_ns);
        self.readings += 1;
        let previous = self.last.replace((mono_ns, offset));
        let (t0, o0) = previous?;
        let gap = mono_ns.saturating_sub(t0);
        self.longest_gap_ns = self.longest_gap_ns.max(gap);
        let step = offset - o0;
        (step.abs() > i128::from(HOST_STEP_THRESHOLD_NS)).then(|| HostClockStep {
            at_mono_ns: mono_ns,
            utc: utc(unix_ns),
            step_ns: step.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
            since_previous_ns: gap,
        })
    }
}

/// The host clock over one phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostClockRecord {
    /// How many readings were taken (every 100 ms), and the longest time between two (a
    /// starved sampler reads less often; a step is still seen, later).
    pub readings: u64,
    pub longest_gap_ms: u64,
    pub threshold_ms: u64,
    /// Every step larger than the threshold, also in `host-clock-steps.jsonl`.
    pub steps: Vec<HostClockStep>,
}

impl HostClockRecord {
    pub fn new(finder: &StepFinder, steps: Vec<HostClockStep>) -> Self {
        Self {
            readings: finder.readings,
            longest_gap_ms: finder.longest_gap_ns / 1_000_000,
            threshold_ms: (HOST_STEP_THRESHOLD_NS / 1_000_000) as u64,
            steps,
        }
    }

    pub fn text(&self) -> String {
        let steps: Vec<String> = self
            .steps
            .iter()
            .take(10)
            .map(|s| format!("{:+.3} s at {}", s.step_ns as f64 / 1e9, s.utc))
            .collect();
        format!(
            "{} step(s) > {} ms in {} readings (longest gap between readings {:.1} s){}",
            self.steps.len(),
            self.threshold_ms,
            self.readings,
            self.longest_gap_ms as f64 / 1000.0,
            if steps.is_empty() {
                String::new()
            } else {
                format!(
                    ": {}{}",
                    steps.join(", "),
                    if self.steps.len() > steps.len() {
                        ", …"
                    } else {
                        ""
                    }
                )
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn loadavg_is_read_and_summed_up() {
        let s = parse_loadavg("2.50 1.25 0.75 3/812 12345\n", 7).unwrap();
        assert_eq!(
            (s.t_mono_ns, s.load1, s.load5, s.load15, s.runnable, s.tasks),
            (7, 2.5, 1.25, 0.75, 3, 812)
        );
        assert!(parse_loadavg("", 0).is_none());
        assert!(parse_loadavg("1 2 3 x 4", 0).is_none());
        let at = |t: u64, load1: f64| LoadSample {
            load1,
            ..parse_loadavg("0 0 0 1/1 1", t).unwrap()
        };
        let r = LoadRecord::new(
            2,
            2,
            vec![Some(0); 4],
            0,
            vec![at(0, 1.0), at(10, 4.0), at(20, 4.0)],
            (0, 20_000 * MS),
        );
        assert_eq!((r.busy_processes, r.max_load1, r.mean_load1), (4, 4.0, 3.0));
        assert!(r.all_at_nice_0());
        assert_eq!(
            r.text(),
            "4 busy processes (2 per core × 2 cores, nice 0); load average (1 min) max 4.00, mean 3.00 over 3 readings in 20 s"
        );
        let niced = LoadRecord::new(1, 2, vec![Some(0), Some(10)], 1, vec![], (0, 0));
        assert!(!niced.all_at_nice_0());
        assert!(
            niced.text().contains("nice 0/10; 1 died before the end"),
            "{}",
            niced.text()
        );
        assert_eq!(niced.mean_load1, 0.0);
        let none = LoadRecord::new(0, 2, vec![], 0, vec![at(0, 0.5)], (0, MS));
        assert!(none.text().starts_with("no load added"), "{}", none.text());
    }

    #[test]
    fn only_a_step_of_the_wall_clock_against_the_monotonic_one_counts() {
        let mut f = StepFinder::default();
        let unix0: i128 = 1_700_000_000_000_000_000;
        // The wall clock runs with CLOCK_MONOTONIC, slewed 0.01 ms: no step.
        assert_eq!(f.observe(0, unix0), None);
        assert_eq!(f.observe(100 * MS, unix0 + 100_010_000), None);
        // A starved sampler reads 3 s later: the time between readings is no step.
        assert_eq!(f.observe(3100 * MS, unix0 + 3_100_010_000), None);
        // Stepped 2 s forward, then 6 ms back.
        let s = f.observe(3200 * MS, unix0 + 5_200_010_000).unwrap();
        assert_eq!(
            (s.at_mono_ns, s.step_ns, s.since_previous_ns),
            (3200 * MS, 2_000_000_000, 100 * MS)
        );
        assert_eq!(s.utc, utc(unix0 + 5_200_010_000));
        let back = f.observe(3300 * MS, unix0 + 5_294_010_000).unwrap();
        assert_eq!(back.step_ns, -6_000_000);
        // 5 ms exactly is not beyond the threshold.
        assert_eq!(f.observe(3400 * MS, unix0 + 5_399_010_000), None);
        let r = HostClockRecord::new(&f, vec![s, back]);
        assert_eq!((r.readings, r.longest_gap_ms, r.threshold_ms), (6, 3000, 5));
        assert!(
            r.text().starts_with(
                "2 step(s) > 5 ms in 6 readings (longest gap between readings 3.0 s): +2.000 s at"
            ),
            "{}",
            r.text()
        );
    }
}
