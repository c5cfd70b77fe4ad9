//! [`Tap`]: the PostgreSQL conversation of one proxied connection, turned into [`WireEvent`]s.
//!
//! The messages are decoded by the `pgwire` crate (both directions); the tap only pairs them:
//! it keeps the prepared statements and portals a client declares (their SQL, their parameter
//! and result types), queues what the client asked for in order, and matches the server's
//! answers to it as the protocol lays them out (each Parse, Bind and Close answered by its
//! completion, each Describe by its descriptions, each Execute by its rows and its completion
//! or error, each Sync and each simple Query by a ReadyForQuery; an error in an extended-query
//! pipeline skips everything up to its Sync).
//!
//! The tap never changes the bytes: the proxy forwards them whatever the tap makes of them. A
//! direction it cannot decode (TLS, or a message `pgwire` refuses) is recorded as
//! [`WireEvent::Undecoded`] and left alone from then on.

use std::collections::{HashMap, VecDeque};

use bytes::BytesMut;
use pgwire::messages::extendedquery::{Bind, Parse};
use pgwire::messages::response::{GssEncResponse, SslResponse, TransactionStatus};
use pgwire::messages::startup::Startup;
use pgwire::messages::{
    DecodeContext, PgWireBackendMessage as Be, PgWireFrontendMessage as Fe,
    SslNegotiationMetaMessage,
};

use crate::record::{Outcome, TxState, WireEvent, MAX_TEXT};
use crate::value::{cut, format_of, render};

/// The most bytes a direction may hold undecoded, waiting for the rest of a message.
const MAX_BUFFERED: usize = 64 * 1024 * 1024;

/// A statement the client prepared (Parse).
#[derive(Debug, Default)]
struct Prepared {
    sql: String,
    param_types: Vec<u32>,
    result_types: Vec<u32>,
}

/// A portal the client bound (Bind).
#[derive(Debug, Default)]
struct Portal {
    /// The statement it was bound from: its result types, when a Describe of the statement
    /// is answered only after the Bind (tokio-postgres's `query_typed` pipelines Parse, Bind,
    /// Describe, Execute).
    statement: String,
    sql: String,
    params: Vec<Option<String>>,
    result_formats: Vec<i16>,
    result_types: Vec<u32>,
}

/// The rows and completions gathered for a statement until its answer is complete.
#[derive(Debug, Default)]
struct Gathered {
    tags: Vec<String>,
    rows: u64,
    first: Option<Vec<Option<String>>>,
    /// The rows of the first result, once it completed (a simple Query may hold several
    /// statements: the elector's first check is its lock statement and `SHOW
    /// server_version_num` in one message).
    first_result_rows: Option<u64>,
    error: Option<(String, String)>,
    /// The columns of a simple Query's current result: type and format.
    columns: Vec<(u32, i16)>,
}

impl Gathered {
    fn row(&mut self, row: Vec<Option<String>>) {
        self.rows += 1;
        if self.rows == 1 {
            self.first = Some(row);
        }
    }

    fn outcome(self) -> Outcome {
        match self.error {
            Some((code, message)) => Outcome::Error { code, message },
            None => Outcome::Done {
                tags: self.tags,
                rows: self.rows,
                row: if self.first_result_rows.unwrap_or(self.rows) == 1 {
                    self.first
                } else {
                    None
                },
            },
        }
    }
}

/// What the client asked for and the server has not answered yet, in order.
#[derive(Debug)]
enum Pending {
    Parse,
    Bind,
    Close,
    DescribeStatement(String),
    DescribePortal(String),
    Execute {
        id: u64,
        portal: String,
        got: Gathered,
    },
    Sync,
    Query {
        id: u64,
        got: Gathered,
    },
}

/// One direction's undecoded bytes.
#[derive(Debug, Default)]
struct Side {
    buf: BytesMut,
    /// The tap gave up on this direction.
    off: bool,
}

/// The decoder of one connection. Feed it what each side sent, in the order the proxy read it.
#[derive(Debug)]
pub struct Tap {
    client: Side,
    server: Side,
    fe: DecodeContext,
    be: DecodeContext,
    statements: HashMap<String, Prepared>,
    portals: HashMap<String, Portal>,
    pending: VecDeque<Pending>,
    /// An extended-query message failed and no Sync has come since: the server ignores
    /// everything up to the next Sync.
    skipping: bool,
    last_id: u64,
    /// The transaction state of the last ReadyForQuery; `None` until the login's.
    tx: Option<TxState>,
    terminated: bool,
}

impl Default for Tap {
    fn default() -> Self {
        Self::new()
    }
}

impl Tap {
    /// A tap for a connection that has just opened.
    pub fn new() -> Self {
        Tap {
            client: Side::default(),
            server: Side::default(),
            fe: DecodeContext::default(),
            be: DecodeContext::default(),
            statements: HashMap::new(),
            portals: HashMap::new(),
            pending: VecDeque::new(),
            skipping: false,
            last_id: 0,
            tx: None,
            terminated: false,
        }
    }

    /// Whether the client sent Terminate (said goodbye before closing).
    pub fn terminated(&self) -> bool {
        self.terminated
    }

    /// Whether the session is idle between the client's statements: logged in, the last
    /// ReadyForQuery outside a transaction, nothing the client sent unanswered, no part of a
    /// message held on either side, and both directions decoded (so a statement of the
    /// proxy's own can run there without the client's knowing).
    pub fn idle(&self) -> bool {
        self.tx == Some(TxState::Idle)
            && self.pending.is_empty()
            && !self.skipping
            && !self.terminated
            && (self.client.buf.is_empty() && !self.client.off)
            && (self.server.buf.is_empty() && !self.server.off)
    }

    /// Decodes what the client sent; appends the events to `out`; returns how many messages
    /// it decoded.
    pub fn from_client(&mut self, data: &[u8], out: &mut Vec<WireEvent>) -> usize {
        if !feed(&mut self.client, data, true, out) {
            return 0;
        }
        let mut n = 0;
        loop {
            let decoded =
                guarded(|| Fe::decode(&mut self.client.buf, &self.fe).map_err(|e| e.to_string()));
            match decoded {
                Ok(Some(m)) => {
                    n += 1;
                    self.client_message(m, out);
                }
                Ok(None) => return n,
                Err(reason) => {
                    give_up(&mut self.client, true, reason, out);
                    return n;
                }
            }
            if self.client.off {
                return n;
            }
        }
    }

    /// Decodes what the server sent; appends the events to `out`; returns how many messages
    /// it decoded.
    pub fn from_server(&mut self, data: &[u8], out: &mut Vec<WireEvent>) -> usize {
        if !feed(&mut self.server, data, false, out) {
            return 0;
        }
        let mut n = 0;
        loop {
            let decoded =
                guarded(|| Be::decode(&mut self.server.buf, &self.be).map_err(|e| e.to_string()));
            match decoded {
                Ok(Some(m)) => {
                    n += 1;
                    self.server_message(m, out);
                }
                Ok(None) => return n,
                Err(reason) => {
                    give_up(&mut self.server, false, reason, out);
                    return n;
                }
            }
            if self.server.off {
                return n;
            }
        }
    }

    fn next_id(&mut self) -> u64 {
        self.last_id += 1;
        self.last_id
    }

    fn client_message(&mut self, m: Fe, out: &mut Vec<WireEvent>) {
        if self.skipping && skipped_while_failed(&m) {
            if let Fe::Execute(e) = &m {
                let (sql, params) = self.portal_text(e.name.as_deref());
                let id = self.next_id();
                out.push(WireEvent::Statement { id, sql, params });
                out.push(WireEvent::Answer {
                    id,
                    outcome: Outcome::Skipped,
                });
            }
            return;
        }
        match m {
            Fe::SslNegotiation(SslNegotiationMetaMessage::PostgresSsl(_)) => {
                self.be.awaiting_backend_ssl_response = true;
            }
            Fe::SslNegotiation(SslNegotiationMetaMessage::PostgresGss(_)) => {
                self.be.awaiting_backend_gss_response = true;
            }
            Fe::SslNegotiation(SslNegotiationMetaMessage::None) => {
                self.fe.awaiting_frontend_ssl = false;
            }
            Fe::Startup(s) => {
                self.fe.awaiting_frontend_ssl = false;
                self.fe.awaiting_frontend_startup = false;
                out.push(startup(&s));
            }
            Fe::CancelRequest(c) => {
                self.fe.awaiting_frontend_startup = false;
                out.push(WireEvent::Cancel { pid: c.pid });
            }
            Fe::Query(q) => {
                let id = self.next_id();
                out.push(WireEvent::Statement {
                    id,
                    sql: cut(q.query),
                    params: Vec::new(),
                });
                self.pending.push_back(Pending::Query {
                    id,
                    got: Gathered::default(),
                });
            }
            Fe::Parse(p) => {
                self.parse(p);
                self.pending.push_back(Pending::Parse);
            }
            Fe::Bind(b) => {
                self.bind(b);
                self.pending.push_back(Pending::Bind);
            }
            Fe::Describe(d) => {
                let name = d.name.unwrap_or_default();
                self.pending.push_back(if d.target_type == b'S' {
                    Pending::DescribeStatement(name)
                } else {
                    Pending::DescribePortal(name)
                });
            }
            Fe::Execute(e) => {
                let portal = e.name.unwrap_or_default();
                let (sql, params) = self.portal_text(Some(&portal));
                let id = self.next_id();
                out.push(WireEvent::Statement { id, sql, params });
                self.pending.push_back(Pending::Execute {
                    id,
                    portal,
                    got: Gathered::default(),
                });
            }
            Fe::Close(c) => {
                let name = c.name.unwrap_or_default();
                if c.target_type == b'S' {
                    self.statements.remove(&name);
                } else {
                    self.portals.remove(&name);
                }
                self.pending.push_back(Pending::Close);
            }
            Fe::Sync(_) => {
                self.skipping = false;
                self.pending.push_back(Pending::Sync);
            }
            Fe::Terminate(_) => self.terminated = true,
            _ => {}
        }
    }

    fn parse(&mut self, p: Parse) {
        let prepared = Prepared {
            sql: cut(p.query),
            param_types: p.type_oids,
            result_types: Vec::new(),
        };
        self.statements.insert(p.name.unwrap_or_default(), prepared);
    }

    fn bind(&mut self, b: Bind) {
        let statement = self
            .statements
            .get(b.statement_name.as_deref().unwrap_or_default());
        let types = statement.map(|s| s.param_types.as_slice()).unwrap_or(&[]);
        let params = (b.parameters.iter().enumerate())
            .map(|(i, v)| {
                v.as_ref().map(|raw| {
                    let oid = types.get(i).copied().unwrap_or(0);
                    render(raw, format_of(&b.parameter_format_codes, i), oid)
                })
            })
            .collect();
        let portal = Portal {
            statement: b.statement_name.clone().unwrap_or_default(),
            sql: statement.map(|s| s.sql.clone()).unwrap_or_default(),
            params,
            result_formats: b.result_column_format_codes,
            result_types: statement
                .map(|s| s.result_types.clone())
                .unwrap_or_default(),
        };
        self.portals
            .insert(b.portal_name.unwrap_or_default(), portal);
    }

    fn portal_text(&self, name: Option<&str>) -> (String, Vec<Option<String>>) {
        self.portals
            .get(name.unwrap_or_default())
            .map(|p| (p.sql.clone(), p.params.clone()))
            .unwrap_or_default()
    }

    fn server_message(&mut self, m: Be, out: &mut Vec<WireEvent>) {
        match m {
            Be::SslResponse(r) => {
                self.be.awaiting_backend_ssl_response = false;
                if matches!(r, SslResponse::Accept) {
                    self.encrypted(out);
                }
            }
            Be::GssEncResponse(r) => {
                self.be.awaiting_backend_gss_response = false;
                if matches!(r, GssEncResponse::Accept) {
                    self.encrypted(out);
                }
            }
            Be::ParameterStatus(p) if p.name == "application_name" => {
                out.push(WireEvent::Parameter {
                    name: p.name,
                    value: cut(p.value),
                });
            }
            Be::BackendKeyData(k) => out.push(WireEvent::Backend { pid: k.pid }),
            Be::NotificationResponse(n) => out.push(WireEvent::Notified {
                channel: cut(n.channel),
            }),
            Be::ParseComplete(_) => self.pop_if(|p| matches!(p, Pending::Parse)),
            Be::BindComplete(_) => self.pop_if(|p| matches!(p, Pending::Bind)),
            Be::CloseComplete(_) => self.pop_if(|p| matches!(p, Pending::Close)),
            Be::ParameterDescription(d) => {
                if let Some(Pending::DescribeStatement(name)) = self.pending.front() {
                    if let Some(s) = self.statements.get_mut(name) {
                        s.param_types = d.types;
                    }
                }
            }
            Be::RowDescription(r) => {
                let columns: Vec<(u32, i16)> = r
                    .fields
                    .iter()
                    .map(|f| (f.type_id, f.format_code))
                    .collect();
                self.described(Some(columns));
            }
            Be::NoData(_) => self.described(None),
            Be::DataRow(d) => self.data_row(d),
            Be::CommandComplete(c) => self.completed(Some(c.tag), out),
            Be::EmptyQueryResponse(_) => self.completed(None, out),
            Be::PortalSuspended(_) => self.completed(Some("SUSPENDED".into()), out),
            Be::ErrorResponse(e) => {
                let field = |k: u8| {
                    (e.fields.iter())
                        .find(|(c, _)| *c == k)
                        .map(|(_, v)| cut(v.clone()))
                        .unwrap_or_default()
                };
                self.failed(field(b'C'), field(b'M'), out);
            }
            Be::ReadyForQuery(r) => self.ready(r.status, out),
            _ => {}
        }
    }

    fn encrypted(&mut self, out: &mut Vec<WireEvent>) {
        let reason = "the connection is encrypted (TLS or GSS): ask for sslmode=disable";
        give_up(&mut self.client, true, reason.into(), out);
        give_up(&mut self.server, false, reason.into(), out);
    }

    fn pop_if(&mut self, f: impl Fn(&Pending) -> bool) {
        if self.pending.front().is_some_and(f) {
            self.pending.pop_front();
        }
    }

    /// A RowDescription (`Some`) or NoData answered a Describe, or a simple Query's result
    /// begins.
    fn described(&mut self, columns: Option<Vec<(u32, i16)>>) {
        match self.pending.front_mut() {
            Some(Pending::DescribeStatement(name)) => {
                let types = columns.unwrap_or_default().iter().map(|c| c.0).collect();
                if let Some(s) = self.statements.get_mut(name.as_str()) {
                    s.result_types = types;
                }
                self.pending.pop_front();
            }
            Some(Pending::DescribePortal(name)) => {
                let types = columns.unwrap_or_default().iter().map(|c| c.0).collect();
                if let Some(p) = self.portals.get_mut(name.as_str()) {
                    p.result_types = types;
                }
                self.pending.pop_front();
            }
            Some(Pending::Query { got, .. }) => got.columns = columns.unwrap_or_default(),
            _ => {}
        }
    }

    fn data_row(&mut self, d: pgwire::messages::data::DataRow) {
        let fields = fields_of(&d.data, d.field_count);
        match self.pending.front_mut() {
            Some(Pending::Execute { portal, got, .. }) => {
                let p = self.portals.get(portal.as_str());
                let of_statement = || {
                    let s = p.and_then(|p| self.statements.get(&p.statement));
                    s.map(|s| s.result_types.as_slice()).unwrap_or(&[])
                };
                let types = match p.map(|p| p.result_types.as_slice()) {
                    Some(t) if !t.is_empty() => t,
                    _ => of_statement(),
                };
                let formats = p.map(|p| p.result_formats.as_slice()).unwrap_or(&[]);
                let row = (fields.iter().enumerate())
                    .map(|(i, f)| {
                        let oid = types.get(i).copied().unwrap_or(0);
                        f.map(|raw| render(raw, format_of(formats, i), oid))
                    })
                    .collect();
                got.row(row);
            }
            Some(Pending::Query { got, .. }) => {
                let row = (fields.iter().enumerate())
                    .map(|(i, f)| {
                        let (oid, format) = got.columns.get(i).copied().unwrap_or((0, 0));
                        f.map(|raw| render(raw, format, oid))
                    })
                    .collect();
                got.row(row);
            }
            _ => {}
        }
    }

    /// A CommandComplete (its tag), an EmptyQueryResponse (`None`) or a PortalSuspended.
    fn completed(&mut self, tag: Option<String>, out: &mut Vec<WireEvent>) {
        match self.pending.front_mut() {
            Some(Pending::Execute { .. }) => {
                if let Some(Pending::Execute { id, mut got, .. }) = self.pending.pop_front() {
                    got.tags.extend(tag);
                    out.push(WireEvent::Answer {
                        id,
                        outcome: got.outcome(),
                    });
                }
            }
            Some(Pending::Query { got, .. }) => {
                got.tags.extend(tag);
                got.first_result_rows.get_or_insert(got.rows);
                got.columns.clear();
            }
            _ => {}
        }
    }

    fn failed(&mut self, code: String, message: String, out: &mut Vec<WireEvent>) {
        match self.pending.front_mut() {
            Some(Pending::Query { got, .. }) => got.error = Some((code, message)),
            None | Some(Pending::Sync) => out.push(WireEvent::ServerError { code, message }),
            Some(_) => {
                // Extended query: the failing message and everything up to its Sync are
                // not run. The first Execute among them carries the error (its statement
                // failed, whether at Parse, Bind or Execute); any later one never ran.
                let mut error = Some((code, message));
                while let Some(p) = self.pending.front() {
                    if matches!(p, Pending::Sync) {
                        break;
                    }
                    if let Some(Pending::Execute { id, .. }) = self.pending.pop_front() {
                        let outcome = match error.take() {
                            Some((code, message)) => Outcome::Error { code, message },
                            None => Outcome::Skipped,
                        };
                        out.push(WireEvent::Answer { id, outcome });
                    }
                }
                if let Some((code, message)) = error {
                    out.push(WireEvent::ServerError { code, message });
                }
                self.skipping = !self.pending.iter().any(|p| matches!(p, Pending::Sync));
            }
        }
    }

    fn ready(&mut self, status: TransactionStatus, out: &mut Vec<WireEvent>) {
        // The first one ends the login and answers nothing the client queued after it; any
        // later one answers a Sync or a Query, and whatever still waited before it is done.
        let login = self.tx.is_none();
        while let Some(p) = self.pending.pop_front().filter(|_| !login) {
            match p {
                Pending::Sync => break,
                Pending::Query { id, got } => {
                    out.push(WireEvent::Answer {
                        id,
                        outcome: got.outcome(),
                    });
                    break;
                }
                _ => {}
            }
        }
        let tx = match status {
            TransactionStatus::Idle => TxState::Idle,
            TransactionStatus::Transaction => TxState::InTransaction,
            TransactionStatus::Error => TxState::Failed,
        };
        if self.tx != Some(tx) {
            self.tx = Some(tx);
            out.push(WireEvent::Ready { tx });
        }
    }
}

/// What the server ignores while it skips to the next Sync after an error.
fn skipped_while_failed(m: &Fe) -> bool {
    matches!(
        m,
        Fe::Parse(_) | Fe::Bind(_) | Fe::Describe(_) | Fe::Execute(_) | Fe::Close(_)
    )
}

fn startup(s: &Startup) -> WireEvent {
    let get = |k: &str| s.parameters.get(k).map(|v| cut(v.clone()));
    WireEvent::Startup {
        user: get("user"),
        database: get("database"),
        application_name: get("application_name"),
        options: get("options"),
    }
}

/// The fields of a DataRow's body: each a length (-1: NULL) and its bytes.
fn fields_of(data: &[u8], count: i16) -> Vec<Option<&[u8]>> {
    let mut fields = Vec::with_capacity(count.max(0) as usize);
    let mut rest = data;
    for _ in 0..count.max(0) {
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            break;
        };
        let len = i32::from_be_bytes(*len);
        if len < 0 {
            fields.push(None);
            rest = tail;
            continue;
        }
        let len = (len as usize).min(tail.len());
        let (value, tail) = tail.split_at(len);
        fields.push(Some(&value[..value.len().min(MAX_TEXT)]));
        rest = tail;
    }
    fields
}

/// Appends `data` to a direction's buffer unless the tap gave up on it; false when it is off.
fn feed(side: &mut Side, data: &[u8], from_client: bool, out: &mut Vec<WireEvent>) -> bool {
    if side.off {
        return false;
    }
    if side.buf.len() + data.len() > MAX_BUFFERED {
        let reason = format!("a message longer than {MAX_BUFFERED} bytes");
        give_up(side, from_client, reason, out);
        return false;
    }
    side.buf.extend_from_slice(data);
    true
}

fn give_up(side: &mut Side, from_client: bool, reason: String, out: &mut Vec<WireEvent>) {
    if side.off {
        return;
    }
    side.off = true;
    side.buf = BytesMut::new();
    out.push(WireEvent::Undecoded {
        from_client,
        reason,
    });
}

/// Runs a decoding step; a panic inside the decoder (it reads fields with `bytes`' panicking
/// getters, and a malformed message can be shorter than its fields) is an error, never a
/// dead connection.
fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err("the decoder panicked on a malformed message".into()))
}

#[cfg(test)]
mod tests;
