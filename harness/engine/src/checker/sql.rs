//! An invariant written as SQL: a query that returns the violating rows.

use sqlx::{Column, Row, TypeInfo};
use uuid::Uuid;

use super::{CheckCx, CulpritKind, Invariant, Problem, Verdict};

/// An invariant defined by a query over the schedule's schema that returns the rows that
/// violate it, e.g. `SELECT operation_id FROM outgoing_email GROUP BY 1 HAVING count(*) > 1`. It holds
/// when the query returns no row. Each row is one problem, printed as its columns
/// (`name=value`, UUIDs replaced by their labels); UUID columns are the culprit's identities.
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
        let problems = rows
            .iter()
            .map(|row| {
                let mut cols = Vec::new();
                let mut ids = Vec::new();
                for (i, c) in row.columns().iter().enumerate() {
                    let text = match c.type_info().name() {
                        "UUID" => match row.try_get::<Option<Uuid>, _>(i) {
                            Ok(Some(u)) => {
                                ids.push(u);
                                cx.label(&u)
                            }
                            _ => "null".into(),
                        },
                        "INT2" | "INT4" | "INT8" => {
                            let v: Option<i64> = row
                                .try_get::<Option<i64>, _>(i)
                                .or_else(|_| row.try_get::<Option<i32>, _>(i).map(|v| v.map(i64::from)))
                                .or_else(|_| row.try_get::<Option<i16>, _>(i).map(|v| v.map(i64::from)))
                                .unwrap_or(None);
                            v.map(|v| v.to_string()).unwrap_or_else(|| "null".into())
                        }
                        "TEXT" | "VARCHAR" | "NAME" | "BPCHAR" => {
                            row.try_get::<Option<String>, _>(i).ok().flatten().unwrap_or_else(|| "null".into())
                        }
                        "BOOL" => row.try_get::<Option<bool>, _>(i).ok().flatten().map(|b| b.to_string()).unwrap_or_else(|| "null".into()),
                        other => format!("<{other}>"),
                    };
                    cols.push(format!("{}={text}", c.name()));
                }
                Problem::new(format!("row {}", cols.join(" ")), self.kind, ids)
            })
            .collect();
        Verdict::from_problems(&self.name, problems)
    }
}
