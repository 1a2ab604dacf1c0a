//! The operator's limit of open files, raised to the most it may have. Every member of every
//! cluster costs a kept probe connection, and the watch of a resting cluster a second handle
//! on each (`admin_connection::ClosedWatch`): at 200 clusters × 3 members that is 1,200
//! sockets besides the API server's, more than the usual soft limit of 1,024. The hard limit
//! is what the container runtime grants; the soft one is only a default for programs that
//! do not expect many files (Go programs raise it at start the same way).

use std::io;

/// The soft and hard limits of open files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub soft: u64,
    pub hard: u64,
}

/// Raises the soft limit of open files to the hard one; the limits before and after.
pub fn raise_soft_limit() -> io::Result<(Limits, Limits)> {
    let before = limits()?;
    if before.soft < before.hard {
        let raised = libc::rlimit {
            rlim_cur: before.hard,
            rlim_max: before.hard,
        };
        // SAFETY: setrlimit reads the struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((before, limits()?))
}

fn limits() -> io::Result<Limits> {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Limits {
        soft: l.rlim_cur,
        hard: l.rlim_max,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set in the child that runs the test proper.
    const CHILD: &str = "REDLOCK_OPEN_FILES_TEST_CHILD";
    const NAME: &str = "runtime::open_files::tests::the_soft_limit_is_raised_to_the_hard_one";

    /// A soft limit lowered below the hard one is raised back to it. The limit is the whole
    /// process's, so the test proper runs in a child of its own (this test binary, only this
    /// test): lowering it here could starve tests that run beside it.
    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", NAME, "--test-threads=1"])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("1 passed"),
                "{stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        let (_, start) = raise_soft_limit().unwrap();
        assert_eq!(start.soft, start.hard);
        let lowered = libc::rlimit {
            rlim_cur: 256,
            rlim_max: start.hard,
        };
        // SAFETY: setrlimit reads the struct it is given.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lowered) }, 0);
        let (before, after) = raise_soft_limit().unwrap();
        assert_eq!(
            before,
            Limits {
                soft: 256,
                hard: start.hard
            }
        );
        assert_eq!(
            after,
            Limits {
                soft: start.hard,
                hard: start.hard
            }
        );
    }
}
