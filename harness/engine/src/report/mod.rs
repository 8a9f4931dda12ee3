//! Reports of a run, for a CI page and for people: the files written to
//! the report directory (`--report-dir`, default [`DEFAULT_DIR`]; the trace text is [`crate::record::trace`]):
//!
//! | file | what |
//! |---|---|
//! | `junit.xml` | one test case per scenario and system ([`junit`]) |
//! | `report.json` | everything, machine-readable ([`model::RunReport`]; schema in docs/guide/ci-gate.md) |
//! | `summary.md` | verdict table, each failure's minimal schedule and repro ([`summary`]) |
//! | `timeline-<scenario>.html` | each failing schedule drawn as lanes ([`timeline`]) |

pub mod junit;
pub mod model;
pub mod screenshot;
pub mod summary;
pub mod timeline;

pub mod violation;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::scenario::ScenarioOutcome;
use model::RunReport;

/// The default report directory, relative to the working directory.
pub const DEFAULT_DIR: &str = "reports/latest";

/// A report directory being written.
#[derive(Debug, Clone)]
pub struct ReportDir {
    dir: PathBuf,
}

impl ReportDir {
    /// Creates `dir` (and its parents) and removes the report files a previous run left there
    /// (`junit.xml`, `report.json`, `summary.md`, `timeline-*.html`), so that nothing stale
    /// mixes with this run. Other files are kept. Errors: the directory cannot be created, or
    /// a file cannot be written in it (checked by writing and removing one), so that a run
    /// fails before its first schedule rather than after its last.
    pub fn create(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating the report directory {}", dir.display()))?;
        tempfile::NamedTempFile::new_in(dir)
            .with_context(|| format!("the report directory {} is not writable", dir.display()))?;
        for e in std::fs::read_dir(dir)?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let ours = matches!(name.as_str(), "junit.xml" | "report.json" | "summary.md")
                || (name.starts_with("timeline-") && name.ends_with(".html"));
            if ours {
                std::fs::remove_file(e.path()).with_context(|| format!("removing the old {}", e.path().display()))?;
            }
        }
        Ok(ReportDir { dir: dir.to_path_buf() })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Writes `timeline-<slug>.html` for `o` and returns the file name.
    pub fn timeline(&self, slug: &str, title: &str, o: &ScenarioOutcome, repro: &[String]) -> Result<String> {
        let name = format!("timeline-{slug}.html");
        let path = self.dir.join(&name);
        std::fs::write(&path, timeline::render(title, o, repro)).with_context(|| format!("writing {}", path.display()))?;
        Ok(name)
    }

    /// Writes `junit.xml`, `report.json` and `summary.md` for `run`.
    pub fn finish(&self, run: &RunReport) -> Result<()> {
        let write = |name: &str, text: String| {
            let path = self.dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
        };
        write("junit.xml", junit::render(run)?)?;
        write("report.json", serde_json::to_string_pretty(run)? + "\n")?;
        write("summary.md", summary::render(run))?;
        Ok(())
    }
}
