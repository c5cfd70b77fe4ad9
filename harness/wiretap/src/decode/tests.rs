//! The tap fed with the bytes clients and servers send: client messages encoded by
//! `postgres-protocol` (tokio-postgres's own encoder), server messages by `pgwire`.

use bytes::BytesMut;
use pgwire::messages::data::{DataRow, FieldDescription, ParameterDescription, RowDescription};
use pgwire::messages::extendedquery::{BindComplete, ParseComplete};
use pgwire::messages::response::{
    CommandComplete, ErrorResponse, ReadyForQuery, SslResponse, TransactionStatus,
};
use pgwire::messages::startup::{BackendKeyData, ParameterStatus, SecretKey};
use pgwire::messages::PgWireBackendMessage as Be;
use postgres_protocol::message::frontend;
use postgres_protocol::IsNull;

use super::Tap;
use crate::record::{Outcome, TxState, WireEvent};

const LOCK: &str = "SELECT pg_try_advisory_lock($1, $2)";

fn server(msgs: Vec<Be>) -> BytesMut {
    let mut buf = BytesMut::new();
    for m in msgs {
        m.encode(&mut buf).expect("encodes");
    }
    buf
}

fn startup(buf: &mut BytesMut, app: &str) {
    frontend::startup_message(
        [
            ("user", "app"),
            ("database", "plexsphere"),
            ("application_name", app),
        ],
        buf,
    )
    .expect("encodes");
}

fn ready(status: TransactionStatus) -> Be {
    Be::ReadyForQuery(ReadyForQuery::new(status))
}

fn bool_column() -> Be {
    Be::RowDescription(RowDescription::new(vec![FieldDescription::new(
        "pg_try_advisory_lock".into(),
        0,
        0,
        16,
        1,
        -1,
        1,
    )]))
}

fn row(fields: &[Option<&[u8]>]) -> Be {
    let mut data = BytesMut::new();
    for f in fields {
        match f {
            Some(v) => {
                data.extend_from_slice(&(v.len() as i32).to_be_bytes());
                data.extend_from_slice(v);
            }
            None => data.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    Be::DataRow(DataRow::new(data, fields.len() as i16))
}

fn complete(tag: &str) -> Be {
    Be::CommandComplete(CommandComplete::new(tag.into()))
}

fn error(code: &str, message: &str) -> Be {
    Be::ErrorResponse(ErrorResponse::new(vec![
        (b'S', "ERROR".into()),
        (b'C', code.into()),
        (b'M', message.into()),
    ]))
}

/// A bound lock call with binary int4 parameters, as tokio-postgres sends it once prepared.
fn bind_lock(buf: &mut BytesMut, statement: &str) {
    let values = [1886156915i32, 1];
    frontend::bind(
        "",
        statement,
        [1i16],
        values.iter(),
        |v, buf| {
            buf.extend_from_slice(&v.to_be_bytes());
            Ok(IsNull::No)
        },
        [1i16],
        buf,
    )
    .map_err(|_| "bind")
    .expect("encodes");
}

/// A tap past the login of `r1`.
fn logged_in() -> Tap {
    let mut tap = Tap::new();
    let mut c = BytesMut::new();
    startup(&mut c, "r1");
    feed(&mut tap, &c, &server(vec![ready(TransactionStatus::Idle)]));
    tap
}

fn feed(tap: &mut Tap, client: &[u8], server: &[u8]) -> Vec<WireEvent> {
    let mut out = Vec::new();
    tap.from_client(client, &mut out);
    tap.from_server(server, &mut out);
    out
}

#[test]
fn a_login_shows_who_connects_and_the_server_pid() {
    let mut tap = Tap::new();
    let mut c = BytesMut::new();
    startup(&mut c, "r1");
    let s = server(vec![
        Be::ParameterStatus(ParameterStatus::new("server_version".into(), "15.8".into())),
        Be::ParameterStatus(ParameterStatus::new("application_name".into(), "r1".into())),
        Be::BackendKeyData(BackendKeyData::new(4242, SecretKey::I32(7))),
        ready(TransactionStatus::Idle),
    ]);
    let out = feed(&mut tap, &c, &s);
    assert_eq!(
        out,
        vec![
            WireEvent::Startup {
                user: Some("app".into()),
                database: Some("plexsphere".into()),
                application_name: Some("r1".into()),
                options: None,
            },
            WireEvent::Parameter {
                name: "application_name".into(),
                value: "r1".into()
            },
            WireEvent::Backend { pid: 4242 },
            WireEvent::Ready { tx: TxState::Idle },
        ]
    );
}

/// A `NOTIFY` delivered to a listening session shows with its channel, in the order the server
/// sent it (X-WAKE's wake-up is timed by it).
#[test]
fn a_notification_shows_its_channel() {
    use pgwire::messages::response::NotificationResponse;
    let mut tap = Tap::new();
    let mut c = BytesMut::new();
    startup(&mut c, "r1");
    let s = server(vec![
        Be::BackendKeyData(BackendKeyData::new(4242, SecretKey::I32(7))),
        ready(TransactionStatus::Idle),
        Be::NotificationResponse(NotificationResponse::new(
            4343,
            "background_leader".into(),
            "released".into(),
        )),
    ]);
    let out = feed(&mut tap, &c, &s);
    assert_eq!(
        out[2..],
        [
            WireEvent::Ready { tx: TxState::Idle },
            WireEvent::Notified {
                channel: "background_leader".into()
            },
        ]
    );
}

#[test]
fn a_refused_ssl_request_is_followed_by_the_startup() {
    let mut tap = Tap::new();
    let mut c = BytesMut::new();
    frontend::ssl_request(&mut c);
    let mut out = Vec::new();
    tap.from_client(&c, &mut out);
    tap.from_server(
        &server(vec![Be::SslResponse(SslResponse::Refuse)]),
        &mut out,
    );
    let mut c = BytesMut::new();
    startup(&mut c, "r2");
    tap.from_client(&c, &mut out);
    assert!(
        matches!(&out[..], [WireEvent::Startup { application_name: Some(a), .. }] if a == "r2"),
        "{out:?}"
    );
}

#[test]
fn an_accepted_ssl_request_stops_the_decoding_and_says_why() {
    let mut tap = Tap::new();
    let mut c = BytesMut::new();
    frontend::ssl_request(&mut c);
    let mut out = Vec::new();
    tap.from_client(&c, &mut out);
    tap.from_server(
        &server(vec![Be::SslResponse(SslResponse::Accept)]),
        &mut out,
    );
    tap.from_client(b"\x16\x03\x01 a TLS hello", &mut out);
    assert_eq!(out.len(), 2, "{out:?}");
    assert!(out.iter().all(
        |e| matches!(e, WireEvent::Undecoded { reason, .. } if reason.contains("sslmode=disable"))
    ));
}

#[test]
fn an_extended_lock_call_shows_its_key_and_its_answer() {
    let mut tap = logged_in();
    // Prepared first (Parse, Describe, Sync), as tokio-postgres and pgx do.
    let mut c = BytesMut::new();
    frontend::parse("s0", LOCK, [], &mut c).expect("encodes");
    frontend::describe(b'S', "s0", &mut c).expect("encodes");
    frontend::sync(&mut c);
    let s = server(vec![
        Be::ParseComplete(ParseComplete::new()),
        Be::ParameterDescription(ParameterDescription::new(vec![23, 23])),
        bool_column(),
        ready(TransactionStatus::Idle),
    ]);
    assert_eq!(feed(&mut tap, &c, &s), vec![]);
    let mut c = BytesMut::new();
    bind_lock(&mut c, "s0");
    frontend::execute("", 0, &mut c).expect("encodes");
    frontend::sync(&mut c);
    let s = server(vec![
        Be::BindComplete(BindComplete::new()),
        row(&[Some(&[1])]),
        complete("SELECT 1"),
        ready(TransactionStatus::Idle),
    ]);
    assert_eq!(
        feed(&mut tap, &c, &s),
        vec![
            WireEvent::Statement {
                id: 1,
                sql: LOCK.into(),
                params: vec![Some("1886156915".into()), Some("1".into())],
            },
            WireEvent::Answer {
                id: 1,
                outcome: Outcome::Done {
                    tags: vec!["SELECT 1".into()],
                    rows: 1,
                    row: Some(vec![Some("t".into())]),
                },
            },
        ]
    );
}

#[test]
fn a_simple_query_is_answered_at_its_ready_for_query_with_every_tag() {
    let mut tap = logged_in();
    let mut c = BytesMut::new();
    frontend::query("BEGIN; SELECT pg_advisory_xact_lock(1); SELECT 1", &mut c).expect("x");
    let text_int = Be::RowDescription(RowDescription::new(vec![FieldDescription::new(
        "?column?".into(),
        0,
        0,
        23,
        4,
        -1,
        0,
    )]));
    let s = server(vec![
        complete("BEGIN"),
        Be::RowDescription(RowDescription::new(vec![FieldDescription::new(
            "pg_advisory_xact_lock".into(),
            0,
            0,
            2278,
            4,
            -1,
            0,
        )])),
        row(&[Some(b"")]),
        complete("SELECT 1"),
        text_int,
        row(&[Some(b"1")]),
        complete("SELECT 1"),
        ready(TransactionStatus::Transaction),
    ]);
    let out = feed(&mut tap, &c, &s);
    assert!(
        matches!(&out[1], WireEvent::Answer { id: 1, outcome: Outcome::Done { tags, rows: 2, row: None } }
            if tags.len() == 3),
        "{out:?}"
    );
    assert_eq!(
        out[2],
        WireEvent::Ready {
            tx: TxState::InTransaction
        }
    );
}

#[test]
fn an_error_answers_its_statement_and_skips_the_rest_of_the_pipeline() {
    let mut tap = logged_in();
    let mut c = BytesMut::new();
    for sql in ["SELECT 1/0", "SELECT 2"] {
        frontend::parse("", sql, [], &mut c).expect("encodes");
        frontend::bind(
            "",
            "",
            [],
            [0i32; 0].iter(),
            |_, _| Ok(IsNull::No),
            [],
            &mut c,
        )
        .map_err(|_| "bind")
        .expect("encodes");
        frontend::execute("", 0, &mut c).expect("encodes");
    }
    frontend::sync(&mut c);
    let s = server(vec![
        Be::ParseComplete(ParseComplete::new()),
        Be::BindComplete(BindComplete::new()),
        error("22012", "division by zero"),
        ready(TransactionStatus::Idle),
    ]);
    let out = feed(&mut tap, &c, &s);
    let answers: Vec<&Outcome> = (out.iter())
        .filter_map(|e| match e {
            WireEvent::Answer { outcome, .. } => Some(outcome),
            _ => None,
        })
        .collect();
    assert_eq!(
        answers,
        vec![
            &Outcome::Error {
                code: "22012".into(),
                message: "division by zero".into()
            },
            &Outcome::Skipped
        ]
    );
}

#[test]
fn the_server_ending_an_idle_session_is_an_error_for_no_statement() {
    let mut tap = Tap::new();
    let s = server(vec![Be::ErrorResponse(ErrorResponse::new(vec![
        (b'S', "FATAL".into()),
        (b'C', "57P05".into()),
        (
            b'M',
            "terminating connection due to idle-session timeout".into(),
        ),
    ]))]);
    let out = feed(&mut tap, &[], &s);
    assert!(
        matches!(&out[..], [WireEvent::ServerError { code, .. }] if code == "57P05"),
        "{out:?}"
    );
}

#[test]
fn byte_by_byte_gives_what_one_chunk_gives() {
    let mut c = BytesMut::new();
    startup(&mut c, "r1");
    frontend::parse("", LOCK, [23, 23], &mut c).expect("encodes");
    bind_lock(&mut c, "");
    frontend::describe(b'P', "", &mut c).expect("encodes");
    frontend::execute("", 0, &mut c).expect("encodes");
    frontend::sync(&mut c);
    frontend::terminate(&mut c);
    let s = server(vec![
        Be::BackendKeyData(BackendKeyData::new(9, SecretKey::I32(1))),
        ready(TransactionStatus::Idle),
        Be::ParseComplete(ParseComplete::new()),
        Be::BindComplete(BindComplete::new()),
        bool_column(),
        row(&[Some(&[0])]),
        complete("SELECT 1"),
        ready(TransactionStatus::Idle),
    ]);
    let mut whole = Tap::new();
    let at_once = feed(&mut whole, &c, &s);
    let mut bytes = Tap::new();
    let mut one_by_one = Vec::new();
    for b in c.iter() {
        bytes.from_client(std::slice::from_ref(b), &mut one_by_one);
    }
    for b in s.iter() {
        bytes.from_server(std::slice::from_ref(b), &mut one_by_one);
    }
    assert_eq!(at_once, one_by_one);
    assert!(whole.terminated() && bytes.terminated());
    assert!(at_once.contains(&WireEvent::Answer {
        id: 1,
        outcome: Outcome::Done {
            tags: vec!["SELECT 1".into()],
            rows: 1,
            row: Some(vec![Some("f".into())])
        }
    }));
}

#[test]
fn garbage_is_undecoded_once_and_never_panics() {
    let mut tap = Tap::new();
    let mut out = Vec::new();
    tap.from_client(&[0, 0, 0, 9, 0xff, 0xff, 0xff, 0xff, 0xff], &mut out);
    tap.from_client(b"more", &mut out);
    let mut s = Vec::new();
    tap.from_server(b"Z\x00\x00\x00\x05", &mut s);
    tap.from_server(b"\x01\xff\xff\xff\xff\xff\xff\xff", &mut s);
    assert_eq!(
        out.iter()
            .filter(|e| matches!(e, WireEvent::Undecoded { .. }))
            .count(),
        1,
        "{out:?}"
    );
    assert!(
        s.iter()
            .filter(|e| matches!(e, WireEvent::Undecoded { .. }))
            .count()
            <= 1,
        "{s:?}"
    );
}

/// tokio-postgres's `query_typed`: Parse, Bind, Describe of the statement, Execute, Sync in
/// one flight, so the result types arrive after the Bind.
#[test]
fn a_statement_described_after_its_bind_still_types_the_rows() {
    let mut tap = logged_in();
    let mut c = BytesMut::new();
    frontend::parse(
        "",
        "SELECT count(*) FROM leader_work WHERE loop_name = $1",
        [25],
        &mut c,
    )
    .expect("encodes");
    frontend::bind(
        "",
        "",
        [1i16],
        ["sweep"].iter(),
        |v, buf| {
            buf.extend_from_slice(v.as_bytes());
            Ok(IsNull::No)
        },
        [1i16],
        &mut c,
    )
    .map_err(|_| "bind")
    .expect("encodes");
    frontend::describe(b'S', "", &mut c).expect("encodes");
    frontend::execute("", 0, &mut c).expect("encodes");
    frontend::sync(&mut c);
    let s = server(vec![
        Be::ParseComplete(ParseComplete::new()),
        Be::BindComplete(BindComplete::new()),
        Be::ParameterDescription(ParameterDescription::new(vec![25])),
        Be::RowDescription(RowDescription::new(vec![FieldDescription::new(
            "count".into(),
            0,
            0,
            20,
            8,
            -1,
            0,
        )])),
        row(&[Some(&7i64.to_be_bytes())]),
        complete("SELECT 1"),
        ready(TransactionStatus::Idle),
    ]);
    let out = feed(&mut tap, &c, &s);
    assert!(
        out.contains(&WireEvent::Answer {
            id: 1,
            outcome: Outcome::Done {
                tags: vec!["SELECT 1".into()],
                rows: 1,
                row: Some(vec![Some("7".into())])
            }
        }),
        "{out:?}"
    );
}

/// The elector's first check is its lock statement and `SHOW server_version_num` in one simple
/// Query: its answer carries the lock statement's row, which says whether the lock was granted.
#[test]
fn a_simple_query_of_several_statements_keeps_its_first_statements_row() {
    let mut tap = logged_in();
    let mut c = BytesMut::new();
    frontend::query(
        "SELECT CASE WHEN pg_try_advisory_lock(1886156915, 1) THEN 'granted' ELSE 'refused' END, pg_backend_pid(); SHOW server_version_num",
        &mut c,
    )
    .expect("x");
    let column = |name: &str, oid: u32| FieldDescription::new(name.into(), 0, 0, oid, -1, -1, 0);
    let s = server(vec![
        Be::RowDescription(RowDescription::new(vec![
            column("case", 25),
            column("pg_backend_pid", 23),
        ])),
        row(&[Some(b"granted"), Some(b"4242")]),
        complete("SELECT 1"),
        Be::RowDescription(RowDescription::new(vec![column("server_version_num", 25)])),
        row(&[Some(b"150004")]),
        complete("SHOW"),
        ready(TransactionStatus::Idle),
    ]);
    let out = feed(&mut tap, &c, &s);
    assert!(
        matches!(&out[1], WireEvent::Answer { id: 1, outcome: Outcome::Done { rows: 2, row: Some(r), .. } }
            if r == &vec![Some("granted".to_owned()), Some("4242".to_owned())]),
        "{out:?}"
    );
}
