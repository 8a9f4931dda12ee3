//! Finding the executables the native provider runs.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::MissingBinary;

/// `name` on `PATH`, if present and executable.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

/// `redis-server` on `PATH`, or an error naming the Debian package `redis-server`.
pub fn redis_server() -> Result<PathBuf, MissingBinary> {
    on_path("redis-server").ok_or_else(|| MissingBinary {
        binary: "redis-server".into(),
        package: "redis-server".into(),
        searched: "not on PATH".into(),
    })
}

/// The PostgreSQL server bin directory holding `initdb` and `postgres`.
///
/// Looked for, in order: `initdb` on `PATH` (with `postgres` beside it, or the real directory
/// behind a symlink), `pg_config --bindir`, and the highest `/usr/lib/postgresql/*/bin`.
/// Error: [`MissingBinary`] naming `initdb` and the package `postgresql`.
pub fn postgres_bindir() -> Result<PathBuf, MissingBinary> {
    let has_server = |d: &Path| is_executable(&d.join("initdb")) && is_executable(&d.join("postgres"));
    if let Some(initdb) = on_path("initdb") {
        if let Ok(real) = std::fs::canonicalize(&initdb) {
            if let Some(dir) = real.parent().filter(|d| has_server(d)) {
                return Ok(dir.to_path_buf());
            }
        }
        if let Some(dir) = initdb.parent().filter(|d| has_server(d)) {
            return Ok(dir.to_path_buf());
        }
    }
    if on_path("pg_config").is_some() {
        if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
            let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if out.status.success() && has_server(&dir) {
                return Ok(dir);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            has_server(&bin).then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, d)| d).ok_or_else(|| MissingBinary {
        binary: "initdb".into(),
        package: "postgresql".into(),
        searched: "not on PATH, not via `pg_config --bindir`, not under /usr/lib/postgresql/*/bin"
            .into(),
    })
}

/// A `python3` able to create venvs, or an error naming the package `python3-venv`.
pub fn python3() -> Result<PathBuf, MissingBinary> {
    on_path("python3").ok_or_else(|| MissingBinary {
        binary: "python3".into(),
        package: "python3-venv".into(),
        searched: "not on PATH".into(),
    })
}
