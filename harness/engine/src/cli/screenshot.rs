//! `crashpoint screenshot PAGE PNG`: a PNG of a report page, for the README or a CI artifact.

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::error::EXIT_OK;
use crate::report::screenshot;

/// Arguments of `screenshot`.
#[derive(Debug, clap::Args)]
pub struct ScreenshotArgs {
    /// The HTML page, e.g. `reports/latest/timeline-payout-catalogue.html`.
    pub page: PathBuf,
    /// The PNG to write.
    pub png: PathBuf,
    /// Viewport width, px (default: the page's drawing, so the whole timeline shows; at most
    /// 8000).
    #[arg(long)]
    pub width: Option<u32>,
    /// Viewport height, px (default: the drawing plus the header above it).
    #[arg(long)]
    pub height: Option<u32>,
}

/// The size of the first `<svg width=".." height="..">` in `html`, px.
fn drawing_size(html: &str) -> Option<(u32, u32)> {
    let tag = &html[html.find("<svg")?..];
    let tag = &tag[..tag.find('>')?];
    let attr = |name: &str| -> Option<u32> {
        let rest = &tag[tag.find(&format!(" {name}=\""))? + name.len() + 3..];
        rest[..rest.find('"')?].parse().ok()
    };
    Some((attr("width")?, attr("height")?))
}

/// Renders the page with headless Chromium. Errors (exit 2): the page cannot be read, no
/// Chromium, or it failed.
pub fn screenshot(args: &ScreenshotArgs) -> Result<i32> {
    let html = std::fs::read_to_string(&args.page).with_context(|| format!("reading {}", args.page.display()))?;
    let (w, h) = drawing_size(&html).unwrap_or((1400, 500));
    let width = args.width.unwrap_or((w + 60).min(8000));
    let height = args.height.unwrap_or(h + 420);
    screenshot::capture(&args.page, &args.png, width, height)?;
    println!("wrote {}", args.png.display());
    Ok(EXIT_OK)
}
