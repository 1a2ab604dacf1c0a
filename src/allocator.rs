//! The operator's memory allocator, and giving freed memory back to the system now and then.
//!
//! **mimalloc, not the C library's malloc.** A reconcile allocates and frees many small
//! objects (names, probe replies, the status it computes), once per cluster per probe period.
//! With glibc's malloc that was about a fifth of the operator's CPU (`make bench-scale`,
//! 50 clusters, perf: `_int_malloc`, `malloc_consolidate` and `realloc` at the top), and the
//! image's static musl build has a slower malloc still. mimalloc cut the CPU per reconcile
//! from 709 to 502 µs there. It is the same allocator in every build (glibc or musl, the
//! binary, its tests and the benchmarks), so what is measured here is what runs.
//!
//! **Transparent huge pages off.** mimalloc asks for huge pages on its arenas, and on a
//! `madvise` THP host each touched 2 MiB region is then resident whole: the anonymous RSS
//! at 50 clusters went from 8.4 MiB (glibc) to 15.6 MiB. Without them it is 9.6 MiB.
//! [`configure`] turns THP off for the process (`PR_SET_THP_DISABLE`, which the kernel
//! applies to every mapping, also those mimalloc advised before `main`).
//!
//! **Freed memory goes back.** A burst (hundreds of clusters created at once, every watch
//! listed again after a reconnect, a storm of events) must not set the operator's RSS for
//! good: [`trim`] has mimalloc purge every free page now, and [`every`] does so
//! periodically.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How often: a trim walks the free lists (about a millisecond at tens of MiB), and memory
/// freed by a burst may wait this long.
pub const PERIOD: Duration = Duration::from_secs(30);

/// Trims every `period` until `shutdown`.
pub async fn every(period: Duration, shutdown: CancellationToken) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => trim(),
        }
    }
}

/// Every allocation of the process goes through mimalloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its `mimalloc.h`, enum `mi_option_e`), which the
/// Rust bindings do not name: how long freed pages stay resident before they are given back
/// (1 s by default). A test checks that this number still is that option.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Settings the allocator needs; called first thing in `main`.
pub fn configure() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE only sets a flag of this process's memory map; it takes no
    // pointer and changes no memory contents.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
    // Freed pages go back at once: every reconcile frees what it built, and with the default
    // delay up to a second of that stayed resident (12.0 MiB anonymous at 50 clusters, 9.6
    // without the delay, the same CPU per reconcile).
    // SAFETY: sets one of mimalloc's option values; no memory is touched.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
    }
}

/// Gives every free page of the heap back to the kernel.
pub fn trim() {
    // SAFETY: mi_collect only frees the allocator's own free memory and is thread-safe; it
    // touches no live allocation.
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The option number is mimalloc's purge delay: the only option whose default is 1000
    /// (ms). A mimalloc whose options are numbered otherwise fails here, not in production.
    #[test]
    fn the_purge_delay_option_is_the_one_set() {
        // SAFETY: reads an option value.
        let default = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(default, 1000);
    }

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
