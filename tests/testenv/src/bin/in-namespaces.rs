//! `in-namespaces COMMAND [ARGS...]`: runs COMMAND inside the run's own network, mount and PID
//! namespaces, as `tests/real_nodes.rs` runs itself (`redlock_testenv::nodes::namespace`). With
//! `REDLOCK_TEST_NODES=real` this runs whole test binaries on real nodes (`make test`, `make
//! test-real-nodes`).
//!
//! This program stays as the namespaces' PID 1 and runs COMMAND as its child. An init must
//! reap every orphan (containerd shims of stopped nodes end up here) and pass on the signals
//! meant for the run (Ctrl-C, a CI's SIGTERM), which a PID 1 without handlers ignores. When
//! COMMAND exits, so does this program, and the kernel kills whatever is left in the
//! namespaces.

use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicI32, Ordering};

use nix::errno::Errno;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use nix::sys::wait::{WaitStatus, waitpid};

/// The command's PID, for the signal handler.
static COMMAND: AtomicI32 = AtomicI32::new(0);

extern "C" fn pass_on(signal: libc::c_int) {
    let pid = COMMAND.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, signal) };
    }
}

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
    // Loopback up (tests on the process kubelet, whose pods listen on 127.B.x.y, need it and
    // do not set up the namespaces themselves) and the private mounts, once for every test
    // binary of the run: those running side by side share this mount namespace, and each
    // mounting its own would hide the others' (`namespace::RUN_PREPARED`).
    if let Err(e) = redlock_testenv::nodes::namespace::prepare() {
        eprintln!("cannot prepare the run's namespaces: {e:#}");
        return ExitCode::FAILURE;
    }
    // The kernel settings kubelets change machine-wide, put back when the run ends: a test
    // binary cannot tell whether another one's kubelets still run.
    let tunables = match redlock_testenv::nodes::kernel_tunables() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cannot read the kernel settings kubelets change: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let inotify = match raise_inotify_limits() {
        Ok(saved) => saved,
        Err(e) => {
            eprintln!("cannot raise the inotify limits: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let code = run(program, rest);
    redlock_testenv::nodes::restore_sysctls(&tunables);
    redlock_testenv::nodes::restore_sysctls(&inotify);
    code
}

/// inotify limits (machine-wide, per user) and what the run needs. Every kubelet and
/// containerd holds several inotify instances; with two test binaries at once, each running
/// two tests of five nodes, the default 128 instances ran out and kubelets failed to start
/// ("fsnotify watcher init: too many open files"). As kind advises for its nodes.
const INOTIFY_LIMITS: &[(&str, u64)] = &[
    ("fs/inotify/max_user_instances", 8192),
    ("fs/inotify/max_user_watches", 524_288),
];

/// Raises each limit to at least what the run needs (never lowers one); the values before,
/// to put back when the run ends.
fn raise_inotify_limits() -> anyhow::Result<Vec<(String, String)>> {
    use redlock_testenv::nodes::namespace::{read_sysctl, write_sysctl};
    let mut saved = Vec::new();
    for &(key, wanted) in INOTIFY_LIMITS {
        let before = read_sysctl(key)?;
        if before.parse::<u64>().is_ok_and(|v| v < wanted) {
            write_sysctl(key, &wanted.to_string())?;
            saved.push((key.to_string(), before));
        }
    }
    Ok(saved)
}

/// Runs the command as this PID 1's child, passing on signals and reaping every orphan, until
/// the command exits; its exit code.
fn run(program: &std::ffi::OsString, rest: &[std::ffi::OsString]) -> ExitCode {
    let handler = SigAction::new(SigHandler::Handler(pass_on), SaFlags::SA_RESTART, SigSet::empty());
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP, Signal::SIGQUIT] {
        // SAFETY: the handler only reads an atomic and calls kill.
        if let Err(e) = unsafe { sigaction(signal, &handler) } {
            eprintln!("cannot handle {signal}: {e}");
            return ExitCode::FAILURE;
        }
    }
    let child = match Command::new(program)
        .args(rest)
        .env(redlock_testenv::nodes::namespace::RUN_PREPARED, "1")
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("run {}: {e}", program.to_string_lossy());
            return ExitCode::FAILURE;
        }
    };
    let pid = child.id() as i32;
    COMMAND.store(pid, Ordering::SeqCst);
    // Reaped below with every orphan (`waitpid(-1)`), not through `child`.
    drop(child);
    loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(p, code)) if p.as_raw() == pid => {
                return ExitCode::from(u8::try_from(code).unwrap_or(1));
            }
            Ok(WaitStatus::Signaled(p, signal, _)) if p.as_raw() == pid => {
                return ExitCode::from(128u8.saturating_add(signal as u8));
            }
            // An orphan reaped, or a stop/continue report.
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => {
                eprintln!("waiting for {}: {e}", program.to_string_lossy());
                return ExitCode::FAILURE;
            }
        }
    }
}
