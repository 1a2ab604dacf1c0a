//! Prometheus metrics of the operator itself (per-cluster metrics come with the lifecycle).

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::error::Error;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    reason: &'static str,
}

/// The operator's metrics and the registry that renders them.
pub struct Metrics {
    registry: Registry,
    reconciles: Counter,
    errors: Family<ErrorLabels, Counter>,
    duration: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        let reconciles = Counter::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        // 1 ms .. ~16 s: a reconcile is a few API calls plus Redis probes.
        let duration = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        let mut registry = Registry::with_prefix("redlock");
        registry.register(
            "reconciles",
            "Reconciles of RedlockCluster objects",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed reconciles, by error reason",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of one reconcile",
            duration.clone(),
        );
        Self {
            registry,
            reconciles,
            errors,
            duration,
        }
    }
}

impl Metrics {
    /// Counts a reconcile and records its duration when the returned guard drops, so early
    /// returns and errors are measured too.
    pub fn reconcile_started(&self) -> ReconcileTimer<'_> {
        self.reconciles.inc();
        ReconcileTimer {
            histogram: &self.duration,
            start: Instant::now(),
        }
    }

    pub fn reconcile_failed(&self, error: &Error) {
        self.errors
            .get_or_create(&ErrorLabels {
                reason: error.metric_label(),
            })
            .inc();
    }

    /// The OpenMetrics text exposition of every registered metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

/// Records the elapsed time of a reconcile on drop.
pub struct ReconcileTimer<'a> {
    histogram: &'a Histogram,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.histogram.observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_errors_and_durations() {
        let m = Metrics::default();
        drop(m.reconcile_started());
        drop(m.reconcile_started());
        m.reconcile_failed(&Error::CrdNotInstalled);
        let text = m.render();
        assert!(text.contains("redlock_reconciles_total 2"), "{text}");
        assert!(
            text.contains("redlock_reconcile_errors_total{reason=\"CrdNotInstalled\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("redlock_reconcile_duration_seconds_count 2"),
            "{text}"
        );
    }
}
