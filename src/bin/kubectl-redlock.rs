//! `kubectl redlock`: installed on the PATH as `kubectl-redlock`, kubectl runs it as a plugin.

use std::process::ExitCode;

use clap::Parser;
use redlock_operator::plugin::{self, Cli};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("cannot start the tokio runtime");
    match runtime.block_on(plugin::run(cli)) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
