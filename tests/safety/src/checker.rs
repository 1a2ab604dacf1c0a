//! Mutual exclusion, checked per key on the history. An operation holds its lock during
//! `[acquire_ok, min(release_invoke, acquire_invoke + validity)]`: from the moment the client
//! was told it holds the lock until it starts releasing it or, at the latest, until the end
//! of the validity the client library itself computed (counted, conservatively, from the
//! attempt's start). Two such intervals of one key that overlap are two holders at once.
//! Independently, the shared counter incremented by a read-modify-write inside every critical
//! section must equal the number of critical sections: an overlap loses an update.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::history::Op;

/// The interval during which `op` held its key, `None` when it never held it (not acquired,
/// or its validity was used up before the client returned).
pub fn hold_interval(op: &Op) -> Option<(u64, u64)> {
    let start = op.acquire_ok?;
    let validity_ns = u64::try_from(op.validity_ms?)
        .unwrap_or(0)
        .saturating_mul(1_000_000);
    let valid_until = op.acquire_invoke?.saturating_add(validity_ns);
    let end = op.release_invoke.map_or(valid_until, |r| r.min(valid_until));
    (end > start).then_some((start, end))
}

/// Two operations that held the same key at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub key: String,
    /// The operation that held first, and the one that acquired while it still held.
    pub first: u64,
    pub second: u64,
    pub first_client: String,
    pub second_client: String,
    /// When the second acquired, and how long both held (ns).
    pub at: u64,
    pub overlap_ns: u64,
}

/// Every operation that acquired a key while another operation still held it, each reported
/// once, against the holder whose interval reaches furthest.
pub fn overlaps(ops: &[Op]) -> Vec<Violation> {
    let mut by_key: BTreeMap<&str, Vec<(u64, u64, &Op)>> = BTreeMap::new();
    for op in ops {
        if let Some((s, e)) = hold_interval(op) {
            by_key.entry(&op.key).or_default().push((s, e, op));
        }
    }
    let mut out = Vec::new();
    for (key, mut intervals) in by_key {
        intervals.sort_by_key(|(s, e, op)| (*s, *e, op.seq));
        let mut furthest: Option<(u64, &Op)> = None;
        for (start, end, op) in intervals {
            if let Some((f_end, f_op)) = furthest
                && start < f_end
            {
                out.push(Violation {
                    key: key.to_owned(),
                    first: f_op.seq,
                    second: op.seq,
                    first_client: f_op.client.clone(),
                    second_client: op.client.clone(),
                    at: start,
                    overlap_ns: f_end.min(end) - start,
                });
            }
            if furthest.is_none_or(|(f_end, _)| end > f_end) {
                furthest = Some((end, op));
            }
        }
    }
    out
}

/// A key whose counter does not equal its number of critical sections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CounterMismatch {
    pub key: String,
    pub critical_sections: i64,
    pub counter: i64,
}

/// Compares the counters read after the run (`count:<key>` → value; missing means 0) with the
/// number of operations that entered the critical section of each key.
pub fn counter_mismatches(ops: &[Op], counters: &BTreeMap<String, i64>) -> Vec<CounterMismatch> {
    let mut sections: BTreeMap<&str, i64> = BTreeMap::new();
    for op in ops.iter().filter(|o| o.acquired()) {
        *sections.entry(&op.key).or_default() += 1;
    }
    for key in counters.keys() {
        sections.entry(key).or_default();
    }
    sections
        .into_iter()
        .filter_map(|(key, n)| {
            let counter = counters.get(key).copied().unwrap_or(0);
            (counter != n).then(|| CounterMismatch {
                key: key.to_owned(),
                critical_sections: n,
                counter,
            })
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// An acquired operation: invoked at `invoke` ms, acquired 1 ms later, released at
    /// `release` ms (if any), with `validity` ms.
    pub(crate) fn held(seq: u64, key: &str, invoke: u64, validity: i64, release: Option<u64>) -> Op {
        Op {
            seq,
            client: format!("c{seq}"),
            worker: format!("w{seq}"),
            key: key.into(),
            acquire_invoke: Some(invoke * MS),
            acquire_ok: Some((invoke + 1) * MS),
            validity_ms: Some(validity),
            acquire_fail: None,
            fail_reason: None,
            release_invoke: release.map(|r| r * MS),
            release_end: release.map(|r| (r + 1) * MS),
            release_failed: false,
            done: true,
            replies: Vec::new(),
        }
    }

    pub(crate) fn failed(seq: u64, key: &str, invoke: u64) -> Op {
        Op {
            acquire_ok: None,
            validity_ms: None,
            acquire_fail: Some((invoke + 5) * MS),
            fail_reason: Some("lock taken".into()),
            release_invoke: None,
            release_end: None,
            ..held(seq, key, invoke, 0, None)
        }
    }

    #[test]
    fn interval_ends_at_release_or_validity_whichever_first() {
        assert_eq!(
            hold_interval(&held(1, "k", 0, 3000, Some(100))),
            Some((MS, 100 * MS))
        );
        // Released after its validity ran out: it only held until the validity ended.
        assert_eq!(
            hold_interval(&held(1, "k", 0, 50, Some(100))),
            Some((MS, 50 * MS))
        );
        // Never released (still holding when the run ended).
        assert_eq!(
            hold_interval(&held(1, "k", 10, 50, None)),
            Some((11 * MS, 60 * MS))
        );
        // Validity used up before the client returned, or negative: never held.
        assert_eq!(hold_interval(&held(1, "k", 0, 1, Some(100))), None);
        assert_eq!(hold_interval(&held(1, "k", 0, -5, Some(100))), None);
        assert_eq!(hold_interval(&failed(1, "k", 0)), None);
    }

    #[test]
    fn sequential_holders_do_not_overlap() {
        let ops = vec![
            held(1, "k", 0, 3000, Some(100)),
            held(2, "k", 100, 3000, Some(200)), // acquired at 101, after 1 released at 100
            failed(3, "k", 150),
            held(4, "k", 250, 3000, Some(300)),
        ];
        assert_eq!(overlaps(&ops), vec![]);
    }

    #[test]
    fn a_second_holder_during_the_first_is_a_violation() {
        let ops = vec![
            held(1, "k", 0, 3000, Some(500)),
            held(2, "k", 200, 3000, Some(300)),
        ];
        let v = overlaps(&ops);
        assert_eq!(v.len(), 1);
        assert_eq!((v[0].first, v[0].second, v[0].at), (1, 2, 201 * MS));
        assert_eq!(v[0].overlap_ns, 99 * MS); // 201..300, inside 1's 1..500
        assert_eq!(
            (v[0].first_client.as_str(), v[0].second_client.as_str()),
            ("c1", "c2")
        );
    }

    #[test]
    fn touching_intervals_are_not_a_violation() {
        // 2 acquires exactly when 1's validity ends (1 never released: a crashed holder).
        let ops = vec![held(1, "k", 0, 100, None), held(2, "k", 99, 3000, Some(150))];
        assert_eq!(hold_interval(&ops[1]).unwrap().0, 100 * MS);
        assert_eq!(overlaps(&ops), vec![]);
    }

    #[test]
    fn expired_validity_frees_the_key_even_without_release() {
        // 1 overran its validity (released late at 900): 2 taking the key at 601 is legal.
        let ops = vec![
            held(1, "k", 0, 600, Some(900)),
            held(2, "k", 600, 3000, Some(700)),
        ];
        assert_eq!(overlaps(&ops), vec![]);
    }

    #[test]
    fn keys_are_independent() {
        let ops = vec![
            held(1, "a", 0, 3000, Some(500)),
            held(2, "b", 100, 3000, Some(300)),
        ];
        assert_eq!(overlaps(&ops), vec![]);
    }

    #[test]
    fn each_late_holder_is_reported_once_against_the_furthest_reaching() {
        // 1 holds 1..1000; 2 holds 101..200 (inside 1); 3 holds 301..400 (inside 1, after 2).
        let ops = vec![
            held(1, "k", 0, 3000, Some(1000)),
            held(2, "k", 100, 3000, Some(200)),
            held(3, "k", 300, 3000, Some(400)),
        ];
        let v = overlaps(&ops);
        assert_eq!(
            v.iter().map(|v| (v.first, v.second)).collect::<Vec<_>>(),
            vec![(1, 2), (1, 3)]
        );
        // Input order does not matter.
        let mut rev = ops.clone();
        rev.reverse();
        assert_eq!(overlaps(&rev), v);
    }

    #[test]
    fn counter_must_equal_critical_sections_per_key() {
        let ops = vec![
            held(1, "a", 0, 3000, Some(100)),
            held(2, "a", 200, 3000, Some(300)),
            failed(3, "a", 400),
            held(4, "b", 0, 3000, Some(100)),
        ];
        let counters = BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 1)]);
        assert_eq!(counter_mismatches(&ops, &counters), vec![]);
        // A lost update on a, and a counter for a key nobody locked.
        let counters = BTreeMap::from([("a".to_string(), 1), ("b".to_string(), 1), ("c".to_string(), 4)]);
        assert_eq!(
            counter_mismatches(&ops, &counters),
            vec![
                CounterMismatch {
                    key: "a".into(),
                    critical_sections: 2,
                    counter: 1
                },
                CounterMismatch {
                    key: "c".into(),
                    critical_sections: 0,
                    counter: 4
                },
            ]
        );
        // A missing counter is 0.
        assert_eq!(
            counter_mismatches(&ops, &BTreeMap::new()).len(),
            2,
            "a and b both had critical sections"
        );
    }
}
