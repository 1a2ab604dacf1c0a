//! The line protocol between the harness and a client worker (Go, Node and Rust workers
//! speak it alike). Every timestamp is CLOCK_MONOTONIC in nanoseconds: one clock for every
//! process on the machine, so events of different workers and the harness's fault times
//! compare directly.
//!
//! Harness → worker (stdin), one command at a time (the next one after `done`):
//!   `lock <seq> <key> <ttl_ms> <hold_ms>`  acquire `key`, hold it for a read-modify-write of
//!                                          the shared counter that sleeps `hold_ms`, release
//!   `quit`
//! Worker → harness (stdout):
//!   `ready <client>`                      configured, connected lazily
//!   `acquire_invoke <seq> <t>`            about to ask the client library for the lock
//!   `acquire_ok <seq> <t> <validity_ms>`  the library granted it, with its own validity
//!   `acquire_fail <seq> <t> <reason…>`
//!   `release_invoke <seq> <t>` / `release_ok <seq> <t>` / `release_fail <seq> <t> <reason…>`
//!   `reply <seq> <t> <step> <member> <outcome> [<detail…>]`
//!                                         what one member answered the client library in
//!                                         `step` (`acquire`: its SET NX or lock script;
//!                                         `release`: its unlock script), received at `t`:
//!                                         `ok` (granted / released), `no` (answered, did not:
//!                                         the key was there / not ours or gone), `error`
//!                                         (a Redis error or a timeout, as the client saw it);
//!                                         `member` is the `host:port` the client dialed. Sent
//!                                         after the step's `acquire_ok` / `release_ok` /
//!                                         `release_fail`, before `done`, and only by workers
//!                                         whose library shows each member's reply (go-redsync
//!                                         and node-redlock; rslock folds them into a count),
//!                                         only for operations that acquired
//!   `done <seq>`
//!   `error <message…>`                    fatal; the worker exits

use serde::Serialize;

/// One line a worker wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Ready {
        client: String,
    },
    AcquireInvoke {
        seq: u64,
        t: u64,
    },
    AcquireOk {
        seq: u64,
        t: u64,
        validity_ms: i64,
    },
    AcquireFail {
        seq: u64,
        t: u64,
        reason: String,
    },
    ReleaseInvoke {
        seq: u64,
        t: u64,
    },
    ReleaseOk {
        seq: u64,
        t: u64,
    },
    ReleaseFail {
        seq: u64,
        t: u64,
        reason: String,
    },
    Reply {
        seq: u64,
        t: u64,
        step: Step,
        member: String,
        outcome: Outcome,
        detail: String,
    },
    Done {
        seq: u64,
    },
    Error {
        message: String,
    },
}

/// Which call of a lock operation a member's reply answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Step {
    /// The attempt that acquired: SET NX (go-redsync) or the lock script (node-redlock).
    Acquire,
    /// The release: the unlock script.
    Release,
}

impl Step {
    pub fn name(self) -> &'static str {
        match self {
            Step::Acquire => "acquire",
            Step::Release => "release",
        }
    }
}

/// What a member answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Granted the lock (acquire) or removed our key (release).
    Ok,
    /// Answered without doing it: the key was held (acquire); not ours, or gone (release).
    No,
    /// No answer the client could use: a Redis error reply, a refused connection, a timeout.
    Error,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::No => "no",
            Outcome::Error => "error",
        }
    }
}

/// The command line for one lock operation.
pub fn lock_command(seq: u64, key: &str, ttl_ms: u64, hold_ms: u64) -> String {
    format!("lock {seq} {key} {ttl_ms} {hold_ms}\n")
}

pub fn parse(line: &str) -> Result<Event, String> {
    let mut f = line.split_whitespace();
    let word = f.next().ok_or("empty line")?;
    let rest = |f: std::str::SplitWhitespace| f.collect::<Vec<_>>().join(" ");
    let num = |s: Option<&str>| -> Result<u64, String> {
        s.ok_or(format!("missing field in {line:?}"))?
            .parse()
            .map_err(|e| format!("{e} in {line:?}"))
    };
    let event = match word {
        "ready" => Event::Ready { client: rest(f) },
        "error" => Event::Error { message: rest(f) },
        "done" => Event::Done { seq: num(f.next())? },
        "acquire_invoke" => Event::AcquireInvoke {
            seq: num(f.next())?,
            t: num(f.next())?,
        },
        "acquire_ok" => {
            let (seq, t) = (num(f.next())?, num(f.next())?);
            let validity_ms = f
                .next()
                .ok_or(format!("missing validity in {line:?}"))?
                .parse()
                .map_err(|e| format!("{e} in {line:?}"))?;
            Event::AcquireOk { seq, t, validity_ms }
        }
        "acquire_fail" => {
            let (seq, t) = (num(f.next())?, num(f.next())?);
            Event::AcquireFail {
                seq,
                t,
                reason: rest(f),
            }
        }
        "release_invoke" => Event::ReleaseInvoke {
            seq: num(f.next())?,
            t: num(f.next())?,
        },
        "release_ok" => Event::ReleaseOk {
            seq: num(f.next())?,
            t: num(f.next())?,
        },
        "release_fail" => {
            let (seq, t) = (num(f.next())?, num(f.next())?);
            Event::ReleaseFail {
                seq,
                t,
                reason: rest(f),
            }
        }
        "reply" => {
            let (seq, t) = (num(f.next())?, num(f.next())?);
            let step = match f.next() {
                Some("acquire") => Step::Acquire,
                Some("release") => Step::Release,
                other => return Err(format!("bad step {other:?} in {line:?}")),
            };
            let member = f.next().ok_or(format!("missing member in {line:?}"))?.to_owned();
            let outcome = match f.next() {
                Some("ok") => Outcome::Ok,
                Some("no") => Outcome::No,
                Some("error") => Outcome::Error,
                other => return Err(format!("bad outcome {other:?} in {line:?}")),
            };
            Event::Reply {
                seq,
                t,
                step,
                member,
                outcome,
                detail: rest(f),
            }
        }
        other => return Err(format!("unknown event {other:?} in {line:?}")),
    };
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_event() {
        assert_eq!(
            parse("ready go-redsync").unwrap(),
            Event::Ready {
                client: "go-redsync".into()
            }
        );
        assert_eq!(
            parse("acquire_invoke 7 100").unwrap(),
            Event::AcquireInvoke { seq: 7, t: 100 }
        );
        assert_eq!(
            parse("acquire_ok 7 150 2960").unwrap(),
            Event::AcquireOk {
                seq: 7,
                t: 150,
                validity_ms: 2960
            }
        );
        // A client may compute a negative validity; it is reported, not rejected.
        assert_eq!(
            parse("acquire_ok 7 150 -3").unwrap(),
            Event::AcquireOk {
                seq: 7,
                t: 150,
                validity_ms: -3
            }
        );
        assert_eq!(
            parse("acquire_fail 8 9 lock: failed to acquire lock").unwrap(),
            Event::AcquireFail {
                seq: 8,
                t: 9,
                reason: "lock: failed to acquire lock".into()
            }
        );
        assert_eq!(
            parse("release_invoke 7 200").unwrap(),
            Event::ReleaseInvoke { seq: 7, t: 200 }
        );
        assert_eq!(
            parse("release_ok 7 210").unwrap(),
            Event::ReleaseOk { seq: 7, t: 210 }
        );
        assert_eq!(
            parse("release_fail 7 210 timeout").unwrap(),
            Event::ReleaseFail {
                seq: 7,
                t: 210,
                reason: "timeout".into()
            }
        );
        assert_eq!(parse("done 7").unwrap(), Event::Done { seq: 7 });
        assert_eq!(
            parse("reply 7 160 acquire locks-3.team.svc:6379 ok").unwrap(),
            Event::Reply {
                seq: 7,
                t: 160,
                step: Step::Acquire,
                member: "locks-3.team.svc:6379".into(),
                outcome: Outcome::Ok,
                detail: String::new()
            }
        );
        assert_eq!(
            parse("reply 7 220 release 127.0.0.1:7001 error  Command   timed out").unwrap(),
            Event::Reply {
                seq: 7,
                t: 220,
                step: Step::Release,
                member: "127.0.0.1:7001".into(),
                outcome: Outcome::Error,
                detail: "Command timed out".into()
            }
        );
        assert_eq!(
            parse("reply 7 220 release locks-0.team.svc:6379 no key gone").unwrap(),
            Event::Reply {
                seq: 7,
                t: 220,
                step: Step::Release,
                member: "locks-0.team.svc:6379".into(),
                outcome: Outcome::No,
                detail: "key gone".into()
            }
        );
        assert_eq!(
            parse("error boom now").unwrap(),
            Event::Error {
                message: "boom now".into()
            }
        );
    }

    #[test]
    fn rejects_malformed_lines() {
        for bad in [
            "",
            "hello 1",
            "done",
            "done x",
            "acquire_ok 1 2",
            "acquire_invoke 1",
            "reply 1 2 acquire",
            "reply 1 2 extend m:1 ok",
            "reply 1 2 acquire m:1 maybe",
            "reply 1 x acquire m:1 ok",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn lock_command_is_one_line() {
        assert_eq!(lock_command(3, "k1", 3000, 50), "lock 3 k1 3000 50\n");
    }
}
