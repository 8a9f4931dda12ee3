//! `crashpoint run`.
use anyhow::Result;
use crate::error::EXIT_OK;
use crate::services::ServiceOptions;

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Scenario names (all by default).
    pub scenarios: Vec<String>,
}

/// Runs scenarios.
pub fn run(_rt: &tokio::runtime::Runtime, _opts: &ServiceOptions, _args: &RunArgs) -> Result<i32> {
    Ok(EXIT_OK)
}
