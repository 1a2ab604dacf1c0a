//! One connection to one Redis process, as the admin user, driven by the task that uses it:
//! a request is written and its replies are read by the caller itself, with no task, channel
//! or codec of its own in between.
//!
//! The operator probes every member of every cluster every probe period on a kept connection
//! (`probe_connections`). A multiplexing client gives each connection a task of its own, a
//! channel to it and 16 KiB of codec buffers: at 200 clusters × 3 members, 600 tasks woken
//! twice a probe, and about 13 MiB. Here a connection is its socket and a small read buffer.
//!
//! A request whose replies were not all read (it failed, timed out or was abandoned) leaves the
//! connection unusable: replies would be matched to the wrong requests. It then refuses every
//! further request, and the caller opens a new one (a kept probe connection is dropped).

use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use redis::{RedisError, RedisResult, Value};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// How a connection logs in and how long it waits.
pub struct Login<'a> {
    pub user: &'a str,
    pub password: &'a str,
    /// The CA (PEM) to trust: `Some` means TLS only (an empty one trusts nothing).
    pub tls_ca: Option<&'a [u8]>,
    /// For connecting (with the TLS handshake), and for each request's replies.
    pub timeout: Duration,
}

pub struct AdminConnection {
    stream: Stream,
    /// Bytes read and not yet taken by a reply.
    buf: Vec<u8>,
    timeout: Duration,
    /// A request's replies were not all read: nothing more can be asked on this connection.
    broken: bool,
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// A read buffer larger than this after a request (a TTL audit's batch of keys) is given back,
/// so that hundreds of kept connections do not each keep their largest reply's worth.
const KEPT_BUFFER: usize = 4096;

impl AdminConnection {
    /// Connects to `ip:port` (TLS when `login` has a CA) and logs in.
    pub async fn open(ip: IpAddr, port: u16, login: &Login<'_>) -> RedisResult<Self> {
        let connecting = async {
            let tcp = TcpStream::connect((ip, port)).await?;
            tcp.set_nodelay(true)?;
            io::Result::Ok(match login.tls_ca {
                None => Stream::Plain(tcp),
                Some(ca) => {
                    let connector = TlsConnector::from(tls_config(ca)?);
                    let tls = connector.connect(ServerName::IpAddress(ip.into()), tcp).await?;
                    Stream::Tls(Box::new(tls))
                }
            })
        };
        let stream = tokio::time::timeout(login.timeout, connecting)
            .await
            .map_err(|_| timed_out("connecting", login.timeout))??;
        let mut conn = Self {
            stream,
            buf: Vec::new(),
            timeout: login.timeout,
            broken: false,
        };
        let auth = redis::cmd("AUTH")
            .arg(login.user)
            .arg(login.password)
            .get_packed_command();
        let () = conn.ask(&auth).await?;
        Ok(conn)
    }

    /// Sends `request` (one or more packed commands) and reads `replies` replies; a reply that
    /// is an error reply stays one (see [`Self::ask`] for one command whose error fails).
    pub async fn query(&mut self, request: &[u8], replies: usize) -> RedisResult<Vec<Value>> {
        if self.broken {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "an earlier request on this connection was not completed",
            )
            .into());
        }
        self.broken = true;
        let timeout = self.timeout;
        let values = tokio::time::timeout(timeout, self.exchange(request, replies))
            .await
            .map_err(|_| timed_out("waiting for a reply", timeout))??;
        self.broken = false;
        if self.buf.is_empty() && self.buf.capacity() > KEPT_BUFFER {
            self.buf = Vec::new();
        }
        Ok(values)
    }

    /// One command and its reply, as `T`; an error reply is the error.
    pub async fn ask<T: redis::FromRedisValue>(&mut self, request: &[u8]) -> RedisResult<T> {
        let reply = self.query(request, 1).await?.pop().unwrap_or(Value::Nil);
        Ok(redis::from_redis_value(reply.extract_error()?)?)
    }

    async fn exchange(&mut self, request: &[u8], replies: usize) -> RedisResult<Vec<Value>> {
        self.stream.write_all(request).await?;
        self.stream.flush().await?;
        let mut values = Vec::with_capacity(replies);
        let mut taken = 0;
        while values.len() < replies {
            match parse(&self.buf[taken..])? {
                Some((value, n)) => {
                    values.push(value);
                    taken += n;
                }
                None => {
                    self.buf.drain(..taken);
                    taken = 0;
                    self.buf.reserve(1024);
                    if self.stream.read_buf(&mut self.buf).await? == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the server closed the connection",
                        )
                        .into());
                    }
                }
            }
        }
        self.buf.drain(..taken);
        Ok(values)
    }
}

impl Stream {
    async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.write_all(bytes).await,
            Stream::Tls(s) => s.write_all(bytes).await,
        }
    }

    async fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush().await,
            Stream::Tls(s) => s.flush().await,
        }
    }

    async fn read_buf(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read_buf(buf).await,
            Stream::Tls(s) => s.read_buf(buf).await,
        }
    }
}

fn timed_out(what: &str, after: Duration) -> RedisError {
    io::Error::new(io::ErrorKind::TimedOut, format!("timed out {what} after {after:?}")).into()
}

/// The complete RESP2 reply at the start of `buf` and its length, `None` while it is
/// incomplete. (A connection that never sends `HELLO 3` only ever gets RESP2.) Values as the
/// `redis` crate's own parser makes them, which this one replaces on the probes' path: its
/// general parser cost more than the rest of a probe.
pub fn parse(buf: &[u8]) -> RedisResult<Option<(Value, usize)>> {
    value_at(buf, 0, 0)
}

/// Replies nest this deep at most (`ACL GETUSER` nests three); deeper is not a Redis reply.
const MAX_DEPTH: usize = 16;

/// The reply starting at `at` and where it ends, `None` while it is incomplete.
fn value_at(buf: &[u8], at: usize, depth: usize) -> RedisResult<Option<(Value, usize)>> {
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some(line_end) = buf[at..].windows(2).position(|w| w == b"\r\n").map(|p| at + p) else {
        return Ok(None);
    };
    let line = &buf[at + 1..line_end];
    let next = line_end + 2;
    let value = match kind {
        b'+' if line == b"OK" => Value::Okay,
        b'+' => Value::SimpleString(text(line)?.to_owned()),
        // Rare: the crate's parser makes the error value (it has no public constructor).
        b'-' => redis::parse_redis_value(&buf[at..next])?,
        b':' => Value::Int(text(line)?.parse().map_err(|_| protocol_error("bad integer"))?),
        b'$' => match length(line)? {
            None => Value::Nil,
            Some(n) => {
                let end = next + n;
                if buf.len() < end + 2 {
                    return Ok(None);
                }
                if &buf[end..end + 2] != b"\r\n" {
                    return Err(protocol_error("bulk string not terminated"));
                }
                return Ok(Some((Value::BulkString(buf[next..end].to_vec()), end + 2)));
            }
        },
        b'*' if depth < MAX_DEPTH => match length(line)? {
            None => Value::Nil,
            Some(n) => {
                let mut items = Vec::with_capacity(n.min(1024));
                let mut pos = next;
                for _ in 0..n {
                    match value_at(buf, pos, depth + 1)? {
                        Some((item, end)) => {
                            items.push(item);
                            pos = end;
                        }
                        None => return Ok(None),
                    }
                }
                return Ok(Some((Value::Array(items), pos)));
            }
        },
        _ => return Err(protocol_error("not a RESP2 reply")),
    };
    Ok(Some((value, next)))
}

fn text(line: &[u8]) -> RedisResult<&str> {
    std::str::from_utf8(line).map_err(|_| protocol_error("not UTF-8"))
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

fn protocol_error(what: &'static str) -> RedisError {
    io::Error::new(io::ErrorKind::InvalidData, what).into()
}

/// A TLS configuration that trusts only `ca` and does not match the server's name: the
/// operator dials pod IPs, which no certificate names (they are not known when it is issued);
/// the chain still has to lead to the cluster's own CA, which only the instances' certificate
/// does.
fn tls_config(ca: &[u8]) -> io::Result<Arc<rustls::ClientConfig>> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca) {
        let cert = cert.map_err(|e| io::Error::other(format!("the CA is not PEM: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| io::Error::other(format!("the CA cannot be trusted: {e}")))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // No roots (an empty or unreadable CA) fails here: nothing can be verified.
    let chain = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| io::Error::other(format!("no CA to verify with: {e}")))?;
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyName(chain)))
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Verifies the chain to the CA and the handshake's signatures, and accepts any name.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The name is checked only once the chain has been verified: a name error means the
        // chain leads to the CA.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
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

    #[test]
    fn replies_parse_as_the_redis_crate_parses_them() {
        for reply in REPLIES {
            let (value, n) = parse(reply).unwrap().unwrap();
            assert_eq!(n, reply.len(), "{reply:?}");
            assert_eq!(value, redis::parse_redis_value(reply).unwrap(), "{reply:?}");
        }
    }

    #[test]
    fn a_reply_is_complete_only_when_all_of_it_arrived() {
        for reply in REPLIES {
            for cut in 0..reply.len() {
                assert!(parse(&reply[..cut]).unwrap().is_none(), "{reply:?} cut at {cut}");
            }
            // What follows belongs to the next reply.
            let mut two = reply.to_vec();
            two.extend_from_slice(b":1\r\n");
            assert_eq!(parse(&two).unwrap().unwrap().1, reply.len());
        }
    }

    #[test]
    fn a_bulk_string_may_hold_line_breaks() {
        let reply = b"$8\r\nab\r\ncd\r\n\r\n";
        let (value, n) = parse(reply).unwrap().unwrap();
        assert_eq!(n, reply.len());
        assert_eq!(value, Value::BulkString(b"ab\r\ncd\r\n".to_vec()));
    }

    #[test]
    fn what_is_not_a_resp2_reply_is_refused() {
        assert!(parse(b"%1\r\n").is_err(), "RESP3 map");
        assert!(parse(b"$x\r\n").is_err());
        assert!(parse(b"*-2\r\n").is_err());
        assert!(parse(b"$2\r\nabcd\r\n").is_err(), "longer than it says");
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1);
        assert!(parse(deep.as_bytes()).is_err());
    }

    #[test]
    fn tls_trusts_nothing_without_a_ca() {
        assert!(tls_config(b"").is_err());
        assert!(tls_config(b"not a certificate").is_err());
    }
}
