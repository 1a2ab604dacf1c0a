//! RESP2, as the operator's admin connections speak it: a request packed into one buffer,
//! and replies read where they lie in the read buffer.
//!
//! Every member of every cluster is probed every probe period; copying each reply into
//! values of their own (a string per flag, per password, per line of `INFO`) was a tenth of
//! the operator's allocations. A [`Reply`] borrows the buffer, and a probe copies only what
//! it keeps. (A connection that never sends `HELLO 3` only ever gets RESP2.)

use std::io;

use redis::{RedisError, RedisResult, Value};

/// One reply, borrowed from the buffer it was read into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<'a> {
    /// `+OK` and the like.
    Status(&'a [u8]),
    /// An error reply, its whole line (`-ERR ...\r\n`).
    Error(&'a [u8]),
    Int(i64),
    Bulk(&'a [u8]),
    /// `$-1` or `*-1`.
    Nil,
    Array(Vec<Reply<'a>>),
}

impl<'a> Reply<'a> {
    /// This reply, or the error it is (or holds).
    pub fn checked(&self) -> RedisResult<&Self> {
        match self {
            Reply::Error(line) => Err(server_error(line)),
            Reply::Array(items) => {
                for item in items {
                    item.checked()?;
                }
                Ok(self)
            }
            _ => Ok(self),
        }
    }

    /// A status or bulk reply as text.
    pub fn text(&self) -> RedisResult<&'a str> {
        match self {
            Reply::Status(b) | Reply::Bulk(b) => text(b),
            _ => Err(protocol_error("not a string reply")),
        }
    }

    /// An array reply's items; none for nil.
    pub fn items(&self) -> RedisResult<&[Reply<'a>]> {
        match self {
            Reply::Array(items) => Ok(items),
            Reply::Nil => Ok(&[]),
            _ => Err(protocol_error("not an array reply")),
        }
    }

    /// An integer, also one sent as a string (as `TIME` does).
    pub fn int(&self) -> RedisResult<i64> {
        match self {
            Reply::Int(n) => Ok(*n),
            _ => self.text()?.parse().map_err(|_| protocol_error("not an integer")),
        }
    }

    /// The value the `redis` crate's parser makes of the same reply.
    pub fn to_value(&self) -> RedisResult<Value> {
        Ok(match self {
            Reply::Status(b"OK") => Value::Okay,
            Reply::Status(b) => Value::SimpleString(text(b)?.to_owned()),
            // Rare: the crate's parser makes the error value (it has no public constructor).
            Reply::Error(line) => redis::parse_redis_value(line)?,
            Reply::Int(n) => Value::Int(*n),
            Reply::Bulk(b) => Value::BulkString(b.to_vec()),
            Reply::Nil => Value::Nil,
            Reply::Array(items) => {
                Value::Array(items.iter().map(Reply::to_value).collect::<RedisResult<_>>()?)
            }
        })
    }
}

/// Commands packed as one request (each a list of arguments).
pub(crate) fn pack<A: AsRef<[u8]>>(commands: &[&[A]]) -> Vec<u8> {
    use std::io::Write;
    let mut out = Vec::with_capacity(64 * commands.len());
    // `write!` into the Vec: no String per length (this packs every probe).
    for args in commands {
        let _ = write!(out, "*{}\r\n", args.len());
        for arg in *args {
            let arg = arg.as_ref();
            let _ = write!(out, "${}\r\n", arg.len());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
    }
    out
}

/// Where `replies` complete replies at the start of `buf` end, `None` while they have not
/// all arrived. Reads only (nothing is built).
pub(crate) fn complete(buf: &[u8], replies: usize) -> RedisResult<Option<usize>> {
    let mut at = 0;
    for _ in 0..replies {
        match end_of(buf, at, 0)? {
            Some(end) => at = end,
            None => return Ok(None),
        }
    }
    Ok(Some(at))
}

/// The `replies` replies at the start of `buf`, which [`complete`] found there.
pub(crate) fn replies(buf: &[u8], replies: usize) -> RedisResult<Vec<Reply<'_>>> {
    let mut at = 0;
    let mut out = Vec::with_capacity(replies);
    for _ in 0..replies {
        let (reply, end) = reply_at(buf, at)?;
        out.push(reply);
        at = end;
    }
    Ok(out)
}

/// Replies nest this deep at most (`ACL GETUSER` nests three); deeper is not a Redis reply.
const MAX_DEPTH: usize = 16;

/// A reply's kind, its first line and where the rest starts; `None` while the line is
/// incomplete.
fn header(buf: &[u8], at: usize) -> Option<(u8, &[u8], usize)> {
    let kind = *buf.get(at)?;
    let line_end = at + buf[at..].windows(2).position(|w| w == b"\r\n")?;
    Some((kind, &buf[at + 1..line_end], line_end + 2))
}

/// Where the reply starting at `at` ends, `None` while it is incomplete.
fn end_of(buf: &[u8], at: usize, depth: usize) -> RedisResult<Option<usize>> {
    let Some((kind, line, next)) = header(buf, at) else {
        return Ok(None);
    };
    match kind {
        b'+' | b'-' | b':' => Ok(Some(next)),
        b'$' => match length(line)? {
            None => Ok(Some(next)),
            Some(n) => {
                let end = next + n + 2;
                if buf.len() < end {
                    return Ok(None);
                }
                if &buf[end - 2..end] != b"\r\n" {
                    return Err(protocol_error("bulk string not terminated"));
                }
                Ok(Some(end))
            }
        },
        b'*' if depth < MAX_DEPTH => {
            let mut pos = next;
            for _ in 0..length(line)?.unwrap_or(0) {
                match end_of(buf, pos, depth + 1)? {
                    Some(end) => pos = end,
                    None => return Ok(None),
                }
            }
            Ok(Some(pos))
        }
        _ => Err(protocol_error("not a RESP2 reply")),
    }
}

/// The complete reply starting at `at` (checked by [`end_of`]) and where it ends.
fn reply_at(buf: &[u8], at: usize) -> RedisResult<(Reply<'_>, usize)> {
    let (kind, line, next) = header(buf, at).ok_or_else(|| protocol_error("incomplete reply"))?;
    Ok(match kind {
        b'+' => (Reply::Status(line), next),
        b'-' => (Reply::Error(&buf[at..next]), next),
        b':' => (
            Reply::Int(text(line)?.parse().map_err(|_| protocol_error("bad integer"))?),
            next,
        ),
        b'$' => match length(line)? {
            None => (Reply::Nil, next),
            Some(n) => (Reply::Bulk(&buf[next..next + n]), next + n + 2),
        },
        b'*' => match length(line)? {
            None => (Reply::Nil, next),
            Some(n) => {
                let mut items = Vec::with_capacity(n);
                let mut pos = next;
                for _ in 0..n {
                    let (item, end) = reply_at(buf, pos)?;
                    items.push(item);
                    pos = end;
                }
                (Reply::Array(items), pos)
            }
        },
        _ => return Err(protocol_error("not a RESP2 reply")),
    })
}

fn text(bytes: &[u8]) -> RedisResult<&str> {
    std::str::from_utf8(bytes).map_err(|_| protocol_error("not UTF-8"))
}

/// A bulk string's or an array's length; `None` for -1 (nil).
fn length(digits: &[u8]) -> RedisResult<Option<usize>> {
    let n: i64 = text(digits)?.parse().map_err(|_| protocol_error("bad length"))?;
    match n {
        -1 => Ok(None),
        n => usize::try_from(n)
            .map(Some)
            .map_err(|_| protocol_error("bad length")),
    }
}

/// The error an error reply (its whole line) is, as the `redis` crate makes it.
fn server_error(line: &[u8]) -> RedisError {
    match redis::parse_redis_value(line).and_then(Value::extract_error) {
        Err(e) => e,
        Ok(_) => protocol_error("not an error reply"),
    }
}

pub(crate) fn protocol_error(what: &'static str) -> RedisError {
    io::Error::new(io::ErrorKind::InvalidData, what).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPLIES: &[&[u8]] = &[
        b"+OK\r\n",
        b"+PONG\r\n",
        b"-ERR no such user\r\n",
        b":42\r\n",
        b":-7\r\n",
        b"$5\r\nhello\r\n",
        b"$0\r\n\r\n",
        b"$-1\r\n",
        b"*-1\r\n",
        b"*0\r\n",
        b"*2\r\n$5\r\nflags\r\n*2\r\n$2\r\non\r\n$7\r\nallkeys\r\n",
        b"*2\r\n:1\r\n*1\r\n-ERR inner\r\n",
    ];

    fn one(buf: &[u8]) -> Reply<'_> {
        let end = complete(buf, 1).unwrap().unwrap();
        replies(&buf[..end], 1).unwrap().pop().unwrap()
    }

    #[test]
    fn replies_are_the_values_the_redis_crate_parses() {
        for reply in REPLIES {
            assert_eq!(complete(reply, 1).unwrap(), Some(reply.len()), "{reply:?}");
            assert_eq!(
                one(reply).to_value().unwrap(),
                redis::parse_redis_value(reply).unwrap(),
                "{reply:?}"
            );
        }
    }

    #[test]
    fn replies_are_complete_only_when_all_of_them_arrived() {
        let all: Vec<u8> = REPLIES.concat();
        assert_eq!(complete(&all, REPLIES.len()).unwrap(), Some(all.len()));
        for cut in 0..all.len() {
            assert!(
                complete(&all[..cut], REPLIES.len()).unwrap().is_none(),
                "cut at {cut}"
            );
        }
        let parsed = replies(&all, REPLIES.len()).unwrap();
        assert_eq!(parsed.len(), REPLIES.len());
        assert_eq!(parsed[3], Reply::Int(42));
    }

    #[test]
    fn a_bulk_string_may_hold_line_breaks() {
        assert_eq!(one(b"$8\r\nab\r\ncd\r\n\r\n"), Reply::Bulk(b"ab\r\ncd\r\n"));
    }

    #[test]
    fn an_error_reply_is_an_error_also_inside_an_array() {
        assert!(one(b"-ERR no\r\n").checked().is_err());
        assert!(one(b"*2\r\n:1\r\n*1\r\n-ERR inner\r\n").checked().is_err());
        assert!(one(b"*1\r\n:1\r\n").checked().is_ok());
        let e = one(b"-NOPERM not allowed\r\n").checked().unwrap_err();
        assert!(e.to_string().contains("not allowed"), "{e}");
    }

    #[test]
    fn what_is_not_a_resp2_reply_is_refused() {
        assert!(complete(b"%1\r\n", 1).is_err(), "RESP3 map");
        assert!(complete(b"$x\r\n", 1).is_err());
        assert!(complete(b"*-2\r\n", 1).is_err());
        assert!(complete(b"$2\r\nabcd\r\n", 1).is_err(), "longer than it says");
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1);
        assert!(complete(deep.as_bytes(), 1).is_err());
    }

    #[test]
    fn typed_reads() {
        assert_eq!(
            one(b"*2\r\n$10\r\n1700000000\r\n$6\r\n123456\r\n")
                .items()
                .unwrap()[0]
                .int()
                .unwrap(),
            1_700_000_000
        );
        assert_eq!(one(b"$3\r\nabc\r\n").text().unwrap(), "abc");
        assert!(one(b"$-1\r\n").items().unwrap().is_empty());
        assert!(one(b":1\r\n").text().is_err());
    }

    #[test]
    fn commands_are_packed_as_the_redis_crate_packs_them() {
        let packed = pack(&[&["INFO", "server"], &["ACL", "GETUSER", "redlock-client"]]);
        let expected = redis::pipe()
            .cmd("INFO")
            .arg("server")
            .cmd("ACL")
            .arg("GETUSER")
            .arg("redlock-client")
            .get_packed_pipeline();
        assert_eq!(packed, expected);
    }
}
