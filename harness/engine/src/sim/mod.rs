//! The simulation: a turmoil fleet of workers, the gate that makes every service call a yield
//! point, the logical clock, and the scheduler.

pub(crate) mod admin;
pub(crate) mod clock;
pub mod cx;
pub(crate) mod fleet;
pub(crate) mod gate;
pub mod history;
pub(crate) mod programs;
pub(crate) mod scheduler;
pub(crate) mod world;
pub mod names;
