//! Namespaces reused between schedules: a schema with the system's DDL
//! applied, the workload's queues and the admin connections are made once, and reset between
//! schedules instead of created and dropped for each. The pool is shared by the slots; each
//! namespace serves one schedule at a time.
//!
//! A namespace goes back to the pool only after a schedule whose drain ended quiescent: the
//! drain's last act asked SQS for every queue's visible, in-flight and delayed counts and found none
//! ([`super::admin::Admin::leftovers`]), so the queues hold no message and no receipt. Any other
//! end (a violation of quiescence, a harness error) drops the namespace and the next schedule
//! gets a new one, as does a schema that a TRUNCATE and a copy cannot restore (triggers,
//! partitions, generated columns), in which the schedule created or dropped a relation, or
//! whose tables a backend still locks past [`super::admin::LOCK_TIMEOUT_MS`]. The reset then empties every table of the schema that was written or analyzed since (the
//! others are as their last TRUNCATE left them: [`super::admin::Admin::reset`]) and restores what the DDL
//! left in it: its rows (kept in a side schema `<ns>_seed`) and every sequence's position. The
//! schedule's Redis keys are deleted. The workers' connections left idle at the end are kept
//! with the namespace (at most [`super::worker_pg::KEPT_MAX`] in all), their sessions reset as
//! fresh ones ([`super::worker_pg::reset`]), so no session state (locks, settings, the
//! workload's prepared statements, temporary tables) survives either; sqlx's own prepared
//! statements do, planned the same way whatever ran before.

use std::collections::BTreeMap;
use std::sync::Mutex;

use anyhow::Result;

use super::admin::{Admin, SqlClock};
use crate::services::Endpoints;
use crate::spec::QueueSpec;

/// A namespace's identity for reuse: the same endpoints, DDL, queues and SQL clock.
fn shape(endpoints: &Endpoints, ddl: &str, specs: &[QueueSpec], sql_clock: SqlClock) -> String {
    let queues: Vec<String> = specs.iter().map(|q| q.sqs_name("")).collect();
    format!("{}|{}|{}|{}|{sql_clock:?}|{ddl}", endpoints.database_url, endpoints.sqs_endpoint_url, endpoints.redis_url, queues.join(","))
}

/// Namespaces waiting for their next schedule, with their shape. At most one per slot of
/// each shape is ever here; the admin connections work from any thread.
static POOL: Mutex<Vec<(String, Admin)>> = Mutex::new(Vec::new());

fn pool() -> std::sync::MutexGuard<'static, Vec<(String, Admin)>> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A namespace for one schedule: a pooled one of the same shape if there is one, else a new
/// one ([`Admin::create`] with a fresh name) whose queues live on the one of
/// [`Endpoints::sqs_endpoints`] with the fewest live namespaces of this process
/// ([`least_loaded`]), so that with several LocalStack instances the slots' SQS calls spread
/// over them. Which instance a namespace uses changes no outcome: they run the same LocalStack
/// with the same settings, and queue URLs never reach a trace. Errors: those of
/// [`Admin::create`].
pub fn take(endpoints: &Endpoints, ddl: &str, specs: &[QueueSpec], sql_clock: SqlClock) -> Result<Admin> {
    let shape = shape(endpoints, ddl, specs, sql_clock);
    let pooled = {
        let mut p = pool();
        p.iter().position(|(s, _)| *s == shape).map(|i| p.remove(i).1)
    };
    match pooled {
        Some(admin) => Ok(admin),
        None => {
            let on = endpoints.on_sqs_shard(least_loaded(endpoints));
            let mut admin = Admin::create(&on, &unique_namespace(), ddl, specs, sql_clock).inspect_err(|_| gone(&on))?;
            admin.shape = shape;
            Ok(admin)
        }
    }
}

/// Hands a schedule's namespace back. With `drained_clean` (the drain ended quiescent, SQS
/// confirming every queue empty), its tables and sequences are reset to what the DDL left,
/// `keys` are deleted, and it waits for the next schedule of the same shape. Otherwise, or
/// when the reset fails, it is destroyed ([`Admin::destroy`]). Returns the schedule's SQS
/// calls by operation (those of the reset or the destruction included), and starts the count
/// afresh for the next user. Errors are logged, not returned: cleanup must not hide the
/// verdict.
pub fn give_back(admin: Admin, keys: &[String], drained_clean: bool) -> BTreeMap<String, u64> {
    let calls = admin.sqs_calls.clone();
    let reset = match drained_clean && admin.reusable() {
        true => admin.reset(keys).map_err(|e| tracing::warn!("resetting namespace {} failed, dropping it: {e:#}", admin.schema)),
        false => Err(()),
    };
    match reset {
        Ok(()) => {
            let counted = calls.take();
            let mut p = pool();
            p.push((admin.shape.clone(), admin));
            // Past the bound, the connections of the namespaces unused longest go first (the
            // pool is in the order namespaces came back: `take` removes without reordering).
            for (_, pooled) in p.iter_mut() {
                if super::worker_pg::kept() <= super::worker_pg::KEPT_MAX {
                    break;
                }
                pooled.kept.clear();
            }
            counted
        }
        Err(()) => {
            gone(&admin.endpoints);
            admin.destroy(keys);
            calls.take()
        }
    }
}

/// Live namespaces of this process (pooled or serving a schedule) by SQS endpoint URL.
static LIVE: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

fn live() -> std::sync::MutexGuard<'static, BTreeMap<String, usize>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The index, in [`Endpoints::sqs_endpoints`], of the endpoint with the fewest live namespaces
/// of this process, counted for the namespace about to be created there. Ties go to the first
/// in an order rotated by the process id, so that processes running one slot each at once
/// start on different instances. A namespace destroyed (after an unclean drain, say) leaves its
/// instance's count, so its replacement goes where fewest are.
fn least_loaded(endpoints: &Endpoints) -> usize {
    let all: Vec<&str> = endpoints.sqs_endpoints().collect();
    let mut live = live();
    let first = std::process::id() as usize % all.len();
    let at = (0..all.len()).map(|i| (first + i) % all.len()).min_by_key(|&i| live.get(all[i]).copied().unwrap_or(0)).unwrap_or(0);
    *live.entry(all[at].to_string()).or_default() += 1;
    at
}

/// A namespace on `on` (its own view, one SQS endpoint) is gone, or was never made.
fn gone(on: &Endpoints) {
    if let Some(n) = live().get_mut(&on.sqs_endpoint_url) {
        *n = n.saturating_sub(1);
    }
}

/// Destroys every pooled namespace (schemas dropped, queues deleted). Called before the
/// services stop (the CLI's `with_services`) and when a test process exits.
pub fn release() {
    let pooled = std::mem::take(&mut *pool());
    for (_, admin) in pooled {
        gone(&admin.endpoints);
        admin.destroy(&[]);
    }
}

/// A schema name no other schedule uses: `cp_<pid>_<n>_<nanos>`.
pub fn unique_namespace() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    format!("cp_{}_{}_{:x}", std::process::id(), n, nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DDL: &str = "CREATE TABLE jobs (id serial PRIMARY KEY, what text NOT NULL); \
        CREATE TABLE runs (job int NOT NULL REFERENCES jobs (id), n int GENERATED ALWAYS AS IDENTITY); \
        CREATE SEQUENCE tickets START 100; \
        INSERT INTO jobs (what) VALUES ('seeded by the DDL'); SELECT nextval('tickets');";

    fn specs() -> Vec<QueueSpec> {
        vec![QueueSpec::new("work", "w")]
    }

    fn rows(a: &Admin) -> (Vec<(i32, String)>, i64, i64) {
        a.rt.block_on(async {
            let jobs = sqlx::query_as("SELECT id, what FROM jobs ORDER BY id").fetch_all(&a.pg).await.unwrap();
            let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM runs").fetch_one(&a.pg).await.unwrap();
            let ticket: i64 = sqlx::query_scalar("SELECT nextval('tickets')").fetch_one(&a.pg).await.unwrap();
            (jobs, runs, ticket)
        })
    }

    /// What a schedule leaves behind: rows, a run, a sequence moved, a message on the queue
    /// (received: in flight), a Redis key.
    fn dirty(a: &Admin, key: &str) {
        a.rt.block_on(async {
            sqlx::raw_sql("INSERT INTO jobs (what) VALUES ('left by a schedule'); INSERT INTO runs (job) VALUES (2); SELECT nextval('tickets');")
                .execute(&a.pg)
                .await
                .unwrap();
            let mut r = a.redis.clone();
            let _: () = redis::cmd("SET").arg(key).arg("1").query_async(&mut r).await.unwrap();
        });
        a.send("work", "{\"left\": true}", None).unwrap();
    }

    fn key_exists(a: &Admin, key: &str) -> bool {
        let mut r = a.redis.clone();
        a.rt.block_on(async { redis::cmd("EXISTS").arg(key).query_async::<i64>(&mut r).await.unwrap() == 1 })
    }

    #[test]
    fn a_reused_namespace_shows_nothing_of_the_schedule_before_and_an_unclean_one_is_dropped() {
        let e = crate::testkit::endpoints();
        // Its own DDL, so that no other test of this process shares the shape.
        let ddl = format!("{DDL} -- pool test {}", unique_namespace());
        let a = take(&e, &ddl, &specs(), SqlClock::Off).unwrap();
        let first = a.schema.clone();
        // A schedule that wrote nothing: its reset empties only the seeded `jobs`, which
        // `runs` (no page) references, so the TRUNCATE must take `runs` too or fail.
        give_back(a, &[], true);
        let a = take(&e, &ddl, &specs(), SqlClock::Off).unwrap();
        assert_eq!(a.schema, first, "the namespace of a schedule that wrote nothing was not reused");
        let fresh = rows(&a);
        assert_eq!(fresh, (vec![(1, "seeded by the DDL".to_string())], 0, 101));
        let key = format!("{first}:lock");
        dirty(&a, &key);
        // A schedule whose drain confirmed the queues empty: the namespace is reset and reused.
        // (The message `dirty` sent stands for none here: give it back only after receiving
        // and deleting it, as a quiescent drain would have.)
        a.rt.block_on(async {
            let url = a.queues.url("work").to_string();
            let got = a.sqs.receive_message().queue_url(&url).send().await.unwrap();
            let m = &got.messages.unwrap()[0];
            a.sqs.delete_message().queue_url(&url).receipt_handle(m.receipt_handle.clone().unwrap()).send().await.unwrap();
        });
        give_back(a, std::slice::from_ref(&key), true);
        let b = take(&e, &ddl, &specs(), SqlClock::Off).unwrap();
        assert_eq!(b.schema, first, "the namespace was not reused");
        assert!(!key_exists(&b, &key), "the previous schedule's Redis key survived the reset");
        assert_eq!(rows(&b), fresh, "the reset did not restore what the DDL left");
        assert_eq!(b.leftovers(&[]).unwrap().0, "", "the reused queue holds messages");
        // A schedule that did not end quiescent: its namespace is dropped, message and all.
        dirty(&b, &key);
        give_back(b, std::slice::from_ref(&key), false);
        let c = take(&e, &ddl, &specs(), SqlClock::Off).unwrap();
        assert_ne!(c.schema, first, "an unclean namespace was reused");
        assert_eq!(c.leftovers(&[]).unwrap().0, "", "a new namespace's queue holds messages");
        assert!(!key_exists(&c, &key));
        assert_eq!(rows(&c), fresh);
        let gone: bool = c.rt.block_on(async {
            sqlx::query_scalar("SELECT NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname IN ($1, $2))")
                .bind(&first)
                .bind(crate::namespace::snapshot::baseline_schema(&first))
                .fetch_one(&c.pg)
                .await
                .unwrap()
        });
        assert!(gone, "the dropped namespace's schemas are still there");
        give_back(c, &[], false);
    }

    #[test]
    fn a_namespace_whose_relations_changed_or_that_a_copy_cannot_restore_is_not_reused() {
        let e = crate::testkit::endpoints();
        let ddl = format!("{DDL} -- pool test {}", unique_namespace());
        let a = take(&e, &ddl, &specs(), SqlClock::Off).unwrap();
        let first = a.schema.clone();
        a.rt.block_on(sqlx::raw_sql("CREATE TABLE made_by_a_worker (v text); INSERT INTO made_by_a_worker VALUES ('x')").execute(&a.pg)).unwrap();
        give_back(a, &[], true);
        let b = take(&e, &ddl, &specs(), SqlClock::Off).unwrap();
        assert_ne!(b.schema, first, "a namespace with a table the DDL did not make was reused");
        give_back(b, &[], false);
        // A trigger would fire again when the DDL's rows are copied back.
        let ddl = format!(
            "{DDL} CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$; \
             CREATE TRIGGER touched BEFORE INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION touch(); -- pool test {}",
            unique_namespace()
        );
        let c = take(&e, &ddl, &specs(), SqlClock::Off).unwrap();
        assert!(!c.reusable());
        let first = c.schema.clone();
        give_back(c, &[], true);
        let d = take(&e, &ddl, &specs(), SqlClock::Off).unwrap();
        assert_ne!(d.schema, first, "a schema with a user trigger was reused");
        give_back(d, &[], false);
    }

    /// With several LocalStack instances, the namespaces this process
    /// creates spread their queues over them (each new one where fewest live). A namespace's queues exist on its own instance and
    /// on no other, so its workers must (and do, [`Admin::endpoints`]) talk to that one.
    #[test]
    fn namespaces_keep_their_queues_on_one_of_several_localstack_instances_in_turn() {
        let mut e = crate::testkit::endpoints();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        // Services with one LocalStack (one core, containers, an older `up`): a second of this
        // test's own, stopped when it ends.
        let dir = tempfile::tempdir().unwrap();
        let _second = match e.sqs_shards.is_empty() {
            true => {
                let ls = rt.block_on(crate::services::native::localstack::start(dir.path(), crate::services::ports::free_port)).unwrap();
                e.sqs_shards.push(ls.endpoint.clone());
                Some(ls)
            }
            false => None,
        };
        let all: Vec<String> = e.sqs_endpoints().map(str::to_string).collect();
        let ddl = format!("{DDL} -- pool test {}", unique_namespace());
        // The fewest live namespaces win: other tests of this process hold some meanwhile, so
        // take a few until two instances were seen.
        let mut taken: Vec<Admin> = Vec::new();
        while taken.len() < 8 && taken.iter().map(|a| &a.endpoints.sqs_endpoint_url).collect::<std::collections::BTreeSet<_>>().len() < 2 {
            taken.push(take(&e, &ddl, &specs(), SqlClock::Off).unwrap());
        }
        let on: std::collections::BTreeSet<&String> = taken.iter().map(|a| &a.endpoints.sqs_endpoint_url).collect();
        assert_eq!(on.len(), 2, "{} namespaces, all on {on:?}", taken.len());
        for a in &taken {
            assert!(a.endpoints.sqs_shards.is_empty() && all.contains(&a.endpoints.sqs_endpoint_url), "{:?}", a.endpoints);
            let name = QueueSpec::new("work", "w").sqs_name(&a.schema);
            for url in &all {
                let sqs = crate::services::clients::sqs_client(url);
                let found = rt.block_on(sqs.get_queue_url().queue_name(&name).send()).is_ok();
                assert_eq!(found, *url == a.endpoints.sqs_endpoint_url, "queue {name} on {url}: {found}");
            }
        }
        for a in taken {
            give_back(a, &[], false);
        }
    }

    #[test]
    fn a_namespace_sees_one_sqs_endpoint_in_turn() {
        let e = Endpoints {
            database_url: "postgres://127.0.0.1/x".into(),
            sqs_endpoint_url: "http://127.0.0.1:1".into(),
            sqs_shards: vec!["http://127.0.0.1:2".into(), "http://127.0.0.1:3".into()],
            redis_url: "redis://127.0.0.1".into(),
        };
        let seen: Vec<String> = (0..4).map(|n| e.on_sqs_shard(n)).inspect(|v| assert!(v.sqs_shards.is_empty())).map(|v| v.sqs_endpoint_url).collect();
        assert_eq!(seen, ["http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3", "http://127.0.0.1:1"]);
        assert_eq!(e.on_sqs_shard(1).database_url, e.database_url);
    }
}
