//! The `crashpoint` binary: the engine's CLI with the in-tree workloads registered, seed 000's
//! payout system first (the default for scenario files that name no workload), then seed
//! 004's counter projection, then seed 003's orders with their external providers.

crashpoint::main!(crashpoint_payout::Payout, crashpoint_counter::Counter, crashpoint_orders::Orders);
