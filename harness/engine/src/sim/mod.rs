//! The simulation: a turmoil fleet of workers, the gate that makes every service call a yield
//! point, the logical clock, and the scheduler; [`wire`] gates external worker processes at
//! the wire with the same yield points; [`model`] decides what a service does with a call, once
//! for both front-ends ([`cx`] in-process, [`wire`] at the wire).

pub(crate) mod clock;
pub mod fifo;
pub mod cx;
pub(crate) mod fleet;
pub(crate) mod gate;
pub(crate) mod host_spec;
pub(crate) mod io;
pub(crate) mod net;
pub mod model;
pub(crate) mod programs;
pub(crate) mod scheduler;
pub(crate) mod world;
pub mod wire;
