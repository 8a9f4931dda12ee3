//! Reports: the trace text of a schedule's history.

pub mod trace;
