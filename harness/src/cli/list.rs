//! `crashpoint list`.

use anyhow::Result;

use crate::error::EXIT_OK;
use crate::scenario;
use crate::sim::points::CrashPoint;

/// Prints the scenarios, the crash points, the fault kinds and the systems under test.
/// Errors: a scenario file that does not load (named with its line and field).
pub fn list() -> Result<i32> {
    let dir = scenario::scenarios_dir();
    println!("scenarios (from {}/):", dir.display());
    for s in scenario::discover(&dir)? {
        println!("  {:<36} {}", s.name, s.description);
    }
    println!("\ncrash points:");
    for cp in CrashPoint::ALL {
        println!("  {:<36} {}", cp.as_str(), cp.role());
    }
    println!("\nfaults (schedule text):");
    for (text, what) in crate::faults::KINDS {
        println!("  {text:<36} {what}");
    }
    println!("\nsystems (--system):");
    println!("  {:<36} seed 000's design, correct under at-least-once delivery", "reference");
    for (name, what) in crate::sut::mutants::CATALOGUE {
        println!("  {name:<36} mutant: {what}");
    }
    Ok(EXIT_OK)
}
