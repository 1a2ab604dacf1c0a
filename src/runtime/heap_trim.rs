//! Gives freed heap memory back to the system now and then.
//!
//! glibc's malloc returns memory to the kernel only from the top of its heap. A burst (hundreds
//! of clusters created at once, every watch listed again after a reconnect, a storm of events)
//! leaves freed chunks below live ones, and the process would keep that memory for good: the
//! operator's RSS would be its largest burst, not what it holds. `malloc_trim` also gives back
//! the free pages inside the heap. Other C libraries (musl in the image) have no such call and
//! need none: their allocators unmap freed memory themselves.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How often: a trim walks the free lists (about a millisecond at tens of MiB), and memory
/// freed by a burst may wait this long.
pub(crate) const PERIOD: Duration = Duration::from_secs(30);

/// Trims every `period` until `shutdown`.
pub(crate) async fn every(period: Duration, shutdown: CancellationToken) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => trim(),
        }
    }
}

/// Gives every free page of the heap back to the kernel.
pub(crate) fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only rearranges the allocator's own free memory; it is thread-safe
    // (it takes each arena's lock) and touches no live allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    fn anonymous_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("RssAnon:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .unwrap()
    }

    /// What the operator's bursts leave: many small blocks freed below one that stays. Without
    /// the trim none of their 64 MiB goes back (the heap's top is in use).
    #[test]
    fn memory_freed_below_live_blocks_goes_back() {
        let mut blocks: Vec<Vec<u8>> = (0..65_536).map(|i| vec![i as u8; 1024]).collect();
        let last = blocks.pop();
        drop(blocks);
        let before = anonymous_kib();
        trim();
        let after = anonymous_kib();
        drop(last);
        assert!(
            before.saturating_sub(after) > 32 * 1024,
            "RssAnon {before} KiB before the trim, {after} KiB after"
        );
    }
}
