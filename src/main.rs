use std::process::ExitCode;

use clap::Parser;
use redlock_operator::cli::{Cli, Command};
use redlock_operator::runtime::{open_files, telemetry};
use redlock_operator::{controller, crd};
use tokio_util::sync::CancellationToken;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => {
            print!("{}", crd::crd_yaml());
            ExitCode::SUCCESS
        }
        Command::Run(args) => {
            telemetry::init(args.log_format, &args.log_filter);
            match open_files::raise_soft_limit() {
                Ok((before, after)) => tracing::info!(
                    before = before.soft,
                    after = after.soft,
                    "limit of open files (kept probe connections and their watches)"
                ),
                Err(e) => tracing::warn!(error = %e, "cannot raise the limit of open files"),
            }
            // One thread. The operator's work is small and waits on I/O (probes, the API
            // server). With worker threads beside the one driving the controller, each probe
            // reply crossed threads, and parking and waking them took about a quarter of the
            // operator's CPU (perf, make bench-scale, 50 clusters; 1,000 µs of CPU per
            // reconcile with two workers, about 780 with one thread). Nothing here blocks a
            // thread: every wait is async.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cannot start the tokio runtime");
            let shutdown = CancellationToken::new();
            let result = runtime.block_on(async {
                controller::cancel_on_signals(shutdown.clone());
                controller::run(args, shutdown).await
            });
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %e, "operator stopped");
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
