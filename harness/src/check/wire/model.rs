//! The replicas' conversations with the database, rebuilt from the timeline's wire entries:
//! each connection with its statements and answers ([`Conn`]), and the lock sessions, the
//! connections that held the lock and when ([`LockSession`]).

use std::collections::{BTreeMap, BTreeSet};

use wiretap::{Closer, Outcome, WireEvent};

use super::sql::{self, Reading};
use crate::fault::Verb;
use crate::timeline::{Entry, What};

/// One statement a replica sent, and its answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    /// When the proxy read it from the replica (ms on the run's clock).
    pub sent_ms: f64,
    /// Its SQL.
    pub sql: String,
    /// The values it was sent with.
    pub params: Vec<Option<String>>,
    /// What it calls and sets (`Err`: the SQL could not be parsed).
    pub reading: Result<Reading, String>,
    /// When it was answered, and how (`None`: never, as far as the proxy saw).
    pub answer: Option<(f64, Outcome)>,
}

impl Stmt {
    /// Whether it calls an advisory-lock function.
    pub fn locks(&self) -> bool {
        self.reading.as_ref().is_ok_and(Reading::locks)
    }

    /// Whether it was answered without an error.
    pub fn succeeded(&self) -> bool {
        matches!(self.answer, Some((_, Outcome::Done { .. })))
    }

    /// Whether it asks for the lock: an advisory-lock call that is not a release.
    pub fn asks(&self) -> bool {
        self.locks() && !self.unlocks()
    }

    /// Whether it releases the lock (`pg_advisory_unlock`).
    pub fn unlocks(&self) -> bool {
        self.reading.as_ref().is_ok_and(Reading::unlocks)
    }

    /// When it failed as a check, as the wire shows it: its error's answer, or T (`t`, ms)
    /// after it was sent when no answer came at all; `None` when it was answered, or sent too
    /// near `end_ms` (the last moment the wire shows, less T and `slack`) to tell.
    pub fn failed_at(&self, t: f64, slack: f64, end_ms: f64) -> Option<f64> {
        match &self.answer {
            Some((at, Outcome::Error { .. })) => Some(*at),
            None if self.sent_ms + t + slack < end_ms => Some(self.sent_ms + t),
            _ => None,
        }
    }

    /// Whether it is a lock call (not a release) whose answer granted the lock ([`GRANTED`] in
    /// its first column): what the wire itself says, whoever pg_locks showed holding the key.
    pub fn granted(&self) -> bool {
        self.asks()
            && (self.row().and_then(|r| r.first().cloned().flatten()))
                .is_some_and(|v| GRANTED.contains(&v.trim()))
    }

    /// The values of its one-row answer.
    pub fn row(&self) -> Option<&[Option<String>]> {
        match &self.answer {
            Some((_, Outcome::Done { row: Some(r), .. })) => Some(r),
            _ => None,
        }
    }
}

/// One client connection of one replica, as its proxy saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct Conn {
    /// The replica.
    pub replica: String,
    /// The proxy's number for it.
    pub id: u64,
    /// When the proxy accepted it.
    pub opened_ms: f64,
    /// The server's pid (behind PgBouncer: PgBouncer's key, see [`super::WireSetup`]).
    pub pid: Option<i32>,
    /// `application_name` as the server reported it, each time it did.
    pub names: Vec<(f64, String)>,
    /// Its statements, in order.
    pub statements: Vec<Stmt>,
    /// Errors the server sent for no statement (e.g. `57P05`, the idle-session timeout).
    pub server_errors: Vec<(f64, String)>,
    /// Statements the proxy ran on its session behind the client's back
    /// ([`WireEvent::Injected`]: the `unlock` fault), when.
    pub injected: Vec<(f64, String)>,
    /// When the server delivered it a notification ([`WireEvent::Notified`]).
    pub notified: Vec<f64>,
    /// When it ended, who ended it, and whether the client said Terminate first.
    pub closed: Option<(f64, Closer, bool)>,
}

impl Conn {
    /// Whether it was open at `t_ms`.
    pub fn open_at(&self, t_ms: f64) -> bool {
        self.opened_ms <= t_ms && self.closed.is_none_or(|(c, ..)| t_ms < c)
    }

    /// X-FENCE: the first token drawn from the fence's sequence on it from its statement `i`
    /// on (the grant: a fencing program draws the term's token in the granting statement or on
    /// the lock session after it), as that statement's answer showed it.
    pub fn token_from(&self, i: usize) -> Option<i64> {
        (self.statements.iter().skip(i)).find_map(|s| {
            let column = s.reading.as_ref().ok()?.token_column?;
            s.row()?.get(column)?.as_deref()?.trim().parse().ok()
        })
    }

    /// When a grant by its statement `i` stopped being held, as the wire shows it: the first
    /// of the connection's close and the answer of the first unlock sent after statement `i`
    /// that was answered without an error (`None`: neither, held to the end). Shared by
    /// [`lock_sessions`] and [`grants_held`].
    pub fn grant_ended(&self, i: usize) -> Option<f64> {
        let unlocked = (self.statements.iter().skip(i + 1))
            .filter(|u| u.succeeded() && u.unlocks())
            .find_map(|u| u.answer.as_ref().map(|(at, _)| *at));
        let closed = self.closed.map(|(at, ..)| at);
        [unlocked, closed].into_iter().flatten().reduce(f64::min)
    }
}

/// Every connection on the timeline, in the order they opened. An answer the proxy read while
/// the replica's link lost the server's answers (`partition-answers`) never reached it: its
/// statement stays unanswered.
pub fn conversations(entries: &[Entry]) -> Vec<Conn> {
    let mut conns: BTreeMap<(String, u64), Conn> = BTreeMap::new();
    let mut open_stmts: BTreeMap<(String, u64, u64), usize> = BTreeMap::new();
    // The replicas whose link loses the server's answers now (`partition-answers`): the proxy
    // reads every answer before its toxics, and none of these reached the client.
    let mut deaf: BTreeSet<&str> = BTreeSet::new();
    for e in entries {
        if let What::Fault {
            verb: Verb::PartitionAnswers,
            target,
            lifted,
        } = &e.what
        {
            if *lifted {
                deaf.remove(target.as_str());
            } else {
                deaf.insert(target.as_str());
            }
            continue;
        }
        let What::Wire {
            replica,
            conn,
            event,
        } = &e.what
        else {
            continue;
        };
        let key = (replica.clone(), *conn);
        let c = conns.entry(key).or_insert_with(|| Conn {
            replica: replica.clone(),
            id: *conn,
            opened_ms: e.t_ms,
            pid: None,
            names: Vec::new(),
            statements: Vec::new(),
            server_errors: Vec::new(),
            injected: Vec::new(),
            notified: Vec::new(),
            closed: None,
        });
        match event {
            WireEvent::Opened => c.opened_ms = e.t_ms,
            WireEvent::Startup {
                application_name: Some(a),
                ..
            } => c.names.push((e.t_ms, a.clone())),
            WireEvent::Parameter { name, value } if name == "application_name" => {
                c.names.push((e.t_ms, value.clone()));
            }
            WireEvent::Backend { pid } => c.pid = Some(*pid),
            WireEvent::Statement { id, sql, params } => {
                open_stmts.insert((replica.clone(), *conn, *id), c.statements.len());
                c.statements.push(Stmt {
                    sent_ms: e.t_ms,
                    sql: sql.clone(),
                    params: params.clone(),
                    reading: sql::read(sql, params),
                    answer: None,
                });
            }
            WireEvent::Answer { .. } if deaf.contains(replica.as_str()) => {}
            WireEvent::Answer { id, outcome } => {
                if let Some(i) = open_stmts.remove(&(replica.clone(), *conn, *id)) {
                    c.statements[i].answer = Some((e.t_ms, outcome.clone()));
                }
            }
            WireEvent::ServerError { code, .. } => c.server_errors.push((e.t_ms, code.clone())),
            WireEvent::Injected { sql } => c.injected.push((e.t_ms, sql.clone())),
            WireEvent::Notified { .. } => c.notified.push(e.t_ms),
            WireEvent::Closed { by, terminate } => {
                c.closed.get_or_insert((e.t_ms, *by, *terminate));
            }
            _ => {}
        }
    }
    let mut v: Vec<Conn> = conns.into_values().collect();
    v.sort_by(|a, b| a.opened_ms.total_cmp(&b.opened_ms));
    v
}

/// What the checks read of a run's wire, rebuilt from its timeline once for all of them
/// ([`crate::check::scenario`] builds it; the wire checks, the expectations timed or decided on
/// the wire, the overlap of grants and leader-only work read it): the conversations and the
/// lock sessions. Empty where the proxies kept no journal.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WireModel {
    /// Every connection, in the order they opened ([`conversations`]).
    pub conns: Vec<Conn>,
    /// The lock sessions, each naming its connection in [`WireModel::conns`]
    /// ([`lock_sessions`]).
    pub sessions: Vec<LockSession>,
}

impl WireModel {
    /// The conversations and lock sessions of `entries`.
    pub fn of(entries: &[Entry]) -> Self {
        let conns = conversations(entries);
        let sessions = lock_sessions(entries, &conns);
        Self { conns, sessions }
    }
}

/// A connection that held the lock.
#[derive(Clone, Debug, PartialEq)]
pub struct LockSession {
    /// The replica.
    pub replica: String,
    /// The connection (its index in [`conversations`]' answer).
    pub conn: usize,
    /// The statement whose answer granted the lock (its index on the connection).
    pub grant: usize,
    /// When its answer came (ms).
    pub granted_ms: f64,
    /// When pg_locks first showed it gone (or the connection closed); `None`: held to the end.
    pub ended_ms: Option<f64>,
    /// X-FENCE: the term's token, as the wire showed it drawn on this connection from the
    /// grant on ([`Conn::token_from`]); `None`: none drawn there.
    pub token: Option<i64>,
}

impl LockSession {
    /// Whether a pg_locks row naming `app` can be this session's: the same replica, or a name
    /// that is no replica's (none set, or the pooler's own). A session pooler hands one server
    /// backend to the next client when a client leaves, so one pid can hold the key for one
    /// replica and then for another.
    fn same_holder(&self, app: &str, conns: &[Conn]) -> bool {
        app == self.replica || !conns.iter().any(|c| c.replica == app)
    }

    /// Its evidence in a few words, for a failed check's message: the connection, its backend
    /// and the call the wire model took for the grant, with its answer.
    pub fn describe(&self, conns: &[Conn]) -> String {
        let c = &conns[self.conn];
        let grant = &c.statements[self.grant];
        let answer = match grant.row() {
            Some(row) => format!("{:?}", row.first().cloned().flatten().unwrap_or_default()),
            None => "no row".to_owned(),
        };
        let sql: String = grant.sql.chars().take(60).collect();
        format!(
            "connection {}, pid {}, opened at {:.0} ms; granted by {sql:?}, sent at {:.0} ms, answered {answer}",
            c.id,
            c.pid.map_or("unknown".to_owned(), |p| p.to_string()),
            c.opened_ms,
            grant.sent_ms
        )
    }
}

/// The lock sessions: each time pg_locks showed a replica's backend holding the lock, the
/// connection whose lock call was answered last before that sample (on a direct path, the
/// connection whose server pid is the holder's; behind PgBouncer, by the holder's
/// `application_name`, the replica's connection that asked last).
pub fn lock_sessions(entries: &[Entry], conns: &[Conn]) -> Vec<LockSession> {
    let mut sessions: Vec<LockSession> = Vec::new();
    // The open session of each holder pid.
    let mut open: BTreeMap<i32, usize> = BTreeMap::new();
    // When the server last went down (a stop or a restart applied), and since when the server
    // that answers now has run: no connection opened before it holds anything on it.
    let (mut down_since, mut serving_since) = (None, f64::NEG_INFINITY);
    for e in entries {
        if let Some(lifted) = server_down(&e.what) {
            if !lifted {
                down_since = Some(e.t_ms);
                continue;
            }
            // Back up: every session of the server that went down ended with it (a sampler
            // cannot see the lock go while the server is away).
            let down = down_since.take().unwrap_or(e.t_ms);
            for (_, i) in std::mem::take(&mut open) {
                sessions[i].ended_ms.get_or_insert(down);
            }
            serving_since = down;
            continue;
        }
        let What::Locks { rows } = &e.what else {
            continue;
        };
        let held: Vec<(i32, &str)> = (rows.iter())
            .filter(|r| r.1)
            .map(|r| (r.0, r.2.as_str()))
            .collect();
        open.retain(|pid, i| {
            let s = &sessions[*i];
            let still = held
                .iter()
                .any(|(p, app)| p == pid && s.same_holder(app, conns))
                && conns[s.conn]
                    .grant_ended(s.grant)
                    .is_none_or(|end| end > e.t_ms);
            if !still {
                sessions[*i].ended_ms.get_or_insert(e.t_ms);
            }
            still
        });
        for (pid, app) in held {
            if open.contains_key(&pid) {
                continue;
            }
            let Some(s) = granting(conns, pid, app, (serving_since, e.t_ms)) else {
                continue;
            };
            // A grant already named (a sample read before its release took effect) is no
            // new session.
            if (sessions.iter()).any(|o| o.conn == s.conn && o.grant == s.grant) {
                continue;
            }
            open.insert(pid, sessions.len());
            sessions.push(s);
        }
    }
    // It ends at the first of: pg_locks showing it gone (up to a sampling period late), its
    // connection closed, its release answered ([`Conn::grant_ended`]).
    for s in &mut sessions {
        let on_the_wire = conns[s.conn].grant_ended(s.grant);
        s.ended_ms = [s.ended_ms, on_the_wire]
            .into_iter()
            .flatten()
            .reduce(f64::min);
    }
    sessions
}

/// The connection and statement that granted the lock pg_locks showed held by `pid` (named
/// `app`) at `t_ms`: the lock call sent last before it on the holder's connection (the one with
/// its pid, else the replica's by `application_name`), answered after it or without an error.
///
/// Only connections opened since `serving_since` (the server's last start, as far as the
/// timeline shows it) count: a restarted server numbers its backends from the start again, so
/// a pid of a connection to the server before names another backend now.
fn granting(
    conns: &[Conn],
    pid: i32,
    app: &str,
    (serving_since, t_ms): (f64, f64),
) -> Option<LockSession> {
    // A pid names a backend of the server as it runs now only on a connection opened since it
    // started; a client connection to a pooler outlives a restart of the server (the pooler
    // opens new server sessions under it), so connections are found by name whenever they
    // opened, and a lock call counts only if its answer came since the server started.
    let conns_now = |c: &&Conn| c.opened_ms >= serving_since;
    // The connection open then with the holder's pid, of the replica the holder names when it
    // names one (a pid is reused once its backend is gone, and behind PgBouncer the pid a
    // client sees is PgBouncer's own, which may equal another server backend's).
    let named = conns.iter().any(|c| c.replica == app);
    let by_pid = (conns.iter().enumerate().filter(|(_, c)| conns_now(c)))
        .rev()
        .find(|(_, c)| c.pid == Some(pid) && c.open_at(t_ms) && (c.replica == app || !named));
    // A connection of the holder's replica that had the holder's pid and is closed now: the
    // server granted a backend whose client is gone (one blocked in the lock queue does not
    // read its socket, so an X-WAKE waiter of a killed replica can be granted long after):
    // no session of the program holds the lock.
    let gone = || {
        (conns.iter().filter(conns_now))
            .any(|c| c.pid == Some(pid) && c.replica == app && c.opened_ms <= t_ms)
    };
    let candidates: Vec<usize> = match by_pid {
        Some((i, _)) => vec![i],
        None if gone() => return None,
        None => (conns.iter().enumerate())
            .filter(|(_, c)| c.replica == app && c.opened_ms <= t_ms)
            .map(|(i, _)| i)
            .collect(),
    };
    // The lock call sent last before the sample: the server grants it before its answer
    // reaches the proxy, so a sample can show the grant before the wire shows the answer. A
    // connection whose last call was refused (whenever the refusal came) held no key then and
    // asked for none since. A release is no lock call here: a sample read just before an
    // unlock took effect shows the grant before it, not a new one.
    let mut best: Option<(usize, usize, f64)> = None;
    for i in candidates {
        let last = (conns[i].statements.iter().enumerate())
            .rev()
            .find(|(_, s)| {
                let failed = matches!(s.answer, Some((at, _)) if at <= t_ms && !s.succeeded());
                s.asks() && !failed && s.sent_ms <= t_ms
            });
        let Some((j, s)) = last else { continue };
        let since_start = (s.answer.as_ref()).is_none_or(|(at, _)| *at >= serving_since);
        if !refused(s) && since_start && best.is_none_or(|b| s.sent_ms > b.2) {
            best = Some((i, j, s.sent_ms));
        }
    }
    let (conn, grant, _) = best?;
    let granted_ms = conns[conn].statements[grant]
        .answer
        .as_ref()
        .map_or(t_ms, |(at, _)| *at);
    Some(LockSession {
        replica: conns[conn].replica.clone(),
        conn,
        grant,
        granted_ms,
        ended_ms: None,
        token: conns[conn].token_from(grant),
    })
}

/// A server stop or restart in the timeline: `Some(false)` when applied (the server goes
/// down), `Some(true)` when lifted (it answers again).
fn server_down(what: &What) -> Option<bool> {
    match what {
        What::Fault {
            verb: Verb::RestartServer | Verb::StopServer,
            lifted,
            ..
        } => Some(*lifted),
        _ => None,
    }
}

/// Whether a lock call's answer says it was not granted: the spec's `pg_try_advisory_lock`
/// answered false, or this project's elector's `refused`.
fn refused(s: &Stmt) -> bool {
    (s.row().and_then(|r| r.first()?.as_deref())).is_some_and(|v| REFUSED.contains(&v.trim()))
}

/// The answers to a lock call that mean it was refused ([`refused`]).
const REFUSED: [&str; 3] = ["f", "false", "refused"];

/// The answers to a lock call that mean it was granted: the spec's `pg_try_advisory_lock`
/// answered true (`t` in the text format), or the words of this project's elector, whose
/// standby statement answers `granted`, or `unbounded` where the server lacks
/// `idle_session_timeout`.
pub const GRANTED: [&str; 4] = ["t", "true", "granted", "unbounded"];

/// Each grant a replica held, as its wire shows it: `(replica, from, to)`, from the answer of
/// a lock call that granted it ([`GRANTED`], first column) to the first of the connection's
/// close and a later unlock's answer on it ([`Conn::grant_ended`]; `None`: held to the end).
/// What the program believes cannot be seen here; a grant it neither closed nor gave back is
/// one it acts on.
pub fn grants_held(conns: &[Conn]) -> Vec<(String, f64, Option<f64>)> {
    let mut v = Vec::new();
    for c in conns {
        for (i, s) in c.statements.iter().enumerate() {
            let Some((from, _)) = s.answer.as_ref().filter(|_| s.granted()) else {
                continue;
            };
            v.push((c.replica.clone(), *from, c.grant_ended(i)));
        }
    }
    v
}

/// [`grants_held`] by replica, each cut at `until` (when the samplers stopped: the harness
/// stops the replicas after it), for the overlap of two leaders at level 0.
pub fn grant_spans(conns: &[Conn], until: f64) -> BTreeMap<String, Vec<(f64, f64)>> {
    let mut spans: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for (replica, from, to) in grants_held(conns) {
        let to = to.unwrap_or(until).min(until);
        if to > from {
            spans.entry(replica).or_default().push((from, to));
        }
    }
    spans
}

/// Every fault on the timeline as `(verb, target, applied, lifted)`, each one on its own: a
/// verb that acts once (a kill, a backend kill, a SIGTERM, a restart) is lifted as it is
/// applied, and one never lifted lasts to the end. (Unlike [`crate::timeline::fault_spans`],
/// a second kill of the same replica does not hide the first.)
pub fn faults(entries: &[Entry]) -> Vec<(Verb, String, f64, f64)> {
    let end = entries.last().map_or(0.0, |e| e.t_ms);
    let mut open: BTreeMap<(Verb, String), f64> = BTreeMap::new();
    let mut v = Vec::new();
    for e in entries {
        let What::Fault {
            verb,
            target,
            lifted,
        } = &e.what
        else {
            continue;
        };
        if matches!(
            verb,
            Verb::Unlock | Verb::KillBackend | Verb::Kill | Verb::Terminate | Verb::Restart
        ) {
            v.push((*verb, target.clone(), e.t_ms, e.t_ms));
        } else if !lifted {
            open.entry((*verb, target.clone())).or_insert(e.t_ms);
        } else if let Some(applied) = open.remove(&(*verb, target.clone())) {
            v.push((*verb, target.clone(), applied, e.t_ms));
        }
    }
    v.extend(
        open.into_iter()
            .map(|((verb, target), a)| (verb, target, a, end)),
    );
    v
}

/// When the samplers stopped (the last pg_locks or gauge sample): the harness stops the
/// replicas after it, and what they do then is their shutdown.
pub fn sampled_until(entries: &[Entry]) -> f64 {
    (entries.iter().rev())
        .find(|e| matches!(e.what, What::Locks { .. } | What::Gauges { .. }))
        .or(entries.last())
        .map_or(0.0, |e| e.t_ms)
}

/// When each replica closed a connection that held the lock without releasing it first and
/// then took the lock again (a new term, so the old one ended), in time order: a demotion seen
/// on the wire where its gauge may never show the 0 between (the term ended and a new one
/// began within a sampling period). A close with no new term after says nothing of the term
/// (a pool closing the connection under a replica that goes on leading). A close by the
/// kernel as the process died (a `kill` or `restart` of it, within the second after) is no
/// demotion, nor is one in the shutdown after the run.
pub fn lock_closes(entries: &[Entry], wire: &WireModel) -> Vec<(String, f64)> {
    closes(entries, wire, true)
}

/// Every close by a replica of a connection that held the lock, without releasing it first,
/// away from its process's death and before the harness stops the replicas, in time order: a
/// program that shows nothing else (contract level 0) has ended its term there, whether or not
/// it leads again (one that goes on as leader without its lock session fails SESS-1).
pub fn lock_connection_closes(entries: &[Entry], wire: &WireModel) -> Vec<(String, f64)> {
    closes(entries, wire, false)
}

/// [`lock_closes`] (`then_led`: only those after which the replica took the lock again) or
/// [`lock_connection_closes`], over `wire`, the model of `entries`.
fn closes(entries: &[Entry], wire: &WireModel, then_led: bool) -> Vec<(String, f64)> {
    let (conns, sessions) = (&wire.conns, &wire.sessions);
    let until = sampled_until(entries);
    let next_term = |r: &str, after: f64| {
        !then_led
            || sessions
                .iter()
                .any(|l| l.replica == r && l.granted_ms > after)
    };
    let deaths: Vec<(String, f64)> = (crate::timeline::fault_spans(entries).into_iter())
        .filter(|f| {
            matches!(
                f.verb,
                crate::fault::Verb::Kill | crate::fault::Verb::Restart
            )
        })
        .map(|f| (f.target, f.applied_ms))
        .collect();
    let mut v: Vec<(String, f64)> = (sessions.iter())
        .filter_map(|l| {
            let c = &conns[l.conn];
            let released = (c.statements.iter().skip(l.grant + 1)).any(Stmt::unlocks);
            match c.closed {
                Some((at, Closer::Client, _)) if !released && at <= until => {
                    Some((l.replica.clone(), at))
                }
                _ => None,
            }
        })
        .filter(|(r, at)| {
            !deaths
                .iter()
                .any(|(d, k)| d == r && *at >= *k && *at <= k + 1000.0)
        })
        .filter(|(r, at)| next_term(r, *at))
        .collect();
    v.sort_by(|a, b| a.1.total_cmp(&b.1));
    v
}
