//! Logging setup: plain text for people, JSON for log pipelines.

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Plain,
    Json,
}

/// Installs the global tracing subscriber. `filter` uses `RUST_LOG` syntax (`info`,
/// `redlock_operator=debug,kube=info`, …).
pub fn init(format: LogFormat, filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|e| {
        eprintln!("invalid log filter {filter:?} ({e}); using \"info\"");
        EnvFilter::new("info")
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
