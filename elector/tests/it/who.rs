//! X-WHO (beyond the spec): the lock session carries the replica's identity as its
//! `application_name`, and `Elector::who_leads` says which replica leads.
//!
//! The names are read back with the spec's leader query and the test's own `pg_stat_activity`
//! query, not with the crate's statements. Each pool names its connections differently from
//! its elector's identity, so only the elector can have put the identity on a session.

use elector::who::Leader;
use elector::{Config, Elector, Error, Role};

use crate::fixture::*;

/// An elector on `pg` whose pool names its connections `pool_name`, with `identity` if any.
async fn named(pg: &Pg, pool_name: &str, identity: Option<&str>) -> Elector {
    let pool = pool_for(&pg.url(), pool_name, 4, Default::default());
    drop(pool.get().await.expect("a first pooled connection"));
    let mut config = Config::new(pool).check_interval(T);
    config.identity = identity.map(str::to_owned);
    Elector::new(config).expect("elector")
}

/// The backend pid of `elector`'s live term, by its own watch.
fn term_pid(elector: &Elector) -> i32 {
    match &elector.subscribe().borrow().role {
        Role::Leading(info) => info.backend_pid,
        Role::Standby => panic!("not leading"),
    }
}

/// How many sessions of the server are named `name` (the test's own query).
async fn sessions_named(observer: &tokio_postgres::Client, name: &str) -> i64 {
    observer
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .await
        .expect("pg_stat_activity")
        .get(0)
}

/// X-WHO: the leader's lock session is named by its identity, and only that session: the
/// standby's pooled sessions keep their pool's name. `who_leads`, asked of the standby, names
/// the leader and its backend; after a handover it names the new leader, and once nobody leads
/// it answers `None`.
#[tokio::test]
async fn the_lock_session_names_its_replica_and_who_leads_says_which() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let a = named(&pg, "pool-a", Some("api-a")).await;
    let b = named(&pg, "pool-b", Some("api-b (eu-west-1)")).await;
    let (stop_a, run_a) = lead(&a).await;
    let (stop_b, run_b) = spawn_run(&b);
    // Two of b's standby checks, so that its pooled session has tried the lock.
    tokio::time::sleep(2 * T + SLACK).await;
    assert!(!b.is_leader(), "b is a standby while a leads");

    let rows = leader_rows(&observer).await;
    assert_eq!(
        rows,
        [(term_pid(&a), true, "api-a".to_owned())],
        "a's lock row"
    );
    assert_eq!(sessions_named(&observer, "api-b (eu-west-1)").await, 0);
    assert!(
        sessions_named(&observer, "pool-b").await >= 1,
        "b's pool keeps its name"
    );
    let leader = Leader {
        backend_pid: term_pid(&a),
        name: Some("api-a".into()),
    };
    assert_eq!(
        b.who_leads().await.expect("who leads"),
        Some(leader.clone())
    );
    assert_eq!(a.who_leads().await.expect("who leads"), Some(leader));

    halt(stop_a, run_a).await;
    until_leader(&b, 2 * T + SLACK).await;
    let rows = leader_rows(&observer).await;
    assert_eq!(rows, [(term_pid(&b), true, "api-b (eu-west-1)".to_owned())]);
    let leader = b.who_leads().await.expect("who leads");
    assert_eq!(
        leader,
        Some(Leader {
            backend_pid: term_pid(&b),
            name: Some("api-b (eu-west-1)".into()),
        })
    );

    halt(stop_b, run_b).await;
    assert_eq!(
        a.who_leads().await.expect("who leads"),
        None,
        "nobody leads"
    );
}

/// X-WHO: without an identity the lock session keeps the name its pool gave it (the opt-in
/// changes nothing when off), and `who_leads` reports that name.
#[tokio::test]
async fn without_an_identity_the_lock_session_keeps_its_pools_name() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let a = named(&pg, "pool-a", None).await;
    let (stop, run) = lead(&a).await;
    let rows = leader_rows(&observer).await;
    assert_eq!(rows, [(term_pid(&a), true, "pool-a".to_owned())]);
    let leader = a.who_leads().await.expect("who leads");
    assert_eq!(leader.and_then(|l| l.name).as_deref(), Some("pool-a"));
    halt(stop, run).await;
}

/// X-WHO: an identity PostgreSQL would cut short or rewrite (so that it would not name the
/// replica as given), or one that cannot go into the statement as it is, is refused when the
/// elector is built, with an error that names it. Names up to 63 bytes of printable ASCII pass.
#[test]
fn identities_the_session_cannot_carry_as_given_are_refused() {
    let pool = || {
        pool_for(
            "postgres://nobody@127.0.0.1:1/none",
            "pool",
            1,
            Default::default(),
        )
    };
    let build = |identity: &str| Elector::new(Config::new(pool()).identity(identity));
    let longest = "r".repeat(63);
    for good in [
        "api-1",
        "api-b (eu-west-1)",
        "a:b/c@d.e_f~!",
        longest.as_str(),
    ] {
        assert!(build(good).is_ok(), "{good:?} is refused");
    }
    let too_long = "r".repeat(64);
    for bad in [
        "",
        too_long.as_str(),
        "it's",
        "back\\slash",
        "café",
        "tab\there",
        "nl\n",
    ] {
        match build(bad) {
            Err(Error::InvalidIdentity { identity, reason }) => {
                assert_eq!(identity, bad);
                let text = Error::InvalidIdentity { identity, reason }.to_string();
                assert!(text.contains(&format!("{bad:?}")), "{text}");
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

/// X-WHO (review: no test had a session waiting on the key): sessions that wait for the key in
/// `pg_advisory_lock` (as a fast-handover waiter would) show in pg_locks with `granted = false`;
/// `who_leads` names only the session granted the key, asked from the leader and the standby.
#[tokio::test]
async fn who_leads_names_the_holder_not_the_sessions_waiting_for_the_key() {
    let pg = Pg::start().await;
    let observer = pg.observer().await;
    let a = named(&pg, "pool-a", Some("api-a")).await;
    let b = named(&pg, "pool-b", Some("api-b")).await;
    let (stop_a, run_a) = lead(&a).await;
    let (stop_b, run_b) = spawn_run(&b);
    let mut waiters = Vec::new();
    for name in ["waiter-1", "waiter-2"] {
        let (client, conn) = tokio_postgres::connect(
            &format!("{}?application_name={name}", pg.url()),
            tokio_postgres::NoTls,
        )
        .await
        .expect("a waiting session");
        tokio::spawn(conn);
        let client = std::sync::Arc::new(client);
        let c = client.clone();
        // Blocks until the key is free: it never is while a leads.
        let waiting = tokio::spawn(async move {
            c.simple_query("SELECT pg_advisory_lock(1886156915, 1)")
                .await
                .map(drop)
        });
        waiters.push((client, waiting));
    }
    let mut waiting_rows = 0;
    for _ in 0..100 {
        let rows = leader_rows(&observer).await;
        waiting_rows = rows.iter().filter(|r| !r.1).count();
        if waiting_rows == 2 {
            break;
        }
        tokio::time::sleep(T / 10).await;
    }
    assert_eq!(waiting_rows, 2, "two sessions wait for the key");
    let holder = Leader {
        backend_pid: term_pid(&a),
        name: Some("api-a".to_owned()),
    };
    for asker in [&a, &b] {
        assert_eq!(
            asker.who_leads().await.expect("who leads"),
            Some(holder.clone())
        );
    }
    for (client, waiting) in waiters {
        waiting.abort();
        drop(client);
    }
    halt(stop_b, run_b).await;
    halt(stop_a, run_a).await;
}
