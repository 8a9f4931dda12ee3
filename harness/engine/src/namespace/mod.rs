//! A schedule's namespace in the real services, and its life between schedules: the
//! PostgreSQL schema, SQS queues and Redis key prefix one schedule owns ([`admin`]), taken from
//! and given back to a pool of namespaces reset between schedules ([`pool`]) to what its DDL
//! left ([`snapshot`]), with the in-process workers' PostgreSQL connections kept alongside
//! ([`worker_pg`]) and its queues' URLs ([`queues`]).
//!
//! It knows nothing of the simulation that runs in it: whatever a schedule leaves with the
//! namespace for the next one (the external worker processes kept running) is opaque here.

pub mod admin;
pub mod pool;
pub mod queues;
pub mod snapshot;
pub mod worker_pg;
