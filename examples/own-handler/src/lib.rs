//! How a team tests its own queue handler with crashpoint, through the engine's public API only.
//!
//! The system: a producer sends `EmailRequested` messages to the SQS queue `email-requests`;
//! a handler receives each one, records its `operation_id` in the `email_request` inbox and
//! queues the email in `outgoing_email`, both in one PostgreSQL transaction, then deletes the
//! message. SQS delivers at least once (a crash after COMMIT and before DeleteMessage, a
//! visibility timeout, a duplicate send), so the inbox's primary key is what keeps one request
//! from becoming two emails.
//!
//! This crate declares that system to the engine as a [`Workload`] ([`OwnHandler`]): its queue,
//! its roles and their one crash point, how scenario `[[events]]` become messages, its
//! invariants, and its systems: the [`reference`](SendEmail) handler and one mutant
//! ([`SendEmailWithoutInbox`]) that the harness must catch. The schema is `schema.sql`; the
//! exploration scenario is `scenarios/own-handler/explore.toml`.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::rc::Rc;

use async_trait::async_trait;
use crashpoint::{
    decide, derive_id, event_specs, CallError, CheckCx, CrashPoint, CulpritKind, Cx, Delivery, Event, Fact, Handler,
    Invariant, Labels, Problem, Producer, Program, QueueSpec, Quiescence, RoleKind, RoleSpec, SqlInvariant, System,
    SystemInfo, Val, Verdict, Workload,
};
use serde::{Deserialize, Serialize};
use sqlx::Row;
use uuid::Uuid;

/// The DDL of `schema.sql`: the `email_request` inbox and the `outgoing_email` effect.
pub const SCHEMA_SQL: &str = include_str!("../schema.sql");

/// The queue of email requests (its messages are labelled `m1`, `m2`, … in traces).
pub const QUEUE: &str = "email-requests";

/// The handler's one crash point: the transaction committed (inbox row and email), and
/// DeleteMessage has not been called. A crash here makes SQS deliver the request again.
pub const AFTER_COMMIT: CrashPoint = "after_commit";

/// Name of the invariant that no operation id has two emails (what [`SendEmailWithoutInbox`]
/// breaks).
pub const AT_MOST_ONE_EMAIL: &str = "at most one email per operation id";

/// Name of the invariant that every request SQS accepted has its email (what a handler that
/// deletes the message before committing would break).
pub const EVERY_REQUEST_EMAILED: &str = "every sent request has its email";

/// The message body: a request to send one email.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmailRequested {
    /// The idempotency key: one email per operation id, however often the message arrives.
    pub operation_id: Uuid,
    /// The address the email goes to.
    pub recipient: String,
    /// The template the mail relay renders, e.g. `welcome`.
    pub template: String,
}

/// One `[[events]]` table of a scenario: `name` (the label, e.g. `e1`), `recipient` (default
/// `<name>@example.com`) and `template` (default `welcome`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventSpec {
    name: String,
    #[serde(default)]
    recipient: Option<String>,
    #[serde(default = "default_template")]
    template: String,
}

fn default_template() -> String {
    "welcome".into()
}

// ---- the programs: the team's producer, handler and mutant ----

/// The producer: one SendMessage per request.
pub struct SendRequest;

#[async_trait(?Send)]
impl Producer for SendRequest {
    async fn dispatch(&self, cx: &mut Cx, event: &Event) -> Result<(), CallError> {
        cx.send("send", QUEUE, &event.body, event.identity).await.map(|_| ())
    }
}

/// Decodes a delivery's body. Errors: [`CallError::Unrecoverable`] when it is not an
/// [`EmailRequested`] (retrying cannot help).
fn decode(d: &Delivery) -> Result<EmailRequested, CallError> {
    serde_json::from_str(&d.body).map_err(|e| CallError::Unrecoverable(format!("EmailRequested: {e}")))
}

/// Queues the email for `req` (the effect), a yield point named `email`. Errors: PostgreSQL's.
async fn queue_email(cx: &mut Cx, req: &EmailRequested) -> Result<(), CallError> {
    let sql = "INSERT INTO outgoing_email (operation_id, recipient, template, queued_at) VALUES ($1, $2, $3, $4)";
    let vals =
        [Val::Uuid(req.operation_id), Val::Text(req.recipient.clone()), Val::Text(req.template.clone()), Val::Now];
    cx.execute("email", sql, &vals).await.map(|_| ())
}

/// The reference handler: the inbox row and the email in one transaction, then DeleteMessage.
/// An error anywhere leaves the message on the queue; the engine rolls the transaction back,
/// and SQS delivers the message again when its visibility timeout expires.
pub struct SendEmail;

#[async_trait(?Send)]
impl Handler for SendEmail {
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let req = decode(&d)?;
        cx.begin().await?;
        // The claim: a row only for the first delivery of this operation id.
        let first = cx
            .fetch_optional(
                "claim",
                "INSERT INTO email_request (operation_id, recipient, template, received_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (operation_id) DO NOTHING RETURNING operation_id",
                &[
                    Val::Uuid(req.operation_id),
                    Val::Text(req.recipient.clone()),
                    Val::Text(req.template.clone()),
                    Val::Now,
                ],
            )
            .await?
            .is_some();
        if first {
            queue_email(cx, &req).await?;
        } else {
            let who = cx.label("op", req.operation_id);
            cx.note(format!("{who} already in the inbox: duplicate, no email"));
        }
        cx.commit().await?;
        cx.crash_point(AFTER_COMMIT);
        cx.delete(&d).await
    }
}

/// The mutant: queues the email without the inbox claim. Each delivery of the same request
/// (a redelivery after a crash at [`AFTER_COMMIT`], a visibility timeout, a duplicate send)
/// queues one more email.
pub struct SendEmailWithoutInbox;

#[async_trait(?Send)]
impl Handler for SendEmailWithoutInbox {
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let req = decode(&d)?;
        cx.begin().await?;
        queue_email(cx, &req).await?;
        cx.commit().await?;
        cx.crash_point(AFTER_COMMIT);
        cx.delete(&d).await
    }
}

/// A system under test: the schema, the producer, and a handler ([`SendEmail`] or a mutant).
pub struct EmailSystem {
    name: &'static str,
    handler: Rc<dyn Handler>,
}

impl System for EmailSystem {
    fn name(&self) -> &str {
        self.name
    }
    fn schema_sql(&self) -> Cow<'_, str> {
        Cow::Borrowed(SCHEMA_SQL)
    }
    fn program(&self, role: &str) -> Option<Program> {
        match role {
            "p" => Some(Program::Producer(Rc::new(SendRequest))),
            "c" => Some(Program::Handler(self.handler.clone())),
            _ => None,
        }
    }
}

// ---- the invariants ----

/// Every request whose message SQS accepted (a `Sent` fact in the history) has at least one
/// email in `outgoing_email`. Violated, for instance, by a handler that deletes the message
/// before its transaction commits and then crashes.
pub struct EveryRequestEmailed;

impl Invariant for EveryRequestEmailed {
    fn name(&self) -> String {
        EVERY_REQUEST_EMAILED.into()
    }

    fn check(&self, cx: &CheckCx) -> Verdict {
        decide(
            EVERY_REQUEST_EMAILED,
            (|| {
                let sent: BTreeSet<Uuid> = cx
                    .history
                    .facts()
                    .filter_map(|f| match f {
                        Fact::Sent { queue: QUEUE, identity, .. } => Some(*identity),
                        _ => None,
                    })
                    .collect();
                let emailed: BTreeSet<Uuid> = cx
                    .rows("SELECT DISTINCT operation_id FROM outgoing_email")?
                    .iter()
                    .map(|r| r.try_get(0))
                    .collect::<Result<_, _>>()?;
                Ok(sent
                    .difference(&emailed)
                    .map(|id| {
                        Problem::new(format!("request {} has no email", cx.label(id)), CulpritKind::Missing, [*id])
                    })
                    .collect())
            })(),
        )
    }
}

/// The invariants, in the order they are checked: no duplicate email, no lost email, and the
/// drain's quiescence.
pub fn invariants() -> Vec<Box<dyn Invariant>> {
    vec![
        Box::new(SqlInvariant::excess(
            AT_MOST_ONE_EMAIL,
            "SELECT operation_id, count(*) AS emails FROM outgoing_email GROUP BY operation_id HAVING count(*) > 1",
        )),
        Box::new(EveryRequestEmailed),
        Box::new(Quiescence),
    ]
}

// ---- the workload ----

/// The own-handler workload: one queue (`email-requests`), a producer `p` and handler workers
/// `c1`, `c2`, …, the invariants of [`invariants`], and the systems `reference` and
/// `without-inbox`.
#[derive(Debug, Clone, Copy, Default)]
pub struct OwnHandler;

impl Workload for OwnHandler {
    fn name(&self) -> &'static str {
        "own-handler"
    }

    fn about(&self) -> &'static str {
        "example: a team's email-request handler, idempotent through an inbox row committed with the email"
    }

    fn queues(&self) -> Vec<QueueSpec> {
        vec![QueueSpec::new(QUEUE, "m")]
    }

    fn roles(&self) -> Vec<RoleSpec> {
        vec![
            RoleSpec { prefix: "p", kind: RoleKind::Producer, points: &[], about: "producer of email requests" },
            RoleSpec {
                prefix: "c",
                kind: RoleKind::Handler { queue: QUEUE },
                points: &[AFTER_COMMIT],
                about: "email-request handler",
            },
        ]
    }

    fn events(&self, specs: &[toml::Table], namespace: Uuid, names: &mut Labels) -> Result<Vec<Event>, String> {
        let mut out = Vec::new();
        for spec in event_specs::<EventSpec>(specs)? {
            let req = EmailRequested {
                operation_id: derive_id(namespace, "operation", &spec.name),
                recipient: spec.recipient.unwrap_or_else(|| format!("{}@example.com", spec.name)),
                template: spec.template,
            };
            names.set(req.operation_id, &spec.name);
            let body = serde_json::to_value(&req).map_err(|e| e.to_string())?;
            out.push(Event { label: spec.name, identity: req.operation_id, body });
        }
        Ok(out)
    }

    fn identity(&self, body: &serde_json::Value) -> Option<(&'static str, Uuid)> {
        let id = body.get("operation_id")?.as_str()?.parse().ok()?;
        Some((QUEUE, id))
    }

    fn invariants(&self) -> Vec<Box<dyn Invariant>> {
        invariants()
    }

    fn systems(&self) -> Vec<SystemInfo> {
        vec![
            SystemInfo::reference(
                "inbox row (ON CONFLICT DO NOTHING) and email in one transaction, then DeleteMessage",
            ),
            SystemInfo::mutant(
                "without-inbox",
                "queues the email with no inbox claim: every redelivery sends another email",
            ),
        ]
    }

    fn system(&self, name: &str) -> Option<Rc<dyn System>> {
        let handler: Rc<dyn Handler> = match name {
            "reference" => Rc::new(SendEmail),
            "without-inbox" => Rc::new(SendEmailWithoutInbox),
            _ => return None,
        };
        let name = self.systems().into_iter().find(|s| s.name == name)?.name;
        Some(Rc::new(EmailSystem { name, handler }))
    }

    fn catalogue_scenario(&self) -> String {
        "own-handler/explore".into()
    }
}
