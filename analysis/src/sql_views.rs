//! The views every report query reads, generated for each SQL engine from the output schema
//! (`contract::schema`) and one small template per dialect ([`Dialect`]).
//!
//! - `v_flows`: every column of `flows` but its lists (the histograms), times as µs since the
//!   epoch, `interval_start` / `interval_end` named `t0` / `t1`;
//! - `v_hist`: one row per bucket of every histogram column of `flows` (`hist` the column's
//!   name, `value` / `pkts` the bucket), with the key, `t0` / `t1`, `class_pkts` (the row's
//!   packets of the histogram's class) and `max_udp_payload`;
//! - `v_ifaces`: every column of `interfaces` (times as in `v_flows`);
//! - `v_pfc`: one row per `interfaces` row and PFC priority: the interface key, `t0` / `t1`,
//!   `priority` and every per-priority column (`pfc_xoff_p3`, ...) named without its `_p<N>`
//!   suffix (`pfc_xoff`), so that no query spells out the eight priorities;
//! - `v_alerts`: every column of `alerts`, `time` as `t` (µs), the other times as µs;
//! - `v_qps`: every column of `qps` (the host's QPs; times as in `v_flows`);
//! - `v_nic`: every column of `nic` but its lists (the NIC's own counters; times as in
//!   `v_flows`).
//!
//! What differs between engines is only the template: how a timestamp becomes µs, how a list is
//! unnested and a struct field read, how a view is created. The columns come from the schema: a
//! column added there reaches the views; the few the generator names itself (the key that
//! `v_hist` and `v_pfc` carry, the class count of each histogram) are looked up in the schema,
//! and one missing or of another type makes the generation panic (a failing test, never a view
//! that silently lacks it).

use std::sync::LazyLock;

use contract::schema::{self, ColType, Column, Table};
use observer_common::maps::class;

/// What one SQL engine writes differently. In the patterns, `{}` is a column's name; in
/// [`Dialect::field`], `{s}` is the struct and `{f}` the field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dialect {
    /// The engine's name (`report --emit-sql` writes `engine.<name>.sql`).
    pub name: &'static str,
    /// The engine as the generated file's first line names it.
    pub title: &'static str,
    /// The statement that creates a view, before its name.
    pub create_view: &'static str,
    /// A `timestamp[us, UTC]` column as µs since the epoch (a 64-bit integer).
    pub epoch_us: &'static str,
    /// In a select list: one row per element of a list column.
    pub unnest: &'static str,
    /// A field of a struct value.
    pub field: &'static str,
}

/// Apache DataFusion (roce-analyze itself): a timestamp cast to BIGINT is its µs value.
pub const DATAFUSION: Dialect = Dialect {
    name: "datafusion",
    title: "Apache DataFusion, roce-analyze",
    create_view: "CREATE VIEW",
    epoch_us: "CAST({} AS BIGINT)",
    unnest: "unnest({})",
    field: "{s}['{f}']",
};

pub const DUCKDB: Dialect = Dialect {
    name: "duckdb",
    title: "DuckDB",
    create_view: "CREATE OR REPLACE TEMP VIEW",
    epoch_us: "epoch_us({})",
    unnest: "unnest({})",
    field: "{s}.{f}",
};

pub const SPARK: Dialect = Dialect {
    name: "spark",
    title: "Apache Spark SQL",
    create_view: "CREATE OR REPLACE TEMP VIEW",
    epoch_us: "unix_micros({})",
    unnest: "explode({})",
    field: "{s}.{f}",
};

/// Every dialect, in the order `report --emit-sql` lists them.
pub const DIALECTS: [Dialect; 3] = [DATAFUSION, DUCKDB, SPARK];

/// PFC priorities (IEEE 802.1Qbb): the per-priority columns end in `_p0` .. `_p7`.
pub const PRIORITIES: u8 = 8;

/// The key `v_hist` carries on every bucket, before `t0` / `t1` (columns of `flows`).
const HIST_KEY: [&str; 7] = ["host", "iface", "dir", "point", "src", "dst", "qp"];
/// Carried on every bucket after `class_pkts`.
const HIST_EXTRA: [&str; 1] = ["max_udp_payload"];
/// The count of packets of each class (`class::NAMES` order): a histogram's `class_pkts`.
const CLASS_PKTS: [&str; class::COUNT] = ["data_pkts", "ack_pkts", "cnp"];
/// The histogram over every class (`class_pkts` is all the row's packets).
const ALL_CLASSES: (&str, &str) = ("opcodes", "pkts");
/// The interface key `v_pfc` carries on every priority, before `t0` / `t1`.
const PFC_KEY: [&str; 4] = ["host", "iface", "dir", "point"];
/// The alias of the unnested struct in `v_hist`.
const BUCKET: &str = "h";

/// The views' names, in creation order.
pub const VIEWS: [&str; 8] = [
    "v_flows",
    "v_hist",
    "v_latency",
    "v_ifaces",
    "v_pfc",
    "v_alerts",
    "v_qps",
    "v_nic",
];

/// One expression of a select list.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A column of the table, as it is.
    Col(&'static Column),
    /// A timestamp column as µs since the epoch.
    EpochUs(&'static Column),
    /// A list column, one row per element.
    Unnest(&'static Column),
    /// A field of the unnested struct ([`BUCKET`]).
    Field(String),
    /// A column of the subquery, by name.
    Outer(String),
    Str(String),
    Int(i64),
}

/// `expr AS alias` (the alias left out when it is the column's own name).
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    pub expr: Expr,
    pub alias: String,
}

/// Where a select reads from.
#[derive(Debug)]
pub enum Source {
    Table(&'static Table),
    /// A UNION ALL of selects, as a subquery (aliased `u`).
    Union(Vec<Select>),
}

#[derive(Debug)]
pub struct Select {
    pub items: Vec<Item>,
    pub from: Source,
}

/// One view: the UNION ALL of its selects.
#[derive(Debug)]
pub struct View {
    pub name: &'static str,
    pub selects: Vec<Select>,
}

fn item(expr: Expr, alias: impl Into<String>) -> Item {
    Item {
        expr,
        alias: alias.into(),
    }
}

/// The column `name` of `t`, which must be of one of the types `ok` (the generation panics
/// otherwise: a renamed or retyped column is a failing test).
fn named(t: &'static Table, name: &str, ok: &[ColType]) -> &'static Column {
    let c = t.expect_column(name);
    assert!(
        ok.contains(&c.ty),
        "the {} table's column {name:?} is {:?}, the SQL views expect {ok:?}",
        t.name,
        c.ty
    );
    c
}

/// The name a time column has in the views.
pub fn time_alias(name: &str) -> &str {
    match name {
        "interval_start" => "t0",
        "interval_end" => "t1",
        "time" => "t",
        n => n,
    }
}

/// One column as the views show it: lists are left out, timestamps become µs.
fn scalar(c: &'static Column) -> Option<Item> {
    match c.ty {
        ColType::Hist | ColType::Named => None,
        ColType::Timestamp => Some(item(Expr::EpochUs(c), time_alias(&c.name))),
        _ => Some(item(Expr::Col(c), c.name.clone())),
    }
}

/// Every column of `t` but its lists.
fn every_scalar(t: &'static Table) -> Select {
    Select {
        items: t.columns.iter().filter_map(scalar).collect(),
        from: Source::Table(t),
    }
}

/// `t0` / `t1` of a table with an interval.
fn interval(t: &'static Table) -> [Item; 2] {
    ["interval_start", "interval_end"].map(|n| {
        let c = named(t, n, &[ColType::Timestamp]);
        item(Expr::EpochUs(c), time_alias(n))
    })
}

/// The count of packets a histogram column is over: `opcodes` all packets, `<kind>_<class>`
/// the class's.
pub fn class_pkts(hist: &str) -> &'static str {
    if hist == ALL_CLASSES.0 {
        return ALL_CLASSES.1;
    }
    let class = hist.rsplit_once('_').map_or("", |(_, c)| c);
    let i = class::NAMES
        .iter()
        .position(|n| *n == class)
        .unwrap_or_else(|| {
            panic!("histogram column {hist:?}: no class known to the SQL views (sql_views.rs)")
        });
    CLASS_PKTS[i]
}

/// Whether `name` is a latency histogram of `flows` (samples, not packets: `v_latency`).
fn is_latency(name: &str) -> bool {
    name.starts_with(LATENCY_PREFIX)
}

const LATENCY_PREFIX: &str = "latency_";

/// One row per bucket of every latency histogram of a flows row (docs/latency.md): `kind`
/// (`ack`, `read`, `nak_resend`, `ce_cnp`), `value` the bucket index, `pkts` its samples.
fn v_latency() -> View {
    hist_union("v_latency", true, |_, h, items| {
        items.push(item(
            Expr::Str(h.name[LATENCY_PREFIX.len()..].to_string()),
            "kind",
        ));
    })
}

/// One row per bucket of every packet histogram of a flows row, with the class's packets.
fn v_hist() -> View {
    hist_union("v_hist", false, |f, h, items| {
        items.push(item(Expr::Str(h.name.clone()), "hist"));
        let count = named(f, class_pkts(&h.name), &[ColType::Int64]);
        items.push(item(Expr::Col(count), "class_pkts"));
        items.extend(
            HIST_EXTRA
                .iter()
                .map(|n| item(Expr::Col(named(f, n, &[ColType::Int32])), *n)),
        );
    })
}

/// A view unnesting the flows table's histogram columns (the latency ones, or the others):
/// per column a select of the key, `t0` / `t1`, what `label` adds and the unnested bucket,
/// all of them as one UNION ALL.
fn hist_union(
    name: &'static str,
    latency: bool,
    label: impl Fn(&'static Table, &'static Column, &mut Vec<Item>),
) -> View {
    let f = schema::flows();
    let branches = f
        .columns
        .iter()
        .filter(|c| c.ty == ColType::Hist && is_latency(&c.name) == latency)
        .map(|h| {
            let mut items: Vec<Item> = HIST_KEY
                .iter()
                .map(|n| item(Expr::Col(named(f, n, &[ColType::Utf8, ColType::Int32])), *n))
                .collect();
            items.extend(interval(f));
            label(f, h, &mut items);
            items.push(item(Expr::Unnest(h), BUCKET));
            Select {
                items,
                from: Source::Table(f),
            }
        })
        .collect::<Vec<_>>();
    assert!(
        !branches.is_empty(),
        "{name}: the flows table has no such histogram"
    );
    let mut items: Vec<Item> = branches[0]
        .items
        .iter()
        .filter(|i| i.alias != BUCKET)
        .map(|i| item(Expr::Outer(i.alias.clone()), i.alias.clone()))
        .collect();
    items.extend(
        schema::hist_fields()
            .iter()
            .map(|x| item(Expr::Field(x.name().clone()), x.name().clone())),
    );
    View {
        name,
        selects: vec![Select {
            items,
            from: Source::Union(branches),
        }],
    }
}

/// The per-priority columns of `interfaces`, grouped: (name without `_p<N>`, the columns of
/// priorities 0 .. 7). Every column `pfc_<what>_p<digit>` is in a group, and every group has
/// all eight priorities of one type (the generation panics otherwise).
pub fn per_priority() -> Vec<(String, Vec<&'static Column>)> {
    let t = schema::interfaces();
    let mut groups: Vec<(String, Vec<&'static Column>)> = Vec::new();
    for c in &t.columns {
        let Some((base, p)) = c
            .name
            .strip_prefix("pfc_")
            .and_then(|_| c.name.rsplit_once("_p"))
            .filter(|(_, p)| p.len() == 1 && p.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let p: u8 = p.parse().expect("one digit");
        match groups.iter_mut().find(|(b, _)| b == base) {
            Some((_, cols)) => {
                assert_eq!(
                    cols.len(),
                    p as usize,
                    "{}: priorities out of order",
                    c.name
                );
                assert_eq!(cols[0].ty, c.ty, "{}: priorities of two types", c.name);
                cols.push(c);
            }
            None => {
                assert_eq!(p, 0, "{}: priorities before 0 missing", c.name);
                groups.push((base.to_string(), vec![c]));
            }
        }
    }
    for (b, cols) in &groups {
        assert_eq!(
            cols.len(),
            PRIORITIES as usize,
            "{b}: not one column per priority"
        );
    }
    groups
}

fn v_pfc() -> View {
    let t = schema::interfaces();
    let groups = per_priority();
    assert!(
        !groups.is_empty(),
        "the interfaces table has no per-priority column"
    );
    let selects = (0..PRIORITIES)
        .map(|p| {
            let mut items: Vec<Item> = PFC_KEY
                .iter()
                .map(|n| item(Expr::Col(named(t, n, &[ColType::Utf8])), *n))
                .collect();
            items.extend(interval(t));
            items.push(item(Expr::Int(p.into()), "priority"));
            for (base, cols) in &groups {
                items.push(item(Expr::Col(cols[p as usize]), base.clone()));
            }
            Select {
                items,
                from: Source::Table(t),
            }
        })
        .collect();
    View {
        name: "v_pfc",
        selects,
    }
}

/// The views, as the generator builds them for every dialect.
pub fn views() -> Vec<View> {
    vec![
        View {
            name: "v_flows",
            selects: vec![every_scalar(schema::flows())],
        },
        v_hist(),
        v_latency(),
        View {
            name: "v_ifaces",
            selects: vec![every_scalar(schema::interfaces())],
        },
        v_pfc(),
        View {
            name: "v_alerts",
            selects: vec![every_scalar(schema::alerts())],
        },
        View {
            name: "v_qps",
            selects: vec![every_scalar(schema::qps())],
        },
        View {
            name: "v_nic",
            selects: vec![every_scalar(schema::nic())],
        },
    ]
}

impl Dialect {
    fn expr(&self, e: &Expr) -> String {
        match e {
            Expr::Col(c) => c.name.clone(),
            Expr::EpochUs(c) => self.epoch_us.replace("{}", &c.name),
            Expr::Unnest(c) => self.unnest.replace("{}", &c.name),
            Expr::Field(f) => self.field.replace("{s}", BUCKET).replace("{f}", f),
            Expr::Outer(n) => n.clone(),
            Expr::Str(s) => format!("'{}'", s.replace('\'', "''")),
            Expr::Int(i) => i.to_string(),
        }
    }

    fn item(&self, i: &Item) -> String {
        let e = self.expr(&i.expr);
        if e == i.alias {
            e
        } else {
            format!("{e} AS {}", i.alias)
        }
    }

    /// `SELECT ... FROM ...`, the select list wrapped, each line after the first `indent`ed.
    fn select(&self, s: &Select, indent: &str) -> String {
        let items: Vec<String> = s.items.iter().map(|i| self.item(i)).collect();
        let from = match &s.from {
            Source::Table(t) => t.name.to_string(),
            Source::Union(branches) => {
                let inner: Vec<String> = branches
                    .iter()
                    .map(|b| format!("{indent}  {}", self.select(b, &format!("{indent}  "))))
                    .collect();
                format!(
                    "(\n{}\n{indent}) u",
                    inner.join(&format!("\n{indent}  UNION ALL\n"))
                )
            }
        };
        format!("SELECT {}\n{indent}FROM {from}", wrap(&items, indent))
    }

    /// The views' SQL in this dialect: comment lines, then one `CREATE VIEW` statement per view,
    /// each ending in `;`.
    pub fn render(&self) -> String {
        let mut s = format!(
            "-- The views every report query reads, in the dialect of {}.\n\
             -- Generated by roce-analyze from the output schema (contract::schema) and the {}\n\
             -- template of analysis/src/sql_views.rs: do not edit; `roce-analyze report --emit-sql DIR`\n\
             -- writes them. They read the tables flows, interfaces, alerts, qps and nic, which the engine\n\
             -- registers first (docs/analysis.md#sql). Times are µs since the epoch.\n\
             -- v_flows: the flows table but its histograms; v_hist: one row per histogram bucket (hist,\n\
             -- value, pkts) with the key, t0 / t1, class_pkts and max_udp_payload; v_ifaces: the\n\
             -- interfaces table; v_pfc: one row per interfaces row and priority, the per-priority\n\
             -- columns without their _p<N> suffix; v_alerts: the alerts table (time as t); v_qps: the\n\
             -- qps table (the host's QPs); v_nic: the nic table but its lists.\n",
            self.title, self.name
        );
        for v in views() {
            let body: Vec<String> = v.selects.iter().map(|x| self.select(x, "")).collect();
            s += &format!(
                "\n{} {} AS\n{};\n",
                self.create_view,
                v.name,
                body.join("\nUNION ALL\n")
            );
        }
        s
    }
}

/// The items joined by `, `, a new line (indented by `indent` and two spaces) before one that
/// would pass 100 characters.
fn wrap(items: &[String], indent: &str) -> String {
    let mut out = String::new();
    let mut line = 7 + indent.len();
    for (n, i) in items.iter().enumerate() {
        if n > 0 {
            out.push(',');
            // the item, its separator and the comma after it
            if line + 2 + i.len() + 1 > 100 {
                out.push('\n');
                out.push_str(indent);
                out.push_str("  ");
                line = indent.len() + 2;
            } else {
                out.push(' ');
                line += 2;
            }
        }
        out.push_str(i);
        line += i.len();
    }
    out
}

/// The views in every dialect: (engine, SQL).
pub fn all() -> Vec<(&'static str, String)> {
    DIALECTS.iter().map(|d| (d.name, d.render())).collect()
}

static DATAFUSION_VIEWS: LazyLock<String> = LazyLock::new(|| DATAFUSION.render());

/// The views in DataFusion's dialect, which [`crate::engine::Engine`] creates.
pub fn datafusion() -> &'static str {
    &DATAFUSION_VIEWS
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::MemTable;
    use datafusion::prelude::SessionContext;

    use super::*;
    use crate::engine::statements;

    fn tables() -> [&'static Table; 5] {
        [
            schema::flows(),
            schema::interfaces(),
            schema::alerts(),
            schema::qps(),
            schema::nic(),
        ]
    }

    /// The names of a text outside string literals and comment lines: (lower-case names,
    /// upper-case keywords).
    fn words(sql: &str) -> Vec<String> {
        let mut body = String::new();
        for l in sql.lines().filter(|l| !l.trim_start().starts_with("--")) {
            let mut quoted = false;
            for ch in l.chars() {
                if ch == '\'' {
                    quoted = !quoted;
                    body.push(' ');
                } else if !quoted {
                    body.push(ch);
                }
            }
            body.push('\n');
        }
        body.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty() && !w.starts_with(|c: char| c.is_ascii_digit()))
            .map(str::to_string)
            .collect()
    }

    /// The lower-case names a dialect's patterns bring (its functions).
    fn functions(d: &Dialect) -> BTreeSet<String> {
        [d.epoch_us, d.unnest, d.field]
            .iter()
            .flat_map(|p| words(p))
            .filter(|w| *w != "s" && *w != "f" && w.chars().all(|c| !c.is_ascii_uppercase()))
            .collect()
    }

    /// Each dialect's text names, in each view, only columns of the view's table (besides
    /// its own aliases, functions and the subquery's names); a time column only inside the
    /// dialect's conversion to µs, a histogram only inside its unnesting, named counters never.
    #[test]
    fn every_dialect_selects_only_schema_columns_of_their_type() {
        for d in DIALECTS {
            let text = d.render();
            let stmts = statements(&text);
            assert_eq!(stmts.len(), VIEWS.len(), "{}", d.name);
            let fns = functions(&d);
            for (stmt, view) in stmts.iter().zip(VIEWS) {
                let w = words(stmt);
                assert_eq!(
                    w.iter().find(|x| x.starts_with("v_")).map(String::as_str),
                    Some(view),
                    "{}",
                    d.name
                );
                let from: Vec<&String> = w
                    .windows(2)
                    .filter(|p| p[0] == "FROM" && p[1].chars().all(|c| !c.is_ascii_uppercase()))
                    .map(|p| &p[1])
                    .collect();
                let t = tables()
                    .into_iter()
                    .find(|t| from.first().is_some_and(|f| *f == t.name))
                    .unwrap_or_else(|| panic!("{}: {view} reads {from:?}", d.name));
                assert!(from.iter().all(|f| *f == t.name), "{view}: {from:?}");
                let aliases: BTreeSet<&String> = w
                    .windows(2)
                    .filter(|p| p[0] == "AS" && p[1].chars().all(|c| !c.is_ascii_uppercase()))
                    .map(|p| &p[1])
                    .collect();
                for x in w
                    .iter()
                    .filter(|x| x.chars().all(|c| !c.is_ascii_uppercase()))
                {
                    let known = x == view
                        || x == t.name
                        || x == "u"
                        || x == BUCKET
                        || fns.contains(x)
                        || aliases.contains(x)
                        || t.column(x).is_some();
                    assert!(
                        known,
                        "{}: {view} names {x:?}, not a column of {}",
                        d.name, t.name
                    );
                }
                // every column it names with its type's treatment
                let mut plain = stmt.clone();
                for c in &t.columns {
                    match c.ty {
                        ColType::Timestamp => {
                            let e = d.epoch_us.replace("{}", &c.name);
                            let named = format!("{e} AS {}", time_alias(&c.name));
                            plain = plain.replace(&named, "").replace(&e, "")
                        }
                        ColType::Hist => {
                            plain = plain
                                .replace(&d.unnest.replace("{}", &c.name), "")
                                .replace(&format!("'{}'", c.name), "")
                        }
                        _ => {}
                    }
                }
                for c in t
                    .columns
                    .iter()
                    .filter(|c| matches!(c.ty, ColType::Timestamp | ColType::Hist | ColType::Named))
                {
                    assert!(
                        !words(&plain).contains(&c.name),
                        "{}: {view} reads {} ({:?}) as it is",
                        d.name,
                        c.name,
                        c.ty
                    );
                }
            }
        }
    }

    /// What the views show of the schema: every column but the lists, every histogram, every
    /// per-priority column; the columns the generator names are the schema's, of their types.
    #[test]
    fn the_views_cover_the_schema() {
        let views = views();
        assert_eq!(views.iter().map(|v| v.name).collect::<Vec<_>>(), VIEWS);
        let aliases = |s: &Select| s.items.iter().map(|i| i.alias.clone()).collect::<Vec<_>>();
        for v in &views {
            for s in &v.selects {
                assert_eq!(
                    aliases(s),
                    aliases(&v.selects[0]),
                    "{}: UNION ALL of unlike rows",
                    v.name
                );
                let mut unique = aliases(s);
                unique.sort();
                unique.dedup();
                assert_eq!(unique.len(), s.items.len(), "{}: a name twice", v.name);
                let check = |sel: &Select| {
                    let Source::Table(t) = &sel.from else {
                        return;
                    };
                    for i in &sel.items {
                        let (c, ok): (&Column, &[ColType]) = match &i.expr {
                            Expr::Col(c) => (
                                c,
                                &[
                                    ColType::Utf8,
                                    ColType::Int32,
                                    ColType::Int64,
                                    ColType::Float64,
                                    ColType::Boolean,
                                ],
                            ),
                            Expr::EpochUs(c) => (c, &[ColType::Timestamp]),
                            Expr::Unnest(c) => (c, &[ColType::Hist]),
                            _ => continue,
                        };
                        assert_eq!(t.column(&c.name), Some(c), "{}: {}", v.name, c.name);
                        assert!(ok.contains(&c.ty), "{}: {} is {:?}", v.name, c.name, c.ty);
                    }
                };
                check(s);
                if let Source::Union(b) = &s.from {
                    b.iter().for_each(check);
                    for i in &s.items {
                        if let Expr::Outer(n) = &i.expr {
                            assert!(aliases(&b[0]).contains(n), "{}: {n}", v.name);
                        }
                    }
                }
            }
        }
        let by = |n: &str| views.iter().find(|v| v.name == n).unwrap();
        for (view, t) in [
            ("v_flows", schema::flows()),
            ("v_ifaces", schema::interfaces()),
            ("v_alerts", schema::alerts()),
        ] {
            let shown = aliases(&by(view).selects[0]);
            let want: Vec<String> = t
                .columns
                .iter()
                .filter(|c| !matches!(c.ty, ColType::Hist | ColType::Named))
                .map(|c| time_alias(&c.name).to_string())
                .collect();
            assert_eq!(shown, want, "{view}");
        }
        let Source::Union(hists) = &by("v_hist").selects[0].from else {
            panic!("v_hist is a union");
        };
        let unnested: Vec<&str> = hists
            .iter()
            .flat_map(|s| &s.items)
            .filter_map(|i| match &i.expr {
                Expr::Unnest(c) => Some(c.name.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(unnested, schema::hist_names());
        let Source::Union(lat) = &by("v_latency").selects[0].from else {
            panic!("v_latency is a union");
        };
        let unnested: Vec<String> = lat
            .iter()
            .flat_map(|s| &s.items)
            .filter_map(|i| match &i.expr {
                Expr::Unnest(c) => Some(c.name.clone()),
                _ => None,
            })
            .collect();
        let want: Vec<String> = observer_common::latency::kind::NAMES
            .iter()
            .map(|k| format!("latency_{k}"))
            .collect();
        assert_eq!(unnested, want);
        assert_eq!(class_pkts("opcodes"), "pkts");
        assert_eq!(class_pkts("dscp_data"), "data_pkts");
        assert_eq!(class_pkts("ecn_ack"), "ack_pkts");
        assert_eq!(class_pkts("pcp_cnp"), "cnp");
        let pfc = by("v_pfc");
        assert_eq!(pfc.selects.len(), PRIORITIES as usize);
        let in_pfc: BTreeSet<&str> = pfc
            .selects
            .iter()
            .flat_map(|s| &s.items)
            .filter_map(|i| match &i.expr {
                Expr::Col(c) if c.name != i.alias => Some(c.name.as_str()),
                _ => None,
            })
            .collect();
        for c in &schema::interfaces().columns {
            let per_priority = c.name.starts_with("pfc_")
                && (0..PRIORITIES).any(|p| c.name.ends_with(&format!("_p{p}")));
            assert_eq!(in_pfc.contains(c.name.as_str()), per_priority, "{}", c.name);
        }
        // what the checks read
        for n in [
            "priority",
            "pfc_xoff",
            "pfc_xon",
            "pfc_xoff_peak_1s",
            "t0",
            "t1",
            "dir",
        ] {
            assert!(
                aliases(&pfc.selects[0]).iter().any(|a| a == n),
                "v_pfc lacks {n}"
            );
        }
        assert!(std::panic::catch_unwind(|| class_pkts("dscp_other")).is_err());
    }

    /// The DataFusion rendering creates the views over the schema's (empty) tables, and each
    /// view's columns have the types the schema gives them (times: Int64 µs).
    #[test]
    fn the_datafusion_views_run_with_the_schema_types() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let ctx = SessionContext::new();
        for t in tables() {
            let mem = MemTable::try_new(t.arrow_schema(), vec![vec![]]).unwrap();
            ctx.register_table(t.name, Arc::new(mem)).unwrap();
        }
        for s in statements(datafusion()) {
            rt.block_on(async { ctx.sql(&s).await?.collect().await })
                .unwrap_or_else(|e| panic!("{s}: {e}"));
        }
        let view_types = |v: &str| -> Schema {
            let df = rt.block_on(ctx.table(v)).unwrap();
            df.schema().as_arrow().clone()
        };
        let shown = |c: &Column| -> DataType {
            match c.ty {
                ColType::Timestamp => DataType::Int64,
                t => t.arrow(),
            }
        };
        for (view, t) in [
            ("v_flows", schema::flows()),
            ("v_ifaces", schema::interfaces()),
            ("v_alerts", schema::alerts()),
        ] {
            let got = view_types(view);
            for c in t
                .columns
                .iter()
                .filter(|c| !matches!(c.ty, ColType::Hist | ColType::Named))
            {
                let f = got.field_with_name(time_alias(&c.name)).unwrap();
                assert_eq!(f.data_type(), &shown(c), "{view}.{}", c.name);
            }
            assert_eq!(
                got.fields().len(),
                t.columns
                    .iter()
                    .filter(|c| !matches!(c.ty, ColType::Hist | ColType::Named))
                    .count()
            );
        }
        let f = schema::flows();
        let hist = view_types("v_hist");
        let mut want: Vec<Field> = HIST_KEY
            .iter()
            .map(|n| Field::new(*n, shown(f.expect_column(n)), true))
            .collect();
        want.push(Field::new("t0", DataType::Int64, true));
        want.push(Field::new("t1", DataType::Int64, true));
        want.push(Field::new("hist", DataType::Utf8, true));
        want.push(Field::new("class_pkts", DataType::Int64, true));
        want.push(Field::new("max_udp_payload", DataType::Int32, true));
        want.extend(schema::hist_fields().iter().map(|x| (**x).clone()));
        let names = |s: &Schema| -> Vec<(String, DataType)> {
            s.fields()
                .iter()
                .map(|x| (x.name().clone(), x.data_type().clone()))
                .collect()
        };
        assert_eq!(names(&hist), names(&Schema::new(want)));
        let pfc = view_types("v_pfc");
        assert_eq!(
            pfc.field_with_name("priority").unwrap().data_type(),
            &DataType::Int64
        );
        for (base, cols) in per_priority() {
            assert_eq!(
                pfc.field_with_name(&base).unwrap().data_type(),
                &shown(cols[0]),
                "{base}"
            );
        }
    }
}
