//! POOL-1 behind a real PgBouncer in transaction mode: the leader's own check, not only a
//! standby's attempt, must notice that it no longer runs on the session that holds the lock.
//!
//! In transaction mode PgBouncer hands the client's next transaction to whichever server
//! session is free. The granted session goes back to PgBouncer's pool; when it ends (a killed
//! backend, its `idle_session_timeout`, a server restart) or is simply busy, the leader's check
//! runs elsewhere, and a plain `SELECT 1` is answered there as well as on the lock session.

use std::time::Duration;

use elector::{Config, Elector};
use testkit::pg::PgOptions;
use testkit::pgbouncer::{unique_name, PgBouncer};
use tokio::time::Instant;

use crate::fixture::*;

/// PgBouncer's own default `default_pool_size`: what users run.
const PGBOUNCER_DEFAULT_POOL_SIZE: u32 = 20;

/// The guard's error, from the crate's docs of `Error::SharedSession` (the text a user sees).
const SHARED: &str = "shared with another client";

/// The line that turns X-WAKE off where the guard saw a shared session.
const WAKE_REFUSED: &str = "background leader: waking is off";

/// A server behind PgBouncer in transaction mode.
struct Bounced {
    pg: Pg,
    _bouncer: PgBouncer,
    url: String,
}

impl Bounced {
    async fn start(pool_size: u32) -> Bounced {
        let pg = Pg::start_with(PgOptions {
            network: Some(unique_name("elector-pooler")),
            ..PgOptions::default()
        })
        .await;
        let bouncer = PgBouncer::start(&pg, "transaction", pool_size).await;
        let url = pg.url_via(bouncer.port);
        Bounced {
            pg,
            _bouncer: bouncer,
            url,
        }
    }

    /// An elector named `app` through the pooler, with the defaults (the guard on).
    async fn elector(&self, app: &str) -> Elector {
        self.elector_with(app, |c| c).await
    }

    /// An elector named `app` through the pooler, with `configure` applied to the defaults.
    async fn elector_with(&self, app: &str, configure: impl FnOnce(Config) -> Config) -> Elector {
        let pool = pool_for(&self.url, app, 4, Default::default());
        drop(pool.get().await.expect("a first pooled connection"));
        Elector::new(configure(Config::new(pool).check_interval(T))).expect("elector")
    }
}

/// Samples `is_leader` of every elector every 2 ms for `span`: the longest stretch in which two
/// or more believed they led at once.
async fn longest_overlap(electors: &[&Elector], span: Duration) -> Duration {
    let start = Instant::now();
    let (mut since, mut longest) = (None::<Instant>, Duration::ZERO);
    while start.elapsed() < span {
        let leaders = electors.iter().filter(|e| e.is_leader()).count();
        match (leaders >= 2, since) {
            (true, None) => since = Some(Instant::now()),
            (false, Some(s)) => {
                longest = longest.max(s.elapsed());
                since = None;
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    since.map_or(longest, |s| longest.max(s.elapsed()))
}

/// POOL-1 (review: the leader's check never asked which session answered it): behind a
/// transaction-mode PgBouncer with one server session, the leader's lock backend is killed.
/// PgBouncer opens a fresh server session, where the leader's next check lands: the leader
/// demotes there, within T of the kill, with the guard's shared-session error, and no two
/// replicas lead at once for longer than that one T (the standby is granted on the fresh
/// session at its own next check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lock_backend_was_killed_behind_a_transaction_pooler_demotes() {
    let logs = Logs::capture_global();
    let bounced = Bounced::start(1).await;
    let observer = bounced.pg.observer().await;
    let a = bounced.elector("a").await;
    let b = bounced.elector("b").await;
    let (astop, arun) = lead(&a).await;
    let (bstop, brun) = spawn_run(&b);
    tokio::time::sleep(2 * T).await;
    assert!(a.is_leader() && !b.is_leader(), "a leads, b is refused");
    let pid = lock_pid(&observer).await;
    terminate(&observer, pid).await;
    let killed = Instant::now();
    let overlap = tokio::spawn({
        let (a, b) = (a.clone(), b.clone());
        async move { longest_overlap(&[&a, &b], 8 * T).await }
    });
    let demoted = wait_for(3 * T, || !a.is_leader()).await;
    let overlap = overlap.await.expect("the sampler");
    let demoted = demoted.unwrap_or_else(|| {
        panic!(
            "a led on for {:?} after its lock backend was killed (b leads: {}, overlap {overlap:?})",
            killed.elapsed(),
            b.is_leader()
        )
    });
    assert!(
        demoted <= T + SLACK,
        "a demoted {demoted:?} after the kill, bound T + {SLACK:?}"
    );
    assert!(
        overlap <= T + SLACK,
        "two replicas led at once for {overlap:?}, bound T + {SLACK:?}"
    );
    let lost = logs.matching("background leader lock lost");
    assert!(
        lost.iter().any(|e| e.message.contains(SHARED)),
        "no lock-lost line with the shared-session error: {lost:#?}"
    );
    halt(astop, arun).await;
    halt(bstop, brun).await;
}

/// Two overlapping requests of the API through the same pooler, on a pool of their own: the
/// first takes the server session at the head of PgBouncer's idle list (the lock session, the
/// only one so far), the second opens another one and is released last. PgBouncer hands idle
/// server sessions out last-in first-out, so from then on every lone transaction (the checks
/// and attempts of the electors) lands on the second session, and the lock session sits idle.
async fn two_overlapping_requests(url: &str) {
    let app = pool_for(url, "api", 2, Default::default());
    let (x, y) = (app.get().await.expect("x"), app.get().await.expect("y"));
    let first = x.simple_query("SELECT pg_sleep(0.05)");
    let second = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        y.simple_query("SELECT pg_sleep(0.1)").await
    };
    let (first, second) = tokio::join!(first, second);
    first.expect("the first request");
    second.expect("the second request");
}

/// POOL-1 at PgBouncer's default pool size (20 server sessions), as users run it: two
/// replicas, and two overlapping requests of the API through the same pooler once the leader
/// leads. The lock's server session went back to PgBouncer's pool after the granting
/// transaction; from the requests on, the leader's checks land on another session, and the
/// lock session idles until the server ends it (4·T) and a standby is granted elsewhere. No
/// two replicas may lead at once for longer than T (a leader demotes at its first check that
/// lands off its lock session: here the first after the requests), and every leader that lost
/// its lock says why, with the guard's error. Before the leader's check compared its session,
/// both replicas led from 4·T after the requests to the end, 1.55 s of the 12 T watched, in
/// each of five runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_pgbouncers_default_pool_size_no_two_replicas_lead_at_once() {
    let logs = Logs::capture_global();
    let bounced = Bounced::start(PGBOUNCER_DEFAULT_POOL_SIZE).await;
    let replicas = [bounced.elector("a").await, bounced.elector("b").await];
    let mut running = vec![lead(&replicas[0]).await];
    running.extend(replicas[1..].iter().map(spawn_run));
    tokio::time::sleep(2 * T).await;
    two_overlapping_requests(&bounced.url).await;
    let refs: Vec<&Elector> = replicas.iter().collect();
    let overlap = longest_overlap(&refs, 12 * T).await;
    let leaders = replicas.iter().filter(|e| e.is_leader()).count();
    assert!(
        overlap <= T + SLACK,
        "two replicas led at once for {overlap:?} (bound T + {SLACK:?}); {leaders} lead at the end"
    );
    let lost = logs.matching("background leader lock lost");
    assert!(
        !lost.is_empty() && lost.iter().all(|e| e.message.contains(SHARED)),
        "the leader did not demote with the guard's error: {lost:#?}"
    );
    for (stop, run) in running {
        halt(stop, run).await;
    }
}

/// X-WAKE where the guard sees a shared session (issue 35, item 2): behind a transaction-mode
/// pooler a queued attempt would hold one of the pooler's server sessions for as long as it
/// waits, be granted on a session other clients then share (the pooler hazard), and be given
/// up by a statement that may run on any server session. So the first check or queued attempt
/// that the guard answers `shared` turns waking off for good (for the elector, through a later
/// `run` too), with one WARN line that says why; the checks every T go on. Before, each standby check queued a new session, the guard refused
/// it at once, and the standby logged "the queued attempt keeps failing" every T.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waking_is_refused_where_the_guard_sees_a_shared_session() {
    let logs = Logs::capture_global();
    let bounced = Bounced::start(PGBOUNCER_DEFAULT_POOL_SIZE).await;
    let observer = bounced.pg.observer().await;
    // b alone wakes: each waking elector says it once, and the guard may demote a (its check
    // landing on another server session), so that b leads and a checks.
    let a = bounced.elector("a").await;
    let b = bounced.elector_with("wake-b", |c| c.wake(true)).await;
    let [a_run, b_run] = [lead(&a).await, spawn_run(&b)];
    tokio::time::sleep(8 * T).await;
    let refused = logs.matching(WAKE_REFUSED);
    assert!(
        refused.len() == 1 && refused[0].message.contains(SHARED),
        "one WARN line turning waking off, with the guard's error: {refused:#?}"
    );
    let churn = logs.matching("background leader: the queued attempt keeps failing");
    assert!(churn.is_empty(), "queued attempts kept failing: {churn:#?}");
    assert_eq!(
        queued(&observer).await,
        0,
        "a session is still queued on the key"
    );
    // For good: `run` called again on the same elector (a supervisor's restart) neither queues
    // an attempt nor turns waking off a second time (issue 48, item 5: each `run` started from
    // the configuration's attempt again).
    halt(b_run.0, b_run.1).await;
    let b_run = spawn_run(&b);
    let mut most = 0;
    for _ in 0..32 {
        tokio::time::sleep(T / 4).await;
        most = most.max(queued(&observer).await);
    }
    let refused = logs.matching(WAKE_REFUSED);
    assert_eq!(refused.len(), 1, "waking turned off again: {refused:#?}");
    assert_eq!(most, 0, "the restarted run queued a session on the key");
    for (stop, run) in [a_run, b_run] {
        halt(stop, run).await;
    }
}

/// The line a standby writes when it frees a key no leader has checked on for the bound.
const FREED: &str = "background leader: freed the key on a pooled server session";

/// POOL-1, ORPH-2 behind a transaction-mode pooler (what made `pgbouncer-transaction-server-
/// restart` flaky): a granting statement whose client gave it up (its deadline passed while
/// PgBouncer waited for a server session after a restart) still runs, and leaves the key, the
/// guard's marker and the bound on a pooled server session that no client owns. PgBouncer
/// hands idle server sessions out last-in first-out, so every standby check lands on that one
/// and is answered `shared`, and the checks keep it busy, so its `idle_session_timeout` never
/// ends it: before, nobody led again (not within 8T here; 12T in the scenario). A standby must
/// free such a key once no leader has checked on its session for the orphan bound, 4T, and
/// a replica is granted at its check after that: within 4T + 2T of the abandoned grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_grant_on_a_pooled_session_is_freed_within_the_orphan_bound() {
    let logs = Logs::capture_global();
    let bounced = Bounced::start(PGBOUNCER_DEFAULT_POOL_SIZE).await;
    let observer = bounced.pg.observer().await;
    let bound_ms = u32::try_from(4 * T.as_millis()).expect("4T in ms");
    {
        // The abandoned attempt: the elector's own granting statement, whose client is gone.
        let pool = pool_for(&bounced.url, "abandoned", 1, Default::default());
        let client = pool.get().await.expect("a pooled connection");
        client
            .simple_query(&elector::sql::try_lock(bound_ms, true, None))
            .await
            .expect("the abandoned attempt ran");
    }
    let granted = Instant::now();
    assert_eq!(leader_rows(&observer).await.len(), 1, "the abandoned grant");
    let replicas = [bounced.elector("a").await, bounced.elector("b").await];
    let running: Vec<Running> = replicas.iter().map(spawn_run).collect();
    let led = wait_for(8 * T, || replicas.iter().any(Elector::is_leader))
        .await
        .map(|_| granted.elapsed());
    let freed = logs.matching(FREED);
    let led = led.unwrap_or_else(|| {
        panic!("nobody led within 8T of an abandoned grant on a pooled session: {freed:#?}")
    });
    assert!(
        led <= 6 * T + SLACK,
        "a replica led {led:?} after the abandoned grant, bound 4T + 2T + {SLACK:?}"
    );
    assert!(
        led >= 4 * T,
        "the key was freed {led:?} after its grant, before the orphan bound 4T"
    );
    assert_eq!(
        freed.len(),
        1,
        "one line saying the key was freed: {freed:#?}"
    );
    for (stop, run) in running {
        halt(stop, run).await;
    }
}

/// The other side of that rule: a live leader behind the same pooler, whose lock session the
/// standby's checks land on (last-in first-out), is checked on there every T, so no standby
/// frees its key, and no two replicas lead at once. Broken on purpose (the leader's check not
/// telling the session it checked, or the standby freeing a key checked on within 4T), the
/// standby frees the live leader's key on that very session and is granted there, and both
/// lead from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_leaders_pooled_lock_session_is_not_freed() {
    let logs = Logs::capture_global();
    let bounced = Bounced::start(PGBOUNCER_DEFAULT_POOL_SIZE).await;
    let replicas = [bounced.elector("a").await, bounced.elector("b").await];
    let mut running = vec![lead(&replicas[0]).await];
    running.extend(replicas[1..].iter().map(spawn_run));
    let refs: Vec<&Elector> = replicas.iter().collect();
    let overlap = longest_overlap(&refs, 12 * T).await;
    assert!(
        overlap <= T + SLACK,
        "two replicas led at once for {overlap:?} (bound T + {SLACK:?})"
    );
    // A leader whose check landed off its lock session demotes and leaves its key there, which
    // is freed 4T later: a freed line may follow a lost one, never come without.
    let (freed, lost) = (
        logs.matching(FREED),
        logs.matching("background leader lock lost"),
    );
    assert!(
        freed.len() <= lost.len(),
        "a live leader's key was freed: {freed:#?}, lost: {lost:#?}"
    );
    for (stop, run) in running {
        halt(stop, run).await;
    }
}
