//! A PNG of a report page, taken by headless Chromium (Debian's `chromium` package):
//! `chromium --headless --screenshot=OUT --window-size=W,H file://PAGE`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

/// Longest a screenshot may take, s.
pub const TIMEOUT_S: u64 = 60;

/// The Chromium executable: `$CHROMIUM`, else the first of `chromium`, `chromium-browser`,
/// `google-chrome` on `PATH`. Errors: none found (with the package to install).
pub fn chromium() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return Ok(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    bail!("no Chromium found (chromium, chromium-browser, google-chrome on PATH, or $CHROMIUM); install it with `apt-get install chromium`")
}

/// Renders `page` (an HTML file) to `png` at `width`×`height` px. Errors: no Chromium, it
/// failed or took longer than [`TIMEOUT_S`], or it wrote no PNG.
pub fn capture(page: &Path, png: &Path, width: u32, height: u32) -> Result<()> {
    let page = std::fs::canonicalize(page).with_context(|| format!("{}", page.display()))?;
    let out = std::path::absolute(png)?;
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // Private, like every temp dir of the harness.
    let profile = tempfile::Builder::new().permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700)).tempdir()?;
    let mut child = Command::new(chromium()?)
        .args(["--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", out.display()))
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting chromium")?;
    let started = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if started.elapsed() > Duration::from_secs(TIMEOUT_S) {
            let _ = child.kill();
            let _ = child.wait();
            bail!("chromium took longer than {TIMEOUT_S} s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    let bytes = std::fs::read(&out).map_err(|_| anyhow!("chromium ({status}) wrote no {}: {}", out.display(), err.trim()))?;
    if !bytes.starts_with(b"\x89PNG") {
        bail!("{} is not a PNG", out.display());
    }
    Ok(())
}
