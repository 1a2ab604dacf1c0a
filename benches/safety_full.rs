//! `make safety`: the full safety suite, ≥ 200 faults by default (`SAFETY_FAULTS`, and
//! `SAFETY_SEED` to replay a run; a fresh seed from the clock otherwise). Exits non-zero
//! unless the operator run has no violation and its clients kept getting locks (never 10 min
//! without one), the operator reported no clock jump that no clock made, and the control run
//! has at least one violation. Every run keeps its evidence
//! (the operator's logs, the Kubernetes events and the RedlockCluster's status history of the
//! operator run, the control's member history) under its output directory and names the files.
//! `SAFETY_NODES=real` (`make safety-real-nodes`) runs it on real nodes, in the run's own
//! namespaces, with every kind: a run that steps members' clocks runs them in the test image
//! that follows its node's clock (`redis:7.0-faketime`).
//! `SAFETY_LOAD=n` (`make safety-load`, or `LOAD=n` on `make safety` / `make
//! safety-real-nodes`) runs n busy processes per core (at nice 0) in each phase while its
//! faults are dealt; the report states them and the load average measured. Every run counts
//! the operator's `ClockJump` events no clock jump fault explains, against the host clock's
//! own steps (sampled every 100 ms): any left (false positives) fail the run.

use redlock_test_support::safety_harness;

fn main() {
    let real_nodes = match std::env::var("SAFETY_NODES").as_deref() {
        Err(_) | Ok("process") => false,
        Ok("real") => true,
        Ok(other) => {
            eprintln!("SAFETY_NODES={other:?}: expected \"real\" or \"process\"");
            std::process::exit(2);
        }
    };
    if real_nodes && let Err(e) = redlock_testenv::nodes::namespace::enter() {
        eprintln!("cannot enter the run's namespaces: {e:#}");
        std::process::exit(2);
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs());
    let mut settings = safety_harness::Settings::from_env(220, seed, "safety");
    if real_nodes {
        settings = settings.on_real_nodes();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let report = match runtime.block_on(safety_harness::run(&settings)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("safety run failed: {e:#}");
            std::process::exit(2);
        }
    };
    println!(
        "safety: {} faults, {} operations, {} violations, {} counter mismatches, {} control violations, {} false clock jumps, {} busy processes (seed {}); report in {}",
        report.faults,
        report.operations,
        report.violations,
        report.counter_mismatches,
        report.control_violations,
        report.false_clock_jumps,
        report.busy_processes,
        report.seed,
        settings.out_dir.join("report.json").display()
    );
    // The load, the host clock's steps, the ClockJump events by what explains them.
    print!("{}", report.conditions_text());
    // Where the operator's logs, the events and the status history of the run are, pass or
    // fail; a failed run also spells out each violation with its members' replies.
    print!("{}", report.evidence_text());
    if !report.passed() {
        if report.violations_beyond_limits > 0 {
            eprint!("{}", report.violations_text());
        }
        if report.false_clock_jumps > 0 {
            eprint!("{}", report.false_clock_jumps_text());
        }
        std::process::exit(1);
    }
}
