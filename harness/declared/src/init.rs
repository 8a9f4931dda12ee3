//! `crashpoint init DIR`: a commented workload file, a schema, a scripted scenario and an
//! exploration for a team to edit ([`Files`]); with `--provider <name>`, the workload file has
//! a `[[providers]]` stanza for the team's HTTP API dependency too.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Result};

use crashpoint::Workload;

/// The stock binary's workload files: [`crate::discover`] and `crashpoint init`.
pub struct Files;

/// The files `init` writes, relative to the team's directory, with `NAME` for the workload.
const TEMPLATE: &[(&str, &str)] = &[
    ("scenarios/NAME.workload.toml", include_str!("init/workload.toml")),
    ("scenarios/NAME.schema.sql", include_str!("init/schema.sql")),
    ("scenarios/NAME/crash-after-commit.toml", include_str!("init/crash-after-commit.toml")),
    ("scenarios/NAME/explore.toml", include_str!("init/explore.toml")),
];

/// The stanza `init --provider <p>` appends to the workload file, with `PROVIDER` for `<p>`.
const PROVIDER: &str = include_str!("init/provider.toml");

impl crashpoint::Declarations for Files {
    fn discover(&self, scenarios: &Path) -> Result<Vec<Arc<dyn Workload>>> {
        crate::discover(scenarios)
    }

    fn init(&self, dir: &Path, name: &str, provider: Option<&str>) -> Result<Vec<PathBuf>> {
        if let Some(p) = provider {
            if p.is_empty() || !p.chars().all(|c| c.is_ascii_lowercase()) {
                bail!("`{p}` is not a provider name; expected lower-case letters, e.g. `cards` (--provider)");
            }
        }
        let ok = !name.is_empty()
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if !ok {
            bail!("`{name}` is not a workload name; expected lower-case letters, digits, `-` and `_`, starting with a letter (--name)");
        }
        let mut files: Vec<(PathBuf, String)> =
            TEMPLATE.iter().map(|(p, text)| (dir.join(p.replace("NAME", name)), text.replace("NAME", name))).collect();
        if let Some(p) = provider {
            // The workload file, first, gets the provider's stanza at its end.
            let stanza = PROVIDER.replace("PROVIDER_UPPER", &p.to_ascii_uppercase()).replace("PROVIDER", p);
            files[0].1.push_str(&stanza);
        }
        let existing: Vec<String> =
            files.iter().filter(|(p, _)| p.exists()).map(|(p, _)| p.display().to_string()).collect();
        if !existing.is_empty() {
            bail!("not overwriting {}: move them away or choose another --name", existing.join(", "));
        }
        for (p, text) in &files {
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent).map_err(|e| anyhow::anyhow!("creating {}: {e}", parent.display()))?;
            }
            std::fs::write(p, text).map_err(|e| anyhow::anyhow!("writing {}: {e}", p.display()))?;
        }
        Ok(files.into_iter().map(|(p, _)| p).collect())
    }
}
