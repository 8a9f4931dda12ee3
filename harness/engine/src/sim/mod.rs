//! The simulation: a turmoil fleet of workers, the gate that makes every service call a yield
//! point, the logical clock, and the scheduler.

pub mod admin;
pub mod clock;
pub mod cx;
pub mod fleet;
pub mod history;
pub mod programs;
pub mod scheduler;
pub mod world;
