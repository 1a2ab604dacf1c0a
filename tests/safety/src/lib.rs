//! The safety suite's logic, pure apart from one clock read (`clock`), unit-tested here and
//! driven by the harness in `tests/support/src/safety_harness/`:
//!
//! - `clock`: the CLOCK_MONOTONIC reading every process of a run shares;
//! - `protocol`: the line protocol between the harness and the client workers;
//! - `history`: the lock operations assembled from the workers' events;
//! - `checker`: mutual exclusion per key and the shared counter;
//! - `clock_jumps`: the operator's `ClockJump` events, each explained by a clock jump fault, a
//!   step of the host's clock, or nothing (a false positive, which fails the run);
//! - `evidence`: the RedlockCluster's status history and the Kubernetes events a run keeps,
//!   as lines and tables;
//! - `host`: the load a run put on the machine (`SAFETY_LOAD`) and the load average measured,
//!   and the host clock's steps against CLOCK_MONOTONIC;
//! - `rng` and `schedule`: the seeded, reproducible fault schedule;
//! - `report`: per-fault-kind statistics, `report.json`, `summary.md`;
//! - `timeline`: `timeline.svg`;
//! - `violation`: a violation with its two operations, the members each locked and every
//!   member's reply, as the report and a failing test's message show it.

pub mod checker;
pub mod clock;
pub mod clock_jumps;
pub mod evidence;
pub mod history;
pub mod host;
pub mod protocol;
pub mod report;
pub mod rng;
pub mod schedule;
pub mod timeline;
pub mod violation;
