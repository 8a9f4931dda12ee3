//! Whether a Docker engine is reachable, for the containers provider.

use std::os::unix::net::UnixStream;
use std::path::Path;

/// `Ok(address)` when a Docker engine accepts connections, else `Err(reason)`.
///
/// Looks at `DOCKER_HOST` (a `unix://` or `tcp://` address) and the default socket
/// `/var/run/docker.sock`. It only connects; it does not start anything.
pub fn engine_status() -> Result<String, String> {
    if let Ok(host) = std::env::var("DOCKER_HOST") {
        if let Some(path) = host.strip_prefix("unix://") {
            return connect_unix(Path::new(path)).map(|_| host.clone());
        }
        if let Some(addr) = host.strip_prefix("tcp://") {
            return std::net::TcpStream::connect(addr)
                .map(|_| host.clone())
                .map_err(|e| format!("no Docker engine answers at DOCKER_HOST={host} ({e})"));
        }
        return Err(format!("DOCKER_HOST={host} is not a unix:// or tcp:// address"));
    }
    let default = Path::new("/var/run/docker.sock");
    connect_unix(default).map(|_| format!("unix://{}", default.display()))
}

fn connect_unix(path: &Path) -> Result<(), String> {
    if !path.exists() {
        return Err(format!("no Docker engine socket at {}", path.display()));
    }
    UnixStream::connect(path)
        .map(|_| ())
        .map_err(|e| format!("the Docker socket {} refuses connections ({e})", path.display()))
}
