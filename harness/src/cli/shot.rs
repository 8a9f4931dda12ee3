//! `crashpoint screenshot PAGE PNG`: a PNG of a report page, for the README or a CI artifact.

use std::path::PathBuf;

use anyhow::Result;

use crate::error::EXIT_OK;
use crate::report::screenshot;

/// Arguments of `screenshot`.
#[derive(Debug, clap::Args)]
pub struct ScreenshotArgs {
    /// The HTML page, e.g. `reports/latest/timeline-payout-catalogue.html`.
    pub page: PathBuf,
    /// The PNG to write.
    pub png: PathBuf,
    /// Viewport width, px.
    #[arg(long, default_value_t = 1400)]
    pub width: u32,
    /// Viewport height, px.
    #[arg(long, default_value_t = 900)]
    pub height: u32,
}

/// Renders the page with headless Chromium. Errors (exit 2): no Chromium, or it failed.
pub fn screenshot(args: &ScreenshotArgs) -> Result<i32> {
    screenshot::capture(&args.page, &args.png, args.width, args.height)?;
    println!("wrote {}", args.png.display());
    Ok(EXIT_OK)
}
