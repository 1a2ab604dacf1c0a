use std::process::ExitCode;

use clap::Parser;
use redlock_operator::cli::{Cli, Command};
use redlock_operator::{controller, crd, telemetry};
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
            let runtime = tokio::runtime::Runtime::new().expect("cannot start the tokio runtime");
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
