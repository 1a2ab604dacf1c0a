//! Lock operations assembled from the workers' events. The harness issues every sequence
//! number, so an event for an unknown or finished operation, or out of order, is a broken
//! worker and an error, never silently dropped.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde::Serialize;

use crate::protocol::{Event, Outcome, Step};

/// What one member answered the client library in one step of an operation, as its worker
/// reported it (`reply` lines: only clients whose library shows it, only acquired operations).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberReply {
    pub step: Step,
    /// The `host:port` the client dialed.
    pub member: String,
    /// When the reply reached the client (CLOCK_MONOTONIC ns).
    pub t: u64,
    pub outcome: Outcome,
    /// The reply's text where it says more than the outcome (a Redis error, `key gone`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// One lock operation: acquire, critical section, release. Times are CLOCK_MONOTONIC ns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Op {
    pub seq: u64,
    pub client: String,
    pub worker: String,
    pub key: String,
    pub acquire_invoke: Option<u64>,
    pub acquire_ok: Option<u64>,
    /// The client library's own validity, counted by it from the attempt's start.
    pub validity_ms: Option<i64>,
    pub acquire_fail: Option<u64>,
    /// What the client library said when it refused the lock (one shared copy per distinct
    /// text: a long outage repeats the same few hundred thousand times). Not in
    /// history.json, which it would make several times larger; the report counts them.
    #[serde(skip)]
    pub fail_reason: Option<Arc<str>>,
    pub release_invoke: Option<u64>,
    pub release_end: Option<u64>,
    pub release_failed: bool,
    pub done: bool,
    /// Each member's reply to the acquisition and the release, in the order they arrived;
    /// empty where the worker's library does not show them (rslock) and for operations that
    /// did not acquire (their workers send none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replies: Vec<MemberReply>,
}

impl Op {
    pub fn acquired(&self) -> bool {
        self.acquire_ok.is_some()
    }

    /// The members that granted this operation its lock (their acquire reply was `ok`), in
    /// the order they answered.
    pub fn locked_on(&self) -> Vec<&str> {
        self.replies
            .iter()
            .filter(|r| r.step == Step::Acquire && r.outcome == Outcome::Ok)
            .map(|r| r.member.as_str())
            .collect()
    }
}

#[derive(Debug, Default)]
pub struct History {
    ops: BTreeMap<u64, Op>,
    next_seq: u64,
    reasons: HashSet<Arc<str>>,
}

impl History {
    /// Issues the next sequence number for an operation of `worker` (a `client`) on `key`.
    pub fn issue(&mut self, client: &str, worker: &str, key: &str) -> u64 {
        self.next_seq += 1;
        let seq = self.next_seq;
        self.ops.insert(
            seq,
            Op {
                seq,
                client: client.to_owned(),
                worker: worker.to_owned(),
                key: key.to_owned(),
                acquire_invoke: None,
                acquire_ok: None,
                validity_ms: None,
                acquire_fail: None,
                fail_reason: None,
                release_invoke: None,
                release_end: None,
                release_failed: false,
                done: false,
                replies: Vec::new(),
            },
        );
        seq
    }

    /// Records `event` from `worker`; returns the operation's seq when it is done.
    pub fn apply(&mut self, worker: &str, event: &Event) -> Result<Option<u64>, String> {
        let seq = match event {
            Event::AcquireInvoke { seq, .. }
            | Event::AcquireOk { seq, .. }
            | Event::AcquireFail { seq, .. }
            | Event::ReleaseInvoke { seq, .. }
            | Event::ReleaseOk { seq, .. }
            | Event::ReleaseFail { seq, .. }
            | Event::Reply { seq, .. }
            | Event::Done { seq } => *seq,
            Event::Ready { .. } => return Ok(None),
            Event::Error { message } => return Err(format!("worker {worker}: {message}")),
        };
        let op = self
            .ops
            .get_mut(&seq)
            .ok_or(format!("worker {worker}: event for unknown seq {seq}: {event:?}"))?;
        let bad = || format!("worker {worker}: {event:?} out of order for {op:?}");
        if op.worker != worker || op.done {
            return Err(bad());
        }
        match *event {
            Event::AcquireInvoke { t, .. } if op.acquire_invoke.is_none() => op.acquire_invoke = Some(t),
            Event::AcquireOk { t, validity_ms, .. }
                if op.acquire_invoke.is_some_and(|i| i <= t)
                    && op.acquire_ok.is_none()
                    && op.acquire_fail.is_none() =>
            {
                op.acquire_ok = Some(t);
                op.validity_ms = Some(validity_ms);
            }
            Event::AcquireFail { t, ref reason, .. }
                if op.acquire_invoke.is_some_and(|i| i <= t)
                    && op.acquire_ok.is_none()
                    && op.acquire_fail.is_none() =>
            {
                op.acquire_fail = Some(t);
                op.fail_reason = Some(intern(&mut self.reasons, reason));
            }
            Event::ReleaseInvoke { t, .. }
                if op.acquire_ok.is_some_and(|a| a <= t) && op.release_invoke.is_none() =>
            {
                op.release_invoke = Some(t)
            }
            Event::ReleaseOk { t, .. } | Event::ReleaseFail { t, .. }
                if op.release_invoke.is_some_and(|r| r <= t) && op.release_end.is_none() =>
            {
                op.release_end = Some(t);
                op.release_failed = matches!(event, Event::ReleaseFail { .. });
            }
            // A member's reply to the acquisition: after the attempt began, before the release.
            Event::Reply {
                t,
                step: Step::Acquire,
                ..
            } if op.acquire_invoke.is_some_and(|i| i <= t) && op.release_invoke.is_none() => {
                op.replies.push(reply(event))
            }
            Event::Reply {
                t,
                step: Step::Release,
                ..
            } if op.release_invoke.is_some_and(|r| r <= t) => op.replies.push(reply(event)),
            Event::Done { .. }
                if op.acquire_fail.is_some() || (op.acquire_ok.is_some() && op.release_end.is_some()) =>
            {
                op.done = true;
                return Ok(Some(seq));
            }
            _ => return Err(bad()),
        }
        Ok(None)
    }

    pub fn get(&self, seq: u64) -> Option<&Op> {
        self.ops.get(&seq)
    }

    /// Every operation that was at least invoked, in seq order.
    pub fn ops(&self) -> Vec<Op> {
        self.ops
            .values()
            .filter(|o| o.acquire_invoke.is_some())
            .cloned()
            .collect()
    }
}

/// The `MemberReply` a `reply` event says.
fn reply(event: &Event) -> MemberReply {
    let Event::Reply {
        t,
        step,
        member,
        outcome,
        detail,
        ..
    } = event
    else {
        unreachable!("only reply events")
    };
    MemberReply {
        step: *step,
        member: member.clone(),
        t: *t,
        outcome: *outcome,
        detail: detail.clone(),
    }
}

/// The one shared copy of `reason`.
fn intern(reasons: &mut HashSet<Arc<str>>, reason: &str) -> Arc<str> {
    if let Some(known) = reasons.get(reason) {
        return known.clone();
    }
    let new: Arc<str> = reason.into();
    reasons.insert(new.clone());
    new
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::parse;

    fn feed(h: &mut History, worker: &str, lines: &[&str]) -> Result<Vec<u64>, String> {
        let mut done = vec![];
        for l in lines {
            if let Some(s) = h.apply(worker, &parse(l).unwrap())? {
                done.push(s);
            }
        }
        Ok(done)
    }

    #[test]
    fn assembles_a_successful_and_a_failed_operation() {
        let mut h = History::default();
        let a = h.issue("rslock", "rslock-0", "k");
        let b = h.issue("rslock", "rslock-0", "k");
        let done = feed(
            &mut h,
            "rslock-0",
            &[
                "acquire_invoke 1 10",
                "acquire_ok 1 20 2900",
                "release_invoke 1 30",
                "release_ok 1 40",
                "done 1",
                "acquire_invoke 2 50",
                "acquire_fail 2 60 no quorum",
                "done 2",
            ],
        )
        .unwrap();
        assert_eq!(done, vec![a, b]);
        let op = h.get(a).unwrap();
        assert_eq!(
            (
                op.acquire_invoke,
                op.acquire_ok,
                op.validity_ms,
                op.release_invoke,
                op.release_end
            ),
            (Some(10), Some(20), Some(2900), Some(30), Some(40))
        );
        assert!(h.get(b).unwrap().acquire_fail.is_some() && !h.get(b).unwrap().acquired());
        assert_eq!(h.get(b).unwrap().fail_reason.as_deref(), Some("no quorum"));
        assert_eq!(h.ops().len(), 2);
    }

    #[test]
    fn keeps_each_members_reply_to_the_acquisition_and_the_release() {
        let mut h = History::default();
        let a = h.issue("go-redsync", "go-0", "k");
        feed(
            &mut h,
            "go-0",
            &[
                "acquire_invoke 1 10",
                "acquire_ok 1 20 2900",
                "reply 1 12 acquire locks-0.t.svc:6379 ok",
                "reply 1 13 acquire locks-1.t.svc:6379 no",
                "reply 1 19 acquire locks-2.t.svc:6379 error i/o timeout",
                "reply 1 14 acquire locks-3.t.svc:6379 ok",
                "reply 1 15 acquire locks-4.t.svc:6379 ok",
                "release_invoke 1 30",
                "release_fail 1 40 not held on a quorum",
                "reply 1 35 release locks-0.t.svc:6379 ok",
                "reply 1 36 release locks-3.t.svc:6379 no key gone",
                "done 1",
            ],
        )
        .unwrap();
        let op = h.get(a).unwrap();
        assert_eq!(op.replies.len(), 7);
        assert_eq!(
            op.locked_on(),
            ["locks-0.t.svc:6379", "locks-3.t.svc:6379", "locks-4.t.svc:6379"]
        );
        assert_eq!(
            op.replies[2],
            MemberReply {
                step: Step::Acquire,
                member: "locks-2.t.svc:6379".into(),
                t: 19,
                outcome: Outcome::Error,
                detail: "i/o timeout".into()
            }
        );
        assert_eq!(
            (
                op.replies[6].step,
                op.replies[6].outcome,
                op.replies[6].detail.as_str()
            ),
            (Step::Release, Outcome::No, "key gone")
        );
        // In history.json with the operation; an operation without replies has no field.
        let json = serde_json::to_value(op).unwrap();
        assert_eq!(json["replies"][0]["outcome"], "ok");
        assert_eq!(json["replies"][0]["step"], "acquire");
        assert!(json["replies"][0].get("detail").is_none());
        h.issue("rslock", "rs-0", "k");
        feed(
            &mut h,
            "rs-0",
            &["acquire_invoke 2 50", "acquire_fail 2 60 x", "done 2"],
        )
        .unwrap();
        assert!(
            serde_json::to_value(h.get(2).unwrap())
                .unwrap()
                .get("replies")
                .is_none()
        );
    }

    #[test]
    fn rejects_broken_workers() {
        let cases: &[&[&str]] = &[
            &["acquire_ok 1 20 100"],                                // no invoke
            &["acquire_invoke 1 10", "acquire_ok 1 5 100"],          // time runs backwards
            &["acquire_invoke 1 10", "acquire_invoke 1 11"],         // twice
            &["acquire_invoke 1 10", "release_invoke 1 20"],         // release without lock
            &["acquire_invoke 1 10", "acquire_ok 1 20 1", "done 1"], // done before release
            &["acquire_invoke 1 10", "acquire_fail 1 20 x", "acquire_ok 1 30 1"],
            // A reply before the attempt, to the acquisition after the release began, to a
            // release never invoked, after done.
            &["reply 1 5 acquire m:1 ok"],
            &["acquire_invoke 1 10", "reply 1 5 acquire m:1 ok"],
            &[
                "acquire_invoke 1 10",
                "acquire_ok 1 20 100",
                "release_invoke 1 30",
                "reply 1 31 acquire m:1 ok",
            ],
            &[
                "acquire_invoke 1 10",
                "acquire_ok 1 20 100",
                "reply 1 25 release m:1 ok",
            ],
            &[
                "acquire_invoke 1 10",
                "acquire_ok 1 20 100",
                "release_invoke 1 30",
                "release_ok 1 40",
                "done 1",
                "reply 1 45 release m:1 ok",
            ],
            &["acquire_invoke 9 10"], // unknown seq
            &["error cannot connect"],
        ];
        for lines in cases {
            let mut h = History::default();
            h.issue("go-redsync", "go-0", "k");
            assert!(feed(&mut h, "go-0", lines).is_err(), "{lines:?}");
        }
        // Another worker's seq.
        let mut h = History::default();
        h.issue("go-redsync", "go-0", "k");
        assert!(feed(&mut h, "go-1", &["acquire_invoke 1 10"]).is_err());
    }

    #[test]
    fn operations_never_invoked_are_not_reported() {
        let mut h = History::default();
        h.issue("node-redlock", "node-0", "k");
        assert!(h.ops().is_empty());
    }
}
