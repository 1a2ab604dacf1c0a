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
//!   `done <seq>`
//!   `error <message…>`                    fatal; the worker exits

/// One line a worker wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Ready { client: String },
    AcquireInvoke { seq: u64, t: u64 },
    AcquireOk { seq: u64, t: u64, validity_ms: i64 },
    AcquireFail { seq: u64, t: u64, reason: String },
    ReleaseInvoke { seq: u64, t: u64 },
    ReleaseOk { seq: u64, t: u64 },
    ReleaseFail { seq: u64, t: u64, reason: String },
    Done { seq: u64 },
    Error { message: String },
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
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn lock_command_is_one_line() {
        assert_eq!(lock_command(3, "k1", 3000, 50), "lock 3 k1 3000 50\n");
    }
}
