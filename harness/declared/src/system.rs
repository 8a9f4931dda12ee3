//! A declared workload's systems: the team's processes play every role but the producer, so a
//! system is its schema and the built-in producer.

use std::borrow::Cow;
use std::rc::Rc;

use async_trait::async_trait;

use crashpoint::{CallError, Cx, Event, Producer, Program, SendEach, System, Val};

use crate::file::{Dispatch, SystemDecl};

/// The crash point of the built-in producer, after its send or insert.
const AFTER_SEND: &str = "after_send";

/// The built-in producer of a table queue: runs the file's `INSERT` for each event, with `$1`
/// the body (`jsonb`) and `$2` the identity (`uuid`), in autocommit (a yield point named
/// `send`), then stands at `after_send`.
struct InsertEach {
    sql: &'static str,
}

#[async_trait(?Send)]
impl Producer for InsertEach {
    async fn dispatch(&self, cx: &mut Cx, event: &Event) -> Result<(), CallError> {
        cx.execute("send", self.sql, &[Val::Json(event.body.clone()), Val::Uuid(event.identity)]).await?;
        cx.crash_point(AFTER_SEND);
        Ok(())
    }
}

/// One system of a declared workload.
pub struct DeclaredSystem {
    name: &'static str,
    schema_sql: String,
    producer: Option<&'static str>,
    dispatch: Dispatch,
}

impl DeclaredSystem {
    /// System `s`, with the built-in producer on role `producer`.
    pub fn new(s: &SystemDecl, producer: Option<&'static str>, dispatch: Dispatch) -> DeclaredSystem {
        DeclaredSystem { name: s.name, schema_sql: s.schema_sql.clone(), producer, dispatch }
    }
}

impl System for DeclaredSystem {
    fn name(&self) -> &str {
        self.name
    }

    fn schema_sql(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.schema_sql)
    }

    fn program(&self, role: &str) -> Option<Program> {
        if Some(role) != self.producer {
            return None;
        }
        Some(Program::Producer(match self.dispatch {
            Dispatch::Queue(queue) => Rc::new(SendEach { queue, after_send: AFTER_SEND }),
            Dispatch::Insert(sql) => Rc::new(InsertEach { sql }),
        }))
    }

    /// An SQS producer's upstream dispatches an event again until one send is accepted, as for
    /// the compiled workloads; a table producer's `INSERT` commits or not, and a crash before it
    /// leaves the event at the front of the producer's own list.
    fn retries_upstream(&self) -> bool {
        matches!(self.dispatch, Dispatch::Queue(_))
    }
}
