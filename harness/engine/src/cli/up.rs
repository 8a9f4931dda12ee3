//! `crashpoint up` and `crashpoint down`.

use anyhow::{bail, Result};

use crate::error::EXIT_OK;
use crate::services::native::{state, NativeServices};

/// Starts the native services, leaves them running and prints their env lines.
/// Errors: services from an earlier `up` still running (run `down` first), a start failure.
pub async fn up() -> Result<i32> {
    if let Some(s) = state::load()? {
        if s.pids.iter().any(|(_, p)| crate::services::native::process::group_alive(*p as i32)) {
            bail!(
                "services from an earlier `crashpoint up` are still running ({}); run `crashpoint down` first",
                state::path().display()
            );
        }
        state::stop(&s)?;
    }
    let native = NativeServices::start().await?;
    let s = native.detach();
    state::save(&s)?;
    println!("# services started; use them with: eval \"$(crashpoint up)\" or export these lines");
    println!("export DATABASE_URL={}", s.database_url);
    println!("export SQS_ENDPOINT_URL={}", s.sqs_endpoint_url);
    // Always, empty with one instance: a value left in the shell by an earlier `up` must not
    // survive into this one's runs.
    println!("export {}={}", crate::services::external::SQS_SHARDS_VAR, s.sqs_shards.join(","));
    println!("export REDIS_URL={}", s.redis_url);
    println!("# stop them with: crashpoint down");
    Ok(EXIT_OK)
}

/// Stops what `up` started. Prints what it stopped, or that nothing was running.
pub fn down() -> Result<i32> {
    match state::load()? {
        None => println!("nothing to stop ({} does not exist)", state::path().display()),
        Some(s) => {
            let stopped = state::stop(&s)?;
            if stopped.is_empty() {
                println!("nothing was running; removed {}", state::path().display());
            } else {
                println!("stopped {}", stopped.join(", "));
            }
        }
    }
    Ok(EXIT_OK)
}
