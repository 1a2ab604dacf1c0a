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

use crate::redis::resp::{self, Reply};

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
    /// The process at the other end, once a probe has read it on this connection.
    pub process: Option<KnownProcess>,
    /// This end's address: tells this connection from one that replaced it (a watch on it,
    /// [`ClosedWatch`], is kept only while the connection is).
    local: Option<std::net::SocketAddr>,
}

/// Which process a connection reaches (`INFO server`), read once per connection: a connection
/// reaches one process for its whole life (a process that restarts takes its connections
/// with it), so a new connection is the only way to reach a new process, and only a new
/// connection must read it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownProcess {
    pub run_id: String,
    pub version: String,
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AdminConnection {
    /// Connects to `ip:port` (TLS when `login` has a CA) and logs in.
    pub async fn open(ip: IpAddr, port: u16, login: &Login<'_>) -> RedisResult<Self> {
        let connecting = async {
            let tcp = TcpStream::connect((ip, port)).await?;
            tcp.set_nodelay(true)?;
            let local = tcp.local_addr().ok();
            io::Result::Ok((
                local,
                match login.tls_ca {
                    None => Stream::Plain(tcp),
                    Some(ca) => {
                        let connector = TlsConnector::from(tls_config(ca)?);
                        let tls = connector.connect(ServerName::IpAddress(ip.into()), tcp).await?;
                        Stream::Tls(Box::new(tls))
                    }
                },
            ))
        };
        let (local, stream) = tokio::time::timeout(login.timeout, connecting)
            .await
            .map_err(|_| timed_out("connecting", login.timeout))??;
        let mut conn = Self {
            stream,
            buf: Vec::new(),
            timeout: login.timeout,
            broken: false,
            process: None,
            local,
        };
        let auth = redis::cmd("AUTH")
            .arg(login.user)
            .arg(login.password)
            .get_packed_command();
        let () = conn.ask(&auth).await?;
        Ok(conn)
    }

    /// Sends `request` (one or more packed commands) and reads `replies` replies, which
    /// `read` gets where they lie in the read buffer (see [`crate::redis::resp`]).
    pub async fn query_with<T>(
        &mut self,
        request: &[u8],
        replies: usize,
        read: impl FnOnce(&[Reply<'_>]) -> T,
    ) -> RedisResult<T> {
        if self.broken {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "an earlier request on this connection was not completed",
            )
            .into());
        }
        self.broken = true;
        let timeout = self.timeout;
        let len = tokio::time::timeout(timeout, self.exchange(request, replies))
            .await
            .map_err(|_| timed_out("waiting for a reply", timeout))??;
        let read = read(&resp::replies(&self.buf[..len], replies)?);
        self.buf.drain(..len);
        self.broken = false;
        // A kept connection idles a probe period between requests: its buffer is given back
        // (one allocation per request) rather than kept by each of hundreds of connections
        // (300 KiB at 50 clusters x 3, heaptrack) or sized by its largest reply.
        if self.buf.is_empty() {
            self.buf = Vec::new();
        }
        Ok(read)
    }

    /// Like [`Self::query_with`], the replies as values of their own; an error reply stays
    /// one (see [`Self::ask`] for one command whose error fails).
    pub async fn query(&mut self, request: &[u8], replies: usize) -> RedisResult<Vec<Value>> {
        self.query_with(request, replies, |replies| {
            replies.iter().map(Reply::to_value).collect()
        })
        .await?
    }

    /// A second handle on this connection's socket ([`ClosedWatch`]), to learn when the process
    /// at the other end closes it (a process that exits or crashes has its sockets closed by
    /// the kernel) while the connection itself stays where it is kept.
    pub fn closed_watch(&self) -> io::Result<ClosedWatch> {
        let tcp = match &self.stream {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref().0,
        };
        let dup = std::net::TcpStream::from(std::os::fd::AsFd::as_fd(tcp).try_clone_to_owned()?);
        dup.set_nonblocking(true)?;
        Ok(ClosedWatch {
            socket: TcpStream::from_std(dup)?,
            local: self.local,
        })
    }

    /// Whether `watch` is on this connection's socket.
    pub fn watched_by(&self, watch: &ClosedWatch) -> bool {
        self.local.is_some() && watch.local == self.local
    }

    /// One command and its reply, as `T`; an error reply is the error.
    pub async fn ask<T: redis::FromRedisValue>(&mut self, request: &[u8]) -> RedisResult<T> {
        let reply = self.query(request, 1).await?.pop().unwrap_or(Value::Nil);
        Ok(redis::from_redis_value(reply.extract_error()?)?)
    }

    /// Writes `request` and reads until `replies` replies are complete; returns their length.
    async fn exchange(&mut self, request: &[u8], replies: usize) -> RedisResult<usize> {
        self.stream.write_all(request).await?;
        self.stream.flush().await?;
        loop {
            if let Some(len) = resp::complete(&self.buf, replies)? {
                return Ok(len);
            }
            self.buf.reserve(1024);
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(
                    io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the connection").into(),
                );
            }
        }
    }
}

/// A duplicate of an idle connection's socket ([`AdminConnection::closed_watch`]), only ever
/// peeked at, so the connection's own reads are untouched. It keeps the socket open while it
/// lives: it is for a watch that lasts as long as the connection is kept (a rest).
pub struct ClosedWatch {
    socket: TcpStream,
    local: Option<std::net::SocketAddr>,
}

impl ClosedWatch {
    /// Returns once the socket has something to read while no request is out: the peer closed
    /// it (end of stream, or a reset), or sent bytes unasked (a Redis server does that only as
    /// it drops a connection, e.g. an error on a timeout). Either way the connection is ending
    /// or in an unknown state, so whoever watches probes again now. Not to be awaited while a
    /// request on the connection is out: its replies would end the wait too.
    pub async fn ended(&self) {
        let mut byte = [0u8; 1];
        let _ = self.socket.peek(&mut byte).await;
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
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("timed out {what} after {after:?}"),
    )
    .into()
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

    #[test]
    fn tls_trusts_nothing_without_a_ca() {
        assert!(tls_config(b"").is_err());
        assert!(tls_config(b"not a certificate").is_err());
    }
}
