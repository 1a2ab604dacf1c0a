//! Pod addresses: every pod gets its own loopback address 127.B.x.y (x in 1..=239,
//! y in 1..=254), so many Redis servers can all listen on their container port, and a
//! client reaching a pod IP reaches exactly that pod. Linux routes all of 127/8 to `lo`,
//! so no interface setup is needed.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;

const THIRD_OCTETS: u32 = 239;
const FOURTH_OCTETS: u32 = 254;
const POOL_SIZE: u32 = THIRD_OCTETS * FOURTH_OCTETS;

/// Allocates pod addresses by pod UID. Allocation walks the pool round-robin, so an
/// address freed by a deleted pod is not handed out again soon (stale clients of the old
/// pod must not reach a new one).
#[derive(Debug)]
pub struct Ipam {
    block: u8,
    by_uid: HashMap<String, Ipv4Addr>,
    taken: HashSet<Ipv4Addr>,
    next: u32,
}

impl Ipam {
    pub fn new(block: u8) -> Self {
        Self {
            block,
            by_uid: HashMap::new(),
            taken: HashSet::new(),
            next: 0,
        }
    }

    fn addr(&self, index: u32) -> Ipv4Addr {
        Ipv4Addr::new(
            127,
            self.block,
            (1 + index / FOURTH_OCTETS) as u8,
            (1 + index % FOURTH_OCTETS) as u8,
        )
    }

    fn in_pool(&self, ip: Ipv4Addr) -> bool {
        let [a, b, c, d] = ip.octets();
        a == 127 && b == self.block && (1..=THIRD_OCTETS).contains(&(c as u32)) && (1..=254).contains(&d)
    }

    fn taken(&self, ip: Ipv4Addr) -> bool {
        self.taken.contains(&ip)
    }

    /// The address of pod `uid`: the one it already has, else `preferred` (the address the
    /// API still shows for it, e.g. after a node comes back) when free, else the next free.
    pub fn allocate(&mut self, uid: &str, preferred: Option<Ipv4Addr>) -> Option<Ipv4Addr> {
        if let Some(ip) = self.by_uid.get(uid) {
            return Some(*ip);
        }
        let chosen = match preferred {
            Some(ip) if self.in_pool(ip) && !self.taken(ip) => Some(ip),
            _ => (0..POOL_SIZE)
                .map(|i| (self.next + i) % POOL_SIZE)
                .find(|i| !self.taken(self.addr(*i)))
                .inspect(|i| self.next = (i + 1) % POOL_SIZE)
                .map(|i| self.addr(i)),
        }?;
        self.by_uid.insert(uid.to_string(), chosen);
        self.taken.insert(chosen);
        Some(chosen)
    }

    pub fn release(&mut self, uid: &str) {
        if let Some(ip) = self.by_uid.remove(uid) {
            self.taken.remove(&ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_unique_addresses_in_the_block() {
        let mut ipam = Ipam::new(7);
        let a = ipam.allocate("a", None).unwrap();
        let b = ipam.allocate("b", None).unwrap();
        assert_eq!(a, Ipv4Addr::new(127, 7, 1, 1));
        assert_eq!(b, Ipv4Addr::new(127, 7, 1, 2));
        assert_eq!(ipam.allocate("a", None), Some(a), "stable per uid");
    }

    #[test]
    fn does_not_reuse_a_freed_address_at_once() {
        let mut ipam = Ipam::new(7);
        let a = ipam.allocate("a", None).unwrap();
        ipam.release("a");
        assert_ne!(ipam.allocate("b", None).unwrap(), a);
    }

    #[test]
    fn honours_a_free_preferred_address_in_the_pool_only() {
        let mut ipam = Ipam::new(7);
        let want = Ipv4Addr::new(127, 7, 3, 9);
        assert_eq!(ipam.allocate("a", Some(want)), Some(want));
        assert_ne!(ipam.allocate("b", Some(want)), Some(want), "taken");
        let outside = Ipv4Addr::new(10, 0, 0, 1);
        assert_ne!(ipam.allocate("c", Some(outside)), Some(outside));
        let other_block = Ipv4Addr::new(127, 8, 1, 1);
        assert_ne!(ipam.allocate("d", Some(other_block)), Some(other_block));
    }

    #[test]
    fn wraps_through_the_whole_pool() {
        let mut ipam = Ipam::new(1);
        for i in 0..POOL_SIZE {
            let ip = ipam.allocate(&i.to_string(), None).unwrap();
            let [_, _, c, d] = ip.octets();
            assert!((1..=239).contains(&c) && (1..=254).contains(&d));
        }
        assert_eq!(ipam.allocate("full", None), None);
        ipam.release("5");
        assert_eq!(ipam.allocate("full", None), Some(Ipv4Addr::new(127, 1, 1, 6)));
    }
}
