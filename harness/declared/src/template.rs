//! The message body of a declared workload's events: a TOML table whose strings may hold
//! placeholders, filled from each `[[events]]` table of a scenario.
//!
//! ```toml
//! [events.body]
//! eventId = "{{id}}"             # the event's identity: v5(namespace, "event/<name>"), labelled <name>
//! orderId = "{{uuid order}}"     # a UUID derived from the event's field `order` (e.g. "o1"), labelled "o1"
//! amountMinor = "{{amount}}"     # the event's field `amount`, with its TOML type (here an integer)
//! note = "order {{order}} paid"  # inside other text a placeholder is spliced in as text
//! ```
//!
//! A string that is exactly one placeholder becomes the placeholder's value with its type; in
//! any other string each placeholder is replaced by its text. Every id is derived from the
//! scenario's per-schedule namespace ([`crashpoint::derive_id`]) and given a label, so that a
//! trace never shows a random id and the same scenario gives the same trace.

use std::collections::BTreeSet;

use serde_json::Value as Json;
use uuid::Uuid;

use crashpoint::{derive_id, Labels};

/// One placeholder of the template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Hole {
    /// `{{id}}`: the event's identity.
    Id,
    /// `{{name}}`: the event's label.
    Name,
    /// `{{uuid <field>}}`: a UUID derived from the field's value.
    Uuid(String),
    /// `{{<field>}}`: the field's value.
    Field(String),
}

/// A checked body template.
#[derive(Debug, Clone)]
pub struct Template {
    body: toml::Table,
    defaults: toml::Table,
    /// The event fields it reads (besides `name`).
    fields: BTreeSet<String>,
}

/// The placeholders of `s`, in order, with their byte ranges. Errors: an unclosed `{{`, an
/// empty or malformed placeholder.
fn holes(s: &str) -> Result<Vec<(std::ops::Range<usize>, Hole)>, String> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = s[from..].find("{{") {
        let start = from + i;
        let end = s[start..]
            .find("}}")
            .map(|j| start + j + 2)
            .ok_or_else(|| format!("`{}`: a `{{{{` without its `}}}}`", s))?;
        let inner = s[start + 2..end - 2].trim();
        let words: Vec<&str> = inner.split_whitespace().collect();
        let field = |w: &str| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let hole = match words.as_slice() {
            ["id"] => Hole::Id,
            ["name"] => Hole::Name,
            ["uuid", f] if field(f) => Hole::Uuid(f.to_string()),
            ["uuid"] => return Err("`{{uuid}}` is not a placeholder: name the field it derives from, `{{uuid <field>}}`".into()),
            [f] if field(f) => Hole::Field(f.to_string()),
            _ => {
                return Err(format!(
                    "`{{{{{inner}}}}}` is not a placeholder; expected `{{{{id}}}}`, `{{{{name}}}}`, `{{{{<field>}}}}` or `{{{{uuid <field>}}}}`"
                ))
            }
        };
        out.push((start..end, hole));
        from = end;
    }
    Ok(out)
}

fn strings(v: &toml::Value, out: &mut Vec<String>) {
    match v {
        toml::Value::String(s) => out.push(s.clone()),
        toml::Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
        toml::Value::Table(t) => t.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

impl Template {
    /// Checks `body` and the fields' `defaults`. Errors: a malformed placeholder, a default for
    /// a field the body does not read.
    pub fn new(body: toml::Table, defaults: toml::Table) -> Result<Template, String> {
        let mut texts = Vec::new();
        strings(&toml::Value::Table(body.clone()), &mut texts);
        let mut fields = BTreeSet::new();
        for t in &texts {
            for (_, h) in holes(t)? {
                if let Hole::Uuid(f) | Hole::Field(f) = h {
                    fields.insert(f);
                }
            }
        }
        if let Some(k) = defaults.keys().find(|k| !fields.contains(*k)) {
            return Err(format!("`defaults.{k}`: the body reads no field `{k}`; it reads: {}", list(&fields)));
        }
        Ok(Template { body, defaults, fields })
    }

    /// The body for event `name` with fields `event` (its `[[events]]` table), its identity
    /// `id`, in `namespace`; every derived id is labelled in `names`. Errors: a field the body
    /// reads and the event lacks (with no default), a field the body does not read.
    pub fn render(
        &self,
        name: &str,
        id: Uuid,
        event: &toml::Table,
        namespace: Uuid,
        names: &mut Labels,
    ) -> Result<Json, String> {
        if let Some(k) = event.keys().find(|k| k.as_str() != "name" && !self.fields.contains(k.as_str())) {
            return Err(format!(
                "unknown field `{k}`; the workload's body reads: name{}",
                self.fields.iter().map(|f| format!(", {f}")).collect::<String>()
            ));
        }
        let cx = Fill { name, id, event, defaults: &self.defaults, namespace };
        fill(&toml::Value::Table(self.body.clone()), &cx, names)
    }

    /// A body with placeholder values (every field `"x"`, ids derived in the nil namespace),
    /// to check where a JSON pointer lands.
    pub fn sample(&self) -> Result<(Json, Uuid), String> {
        let id = derive_id(Uuid::nil(), "event", "e1");
        let event: toml::Table = self
            .fields
            .iter()
            .map(|f| (f.clone(), self.defaults.get(f).cloned().unwrap_or_else(|| "x".into())))
            .collect();
        Ok((self.render("e1", id, &event, Uuid::nil(), &mut Labels::default())?, id))
    }
}

fn list(fields: &BTreeSet<String>) -> String {
    if fields.is_empty() {
        "none".into()
    } else {
        fields.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

struct Fill<'a> {
    name: &'a str,
    id: Uuid,
    event: &'a toml::Table,
    defaults: &'a toml::Table,
    namespace: Uuid,
}

impl Fill<'_> {
    fn field(&self, f: &str) -> Result<&toml::Value, String> {
        self.event
            .get(f)
            .or_else(|| self.defaults.get(f))
            .ok_or_else(|| format!("missing field `{f}`, which the workload's body reads"))
    }

    fn value(&self, h: &Hole, names: &mut Labels) -> Result<Json, String> {
        Ok(match h {
            Hole::Id => Json::String(self.id.to_string()),
            Hole::Name => Json::String(self.name.to_string()),
            Hole::Uuid(f) => {
                let v = self.field(f)?;
                let label = match v {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                let u = derive_id(self.namespace, f, &label);
                names.set(u, &label);
                Json::String(u.to_string())
            }
            Hole::Field(f) => serde_json::to_value(self.field(f)?).map_err(|e| format!("field `{f}`: {e}"))?,
        })
    }
}

fn fill(v: &toml::Value, cx: &Fill, names: &mut Labels) -> Result<Json, String> {
    Ok(match v {
        toml::Value::String(s) => {
            let hs = holes(s)?;
            match hs.as_slice() {
                [(r, h)] if r.start == 0 && r.end == s.len() => cx.value(h, names)?,
                _ => {
                    let mut out = String::new();
                    let mut at = 0;
                    for (r, h) in &hs {
                        out.push_str(&s[at..r.start]);
                        match cx.value(h, names)? {
                            Json::String(t) => out.push_str(&t),
                            other => out.push_str(&other.to_string()),
                        }
                        at = r.end;
                    }
                    out.push_str(&s[at..]);
                    Json::String(out)
                }
            }
        }
        toml::Value::Array(a) => Json::Array(a.iter().map(|v| fill(v, cx, names)).collect::<Result<_, _>>()?),
        toml::Value::Table(t) => {
            Json::Object(t.iter().map(|(k, v)| Ok((k.clone(), fill(v, cx, names)?))).collect::<Result<_, String>>()?)
        }
        other => serde_json::to_value(other).map_err(|e| e.to_string())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(s: &str) -> toml::Table {
        s.parse().unwrap()
    }

    #[test]
    fn placeholders_keep_their_types_and_ids_get_labels() {
        let t = Template::new(
            table(
                r#"eventId = "{{id}}"
orderId = "{{uuid order}}"
amount = "{{amount}}"
note = "order {{order}} of {{name}}"
nested = { list = ["{{amount}}", 2] }"#,
            ),
            table("amount = 1000"),
        )
        .unwrap();
        let ns = Uuid::from_u128(1);
        let id = derive_id(ns, "event", "e1");
        let mut names = Labels::default();
        let body = t
            .render(
                "e1",
                id,
                &table(
                    r#"name = "e1"
order = "o7""#,
                ),
                ns,
                &mut names,
            )
            .unwrap();
        let order = derive_id(ns, "order", "o7");
        assert_eq!(
            body,
            serde_json::json!({"eventId": id.to_string(), "orderId": order.to_string(), "amount": 1000, "note": "order o7 of e1", "nested": {"list": [1000, 2]}})
        );
        assert_eq!(names.get(order).as_deref(), Some("o7"));
    }

    #[test]
    fn mistakes_are_named() {
        assert!(Template::new(table(r#"a = "{{id""#), toml::Table::new()).unwrap_err().contains("without its"));
        assert!(Template::new(table(r#"a = "{{uuid}}""#), toml::Table::new())
            .unwrap_err()
            .contains("is not a placeholder"));
        assert!(Template::new(table(r#"a = "{{x}}""#), table("y = 1")).unwrap_err().contains("reads no field `y`"));
        let t = Template::new(table(r#"a = "{{x}}""#), toml::Table::new()).unwrap();
        let mut names = Labels::default();
        let e = t.render("e1", Uuid::nil(), &table(r#"name = "e1""#), Uuid::nil(), &mut names).unwrap_err();
        assert!(e.contains("missing field `x`"), "{e}");
        let e = t
            .render(
                "e1",
                Uuid::nil(),
                &table(
                    r#"name = "e1"
x = 1
z = 2"#,
                ),
                Uuid::nil(),
                &mut names,
            )
            .unwrap_err();
        assert!(e.contains("unknown field `z`"), "{e}");
    }
}
