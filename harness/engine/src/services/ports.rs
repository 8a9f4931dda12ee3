//! Loopback ports: choosing a free one, knowing who listens on one, and starting a service
//! again on another port when the chosen one was taken before the service could bind it.
//!
//! A free port is found by binding port 0 and closing the socket, so another process can take
//! it before the service binds it. The native services therefore count as ready
//! only once the listener on their port belongs to their own process group, and a service that
//! exits saying the address is in use is started again on another port ([`on_free_port`]).

use std::collections::BTreeSet;
use std::future::Future;

use anyhow::{Context, Result};

/// How many ports [`on_free_port`] tries before it gives up.
pub const PORT_ATTEMPTS: usize = 5;

/// A service exited because another process held its port (its log said so). [`on_free_port`]
/// tries again on another port.
#[derive(Debug, thiserror::Error)]
#[error("{service} could not bind 127.0.0.1:{port}: another process took the port after it was chosen")]
pub struct PortTaken {
    /// `postgres`, `redis-server` or `localstack`.
    pub service: String,
    /// The port it was given.
    pub port: u16,
}

/// Whether a service's log says it could not bind its address: PostgreSQL ("could not bind
/// IPv4 address … Address already in use"), Redis ("bind: Address already in use") and Python
/// (`OSError: [Errno 98] Address already in use`) all say "address already in use".
pub fn says_address_in_use(log: &str) -> bool {
    log.to_ascii_lowercase().contains("address already in use")
}

/// The error for `service`, started on `port`, that exited while starting with `log_tail` the
/// end of its log: [`PortTaken`] when the log says the address was in use, else `other`.
pub fn exit_error(service: &str, port: u16, log_tail: &str, other: impl FnOnce() -> anyhow::Error) -> anyhow::Error {
    match says_address_in_use(log_tail) {
        true => PortTaken { service: service.into(), port }.into(),
        false => other(),
    }
}

/// A free TCP port on 127.0.0.1, found by binding port 0. Errors: no port can be bound.
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free loopback port")?;
    Ok(l.local_addr()?.port())
}

/// Runs `attempt` with ports from `ports` until one does not fail with [`PortTaken`], at most
/// [`PORT_ATTEMPTS`] times; each retry is logged. Errors: the last attempt's error, or the
/// first error that is not [`PortTaken`].
pub async fn on_free_port<T, Fut>(
    mut ports: impl FnMut() -> Result<u16>,
    mut attempt: impl FnMut(u16) -> Fut,
) -> Result<T>
where
    Fut: Future<Output = Result<T>>,
{
    let mut n = 1;
    loop {
        let port = ports()?;
        match attempt(port).await {
            Err(e) if n < PORT_ATTEMPTS && e.is::<PortTaken>() => {
                tracing::warn!("{e}; trying another port ({n} of {PORT_ATTEMPTS} attempts made)");
                n += 1;
            }
            r => return r,
        }
    }
}

/// The pid of the process that listens on `port` (loopback or any address, IPv4 or IPv6), from
/// `/proc/net/tcp{,6}` and the processes' socket descriptors; `None` when nobody listens or
/// the listener's process cannot be read.
pub fn listener_pid(port: u16) -> Option<i32> {
    let mut entries = procfs::net::tcp().unwrap_or_default();
    entries.extend(procfs::net::tcp6().unwrap_or_default());
    let inodes: BTreeSet<u64> = entries
        .iter()
        .filter(|e| e.state == procfs::net::TcpState::Listen && e.local_address.port() == port)
        .map(|e| e.inode)
        .collect();
    if inodes.is_empty() {
        return None;
    }
    procfs::process::all_processes().ok()?.flatten().find_map(|p| {
        let holds = p.fd().ok()?.flatten().any(|fd| matches!(fd.target, procfs::process::FDTarget::Socket(i) if inodes.contains(&i)));
        holds.then_some(p.pid)
    })
}

/// Whether the listener on `port` belongs to process group `pgid` (a service started by
/// [`super::native::process::ManagedChild`], whose pid is its group id).
pub fn listened_by_group(port: u16, pgid: u32) -> bool {
    listener_pid(port)
        .and_then(|pid| procfs::process::Process::new(pid).ok()?.stat().ok())
        .is_some_and(|st| st.pgrp as u32 == pgid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listener_of_a_port_is_found_and_told_apart_from_another_group() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert_eq!(listener_pid(port), Some(std::process::id() as i32));
        let own_group = nix::unistd::getpgrp().as_raw() as u32;
        assert!(listened_by_group(port, own_group));
        assert!(!listened_by_group(port, own_group + 1));
        drop(l);
        assert_eq!(listener_pid(port), None);
    }

    #[test]
    fn every_services_wording_of_a_taken_port_is_recognised() {
        for log in [
            "LOG:  could not bind IPv4 address \"127.0.0.1\": Address already in use",
            "# Warning: Could not create server TCP listening socket 127.0.0.1:6379: bind: Address already in use",
            "OSError: [Errno 98] Address already in use",
        ] {
            assert!(says_address_in_use(log), "{log}");
        }
        assert!(!says_address_in_use("FATAL:  data directory has wrong ownership"));
    }

    #[test]
    fn a_taken_port_is_retried_on_another_and_other_errors_are_not() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut given = vec![3, 2, 1];
        let mut tried = Vec::new();
        let r: Result<u16> = rt.block_on(on_free_port(
            || Ok(given.pop().unwrap()),
            |port| {
                tried.push(port);
                async move {
                    match port {
                        1 | 2 => Err(PortTaken { service: "redis-server".into(), port }.into()),
                        p => Ok(p),
                    }
                }
            },
        ));
        assert_eq!((r.unwrap(), tried), (3, vec![1, 2, 3]));
        let mut calls = 0;
        let r: Result<u16> = rt.block_on(on_free_port(|| Ok(7), |_| {
            calls += 1;
            async { Err(anyhow::anyhow!("initdb failed")) }
        }));
        assert_eq!((r.unwrap_err().to_string(), calls), ("initdb failed".to_string(), 1));
        let r: Result<u16> = rt.block_on(on_free_port(|| Ok(7), |port| async move { Err(PortTaken { service: "x".into(), port }.into()) }));
        assert!(r.unwrap_err().is::<PortTaken>(), "gives up after {PORT_ATTEMPTS} attempts with the last error");
    }
}
