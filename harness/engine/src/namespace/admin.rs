//! The harness's own connections for one schedule: it creates the schedule's namespace (a
//! PostgreSQL schema and the workload's SQS queues), asks the server who blocks whom, forces expiries,
//! and removes the namespace afterwards. Runs on its own current-thread runtime, outside the
//! turmoil simulation.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};

use super::queues::QueueUrls;
use super::snapshot::{self, qualified, relations_of, baseline_schema, Snapshot};
use crate::services::sqs_calls::SqsCalls;
use crate::services::{clients, Endpoints};
use crate::spec::{Leftover, QueueSpec};

/// The logical clock as SQL, for external workers: `crashpoint_now()` is the epoch
/// (2026-01-01T00:00:00Z) plus the logical ms in `crashpoint_clock`.
const CLOCK_DDL: &str = "CREATE TABLE crashpoint_clock (now_ms BIGINT NOT NULL); \
    INSERT INTO crashpoint_clock VALUES (0); \
    CREATE FUNCTION crashpoint_now() RETURNS timestamptz LANGUAGE sql STABLE AS \
    $$ SELECT timestamptz '2026-01-01 00:00:00+00' + now_ms * interval '1 millisecond' FROM crashpoint_clock $$;";

/// PostgreSQL's own clock functions shadowed in the schedule's schema by the logical clock
/// ([`SqlClock::Everywhere`]): `now()`, `transaction_timestamp()`, `statement_timestamp()` and
/// `clock_timestamp()` are ordinary functions of `pg_catalog`, so an unqualified call resolves
/// through `search_path` to the schema's own when `pg_catalog` is placed after it
/// (PostgreSQL documentation, "The Schema Search Path": "if pg_catalog is in the path, it is
/// searched in the specified order"). `CURRENT_TIMESTAMP`, `LOCALTIMESTAMP`, `CURRENT_DATE`
/// and `'now'::timestamptz` are keywords or literals the parser resolves itself: they stay
/// wall time.
const NOW_DDL: &str = "CREATE FUNCTION now() RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT crashpoint_now() $$; \
    CREATE FUNCTION transaction_timestamp() RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT crashpoint_now() $$; \
    CREATE FUNCTION statement_timestamp() RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT crashpoint_now() $$; \
    CREATE FUNCTION clock_timestamp() RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT crashpoint_now() $$;";

/// How much of PostgreSQL's time follows the schedule's logical clock in its schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SqlClock {
    /// None: the workers are in-process and take the logical clock from `Cx::now`.
    Off,
    /// `crashpoint_now()` (timestamptz): a one-row table `crashpoint_clock` and the function,
    /// created before the system's DDL, for external workers, whose own clock is real.
    Function,
    /// `crashpoint_now()`, and `now()`, `transaction_timestamp()`, `statement_timestamp()` and
    /// `clock_timestamp()` too (`NOW_DDL`): every connection's `search_path` is
    /// `<schema>, pg_catalog`, so the DDL's defaults and every unqualified call take the
    /// schema's functions. Within a transaction, `now()` then reads the logical clock at each
    /// statement instead of the transaction's start.
    Everywhere,
}

impl SqlClock {
    /// The `search_path` of every connection to schema `schema`: `<schema>`, or
    /// `<schema>,pg_catalog` for [`SqlClock::Everywhere`].
    pub fn search_path(self, schema: &str) -> String {
        match self {
            SqlClock::Everywhere => format!("{schema},pg_catalog"),
            _ => schema.to_string(),
        }
    }
}

/// How long the harness waits for a PostgreSQL connection of its own (3 s): the namespace's
/// first connect and its pool's acquire timeout. Longer means PostgreSQL stopped answering.
const CONNECT_MAX: Duration = Duration::from_secs(3);

/// How long the namespace's reset and its removal wait for a table lock, ms (PostgreSQL's
/// `lock_timeout`). Longer than `deadlock_timeout` (1 s), after which PostgreSQL cancels an
/// autovacuum that holds a conflicting lock. A backend that holds one longer (a worker's
/// transaction outliving its schedule) fails the reset, and the namespace is dropped instead,
/// or left behind with a warning naming it when the lock outlasts the DROP's wait too.
pub const LOCK_TIMEOUT_MS: u64 = 5_000;

/// Admin connections and the namespace of one schedule.
pub struct Admin {
    /// The runtime the admin clients live on.
    pub rt: tokio::runtime::Runtime,
    /// PostgreSQL, with `search_path` set to the schedule's schema.
    pub pg: PgPool,
    /// SQS.
    pub sqs: aws_sdk_sqs::Client,
    /// Redis.
    pub redis: redis::aio::MultiplexedConnection,
    /// The services as this namespace uses them: SQS at the instance that holds its queues
    /// (one of [`Endpoints::sqs_endpoints`]: [`super::pool::take`] spreads namespaces over
    /// them), with no further shard. The schedule's workers and proxies connect here.
    pub endpoints: Endpoints,
    /// The schedule's schema name.
    pub schema: String,
    /// How much of PostgreSQL's time follows the logical clock in it.
    pub sql_clock: SqlClock,
    /// The schedule's queues.
    pub queues: QueueUrls,
    /// The schedule's SQS calls by operation, the workers' and the harness's: the worker
    /// hosts' clients count into it too (a host spec's `sqs_calls`).
    pub sqs_calls: SqsCalls,
    /// What puts the schema back as the DDL left it ([`Admin::reset`]); `None` when the schema
    /// cannot be put back that way.
    snapshot: Option<Snapshot>,
    /// What it was made for, as [`crate::namespace::pool`] tells namespaces apart.
    pub(super) shape: String,
    /// Set when PostgreSQL stopped answering ([`Admin::pg_unreachable`]): removing the
    /// namespace then skips the schema instead of waiting out the pool's timeout again.
    pg_gone: std::sync::atomic::AtomicBool,
    /// The workers' PostgreSQL connections kept for the namespace's next schedule
    /// ([`super::worker_pg`]); closed before the schema is dropped.
    pub(crate) kept: Vec<super::worker_pg::WorkerPg>,
    /// What a schedule left running for the namespace's next one, opaque here: the external
    /// worker processes with their proxies' listening sockets (`sim::wire::keep`);
    /// dropped (killed) before the namespace's queues and schema go.
    pub(crate) processes: Vec<Box<dyn std::any::Any + Send>>,
}

impl Admin {
    /// Connects, creates schema `ns` with `ddl` (its tables then without autovacuum:
    /// [`autovacuum_off`]) and one queue per queue spec ([`QueueSpec::sqs_name`];
    /// VisibilityTimeout 3600 s, MessageRetentionPeriod 14 days: only the logical clock expires
    /// messages). Errors: a service unreachable, the DDL failing (with PostgreSQL's message),
    /// CreateQueue failing.
    ///
    /// Unless `sql_clock` is [`SqlClock::Off`], the schema also gets the logical clock as SQL,
    /// before the system's DDL ([`SqlClock`]; [`Admin::set_clock`] moves it).
    pub fn create(endpoints: &Endpoints, ns: &str, ddl: &str, specs: &[QueueSpec], sql_clock: SqlClock) -> Result<Admin> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let schema = ns.to_string();
        let sqs_calls = SqsCalls::default();
        let (pg, sqs, redis, queues, snapshot) = rt.block_on(async {
            let opts = clients::pg_options(&endpoints.database_url)?;
            // One connection, tried once: a pool would retry a refused connect until its
            // acquire timeout (30 s by default), and a PostgreSQL killed under the run between
            // two schedules must end the run at once, not 30 s later. One that
            // accepts the connection but does not answer gets the schema pool's time.
            let mut bootstrap = tokio::time::timeout(CONNECT_MAX, PgConnection::connect_with(&opts))
                .await
                .map_err(|_| anyhow::anyhow!("PostgreSQL did not complete a connection within {} s", CONNECT_MAX.as_secs()))??;
            sqlx::raw_sql(&format!("CREATE SCHEMA {schema}")).execute(&mut bootstrap).await?;
            // The schema exists; a failed goodbye on a connection no longer needed is no error.
            let _ = bootstrap.close().await;
            // The harness uses its two connections one at a time, so a wait of CONNECT_MAX
            // for one means PostgreSQL stopped answering (sqlx retries a refused connect until
            // then), and the run should end with that error soon after.
            let pg = PgPoolOptions::new()
                .max_connections(2)
                .acquire_timeout(CONNECT_MAX)
                .connect_with(opts.options([("search_path", sql_clock.search_path(&schema).as_str())]))
                .await?;
            if sql_clock != SqlClock::Off {
                sqlx::raw_sql(CLOCK_DDL).execute(&pg).await.context("creating crashpoint_now()")?;
            }
            if sql_clock == SqlClock::Everywhere {
                sqlx::raw_sql(NOW_DDL).execute(&pg).await.context("creating the schema's now()")?;
            }
            sqlx::raw_sql(ddl).execute(&pg).await.context("creating the system's schema")?;
            autovacuum_off(&pg, &schema).await.context("turning autovacuum off for the schema's tables")?;
            let sqs = clients::sqs_client_counted(&endpoints.sqs_endpoint_url, &sqs_calls);
            let mut urls = Vec::new();
            for q in specs {
                use aws_sdk_sqs::types::QueueAttributeName as A;
                let mut create = sqs
                    .create_queue()
                    .queue_name(q.sqs_name(&schema))
                    .attributes(A::VisibilityTimeout, "3600")
                    .attributes(A::MessageRetentionPeriod, "1209600");
                if q.fifo {
                    create = create.attributes(A::FifoQueue, "true").attributes(A::ContentBasedDeduplication, "false");
                }
                let out = create
                    .send()
                    .await
                    .map_err(|e| anyhow::anyhow!("CreateQueue: {}", aws_sdk_sqs::error::DisplayErrorContext(&e)))?;
                urls.push((q.name, out.queue_url.unwrap_or_default(), q.label));
            }
            let fifo = specs.iter().filter(|q| q.fifo).map(|q| q.name).collect();
            let outbound = specs.iter().filter(|q| q.outbound).map(|q| q.name).collect();
            let redis = clients::redis_connect(&endpoints.redis_url).await?;
            let snapshot = snapshot::take(&pg, &schema).await.context("taking the schema's snapshot for its reset")?;
            anyhow::Ok((pg, sqs, redis, QueueUrls { queues: urls, fifo, outbound }, snapshot))
        })?;
        Ok(Admin { rt, pg, sqs, redis, endpoints: endpoints.clone(), schema, sql_clock, queues, sqs_calls, snapshot, shape: String::new(), pg_gone: Default::default(), kept: Vec::new(), processes: Vec::new() })
    }

    /// Records that PostgreSQL did not answer (the checker's probe timed out): a later
    /// [`Admin::destroy`] leaves the schema rather than wait 2 s more for a connection.
    pub fn pg_unreachable(&self) {
        self.pg_gone.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether PostgreSQL's TCP port refuses a connection now (a killed server): answered at
    /// once, where the pool would retry a refused connect until its acquire timeout (3 s).
    pub fn pg_refuses(&self) -> bool {
        self.rt.block_on(refuses(&self.pg))
    }

    /// Runs `fut` (admin work on PostgreSQL) to its end on the admin runtime, unless
    /// PostgreSQL's port starts refusing connections meanwhile (probed every 500 ms): then it
    /// gives up at once with an error saying so, where each statement would wait out the
    /// pool's acquire timeout (3 s) first. Errors: `fut`'s, or PostgreSQL refusing.
    pub fn on_pg<T>(&self, fut: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        self.rt.block_on(async {
            tokio::select! {
                r = fut => r,
                _ = refused_soon(&self.pg) => {
                    self.pg_unreachable();
                    Err(anyhow::anyhow!("PostgreSQL refuses connections"))
                }
            }
        })
    }

    /// Sets `crashpoint_now()` to the logical time `now_ms` (ms since the epoch of
    /// [`crate::duration::epoch`]). Errors: PostgreSQL failing.
    pub fn set_clock(&self, now_ms: u64) -> Result<()> {
        self.on_pg(async {
            sqlx::query("UPDATE crashpoint_clock SET now_ms = $1").bind(now_ms as i64).execute(&self.pg).await?;
            Ok(())
        })
    }

    /// The PIDs that block backend `pid` (`pg_blocking_pids`, as isolationtester asks).
    pub fn blocking_pids(&self, pid: i32) -> Result<Vec<i32>> {
        self.on_pg(async {
            let v: Vec<i32> =
                sqlx::query_scalar("SELECT pg_blocking_pids($1)").bind(pid).fetch_one(&self.pg).await?;
            Ok(v)
        })
    }

    /// Terminates backend `pid` (a crashed worker's socket is already closed, unless its
    /// connection was kept as a fresh session, whose pid is not passed here; this makes sure
    /// its transaction is rolled back now, even if it waits on a lock) and waits until it is
    /// gone from `pg_stat_activity` (at most 10 s).
    pub fn terminate_backend(&self, pid: i32) -> Result<()> {
        self.on_pg(async {
            let _ = sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1").bind(pid).execute(&self.pg).await;
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let alive: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)")
                    .bind(pid)
                    .fetch_one(&self.pg)
                    .await?;
                if !alive {
                    return Ok(());
                }
                if Instant::now() > deadline {
                    bail!("backend {pid} of a crashed worker is still alive after 10 s");
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    }

    /// Makes an in-flight message visible now (ChangeMessageVisibility to 0 with the receipt
    /// recorded at receive). `Ok(false)` when SQS refuses (the message is already gone).
    pub fn expire_visibility(&self, q: &str, receipt: &str) -> Result<bool> {
        let url = self.queues.url(q).to_string();
        self.rt.block_on(async {
            let r = self.sqs.change_message_visibility().queue_url(url).receipt_handle(receipt).visibility_timeout(0).send().await;
            Ok(r.is_ok())
        })
    }

    /// Deletes message `message_id` from queue `q` as SQS does when it outlived the queue's
    /// retention or moves to a dead-letter queue (or as a redrive takes it off one). With `receipt` (the message is in flight) a DeleteMessage with it; without,
    /// the harness receives from the queue (10 at a time, at most 100 messages) until it finds
    /// the message, deletes it, and makes every other message it received visible again
    /// (ChangeMessageVisibility to 0). Those others' receive count stays one higher, which AWS
    /// retention does not do: a handler that decides by receive count may see it.
    /// `Ok(false)` when SQS no longer had it (the receipt was refused, or the queue ran out).
    /// Errors: a call failing other than by refusing the receipt; the message not among the
    /// first 100 visible.
    pub fn expire_message(&self, q: &str, message_id: &str, receipt: Option<&str>) -> Result<bool> {
        use aws_sdk_sqs::error::{DisplayErrorContext, SdkError};
        let url = self.queues.url(q).to_string();
        self.rt.block_on(async {
            if let Some(r) = receipt {
                return match self.sqs.delete_message().queue_url(&url).receipt_handle(r).send().await {
                    Ok(_) => Ok(true),
                    Err(SdkError::ServiceError(_)) => Ok(false),
                    Err(e) => Err(anyhow::anyhow!("DeleteMessage: {}", DisplayErrorContext(&e))),
                };
            }
            let (mut found, mut exhausted, mut others) = (false, false, Vec::new());
            for _ in 0..10 {
                let out = self.sqs.receive_message().queue_url(&url).max_number_of_messages(10).visibility_timeout(super::queues::REAL_VISIBILITY_S).send().await
                    .map_err(|e| anyhow::anyhow!("ReceiveMessage: {}", DisplayErrorContext(&e)))?;
                let got = out.messages.unwrap_or_default();
                exhausted = got.is_empty();
                for m in got {
                    let handle = m.receipt_handle.unwrap_or_default();
                    if m.message_id.as_deref() == Some(message_id) {
                        self.sqs.delete_message().queue_url(&url).receipt_handle(&handle).send().await
                            .map_err(|e| anyhow::anyhow!("DeleteMessage: {}", DisplayErrorContext(&e)))?;
                        found = true;
                    } else {
                        others.push(handle);
                    }
                }
                if found || exhausted {
                    break;
                }
            }
            for handle in others {
                self.sqs.change_message_visibility().queue_url(&url).receipt_handle(handle).visibility_timeout(0).send().await
                    .map_err(|e| anyhow::anyhow!("ChangeMessageVisibility: {}", DisplayErrorContext(&e)))?;
            }
            if !found && !exhausted {
                bail!("deleting message {message_id} from {q} (retention, dead-letter move or redrive): it is not among the first 100 visible messages of the queue");
            }
            Ok(found)
        })
    }

    /// The earliest logical ms at which pending work that waits for time becomes due (the
    /// `due_sql` of `pending`), or `None`. Errors: PostgreSQL's, naming the probe.
    pub fn next_due(&self, pending: &[Leftover]) -> Result<Option<u64>> {
        self.on_pg(async {
            let mut next: Option<u64> = None;
            for sql in pending.iter().filter_map(|p| p.due_sql) {
                let t: Option<chrono::DateTime<chrono::Utc>> =
                    sqlx::query_scalar(sql).fetch_one(&self.pg).await.with_context(|| format!("due probe `{sql}`"))?;
                if let Some(t) = t {
                    let ms = (t - crate::duration::epoch()).num_milliseconds().max(0) as u64;
                    next = Some(next.map_or(ms, |n| n.min(ms)));
                }
            }
            Ok(next)
        })
    }

    /// What is left that a quiescent world would not have: messages on any queue (visible,
    /// in flight or delayed, `ApproximateNumberOfMessages*`, exact on LocalStack) and the workload's
    /// pending rows (`pending`), as text (empty when there is none), and the queues that hold
    /// visible messages. Errors: SQS or PostgreSQL failing (a `count_sql` naming a missing
    /// table, too).
    /// (Outbound queues are left out: another service consumes them, [`QueueSpec::outbound`].)
    pub fn leftovers(&self, pending: &[Leftover]) -> Result<(String, Vec<&'static str>)> {
        use aws_sdk_sqs::types::QueueAttributeName as A;
        self.on_pg(async {
            let (mut parts, mut visible_on) = (Vec::new(), Vec::new());
            for (name, url, _) in self.queues.queues.iter().filter(|(n, _, _)| !self.queues.outbound.contains(n)) {
                let out = self
                    .sqs
                    .get_queue_attributes()
                    .queue_url(url)
                    .attribute_names(A::ApproximateNumberOfMessages)
                    .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
                    .attribute_names(A::ApproximateNumberOfMessagesDelayed)
                    .send()
                    .await
                    .map_err(|e| anyhow::anyhow!("GetQueueAttributes: {}", aws_sdk_sqs::error::DisplayErrorContext(&e)))?;
                let attrs = out.attributes.unwrap_or_default();
                let n = |k: A| attrs.get(&k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                let (visible, hidden) = (n(A::ApproximateNumberOfMessages), n(A::ApproximateNumberOfMessagesNotVisible));
                let delayed = n(A::ApproximateNumberOfMessagesDelayed);
                if visible > 0 {
                    visible_on.push(*name);
                }
                if visible + hidden > 0 {
                    parts.push(format!("{visible} visible and {hidden} in-flight message(s) on {name}"));
                }
                if delayed > 0 {
                    parts.push(format!("{delayed} delayed message(s) on {name}"));
                }
            }
            for p in pending {
                let n: i64 = sqlx::query_scalar(p.count_sql)
                    .fetch_one(&self.pg)
                    .await
                    .with_context(|| format!("quiescence probe `{}`", p.count_sql))?;
                if n > 0 {
                    parts.push(format!("{n} {}", p.what));
                }
            }
            Ok((parts.join(", "), visible_on))
        })
    }

    /// Sends `body` to queue `q` (a redelivery, a replayed message), with `fifo`'s
    /// (MessageGroupId, MessageDeduplicationId) on a FIFO queue, and returns the SQS MessageId.
    /// Errors: SendMessage failed.
    pub fn send(&self, q: &str, body: &str, fifo: Option<(&str, &str)>) -> Result<String> {
        let url = self.queues.url(q).to_string();
        let (group, dedup) = fifo.map(|(g, d)| (g.to_string(), d.to_string())).unzip();
        self.rt.block_on(async {
            let sent = self
                .sqs
                .send_message()
                .queue_url(url)
                .message_body(body)
                .set_message_group_id(group)
                .set_message_deduplication_id(dedup)
                .send()
                .await
                .map_err(|e| anyhow::anyhow!("SendMessage: {}", aws_sdk_sqs::error::DisplayErrorContext(&e)))?;
            Ok(sent.message_id.unwrap_or_default())
        })
    }

    /// Empties the outbound queues ([`QueueSpec::outbound`]) for the namespace's next schedule:
    /// receives and deletes (DeleteMessageBatch) what the schedule published until a receive
    /// returns nothing (no PurgeQueue, which AWS allows once a minute per queue). Nobody else receives from them,
    /// so every message is visible. Errors: SQS failing.
    fn empty_outbound(&self) -> Result<()> {
        let urls: Vec<&String> = self.queues.queues.iter().filter(|(n, _, _)| self.queues.outbound.contains(n)).map(|(_, u, _)| u).collect();
        self.rt.block_on(async {
            for url in urls {
                loop {
                    let got = self
                        .sqs
                        .receive_message()
                        .queue_url(url)
                        .max_number_of_messages(10)
                        .send()
                        .await
                        .map_err(|e| anyhow::anyhow!("ReceiveMessage: {}", aws_sdk_sqs::error::DisplayErrorContext(&e)))?;
                    let messages = got.messages.unwrap_or_default();
                    if messages.is_empty() {
                        break;
                    }
                    // One DeleteMessageBatch for the (at most 10) messages received.
                    let entries = messages
                        .into_iter()
                        .enumerate()
                        .map(|(i, m)| {
                            aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                                .id(i.to_string())
                                .set_receipt_handle(m.receipt_handle)
                                .build()
                                .map_err(|e| anyhow::anyhow!("DeleteMessageBatch entry: {e}"))
                        })
                        .collect::<Result<Vec<_>>>()?;
                    let out = self
                        .sqs
                        .delete_message_batch()
                        .queue_url(url)
                        .set_entries(Some(entries))
                        .send()
                        .await
                        .map_err(|e| anyhow::anyhow!("DeleteMessageBatch: {}", aws_sdk_sqs::error::DisplayErrorContext(&e)))?;
                    if let Some(f) = out.failed.first() {
                        anyhow::bail!("DeleteMessageBatch: entry {} failed: {} {}", f.id, f.code, f.message.as_deref().unwrap_or(""));
                    }
                }
            }
            anyhow::Ok(())
        })
    }

    /// Deletes a Redis key (a key whose logical expiry passed).
    pub fn expire_key(&self, key: &str) -> Result<()> {
        self.forget_keys(&[key]).map(|_| ())
    }

    /// Deletes Redis keys with one `DEL` (Redis lost them: a restart without persistence) and
    /// returns how many existed.
    pub fn forget_keys<K: redis::ToRedisArgs>(&self, keys: &[K]) -> Result<u64> {
        let mut r = self.redis.clone();
        self.rt.block_on(async { Ok(delete_keys(&mut r, keys).await?) })
    }

    /// Whether [`Admin::reset`] can put the schema back as the DDL left it.
    pub fn reusable(&self) -> bool {
        self.snapshot.is_some()
    }

    /// Empties every table of the schema and restores what the DDL left: its rows, and every
    /// sequence's position ([`snapshot`]); deletes `keys`. In one transaction: the DDL's
    /// tables locked against writers first (`SHARE`, so that a backend still finishing a
    /// write is waited for, as the TRUNCATE's own lock waited before the sizes were read;
    /// for at most [`LOCK_TIMEOUT_MS`]), then one TRUNCATE of the tables that have pages or
    /// statistics and of those the DDL put rows in ([`Snapscreenshot::restoring_sql`]). A table
    /// with neither is as the DDL left it ([`relations_of`]), and a TRUNCATE of it would still
    /// make new files for it and each of its indexes. The queues are not touched: the caller
    /// knows them empty ([`crate::namespace::pool`]). Errors: the schema is not reusable; a schedule
    /// created or dropped a relation in it (a table the DDL did not make would keep its rows);
    /// a lock not granted within [`LOCK_TIMEOUT_MS`] (PostgreSQL's `lock_timeout` error, in
    /// the context "locking the tables of schema …" for the `SHARE` locks, "resetting schema
    /// …" for the TRUNCATE's `ACCESS EXCLUSIVE` ones, which a backend idle in a transaction
    /// after reading a table holds off); PostgreSQL's or Redis's.
    pub fn reset(&self, keys: &[String]) -> Result<()> {
        let snapshot = self.snapshot.as_ref().context("the schema cannot be restored by TRUNCATE and a copy")?;
        self.empty_outbound()?;
        let tables = snapshot.tables(&self.schema);
        self.on_pg(async {
            let mut tx = self.pg.begin().await?;
            if !tables.is_empty() {
                let lock = format!("SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}; LOCK TABLE {} IN SHARE MODE", tables.join(", "));
                if let Err(e) = sqlx::raw_sql(&lock).execute(&mut *tx).await {
                    drop(tx);
                    let e = anyhow::Error::from(e).context(format!("locking the tables of schema {}", self.schema));
                    // A table the schedule dropped fails the LOCK too: then that is the cause.
                    // The catalogue alone: a lock that stopped the LOCK would stop a size too.
                    return Err(match relations_of(&self.pg, &self.schema, false).await {
                        Ok(now) if !snapshot.same_relations(&now) => snapshot.changed(&self.schema, &now),
                        Ok(_) => e,
                        Err(again) => e.context(format!("reading the relations of schema {} after it failed too: {again:#}", self.schema)),
                    });
                }
            }
            let now = relations_of(&mut *tx, &self.schema, true).await?;
            if !snapshot.same_relations(&now) {
                return Err(snapshot.changed(&self.schema, &now));
            }
            let sql = snapshot.restoring_sql(&self.schema, &now);
            if !sql.is_empty() {
                sqlx::raw_sql(&sql).execute(&mut *tx).await.with_context(|| format!("resetting schema {}", self.schema))?;
            }
            tx.commit().await?;
            delete_keys(&mut self.redis.clone(), keys).await?;
            Ok(())
        })
    }

    /// Drops the schema and deletes the queues and `keys`. Errors are logged, not returned:
    /// cleanup must not hide the verdict. The DROP waits at most [`LOCK_TIMEOUT_MS`] for its
    /// locks; past that the schema is left behind, with a warning naming it.
    pub fn destroy(self, keys: &[String]) {
        let Admin { rt, pg, sqs, mut redis, schema, queues, pg_gone, kept, processes, .. } = self;
        // Closed before their schema goes (idle, they hold no lock the DROP waits for); the
        // kept processes are killed before their queues go.
        drop(kept);
        drop(processes);
        let seed = baseline_schema(&schema);
        rt.block_on(async {
            for (_, url, _) in &queues.queues {
                if let Err(e) = sqs.delete_queue().queue_url(url).send().await {
                    tracing::warn!("DeleteQueue {url}: {e}");
                }
            }
            if let Err(e) = delete_keys(&mut redis, keys).await {
                tracing::warn!("DEL of the schedule's Redis keys: {e}");
            }
            // PostgreSQL is taken to be gone (killed under the run) when the checker said so,
            // when its port refuses a connection (at once, without the pool's retries), or when
            // no connection comes within 2 s.
            let gone = pg_gone.into_inner() || refuses(&pg).await;
            let conn = match gone {
                true => None,
                false => tokio::time::timeout(Duration::from_secs(2), pg.acquire()).await.ok().and_then(Result::ok),
            };
            match conn {
                None => tracing::warn!("DROP SCHEMA {schema} skipped: PostgreSQL stopped answering"),
                Some(mut c) => {
                    if let Err(e) = sqlx::raw_sql(&format!("SET lock_timeout = {LOCK_TIMEOUT_MS}; DROP SCHEMA IF EXISTS {schema}, {seed} CASCADE")).execute(&mut *c).await {
                        tracing::warn!("DROP SCHEMA {schema}: {e}");
                    }
                }
            }
            pg.close().await;
        });
    }
}

/// Turns autovacuum off for every ordinary table of `schema` (the storage parameter
/// `autovacuum_enabled`, PostgreSQL docs, "CREATE TABLE", "Storage Parameters"). An
/// autoanalyze comes at a moment no schedule decides: it would change plans in the middle of a
/// schedule, and its column statistics (which TRUNCATE keeps) would make a reused namespace
/// plan otherwise than a fresh one. A schedule writes too few rows for its dead ones to
/// matter, and the reset's TRUNCATE removes them. Errors: PostgreSQL's.
async fn autovacuum_off(pg: &PgPool, schema: &str) -> Result<()> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY 1",
    )
    .bind(schema)
    .fetch_all(pg)
    .await?;
    let sql: String = tables.iter().map(|t| format!("ALTER TABLE {} SET (autovacuum_enabled = off);\n", qualified(schema, t))).collect();
    if !sql.is_empty() {
        sqlx::raw_sql(&sql).execute(pg).await?;
    }
    Ok(())
}

/// Whether PostgreSQL's TCP port refuses a connection now (within 1 s). A Unix-socket URL is
/// never taken to refuse.
async fn refuses(pg: &PgPool) -> bool {
    let opts = pg.connect_options();
    if opts.get_host().starts_with('/') {
        return false;
    }
    let connect = tokio::net::TcpStream::connect((opts.get_host(), opts.get_port()));
    matches!(tokio::time::timeout(Duration::from_secs(1), connect).await, Ok(Err(_)))
}

/// Returns once PostgreSQL's port refuses a connection, probing every 500 ms.
async fn refused_soon(pg: &PgPool) {
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if refuses(pg).await {
            return;
        }
    }
}

/// Deletes `keys` with one `DEL` (none when there are no keys); returns how many existed.
async fn delete_keys<K: redis::ToRedisArgs>(redis: &mut redis::aio::MultiplexedConnection, keys: &[K]) -> redis::RedisResult<u64> {
    if keys.is_empty() {
        return Ok(0);
    }
    redis::cmd("DEL").arg(keys).query_async(redis).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::ports::free_port;

    /// `Admin::create` with PostgreSQL at loopback port `pg` (SQS and Redis on ports nobody
    /// listens on: they are never reached): its error, and how long it took to fail.
    fn create_fails(pg: u16) -> (String, Duration) {
        let e = Endpoints {
            database_url: format!("postgres://postgres@127.0.0.1:{pg}/postgres"),
            sqs_endpoint_url: format!("http://127.0.0.1:{}", free_port().unwrap()),
            sqs_shards: Vec::new(),
            redis_url: format!("redis://127.0.0.1:{}", free_port().unwrap()),
        };
        let started = Instant::now();
        match Admin::create(&e, "cp_unreachable", "", &[], SqlClock::Off) {
            Ok(_) => panic!("created a namespace on port {pg}, where no PostgreSQL answers"),
            Err(err) => (format!("{err:#}"), started.elapsed()),
        }
    }

    /// The namespace's tables have no autovacuum. A backend that holds a table's lock past
    /// [`LOCK_TIMEOUT_MS`] fails the reset with PostgreSQL's lock-timeout error in the context
    /// that names the schema, and the reset succeeds once the lock is gone. A table dropped
    /// under the reset fails it as a change of the schema's relations, not as a lock error.
    #[test]
    fn the_reset_waits_for_a_lock_at_most_its_timeout_and_names_a_dropped_table() {
        let e = crate::testkit::endpoints();
        let ddl = "CREATE TABLE jobs (id int PRIMARY KEY); CREATE TABLE notes (body text);";
        let a = Admin::create(&e, &crate::namespace::pool::unique_namespace(), ddl, &[], SqlClock::Off).unwrap();
        let schema = a.schema.clone();
        a.rt.block_on(async {
            let options: Vec<String> =
                sqlx::query_scalar("SELECT array_to_string(reloptions, ',') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY c.relname")
                    .bind(&schema)
                    .fetch_all(&a.pg)
                    .await
                    .unwrap();
            assert_eq!(options, vec!["autovacuum_enabled=off"; 2], "autovacuum is on for a table of the namespace");
        });
        let opts = clients::pg_options(&e.database_url).unwrap();
        let mut holder = a.rt.block_on(PgConnection::connect_with(&opts)).unwrap();
        a.rt.block_on(sqlx::raw_sql(&format!("BEGIN; LOCK TABLE {schema}.jobs IN ACCESS EXCLUSIVE MODE")).execute(&mut holder)).unwrap();
        let started = Instant::now();
        let err = format!("{:#}", a.reset(&[]).expect_err("the reset went past a lock held by another backend"));
        assert!(err.starts_with(&format!("locking the tables of schema {schema}: ")) && err.contains("lock timeout"), "{err}");
        assert!(started.elapsed() >= Duration::from_millis(LOCK_TIMEOUT_MS - 100), "gave up after {:?}", started.elapsed());
        a.rt.block_on(sqlx::raw_sql("ROLLBACK").execute(&mut holder)).unwrap();
        a.reset(&[]).expect("the reset failed once the lock was gone");
        a.rt.block_on(sqlx::raw_sql(&format!("DROP TABLE {schema}.notes")).execute(&mut holder)).unwrap();
        let err = format!("{:#}", a.reset(&[]).expect_err("the reset restored a schema that lost a table"));
        assert!(err.contains(&format!("changed the relations of schema {schema}")) && err.contains("notes:r"), "{err}");
        a.destroy(&[]);
    }

    /// A PostgreSQL killed between two schedules makes the next namespace fail at
    /// its first connect, where a pool would retry the refused connect for its acquire timeout
    /// (30 s by default) and the run would outlive its 10 s.
    #[test]
    fn creating_a_namespace_on_a_refusing_postgres_fails_without_retrying() {
        // A free port nobody listens on: connecting to it is refused at once.
        let (err, took) = create_fails(free_port().unwrap());
        assert!(err.contains("Connection refused"), "{err}");
        assert!(took < Duration::from_secs(3), "took {took:?}: the refused connect was retried");
    }

    /// A PostgreSQL that accepts the connection but never answers (here a listening socket
    /// nobody serves: the kernel completes the handshake) fails the namespace after 3 s.
    #[test]
    fn creating_a_namespace_on_a_silent_postgres_gives_up_after_3_s() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (err, took) = create_fails(silent.local_addr().unwrap().port());
        assert!(err.contains("did not complete a connection within 3 s"), "{err}");
        assert!(took < Duration::from_secs(10), "took {took:?}");
    }
}
