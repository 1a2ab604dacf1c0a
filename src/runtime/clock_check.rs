//! The running clock check: the process's clock ([`crate::clock`]) and its measured offset to
//! the API server ([`crate::clock::offset`]), sampled by a background task, exported as metrics
//! and consulted before every release.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::fmt::rfc2822::DateTimeParser;
use kube::Client;
use kube::client::Body;
use tokio_util::sync::CancellationToken;

use crate::clock::offset::{Offset, OffsetTracker, Sample, release_blocked};
use crate::clock::server::{ServerClock, ServerTime, TimedDate};
use crate::clock::{Reading, SystemClock};
use crate::runtime::metrics::Metrics;

/// Samples taken at start, [`START_BURST_STEP`] apart.
const START_BURST: u64 = 8;
const START_BURST_STEP: Duration = Duration::from_millis(125);

pub(crate) struct ClockCheck {
    clock: SystemClock,
    offsets: Mutex<OffsetTracker>,
    /// The same samples placed on the monotonic clock: the reference members' clocks are
    /// recorded against, so that another leader can compare them (§9.3).
    server: Mutex<ServerClock>,
    /// The largest offset to the API server at which releases go on.
    bound: Duration,
    /// Pause between two samples.
    period: Duration,
}

impl ClockCheck {
    pub fn new(bound: Duration, period: Duration) -> Self {
        Self {
            clock: SystemClock::new(),
            // Samples older than a few periods say nothing about now.
            offsets: Mutex::new(OffsetTracker::new(period * 4)),
            // Longer than the offset's: members' clocks are compared with this one across
            // leaders, and more samples (at more phases of the server's second) narrow it.
            server: Mutex::new(ServerClock::new(period * 12)),
            bound,
            period,
        }
    }

    pub fn now(&self) -> Reading {
        self.clock.now()
    }

    pub fn offset(&self) -> Option<Offset> {
        self.lock().offset(self.clock.uptime())
    }

    /// The API server's clock at the monotonic instant `at`, if recently measured.
    pub fn server_time(&self, at: std::time::Instant) -> Option<ServerTime> {
        self.server
            .lock()
            .expect("server clock lock is never poisoned")
            .at(at)
    }

    /// Why releases must wait now, if they must.
    pub fn release_blocked(&self) -> Option<String> {
        release_blocked(self.offset(), self.bound)
    }

    /// One timed request to the API server (`GET /version`: tiny, allowed to every
    /// authenticated user); its `Date` header is the server's clock.
    pub async fn sample(&self, client: &Client) -> Result<Offset, String> {
        let request = ::http::Request::get("/version")
            .body(Body::empty())
            .map_err(|e| e.to_string())?;
        let sent = self.clock.now().wall;
        let sent_mono = std::time::Instant::now();
        let response = client.send(request).await.map_err(|e| e.to_string())?;
        let received_mono = std::time::Instant::now();
        let received = self.clock.now().wall;
        let date = response
            .headers()
            .get(::http::header::DATE)
            .ok_or("the API server's answer has no Date header")?
            .to_str()
            .map_err(|e| e.to_string())?;
        let date: Timestamp = DateTimeParser::new()
            .parse_timestamp(date)
            .map_err(|e| format!("Date header {date:?}: {e}"))?;
        self.server
            .lock()
            .expect("server clock lock is never poisoned")
            .add(TimedDate {
                sent: sent_mono,
                received: received_mono,
                date,
            });
        let mut offsets = self.lock();
        offsets.add(Sample { sent, received, date }, self.clock.uptime());
        offsets
            .offset(self.clock.uptime())
            .ok_or_else(|| "no offset after a sample".to_owned())
    }

    /// Samples every `period` (with jitter, so samples fall at different phases of the
    /// server's second and narrow the estimate) until `shutdown`.
    pub async fn run(self: Arc<Self>, client: Client, metrics: Arc<Metrics>, shutdown: CancellationToken) {
        let mut n: u64 = 0;
        loop {
            match self.sample(&client).await {
                Ok(o) => {
                    metrics.clock_offset(o.estimate().as_secs_f64(), (o.high - o.low).as_secs_f64() / 2.0)
                }
                Err(e) => tracing::warn!(error = %e, "clock offset sample failed"),
            }
            metrics.clock_steps(self.clock.skipped().as_secs_f64());
            n = n.wrapping_add(1);
            // At start, a burst at eight phases of the server's second narrows the estimate to
            // about 125 ms within a second (members' clocks are compared with it, and a new
            // leader's first comparison should not wait); then a fixed pattern of phases is
            // enough: 0, 0.37, 0.74, 0.11 ... of a second.
            let pause = if n < START_BURST {
                START_BURST_STEP
            } else {
                self.period + Duration::from_millis((n * 370) % 1000)
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, OffsetTracker> {
        self.offsets.lock().expect("offset lock is never poisoned")
    }
}
