//! Seed 000's own stack as an external worker: a Symfony Messenger 5.4 handler in PHP, from
//! Debian's packages (examples/symfony-handler), under the seed's windows and generated
//! schedules. Its SQS transport (async-aws) speaks the query protocol and prefetches up to 9
//! messages per receive.

use crashpoint::explore::{self, Options};
use crashpoint::scenario::run_scenario;
use crashpoint::testkit;
mod common;

#[test]
fn seed_windows_pass_on_the_symfony_handler_and_repeat_byte_for_byte() {
    for name in ["symfony/concurrent-same-event", "symfony/crash-after-commit", "symfony/lock-expiry", "symfony/commit-applied"] {
        let s = common::scenario(name);
        let first = run_scenario(&testkit::endpoints(), common::payout("reference"), &s, None).unwrap();
        assert!(first.passed(), "{name} failed:\n{}", first.trace);
        let second = run_scenario(&testkit::endpoints(), common::payout("reference"), &s, None).unwrap();
        assert_eq!(first.trace, second.trace, "{name}: the same schedule gave another trace");
    }
}

#[test]
fn the_symfony_handler_passes_100_explored_schedules() {
    let s = common::scenario("symfony/explore");
    let opts = Options { schedules: Some(100), time: None, seed: 20261130, check_determinism: false, shard: Default::default() };
    let report = explore::explore(&testkit::endpoints(), common::payout("reference"), &s, &opts, |_| {}).unwrap();
    if let Some(f) = &report.failure {
        panic!("the Symfony handler failed: {}\n{}", f.minimal.schedule, f.minimal.trace);
    }
    assert!(report.stats.schedules >= 100, "{} schedules", report.stats.schedules); // plus the saved regressions
}
