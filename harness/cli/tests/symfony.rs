//! The payout article's own stack as an external worker: a Symfony Messenger 5.4 handler in PHP, from
//! Debian's packages (examples/symfony-handler), under the seed's windows and generated
//! schedules. Its SQS transport (async-aws) speaks the query protocol and prefetches up to 9
//! messages per receive.

use crashpoint::explore::{self, Options};
use crashpoint::testkit;
mod common;

#[test]
fn seed_windows_pass_on_the_symfony_handler_and_repeat_byte_for_byte() {
    common::passes_twice_identically(&[
        "symfony/concurrent-same-event",
        "symfony/crash-after-commit",
        "symfony/lock-expiry",
        "symfony/commit-applied",
        "symfony/commit-response-lost",
    ]);
}

#[test]
#[ignore = "full tier: 100 schedules of PHP worker processes; `cargo test -- --include-ignored` runs it"]
fn the_symfony_handler_passes_100_explored_schedules() {
    let s = common::scenario("symfony/explore");
    let opts = Options {
        schedules: Some(100),
        time: None,
        seed: 20261130,
        check_determinism: false,
        shard: Default::default(),
        jobs: 1,
    };
    let report = explore::explore(&testkit::endpoints(), common::payout("reference"), &s, &opts, |_| {}).unwrap();
    if let Some(f) = &report.failure {
        panic!("the Symfony handler failed: {}\n{}", f.minimal.schedule, f.minimal.trace);
    }
    assert!(report.stats.schedules >= 100, "{} schedules", report.stats.schedules);
    // plus the saved regressions
}
