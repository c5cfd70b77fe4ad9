//! What a statement a replica sent calls, read from its SQL with `sqlparser` (PostgreSQL
//! dialect), its `$n` placeholders filled with the values the wire showed: the advisory-lock
//! functions and their keys (LOCK-1), the settings it changes (`SET`, `set_config`: ORPH-1,
//! RUN-2) and whether it touches `leader_work` (LOOP-1).

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::{Arc, LazyLock, Mutex};

use sqlparser::ast::{
    visit_expressions, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, ObjectName,
    SelectItem, Set, SetExpr, Statement, TableFactor, UnaryOperator, Value, Visit, Visitor,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

/// An argument of a call, as far as it can be known without running it.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// An integer literal, or a placeholder whose value is one.
    Int(i64),
    /// A string literal, or a placeholder whose value is not an integer.
    Text(String),
    /// Anything else (an expression, a column), as written.
    Other(String),
}

/// A function call in a statement: its name (lower case, without schema) and arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// E.g. `pg_try_advisory_lock`.
    pub name: String,
    /// Its arguments.
    pub args: Vec<Arg>,
}

/// What one statement (a simple Query may hold several) does that the wire checks read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reading {
    /// Every function call, in the order written.
    pub calls: Vec<Call>,
    /// Every setting it changes for the session (`SET name ...`, `set_config(name, value,
    /// false)`), with the value as far as known.
    pub sets: Vec<(String, Arg)>,
    /// Whether it is a `RESET`, `DISCARD` or `SET` of anything (session state changed).
    pub resets: bool,
    /// The tables it names.
    pub tables: Vec<String>,
    /// Whether it is an `INSERT`.
    pub inserts: bool,
    /// The values of an `INSERT ... VALUES` (every row's, in order), placeholders filled: a
    /// program may send its values inline or as parameters.
    pub values: Vec<Arg>,
    /// X-FENCE: the column of its answer whose expression draws a token from the fence's
    /// sequence ([`FENCE_SEQUENCE`]'s `nextval`), in the first statement's select list: where
    /// the term's token is read on the wire.
    pub token_column: Option<usize>,
}

/// X-FENCE: the sequence a fencing program draws each term's token from, by the contract
/// (`docs/replica-contract.md`: the harness creates it ahead; its name as the tap may see it,
/// with or without its schema).
pub const FENCE_SEQUENCE: &str = "plexsphere_background_leader_fence";

impl Reading {
    /// The calls named `name`.
    pub fn calls_to<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Call> + 'a {
        self.calls.iter().filter(move |c| c.name == name)
    }

    /// Whether it calls an advisory-lock function (any of them).
    pub fn locks(&self) -> bool {
        self.calls.iter().any(|c| c.name.contains("advisory"))
    }

    /// Whether it is a release: it calls `pg_advisory_unlock` (any form) and no function that
    /// takes a lock. An attempt that may unlock in one of its branches (this project's elector
    /// frees a key no leader checked on, behind a transaction pooler) is an attempt.
    pub fn unlocks(&self) -> bool {
        let unlock = |c: &Call| c.name.contains("advisory_unlock");
        (self.calls.iter()).any(unlock)
            && !(self.calls.iter()).any(|c| c.name.contains("advisory") && !unlock(c))
    }
}

/// The statements of each SQL text parsed so far: a run sends the same few texts thousands
/// of times (its checks, its prepared statements), and the checks read them several times.
type Parsed = Arc<Result<Vec<Statement>, String>>;
static PARSED: LazyLock<Mutex<HashMap<String, Parsed>>> = LazyLock::new(Mutex::default);

/// The most texts [`PARSED`] keeps (a program that inlines its values sends a new text each
/// time): past it, it starts again.
const PARSED_MAX: usize = 10_000;

fn parsed(sql: &str) -> Parsed {
    let mut cache = PARSED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = cache.get(sql) {
        return p.clone();
    }
    if cache.len() >= PARSED_MAX {
        cache.clear();
    }
    let p = Arc::new(Parser::parse_sql(&PostgreSqlDialect {}, sql).map_err(|e| e.to_string()));
    cache.insert(sql.to_owned(), p.clone());
    p
}

/// Reads `sql` with `params` for its placeholders. `Err` with the parser's message when
/// `sqlparser` cannot parse it.
pub fn read(sql: &str, params: &[Option<String>]) -> Result<Reading, String> {
    let statements = parsed(sql);
    let statements = statements.as_ref().as_ref().map_err(Clone::clone)?;
    let mut r = Reading {
        token_column: statements.first().and_then(|st| token_column(st, params)),
        ..Reading::default()
    };
    for st in statements {
        let _ = visit_expressions(st, |e| {
            if let Expr::Function(f) = e {
                r.calls.push(call_of(&f.name, &f.args, params));
            }
            ControlFlow::<()>::Continue(())
        });
        let mut tables = Tables {
            params,
            ..Tables::default()
        };
        let _ = st.visit(&mut tables);
        r.tables.extend(tables.names);
        r.calls.extend(tables.calls);
        match st {
            Statement::Set(Set::SingleAssignment {
                variable, values, ..
            }) => {
                let name = variable.to_string().to_ascii_lowercase();
                let value = values
                    .first()
                    .map_or(Arg::Other(String::new()), |v| arg(v, params));
                r.sets.push((name, value));
                r.resets = true;
            }
            Statement::Set(_) | Statement::Discard { .. } => r.resets = true,
            Statement::Insert(i) => {
                r.inserts = true;
                r.values.extend(insert_values(i, params));
            }
            _ => {}
        }
        if st.to_string().to_ascii_uppercase().starts_with("RESET") {
            r.resets = true;
        }
    }
    for call in r.calls.iter().filter(|c| c.name == "set_config") {
        if let [Arg::Text(name), value, local] = call.args.as_slice() {
            if !matches!(local, Arg::Other(l) if l.eq_ignore_ascii_case("true")) {
                r.sets.push((name.to_ascii_lowercase(), value.clone()));
            }
        }
    }
    Ok(r)
}

/// The values an `INSERT ... VALUES` writes, every row's in order (none for `INSERT ...
/// SELECT`).
fn insert_values(i: &sqlparser::ast::Insert, params: &[Option<String>]) -> Vec<Arg> {
    let Some(SetExpr::Values(v)) = i.source.as_ref().map(|q| q.body.as_ref()) else {
        return Vec::new();
    };
    (v.rows.iter())
        .flat_map(|row| row.content.iter().map(|e| arg(e, params)))
        .collect()
}

/// X-FENCE: the index in `st`'s select list of the first item that calls `nextval` on
/// [`FENCE_SEQUENCE`].
fn token_column(st: &Statement, params: &[Option<String>]) -> Option<usize> {
    let Statement::Query(q) = st else {
        return None;
    };
    let SetExpr::Select(select) = q.body.as_ref() else {
        return None;
    };
    let draws = |e: &Expr| {
        visit_expressions(e, |e| match e {
            Expr::Function(f) => {
                let call = call_of(&f.name, &f.args, params);
                let fence = matches!(call.args.first(),
                    Some(Arg::Text(t)) if t.trim_matches('"').ends_with(FENCE_SEQUENCE));
                if call.name == "nextval" && fence {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            }
            _ => ControlFlow::Continue(()),
        })
        .is_break()
    };
    (select.projection.iter()).position(|item| match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => draws(e),
        _ => false,
    })
}

/// The tables a statement names: its relations, but not a function in a `FROM` (`FROM
/// set_config(...)` is a call, not a table: it goes with the calls).
#[derive(Default)]
struct Tables<'a> {
    params: &'a [Option<String>],
    names: Vec<String>,
    calls: Vec<Call>,
}

impl Visitor for Tables<'_> {
    type Break = ();

    fn pre_visit_table_factor(&mut self, t: &TableFactor) -> ControlFlow<()> {
        match t {
            TableFactor::Table {
                name, args: None, ..
            } => self.names.push(last_name(name)),
            TableFactor::Table {
                name,
                args: Some(a),
                ..
            } => {
                let list = FunctionArguments::List(sqlparser::ast::FunctionArgumentList {
                    duplicate_treatment: None,
                    args: a.args.clone(),
                    clauses: Vec::new(),
                });
                self.calls.push(call_of(name, &list, self.params));
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_statement(&mut self, s: &Statement) -> ControlFlow<()> {
        if let Statement::Insert(i) = s {
            if let sqlparser::ast::TableObject::TableName(name) = &i.table {
                self.names.push(last_name(name));
            }
        }
        ControlFlow::Continue(())
    }
}

/// The last part of a name, unquoted, in lower case.
fn last_name(name: &ObjectName) -> String {
    (name.0.last())
        .map(|p| p.to_string().trim_matches('"').to_ascii_lowercase())
        .unwrap_or_default()
}

fn call_of(name: &ObjectName, args: &FunctionArguments, params: &[Option<String>]) -> Call {
    let name = last_name(name);
    let args = match args {
        FunctionArguments::List(list) => (list.args.iter())
            .map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e))
                | FunctionArg::Named {
                    arg: FunctionArgExpr::Expr(e),
                    ..
                } => arg(e, params),
                other => Arg::Other(other.to_string()),
            })
            .collect(),
        _ => Vec::new(),
    };
    Call { name, args }
}

/// An expression as an argument: literals and placeholders known, casts looked through.
fn arg(e: &Expr, params: &[Option<String>]) -> Arg {
    match e {
        Expr::Cast { expr, .. } | Expr::Nested(expr) => arg(expr, params),
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match arg(expr, params) {
            Arg::Int(n) => Arg::Int(-n),
            _ => Arg::Other(e.to_string()),
        },
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => n.parse().map_or(Arg::Other(n.clone()), Arg::Int),
            Value::SingleQuotedString(s) => Arg::Text(s.clone()),
            Value::Boolean(b) => Arg::Other(b.to_string()),
            Value::Placeholder(p) => placeholder(p, params),
            other => Arg::Other(other.to_string()),
        },
        other => Arg::Other(other.to_string()),
    }
}

/// `$n` filled with the `n`th value sent.
fn placeholder(p: &str, params: &[Option<String>]) -> Arg {
    let value = (p.strip_prefix('$'))
        .and_then(|n| n.parse::<usize>().ok())
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| params.get(i).cloned().flatten());
    match value {
        Some(v) => v.trim().parse().map_or(Arg::Text(v), Arg::Int),
        None => Arg::Other(p.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: Vec<Arg>) -> Call {
        Call {
            name: name.into(),
            args,
        }
    }

    /// X-FENCE: the column that draws the term's token from the contract's sequence, wherever
    /// the draw sits in its expression; a read of the sequence, or another sequence, is none.
    #[test]
    fn the_token_column_is_the_one_that_draws_from_the_fence_sequence() {
        let column = |sql: &str| read(sql, &[]).expect("parses").token_column;
        let plain = "SELECT pg_try_advisory_lock(1886156915, 1), \
                     nextval('public.plexsphere_background_leader_fence')";
        assert_eq!(column(plain), Some(1));
        let guarded = "SELECT a.answer, a.pid, CASE WHEN a.answer = 'granted' \
                       THEN nextval('plexsphere_background_leader_fence'::regclass) END \
                       FROM (SELECT 'granted', 42 OFFSET 0) AS a(answer, pid)";
        assert_eq!(column(guarded), Some(2));
        let bound = read(
            "SELECT pg_try_advisory_lock(1886156915, 1), nextval($1)",
            &[Some("public.plexsphere_background_leader_fence".into())],
        );
        assert_eq!(bound.expect("parses").token_column, Some(1));
        for none in [
            "SELECT last_value FROM public.plexsphere_background_leader_fence",
            "SELECT nextval('public.other_sequence')",
            "SELECT currval('public.plexsphere_background_leader_fence')",
            "SELECT 1",
        ] {
            assert_eq!(column(none), None, "{none}");
        }
        let ours = elector::sql::fenced(&elector::sql::try_lock(800, true, None));
        assert_eq!(column(&ours), Some(2), "the elector's fenced attempt");
    }

    #[test]
    fn lock_calls_and_their_keys_literal_or_bound() {
        let r = read("SELECT pg_try_advisory_lock(1886156915, 1)", &[]).expect("parses");
        assert_eq!(
            r.calls,
            vec![call(
                "pg_try_advisory_lock",
                vec![Arg::Int(1886156915), Arg::Int(1)]
            )]
        );
        let bound = [Some("1886156915".into()), Some("1".into())];
        let r = read("select PG_TRY_ADVISORY_LOCK($1::int4, $2)", &bound).expect("parses");
        assert_eq!(r.calls[0].args, vec![Arg::Int(1886156915), Arg::Int(1)]);
        let r = read(
            "SELECT pg_advisory_xact_lock((1886156915::bigint << 32) | 1)",
            &[],
        )
        .expect("parses");
        assert_eq!(r.calls[0].name, "pg_advisory_xact_lock");
        assert!(matches!(r.calls[0].args[..], [Arg::Other(_)]));
        assert!(r.locks());
    }

    #[test]
    fn settings_a_statement_changes() {
        let r = read("SET idle_session_timeout = 800", &[]).expect("parses");
        assert_eq!(r.sets, vec![("idle_session_timeout".into(), Arg::Int(800))]);
        assert!(r.resets);
        let r = read("SET SESSION idle_session_timeout TO '800ms'", &[]).expect("parses");
        assert_eq!(r.sets[0].1, Arg::Text("800ms".into()));
        let sql = "SELECT CASE WHEN pg_try_advisory_lock(1886156915, 1) THEN \
                   set_config('idle_session_timeout', $1, false) END";
        let r = read(sql, &[Some("800".into())]).expect("parses");
        assert_eq!(r.sets, vec![("idle_session_timeout".into(), Arg::Int(800))]);
        assert!(!r.resets, "a set_config is a call, not a SET");
        let r = read(
            "SELECT set_config('idle_session_timeout', '800', true)",
            &[],
        )
        .expect("x");
        assert!(
            r.sets.is_empty(),
            "local to a transaction: not the session's"
        );
        for sql in ["RESET ALL", "DISCARD ALL", "SET application_name = 'x'"] {
            assert!(read(sql, &[]).expect("parses").resets, "{sql}");
        }
    }

    #[test]
    fn inserts_and_their_tables() {
        let sql = "INSERT INTO leader_work (loop_name, replica, term) VALUES ('sweep', $1, $2)";
        let r = read(sql, &[Some("r1".into()), Some("3".into())]).expect("parses");
        assert!(r.inserts);
        assert_eq!(r.tables, vec!["leader_work".to_owned()]);
        let sql = "SELECT pg_advisory_unlock(1886156915, 1) FROM set_config('x', '', false)";
        let r = read(sql, &[]).expect("parses");
        assert!(r.tables.is_empty(), "{:?}", r.tables);
        assert!(r.calls.iter().any(|c| c.name == "pg_advisory_unlock"));
        let sql = "SELECT * FROM set_config('idle_session_timeout', '820', false)";
        let r = read(sql, &[]).expect("parses");
        assert_eq!(
            r.sets,
            vec![("idle_session_timeout".into(), Arg::Text("820".into()))]
        );
        assert!(read("not sql at all", &[]).is_err());
    }

    #[test]
    fn a_release_unlocks_and_takes_nothing() {
        let release = read("SELECT pg_advisory_unlock(1886156915, 1)", &[]).expect("parses");
        assert!(release.unlocks());
        // The Python example's release clears its session marker in the same statement.
        let python = read(
            "SELECT pg_advisory_unlock(1886156915, 1)\n  FROM \
             set_config('plexsphere.background_leader', '', false)",
            &[],
        )
        .expect("parses");
        assert!(python.unlocks(), "{python:?}");
        // An attempt that may unlock in a branch of its own is an attempt, not a release.
        let attempt = "SELECT CASE WHEN current_setting('x', true) = 'y' THEN CASE WHEN \
            pg_advisory_unlock(1886156915, 1) THEN 'freed' END WHEN \
            pg_try_advisory_lock(1886156915, 1) THEN 'granted' ELSE 'refused' END";
        let attempt = read(attempt, &[]).expect("parses");
        assert!(attempt.locks() && !attempt.unlocks());
        // The elector's guarded attempt is read so too (the harness parses it on the wire).
        let ours = read(&elector::sql::try_lock(800, true, None), &[]).expect("parses");
        assert!(ours.locks() && !ours.unlocks(), "{ours:?}");
        let check = read(elector::sql::PING_SESSION, &[]).expect("parses");
        assert!(!check.locks() && check.tables.is_empty(), "{check:?}");
    }
}
