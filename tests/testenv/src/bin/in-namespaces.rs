//! `in-namespaces COMMAND [ARGS...]`: runs COMMAND inside the run's own network, mount and PID
//! namespaces, as `tests/real_nodes.rs` runs itself (`redlock_testenv::nodes::namespace`). With
//! `REDLOCK_TEST_NODES=real` this runs whole test binaries on real nodes (`make
//! test-real-nodes`). When COMMAND exits, the kernel kills whatever it left in the namespace.

use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let Some((program, rest)) = args.split_first() else {
        eprintln!("usage: in-namespaces COMMAND [ARGS...]");
        return ExitCode::from(2);
    };
    if let Err(e) = redlock_testenv::nodes::namespace::enter() {
        eprintln!("cannot enter the run's namespaces: {e:#}");
        return ExitCode::FAILURE;
    }
    // A new network namespace's loopback is down; tests on the process kubelet (whose pods
    // listen on 127.B.x.y) need it, and do not set up the namespaces themselves.
    if let Err(e) = redlock_testenv::nodes::namespace::run("ip", &["link", "set", "lo", "up"]) {
        eprintln!("cannot bring loopback up: {e:#}");
        return ExitCode::FAILURE;
    }
    let err = Command::new(program).args(rest).exec();
    eprintln!("exec {}: {err}", program.to_string_lossy());
    ExitCode::FAILURE
}
