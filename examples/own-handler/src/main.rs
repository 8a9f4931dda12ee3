//! The team's own crashpoint binary: the whole CLI (list, run, repro, catalogue, bench) for
//! the own-handler workload. Run it from the crate directory, so that `./scenarios` is found
//! (or set `CRASHPOINT_SCENARIOS`).

crashpoint::main!(crashpoint_example_own_handler::OwnHandler);
