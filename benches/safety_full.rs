//! `make safety`: the full safety suite, ≥ 200 faults by default (`SAFETY_FAULTS`, and
//! `SAFETY_SEED` to replay a run; a fresh seed from the clock otherwise). Exits non-zero
//! unless the operator run has no violation and the control run has at least one.

use redlock_test_support::safety_harness;

fn main() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs());
    let settings = safety_harness::Settings::from_env(220, seed, "safety");
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
        "safety: {} faults, {} operations, {} violations, {} counter mismatches, {} control violations (seed {}); report in {}",
        report.faults,
        report.operations,
        report.violations,
        report.counter_mismatches,
        report.control_violations,
        report.seed,
        settings.out_dir.join("report.json").display()
    );
    if !report.passed() {
        std::process::exit(1);
    }
}
