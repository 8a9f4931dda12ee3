//! Sharding: N CI jobs split one run's schedules between them, deterministically and without
//! overlap (`--shard I/N`).
//!
//! Item `k` (0-based: the k-th explored case of a scenario, the k-th saved regression, the k-th
//! scripted or exhaustive scenario of the run) belongs to shard `k mod N + 1`. Together the N
//! shards run exactly the items of one unsharded run with the same seed and budget in
//! schedules. (With a budget in wall time each job stops on its own clock.)

use crate::scenario::Scenario;
use std::fmt;
use std::str::FromStr;

/// This job's part of the run: shard `index` of `count`, 1-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Shard {
    /// 1..=count.
    pub index: u64,
    /// Number of shards, ≥ 1.
    pub count: u64,
}

impl Default for Shard {
    fn default() -> Self {
        Shard { index: 1, count: 1 }
    }
}

impl Shard {
    /// Whether item `k` (0-based) belongs to this shard.
    pub fn owns(&self, k: u64) -> bool {
        k % self.count == self.index - 1
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = String;

    /// Parses `I/N` with 1 ≤ I ≤ N. Errors say what was expected.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}`: expected I/N with 1 ≤ I ≤ N, e.g. 1/4");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u64 = i.trim().parse().map_err(|_| bad())?;
        let count: u64 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

/// The scenarios shard `shard` runs, in order: every exploration scenario (their explored
/// cases are dealt by [`crate::explore::Options::shard`]), and the k-th of the others
/// (scripted, exhaustive) when the shard owns k.
pub fn for_shard(chosen: Vec<Scenario>, shard: Shard) -> Vec<Scenario> {
    let mut k = 0u64;
    chosen
        .into_iter()
        .filter(|s| {
            if s.explore.is_some() {
                return true;
            }
            k += 1;
            shard.owns(k - 1)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_the_items() {
        for count in 1..=5u64 {
            let shards: Vec<Shard> = (1..=count).map(|index| Shard { index, count }).collect();
            for k in 0..100u64 {
                assert_eq!(shards.iter().filter(|s| s.owns(k)).count(), 1, "item {k} of {count} shards");
            }
        }
    }

    #[test]
    fn parses_and_rejects() {
        assert_eq!("2/3".parse::<Shard>(), Ok(Shard { index: 2, count: 3 }));
        for bad in ["0/2", "3/2", "1/0", "1", "a/b", "1/2/3"] {
            let e = bad.parse::<Shard>().unwrap_err();
            assert!(e.contains("expected I/N"), "{bad}: {e}");
        }
    }
}
