//! What a pooled namespace's reset puts back ([`super::admin::Admin::reset`]): the schema's
//! relations as the DDL left them, the rows the DDL inserted (kept in the side schema
//! [`baseline_schema`]) and every sequence's position, and the SQL that restores them after a
//! schedule (PostgreSQL docs, "TRUNCATE" and §9.17 "Sequence Manipulation Functions").

use std::collections::BTreeSet;

use anyhow::Result;
use sqlx::PgPool;

/// One relation of a schema, as [`relations_of`] reads it from `pg_class`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Relation {
    /// Its name, unquoted.
    pub name: String,
    /// `pg_class.relkind`: `r` table, `i` index, `S` sequence, `v` view, `c` composite type, …
    pub relkind: String,
    /// Whether it is an ordinary table with a page on disk or statistics ([`relations_of`]
    /// with `sizes`; always false without).
    pub written: bool,
}

impl std::fmt::Display for Relation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.name, self.relkind)
    }
}

/// What [`super::admin::Admin::reset`] needs: the schema's relations as the DDL left them, and
/// the SQL that restores that state.
pub(crate) struct Snapshot {
    /// Every relation of the schema (tables, indexes, sequences, views), sorted by name, as
    /// the DDL left them (their `written` as it was then).
    relations: Vec<Relation>,
    /// The tables the DDL put rows in (`schema."name"`): emptied at every reset.
    with_rows: Vec<String>,
    /// Foreign keys between the schema's tables, (referencing, referenced), as `schema."name"`:
    /// a TRUNCATE must take the tables referencing one it takes (PostgreSQL docs, "TRUNCATE").
    references: Vec<(String, String)>,
    /// The SQL that puts back the DDL's rows and the sequences' positions, run after the
    /// TRUNCATE.
    restore: String,
}

impl Snapshot {
    /// Whether `now` ([`relations_of`] the schema now) names the same relations, of the same
    /// kinds, as the DDL left: a schedule that created or dropped one fails this.
    pub(super) fn same_relations(&self, now: &[Relation]) -> bool {
        let key = |r: &Relation| (r.name.clone(), r.relkind.clone());
        now.iter().map(key).eq(self.relations.iter().map(key))
    }

    /// The error for a schema whose relations a schedule changed, listing both as
    /// `name:relkind`.
    pub(super) fn changed(&self, schema: &str, now: &[Relation]) -> anyhow::Error {
        let list = |v: &[Relation]| v.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ");
        anyhow::anyhow!("the schedule changed the relations of schema {schema} (the DDL made [{}], now [{}])", list(&self.relations), list(now))
    }

    /// Every ordinary table of `schema`, as `schema."name"`, sorted.
    pub(super) fn tables(&self, schema: &str) -> Vec<String> {
        self.relations.iter().filter(|r| r.relkind == "r").map(|r| qualified(schema, &r.name)).collect()
    }

    /// The SQL that restores `schema` given `now`, its relations ([`relations_of`]): one
    /// TRUNCATE of the tables with pages or statistics, those the DDL put rows in and those
    /// referencing any of these (else PostgreSQL refuses the TRUNCATE), then the rows and
    /// sequence positions the DDL left. Empty when there is nothing to do.
    pub(super) fn restoring_sql(&self, schema: &str, now: &[Relation]) -> String {
        let mut truncate: BTreeSet<String> = now.iter().filter(|r| r.written).map(|r| qualified(schema, &r.name)).collect();
        truncate.extend(self.with_rows.iter().cloned());
        while let Some((from, _)) = self.references.iter().find(|(from, to)| truncate.contains(to) && !truncate.contains(from)) {
            truncate.insert(from.clone());
        }
        let mut sql = String::new();
        if !truncate.is_empty() {
            sql = format!("TRUNCATE {};\n", truncate.into_iter().collect::<Vec<_>>().join(", "));
        }
        sql + &self.restore
    }
}

/// The side schema that keeps the rows the DDL inserted, for the reset.
pub(super) fn baseline_schema(schema: &str) -> String {
    format!("{schema}_baseline")
}

/// `name` as a quoted SQL identifier.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `schema."name"`.
pub(super) fn qualified(schema: &str, name: &str) -> String {
    format!("{schema}.{}", ident(name))
}

/// Every relation in `schema`, sorted by name, each with whether it is an ordinary table with a
/// page on disk or statistics (`reltuples` ≥ 0, set by VACUUM or ANALYZE; TRUNCATE sets it
/// back to -1). A table with neither is as its last TRUNCATE left it: a row's insert, even one
/// rolled back, extends the file, and only VACUUM shrinks a file, which also sets the
/// statistics (PostgreSQL docs, "Database File Layout", §9.27.7 `pg_relation_size`,
/// "pg_class"). So are its indexes. Without `sizes`, only the catalogue is read and `written`
/// is false: `pg_relation_size` takes each table's `ACCESS SHARE` lock, so it waits for a
/// backend holding an `ACCESS EXCLUSIVE` one. Errors: PostgreSQL's.
pub(super) async fn relations_of<'c>(pg: impl sqlx::PgExecutor<'c>, schema: &str, sizes: bool) -> Result<Vec<Relation>> {
    let written = match sizes {
        true => "c.relkind = 'r' AND (pg_relation_size(c.oid) > 0 OR c.reltuples >= 0)",
        false => "false",
    };
    let sql = format!(
        "SELECT c.relname::text, c.relkind::text, {written} \
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 ORDER BY 1, 2"
    );
    let rows: Vec<(String, String, bool)> = sqlx::query_as(&sql)
    .bind(schema)
    .fetch_all(pg)
    .await?;
    Ok(rows.into_iter().map(|(name, relkind, written)| Relation { name, relkind, written }).collect())
}

/// Whether a TRUNCATE and a copy of the DDL's rows can restore `schema`: not when it has
/// partitioned or inherited tables (a parent's count includes its children's rows),
/// materialized views or foreign tables, user triggers (they would fire again on the copy) or
/// generated stored columns (they cannot be inserted).
const RESTORABLE: &str = "SELECT NOT ( \
    EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind IN ('p', 'm', 'f')) \
    OR EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1) \
    OR EXISTS (SELECT 1 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND NOT t.tgisinternal) \
    OR EXISTS (SELECT 1 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND a.attgenerated = 's'))";

/// Records what the DDL left in `schema` and what restores it: a TRUNCATE of the tables that
/// hold rows or pages then, an INSERT of the rows the DDL put in a table (copied now to the
/// side schema [`baseline_schema`]), and a `setval` of every sequence to where the DDL left it.
/// `None` when the schema cannot be restored that way ([`RESTORABLE`]): its namespace is then
/// never reused. Errors: PostgreSQL's.
pub(super) async fn take(pg: &PgPool, schema: &str) -> Result<Option<Snapshot>> {
    let restorable: bool = sqlx::query_scalar(RESTORABLE).bind(schema).fetch_one(pg).await?;
    if !restorable {
        return Ok(None);
    }
    let baseline = baseline_schema(schema);
    let relations = relations_of(pg, schema, false).await?;
    let mut sql = String::new();
    let mut with_rows = Vec::new();
    for r in relations.iter().filter(|r| r.relkind == "r") {
        let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {}", qualified(schema, &r.name))).fetch_one(pg).await?;
        if rows > 0 {
            with_rows.push(r.name.clone());
        }
    }
    if !with_rows.is_empty() {
        sqlx::raw_sql(&format!("CREATE SCHEMA {baseline}")).execute(pg).await?;
    }
    for name in &with_rows {
        let t = ident(name);
        sqlx::raw_sql(&format!("CREATE TABLE {baseline}.{t} AS TABLE {schema}.{t}")).execute(pg).await?;
        sql.push_str(&format!("INSERT INTO {schema}.{t} OVERRIDING SYSTEM VALUE SELECT * FROM {baseline}.{t};\n"));
    }
    let sequences: Vec<(String, Option<i64>, i64)> =
        sqlx::query_as("SELECT sequencename::text, last_value, start_value FROM pg_sequences WHERE schemaname = $1 ORDER BY 1")
            .bind(schema)
            .fetch_all(pg)
            .await?;
    for (name, last, start) in sequences {
        let name = qualified(schema, &name).replace('\'', "''");
        let (value, called) = match last {
            Some(v) => (v, true),
            None => (start, false),
        };
        sql.push_str(&format!("SELECT setval('{name}', {value}, {called});\n"));
    }
    let references: Vec<(String, String)> = sqlx::query_as(
        "SELECT r.relname::text, f.relname::text FROM pg_constraint c JOIN pg_class r ON r.oid = c.conrelid \
         JOIN pg_class f ON f.oid = c.confrelid JOIN pg_namespace n ON n.oid = r.relnamespace \
         WHERE c.contype = 'f' AND n.nspname = $1 ORDER BY 1, 2",
    )
    .bind(schema)
    .fetch_all(pg)
    .await?;
    let references = references.iter().map(|(from, to)| (qualified(schema, from), qualified(schema, to))).collect();
    let with_rows = with_rows.iter().map(|t| qualified(schema, t)).collect();
    Ok(Some(Snapshot { relations, with_rows, references, restore: sql }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relation(name: &str, written: bool) -> Relation {
        let relkind = if name.ends_with("_pkey") { "i" } else { "r" };
        Relation { name: name.to_string(), relkind: relkind.to_string(), written }
    }

    /// The reset empties the tables with pages or statistics, the with_rows ones and,
    /// transitively, the tables referencing any of these; an untouched table is left alone.
    #[test]
    fn the_reset_truncates_what_was_written_with_rows_or_refers_to_it() {
        let q = |t: &str| format!("s.\"{t}\"");
        let names = ["audit", "entries", "log", "merchants", "other", "payouts", "payouts_pkey"];
        let now = |written: &[&str]| -> Vec<Relation> { names.iter().map(|t| relation(t, written.contains(t))).collect() };
        let snapshot = Snapshot {
            relations: now(&[]),
            with_rows: vec![q("merchants")],
            references: vec![(q("payouts"), q("merchants")), (q("entries"), q("payouts")), (q("audit"), q("log"))],
            restore: "INSERT INTO s.\"merchants\" SELECT * FROM s_baseline.\"merchants\";\n".into(),
        };
        let sql = snapshot.restoring_sql("s", &now(&[]));
        assert_eq!(
            sql,
            "TRUNCATE s.\"entries\", s.\"merchants\", s.\"payouts\";\nINSERT INTO s.\"merchants\" SELECT * FROM s_baseline.\"merchants\";\n"
        );
        let sql = snapshot.restoring_sql("s", &now(&["log", "other"]));
        assert!(sql.starts_with("TRUNCATE s.\"audit\", s.\"entries\", s.\"log\", s.\"merchants\", s.\"other\", s.\"payouts\";"), "{sql}");
        let bare = Snapshot { relations: Vec::new(), with_rows: Vec::new(), references: Vec::new(), restore: String::new() };
        assert_eq!(bare.restoring_sql("s", &now(&[])), "", "nothing written, nothing with_rows: nothing to run");
    }

    /// The relations compare by name and kind, not by whether a table was written; the
    /// tables are the ordinary ones, qualified.
    #[test]
    fn relations_compare_by_name_and_kind() {
        let snapshot = Snapshot { relations: vec![relation("jobs", false), relation("jobs_pkey", false)], with_rows: vec![], references: vec![], restore: String::new() };
        assert!(snapshot.same_relations(&[relation("jobs", true), relation("jobs_pkey", false)]));
        assert!(!snapshot.same_relations(&[relation("jobs", false)]), "a dropped index went unseen");
        let rekinded = [relation("jobs", false), Relation { relkind: "S".into(), ..relation("jobs_pkey", false) }];
        assert!(!snapshot.same_relations(&rekinded), "a relation of another kind under the same name went unseen");
        assert_eq!(snapshot.tables("s"), vec!["s.\"jobs\"".to_string()]);
        let err = snapshot.changed("s", &[relation("jobs", true)]).to_string();
        assert_eq!(err, "the schedule changed the relations of schema s (the DDL made [jobs:r, jobs_pkey:i], now [jobs:r])");
    }
}
