//! Command line: `redlock-operator run` and `redlock-operator crd`.

use std::net::SocketAddr;

use clap::{Parser, Subcommand};

use crate::runtime::telemetry::LogFormat;

#[derive(Parser, Debug)]
#[command(
    name = "redlock-operator",
    version,
    about = "Kubernetes operator for correct Redlock server sets"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per process: the size of the flags struct costs nothing worth a Box.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the operator against the cluster of the in-cluster config or KUBECONFIG.
    Run(RunArgs),
    /// Print the RedlockCluster CustomResourceDefinition as YAML.
    Crd,
}

#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Watch RedlockClusters in this namespace only (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,

    /// Namespace the operator's pods run in (the Downward API's `metadata.namespace`). Every
    /// cluster's NetworkPolicy admits pods labelled `app.kubernetes.io/name=redlock-operator`
    /// from this namespace only; unset, from any namespace.
    #[arg(long, env = "POD_NAMESPACE")]
    pub operator_namespace: Option<String>,

    /// Address of the HTTP server for /healthz, /readyz and /metrics.
    #[arg(long, env = "HTTP_ADDR", default_value = "0.0.0.0:8080")]
    pub http_addr: SocketAddr,

    /// Log output format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "plain")]
    pub log_format: LogFormat,

    /// How often every member's Redis is probed (milliseconds) when no event arrives.
    #[arg(long, env = "PROBE_PERIOD_MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(50..=60_000))]
    pub probe_period_ms: u64,

    /// How long clients get after a rotated client password is published before a
    /// confirmation may remove the old one (milliseconds): clients that mount the client
    /// Secret see a change only after the kubelet's sync (about a minute).
    #[arg(long, env = "PASSWORD_ROTATION_GRACE_MS", default_value_t = 120_000, value_parser = clap::value_parser!(u64).range(0..=86_400_000))]
    pub password_rotation_grace_ms: u64,

    /// Connect and reply timeout of the operator's Redis connections (milliseconds).
    #[arg(long, env = "PROBE_TIMEOUT_MS", default_value_t = 500, value_parser = clap::value_parser!(u64).range(10..=30_000))]
    pub probe_timeout_ms: u64,

    /// How often the TTL audit samples keys on every serving member (milliseconds).
    #[arg(long, env = "TTL_AUDIT_PERIOD_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub ttl_audit_period_ms: u64,

    /// Releases wait while the operator's wall clock is certainly further than this from the
    /// API server's (milliseconds). Holds do not depend on it (they are timed on the monotonic
    /// clock); the status times users read (`heldUntil`) are true to within it plus the
    /// measurement's uncertainty. An offset that cannot be measured blocks nothing.
    #[arg(long, env = "MAX_CLOCK_OFFSET_MS", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1100..=600_000))]
    pub max_clock_offset_ms: u64,

    /// How often the operator measures its clock offset to the API server (milliseconds;
    /// one `GET /version` each).
    #[arg(long, env = "CLOCK_CHECK_PERIOD_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=300_000))]
    pub clock_check_period_ms: u64,

    /// Keys the TTL audit reads per member per period (SCAN + PTTL); bounds its cost on large
    /// keyspaces, which are then swept over several periods.
    #[arg(long, env = "TTL_AUDIT_KEYS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=1_000_000))]
    pub ttl_audit_keys: u64,

    /// How many clusters are reconciled at once (0: no bound). When many change together
    /// (hundreds created at once, every watch listed again), this bounds the operator's
    /// requests in flight to the API server, so that its Lease renewals are not queued behind
    /// them, and the connections it opens for them.
    #[arg(long, env = "MAX_CONCURRENT_RECONCILES", default_value_t = 32)]
    pub max_concurrent_reconciles: u16,

    /// Elect a leader with a Lease so that several replicas can run and only one writes.
    /// `--leader-elect=false` only for a single operator process.
    #[arg(long, env = "LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,

    /// Name of the coordination.k8s.io Lease used for leader election.
    #[arg(long, env = "LEASE_NAME", default_value = "redlock-operator")]
    pub lease_name: String,

    /// Namespace of the Lease (default: `--operator-namespace`, else the kubeconfig's).
    #[arg(long, env = "LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,

    /// Identity in the Lease (default: the pod name, else host name and a random suffix).
    #[arg(long, env = "POD_NAME")]
    pub leader_identity: Option<String>,

    /// Seconds a standby waits after the leader's last renewal before taking over.
    #[arg(long, env = "LEASE_DURATION_SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub lease_duration_seconds: u64,

    /// The leader stops writing when it could not renew for this long (milliseconds);
    /// must be shorter than the lease duration.
    #[arg(long, env = "LEASE_RENEW_DEADLINE_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub lease_renew_deadline_ms: u64,

    /// Pause between two attempts to acquire or renew the Lease (milliseconds).
    #[arg(long, env = "LEASE_RETRY_PERIOD_MS", default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(50..=600_000))]
    pub lease_retry_period_ms: u64,

    /// Log filter in RUST_LOG syntax.
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    pub log_filter: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_flags_parse() {
        let cli = Cli::try_parse_from([
            "redlock-operator",
            "run",
            "--namespace",
            "locks",
            "--http-addr",
            "127.0.0.1:9000",
            "--log-format",
            "json",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("expected run")
        };
        assert_eq!(args.namespace.as_deref(), Some("locks"));
        assert_eq!(args.http_addr.port(), 9000);
        assert_eq!(args.log_format, LogFormat::Json);
    }

    #[test]
    fn leader_election_flags() {
        let parse = |extra: &[&str]| {
            let mut argv = vec!["redlock-operator", "run"];
            argv.extend_from_slice(extra);
            match Cli::try_parse_from(argv).map(|c| c.command) {
                Ok(Command::Run(args)) => Ok(args),
                Ok(_) => panic!("expected run"),
                Err(e) => Err(e),
            }
        };
        let defaults = parse(&[]).unwrap();
        assert!(defaults.leader_elect);
        assert_eq!(defaults.lease_name, "redlock-operator");
        assert_eq!(defaults.lease_duration_seconds, 15);
        assert_eq!(defaults.max_concurrent_reconciles, 32);
        assert_eq!(
            parse(&["--max-concurrent-reconciles=0"])
                .unwrap()
                .max_concurrent_reconciles,
            0
        );
        assert!(parse(&["--max-concurrent-reconciles=-1"]).is_err());
        let off = parse(&[
            "--leader-elect=false",
            "--leader-identity",
            "a",
            "--lease-namespace",
            "ops",
        ])
        .unwrap();
        assert!(!off.leader_elect);
        assert_eq!(off.leader_identity.as_deref(), Some("a"));
        assert_eq!(off.lease_namespace.as_deref(), Some("ops"));
        assert!(parse(&["--lease-duration-seconds", "0"]).is_err());
    }

    #[test]
    fn bad_http_addr_is_refused() {
        assert!(Cli::try_parse_from(["redlock-operator", "run", "--http-addr", "nope"]).is_err());
    }
}
