//! `crashpoint list`.
use anyhow::Result;
use crate::error::EXIT_OK;

/// Prints scenarios, crash points and fault kinds.
pub fn list() -> Result<i32> {
    Ok(EXIT_OK)
}
