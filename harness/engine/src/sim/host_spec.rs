//! What every worker host of a schedule needs to start its software, in-process
//! ([`super::fleet`]) or external ([`super::wire::host`]).

use std::rc::Rc;

use crate::namespace::queues::QueueUrls;
use super::world::SharedWorld;
use crate::services::Endpoints;
use crate::spec::{IdentityFn, RoleSpec};
use crate::sim::cx::System;
use super::wire::External;

/// What every host needs to start its software.
pub struct HostSpec {
    /// Where the services listen, as the schedule's namespace uses them: one SQS endpoint, the
    /// instance that holds its queues ([`crate::namespace::admin::Admin::endpoints`]).
    pub endpoints: Endpoints,
    /// The schedule's PostgreSQL schema.
    pub schema: String,
    /// The `search_path` of every worker connection: the schema, then `pg_catalog` when
    /// `now()` follows the logical clock ([`crate::namespace::admin::SqlClock::search_path`]).
    pub search_path: String,
    /// The schedule's queues.
    pub queues: QueueUrls,
    /// The workload's handler policy.
    pub config: Rc<dyn std::any::Any>,
    /// The state shared with the scheduler.
    pub world: SharedWorld,
    /// The system under test.
    pub system: Rc<dyn System>,
    /// The workload's roles.
    pub roles: Vec<RoleSpec>,
    /// The workload's message identity of a body (the SQS proxy reads it from sent bodies).
    pub identity: Rc<IdentityFn>,
    /// Roles played by external worker processes ([`crate::sim::wire`]).
    pub external: Vec<std::sync::Arc<External>>,
    /// The scenario's `[config]` as JSON, for external workers (`CRASHPOINT_CONFIG`).
    pub config_json: String,
    /// Where the hosts' SQS clients count their calls ([`crate::namespace::admin::Admin::sqs_calls`]).
    pub sqs_calls: crate::services::sqs_calls::SqsCalls,
    /// The workload's providers for this schedule, each a turmoil host of its name.
    pub providers: Vec<Rc<dyn crate::provider::Provider>>,
    /// PostgreSQL connections kept from the namespace's schedule before, for the workers to
    /// take, and where they leave theirs at the schedule's end.
    pub pg_kept: Rc<crate::namespace::worker_pg::Shelf>,
    /// External worker processes kept from the namespace's schedule before, for the hosts to
    /// take, and where they leave theirs at the schedule's end ([`super::wire::keep`]).
    pub processes: Rc<super::wire::keep::Shelf>,
    /// Raised when a host's task is woken from another thread ([`super::io`]): the scheduler
    /// steps when it is.
    pub wake: std::sync::Arc<super::io::Signal>,
}
