//! The one clock of a run: CLOCK_MONOTONIC, which every process on the machine shares, so the
//! harness's fault times and the Go, Node and Rust workers' event times compare directly
//! (and no wall-clock step can reorder them).

/// CLOCK_MONOTONIC in nanoseconds.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn monotonic_and_in_nanoseconds() {
        let a = super::mono_ns();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let b = super::mono_ns();
        assert!(b - a >= 5_000_000 && b - a < 5_000_000_000, "{a} {b}");
    }
}
