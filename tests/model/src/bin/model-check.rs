//! `make model-check`: the full bounds, with states explored, depth, time and the bounds
//! printed; exits 1 on a property violation (its trace printed) or a vacuous property.

use redlock_model::model::Bounds;
use redlock_model::{check_for, format_trace};

fn main() {
    let which = std::env::args().nth(1).unwrap_or_else(|| "full".into());
    let Some(mut bounds) = Bounds::named(&which) else {
        eprintln!(
            "unknown bound {which}: small, full, first-process, lowering, release-ahead, evidence, clock, member-clock, heal"
        );
        std::process::exit(2);
    };
    // MODEL_MAX_NOW / MODEL_FAULTS override those two bounds.
    if let Some(v) = std::env::var("MODEL_MAX_NOW").ok().and_then(|v| v.parse().ok()) {
        bounds.max_now = v;
    }
    if let Some(v) = std::env::var("MODEL_FAULTS").ok().and_then(|v| v.parse().ok()) {
        bounds.faults = v;
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("bounds ({which}): {bounds:?}");
    // MODEL_CHECK_SECS: stop after that long (a partial run, for measuring).
    let limit = std::env::var("MODEL_CHECK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(std::time::Duration::from_secs);
    let out = check_for(bounds.clone(), threads, limit);
    println!(
        "states explored: {} ({} unique), max depth {}, {:.1}s",
        out.states,
        out.unique,
        out.depth,
        out.elapsed.as_secs_f64()
    );
    let mut failed = false;
    for (name, start, actions) in &out.violations {
        failed = true;
        println!("VIOLATED: {name} (trace of {} actions)", actions.len());
        print!("{}", format_trace(&bounds, start, actions));
    }
    for name in &out.never_seen {
        failed = true;
        println!("NEVER SEEN (the model is vacuous for it): {name}");
    }
    if failed {
        std::process::exit(1);
    }
    println!("0 property violations");
}
