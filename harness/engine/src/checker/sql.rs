//! An invariant written as SQL: a query that returns the violating rows.

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use sqlx::postgres::types::PgInterval;
use sqlx::postgres::PgRow;
use sqlx::types::BigDecimal;
use sqlx::{Column, Row, TypeInfo};
use uuid::Uuid;

use super::{CheckCx, CulpritKind, Invariant, Problem, Verdict};
use crate::duration::{format_duration_ms, format_instant_ms};

/// An invariant defined by a query over the schedule's schema that returns the rows that
/// violate it, e.g. `SELECT operation_id FROM outgoing_email GROUP BY 1 HAVING count(*) > 1`. It holds
/// when the query returns no row. Each row is one problem, printed as its columns
/// (`name=value`, [`value`]; every UUID in it replaced by its label, a UUID the schedule never
/// labelled, such as one the worker generated, by a `k<n>` label: [`CheckCx::label_rows`]);
/// UUID columns are the culprit's identities.
/// A query that fails (a syntax error, a missing table) gives [`Verdict::unknown`] with
/// PostgreSQL's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlInvariant {
    /// The invariant's name.
    pub name: String,
    /// The query returning violating rows.
    pub sql: String,
    /// Whether a violating row is too much of an effect ([`CulpritKind::Excess`]) or too
    /// little ([`CulpritKind::Missing`]), for "where it broke" in reports.
    pub kind: CulpritKind,
    /// Where it is written (`scenarios/x.toml:12`), named when its query fails; `None` for
    /// one built in code.
    pub origin: Option<String>,
}

impl SqlInvariant {
    /// An invariant named `name` whose violating rows `sql` returns, too much of an effect.
    pub fn excess(name: impl Into<String>, sql: impl Into<String>) -> SqlInvariant {
        SqlInvariant { name: name.into(), sql: sql.into(), kind: CulpritKind::Excess, origin: None }
    }

    /// The same, for an effect missing.
    pub fn missing(name: impl Into<String>, sql: impl Into<String>) -> SqlInvariant {
        SqlInvariant { name: name.into(), sql: sql.into(), kind: CulpritKind::Missing, origin: None }
    }
}

impl Invariant for SqlInvariant {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn check(&self, cx: &CheckCx) -> Verdict {
        let rows = match cx.rows(&self.sql) {
            Ok(rows) => rows,
            Err(e) => {
                let mut msg = match e.as_database_error() {
                    Some(db) => format!("PostgreSQL: {} (in `{}`)", db.message(), self.sql),
                    None => format!("{e} (in `{}`)", self.sql),
                };
                if let Some(origin) = &self.origin {
                    msg.push_str(&format!(", the invariant of {origin}"));
                }
                return Verdict::unknown(&self.name, msg);
            }
        };
        // Each row as text with its UUIDs as they are, and the UUIDs of its uuid columns (the
        // culprit's identities). Labels come after, in an order that does not depend on the
        // random ids (below).
        let rendered: Vec<(String, Vec<Uuid>)> = rows
            .iter()
            .map(|row| {
                let mut ids = Vec::new();
                let cols: Vec<String> = row
                    .columns()
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        if c.type_info().name() == "UUID" {
                            ids.extend(row.try_get::<Option<Uuid>, _>(i).ok().flatten());
                        }
                        format!("{}={}", c.name(), value(row, i, c.type_info().name()))
                    })
                    .collect();
                (format!("row {}", cols.join(" ")), ids)
            })
            .collect();
        let problems = cx
            .label_rows(rendered.iter().map(|(text, _)| text.as_str()))
            .into_iter()
            .zip(rendered)
            .map(|(text, (_, ids))| Problem::new(text, self.kind, ids))
            .collect();
        Verdict::from_problems(&self.name, problems)
    }
}

/// Column `i` of `row`, whose PostgreSQL type is `ty` (sqlx's name: `INT8`, `NUMERIC`, `UUID[]`
/// for an array), as the failure line prints it: numbers and text as they are, `numeric` in
/// full, `timestamptz` and `timestamp` as logical time (`31.000s` from the logical clock's
/// epoch, [`crate::duration::epoch`]) or ISO 8601 before it, `date` ISO, `interval` as `90s`
/// or `1 mon 2 days 30s`, `json`/`jsonb` as compact JSON, arrays as `{a,b}`, `null`; any
/// other type as `<TYPE>`. UUIDs print whole here; labels replace them after.
pub fn value(row: &PgRow, i: usize, ty: &str) -> String {
    fn get<'r, T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>>(row: &'r PgRow, i: usize) -> Option<Option<T>> {
        row.try_get::<Option<T>, _>(i).ok()
    }
    fn or_null<T>(v: Option<Option<T>>, f: impl Fn(T) -> String) -> Option<String> {
        v.map(|v| v.map(f).unwrap_or_else(|| "null".into()))
    }
    fn list<T>(v: Option<Option<Vec<Option<T>>>>, f: impl Fn(T) -> String) -> Option<String> {
        or_null(v, |items| format!("{{{}}}", items.into_iter().map(|x| x.map(&f).unwrap_or_else(|| "NULL".into())).collect::<Vec<_>>().join(",")))
    }
    let epoch = crate::duration::epoch();
    let instant = move |t: DateTime<Utc>| match (t - epoch).num_milliseconds() {
        ms if ms >= 0 => format_instant_ms(ms as u64),
        _ => t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
    };
    let text = match ty {
        "UUID" => or_null(get::<Uuid>(row, i), |u| u.to_string()),
        "INT2" => or_null(get::<i16>(row, i), |v| v.to_string()),
        "INT4" => or_null(get::<i32>(row, i), |v| v.to_string()),
        "INT8" => or_null(get::<i64>(row, i), |v| v.to_string()),
        "FLOAT4" => or_null(get::<f32>(row, i), |v| v.to_string()),
        "FLOAT8" => or_null(get::<f64>(row, i), |v| v.to_string()),
        "NUMERIC" => or_null(get::<BigDecimal>(row, i), |v| v.normalized().to_string()),
        "TEXT" | "VARCHAR" | "NAME" | "BPCHAR" => or_null(get::<String>(row, i), |v| v),
        "BOOL" => or_null(get::<bool>(row, i), |v| v.to_string()),
        "TIMESTAMPTZ" => or_null(get::<DateTime<Utc>>(row, i), instant),
        "TIMESTAMP" => or_null(get::<NaiveDateTime>(row, i), |t| instant(t.and_utc())),
        "DATE" => or_null(get::<NaiveDate>(row, i), |d| d.to_string()),
        "INTERVAL" => or_null(get::<PgInterval>(row, i), interval),
        "JSON" | "JSONB" => or_null(get::<serde_json::Value>(row, i), |v| v.to_string()),
        "UUID[]" => list(get::<Vec<Option<Uuid>>>(row, i), |u| u.to_string()),
        "TEXT[]" | "VARCHAR[]" => list(get::<Vec<Option<String>>>(row, i), |v| v),
        "INT4[]" => list(get::<Vec<Option<i32>>>(row, i), |v| v.to_string()),
        "INT8[]" => list(get::<Vec<Option<i64>>>(row, i), |v| v.to_string()),
        "NUMERIC[]" => list(get::<Vec<Option<BigDecimal>>>(row, i), |v| v.normalized().to_string()),
        _ => None,
    };
    text.unwrap_or_else(|| format!("<{ty}>"))
}

/// An `interval` as the trace writes durations (`90s`, `1d`), with its months and days in
/// words when it has any (PostgreSQL keeps the three apart: "Interval Input").
fn interval(v: PgInterval) -> String {
    let mut parts = Vec::new();
    if v.months != 0 {
        parts.push(format!("{} mon", v.months));
    }
    if v.days != 0 {
        parts.push(format!("{} days", v.days));
    }
    if v.microseconds != 0 || parts.is_empty() {
        let us = v.microseconds.unsigned_abs();
        let sign = if v.microseconds < 0 { "-" } else { "" };
        let text = match us % 1000 {
            0 => format_duration_ms(us / 1000),
            _ => format!("{us}us"),
        };
        parts.push(format!("{sign}{text}"));
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_prints_as_the_trace_writes_durations() {
        assert_eq!(interval(PgInterval { months: 0, days: 0, microseconds: 90_000_000 }), "90s");
        assert_eq!(interval(PgInterval { months: 0, days: 0, microseconds: 0 }), "0ms");
        assert_eq!(interval(PgInterval { months: 1, days: 2, microseconds: 1_500 }), "1 mon 2 days 1500us");
        assert_eq!(interval(PgInterval { months: 0, days: 0, microseconds: -60_000_000 }), "-1m");
    }
}
