//! A small seeded generator (SplitMix64): the same seed gives the same fault schedule and
//! workload choices on every machine and with every dependency version, which a crate's RNG
//! does not promise across releases.

#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` (modulo bias is irrelevant at these ranges).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi, "empty range {lo}..={hi}");
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// A new generator for a sub-stream (e.g. one per worker), independent of how many
    /// numbers the parent draws later.
    pub fn fork(&mut self) -> Rng {
        Rng(self.next_u64())
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.range(0, i as u64) as usize;
            items.swap(i, j);
        }
    }

    /// `k` distinct values of `0..n`, sorted.
    pub fn choose(&mut self, n: usize, k: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..n).collect();
        self.shuffle(&mut all);
        let mut out = all[..k.min(n)].to_vec();
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_different_seed_different_stream() {
        let a: Vec<u64> = (0..5)
            .map({
                let mut r = Rng::new(42);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..5)
            .map({
                let mut r = Rng::new(42);
                move |_| r.next_u64()
            })
            .collect();
        let c = Rng::new(43).next_u64();
        assert_eq!(a, b);
        assert_ne!(a[0], c);
    }

    #[test]
    fn range_stays_in_bounds_and_reaches_both_ends() {
        let mut r = Rng::new(1);
        let v: Vec<u64> = (0..1000).map(|_| r.range(3, 6)).collect();
        assert!(v.iter().all(|x| (3..=6).contains(x)));
        assert!(v.contains(&3) && v.contains(&6));
        assert_eq!(r.range(7, 7), 7);
    }

    #[test]
    fn choose_is_distinct_sorted_and_bounded() {
        let mut r = Rng::new(9);
        for k in 0..=5 {
            let c = r.choose(5, k);
            assert_eq!(c.len(), k);
            assert!(c.windows(2).all(|w| w[0] < w[1]) && c.iter().all(|x| *x < 5));
        }
        assert_eq!(r.choose(3, 10).len(), 3);
    }
}
