//! What a schedule did, as data and as text: the [`history`] of steps and faults a run
//! records (what the checker and the report read), its [`trace`] (one line per step, the text
//! `--check-determinism` compares byte for byte), and the [`labels`] that make both readable
//! and stable from run to run (`m1`, `e2` instead of message ids and UUIDs).
//!
//! Both front-ends record here the same way: an in-process worker's calls ([`crate::sim::cx`])
//! and an external worker's calls at the wire ([`crate::sim::wire`]).

pub mod history;
pub mod labels;
pub mod trace;
