//! The `crashpoint` binary: the engine's CLI with the in-tree workloads registered, the payout article's
//! payout system first (the default for scenario files that name no workload), then seed
//! 004's counter projection, then the orders article's orders with their external providers; then every
//! workload declared in a `*.workload.toml` file under the scenarios directory
//! (`crashpoint_declared`).

use std::sync::Arc;

fn main() {
    let registry = crashpoint::Registry::new(vec![
        Arc::new(crashpoint_payout::Payout),
        Arc::new(crashpoint_counter::Counter),
        Arc::new(crashpoint_orders::Orders),
    ]);
    std::process::exit(crashpoint::main_with(registry, &crashpoint_declared::Files));
}
