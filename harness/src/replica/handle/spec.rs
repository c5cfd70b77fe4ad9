//! How to start one replica process: the flags of `harness replica`, and the contract's
//! environment for another program.

use std::path::PathBuf;
use std::time::Duration;

/// The contract variable that turns POOL-1's shared-session guard off (`0`) in a program that
/// has it (the harness's own replica takes `--no-shared-session-guard`).
pub const CONTRACT_GUARD: &str = "REPLICA_SHARED_SESSION_GUARD";

/// How to start one replica process (the flags of `harness replica`).
#[derive(Clone, Debug)]
pub struct ReplicaSpec {
    /// `--name`: also the Postgres `application_name`.
    pub name: String,
    /// The DSN, handed over in the child's environment (`PLEXSPHERE_DSN`), never on its
    /// command line, where `ps` would show its password; `None` boots a replica without an
    /// elector or loops (LOOP-4).
    pub dsn: Option<String>,
    /// `--check-interval-ms`: T.
    pub check_interval: Duration,
    /// `--tick-ms`: the cadence of the loops (default T).
    pub tick: Option<Duration>,
    /// `--http`: the listen address (default `127.0.0.1:0`).
    pub http: Option<String>,
    /// `--pool-max-size`.
    pub pool_max_size: Option<usize>,
    /// `--pool-max-lifetime-ms`.
    pub pool_max_lifetime: Option<Duration>,
    /// `--restart-budget`.
    pub restart_budget: Option<u32>,
    /// `--restart-window-ms`.
    pub restart_window: Option<Duration>,
    /// `--restart-backoff-ms`.
    pub restart_backoff: Option<Duration>,
    /// `--verify-lock` (X-VERIFY); another program is told `REPLICA_VERIFY_LOCK=1`.
    pub verify_lock: bool,
    /// `--no-shared-session-guard`: the elector's POOL-1 guard off (the spec's plain lock);
    /// another program is told `REPLICA_SHARED_SESSION_GUARD=0`.
    pub no_shared_session_guard: bool,
    /// `--wake` (X-WAKE); another program is told `REPLICA_WAKE=1`.
    pub wake: bool,
    /// `--fence` (X-FENCE); another program is told `REPLICA_FENCE=1`.
    pub fence: bool,
    /// `--fail-loop`, once per loop.
    pub fail_loops: Vec<String>,
    /// `--panic-loop`, once per loop.
    pub panic_loops: Vec<String>,
    /// Further arguments, appended as given.
    pub extra_args: Vec<String>,
    /// Further environment variables of the child (the flags' own variables,
    /// [`ENV_VARS`](crate::replica::ENV_VARS), are cleared first and may be set here).
    pub env: Vec<(String, String)>,
    /// `RUST_LOG` of the child (its stderr log filter); `None` keeps the caller's.
    pub rust_log: Option<String>,
    /// Where the child's stderr goes (appended). `None`: the caller's stderr, each line prefixed
    /// with `[name] `.
    pub stderr_log: Option<PathBuf>,
    /// How long [`ReplicaProcess::spawn`] waits for the `started` event.
    pub start_timeout: Duration,
}

impl ReplicaSpec {
    /// A replica named `name` with check interval `check_interval`, no DSN, and every other
    /// flag at its default.
    pub fn new(name: &str, check_interval: Duration) -> Self {
        Self {
            name: name.to_owned(),
            dsn: None,
            check_interval,
            tick: None,
            http: None,
            pool_max_size: None,
            pool_max_lifetime: None,
            restart_budget: None,
            restart_window: None,
            restart_backoff: None,
            verify_lock: false,
            no_shared_session_guard: false,
            wake: false,
            fence: false,
            fail_loops: Vec::new(),
            panic_loops: Vec::new(),
            extra_args: Vec::new(),
            env: Vec::new(),
            rust_log: None,
            stderr_log: None,
            start_timeout: Duration::from_secs(20),
        }
    }

    /// Sets the DSN.
    pub fn dsn(mut self, dsn: impl Into<String>) -> Self {
        self.dsn = Some(dsn.into());
        self
    }

    /// Sets the supervisor's restart budget, window and back-off.
    pub fn restarts(mut self, budget: u32, window: Duration, backoff: Duration) -> Self {
        self.restart_budget = Some(budget);
        self.restart_window = Some(window);
        self.restart_backoff = Some(backoff);
        self
    }

    /// The HTTP listen address (`127.0.0.1:0` when none was set: any free port, which only this
    /// harness's own replica can report back).
    pub fn listen(&self) -> &str {
        self.http.as_deref().unwrap_or("127.0.0.1:0")
    }

    /// The flags set that only the harness's own replica takes (another program is started
    /// with its name, T, listen address and DSN, and the contract variables of
    /// [`ReplicaSpec::contract_env`]), by their names.
    pub fn flags_only_ours(&self) -> Vec<String> {
        let set = [
            ("--pool-max-size", self.pool_max_size.is_some()),
            ("--restart-budget", self.restart_budget.is_some()),
            ("--restart-window-ms", self.restart_window.is_some()),
            ("--restart-backoff-ms", self.restart_backoff.is_some()),
            ("--fail-loop", !self.fail_loops.is_empty()),
            ("--panic-loop", !self.panic_loops.is_empty()),
        ];
        let mut named: Vec<String> = (set.iter())
            .filter(|(_, on)| *on)
            .map(|(f, _)| (*f).to_owned())
            .collect();
        named.extend(self.extra_args.iter().cloned());
        named
    }

    /// The contract's variables for a program other than the harness's own replica, beyond its
    /// name, T, listen address and DSN: the settings a scenario gives it
    /// (`docs/replica-contract.md`, "Contract variables").
    pub fn contract_env(&self) -> Vec<(&'static str, String)> {
        let mut env = Vec::new();
        if let Some(l) = self.pool_max_lifetime {
            env.push(("REPLICA_POOL_MAX_LIFETIME_MS", l.as_millis().to_string()));
        }
        if self.no_shared_session_guard {
            env.push((CONTRACT_GUARD, "0".to_owned()));
        }
        if self.wake {
            env.push(("REPLICA_WAKE", "1".to_owned()));
        }
        if self.fence {
            env.push(("REPLICA_FENCE", "1".to_owned()));
        }
        if self.verify_lock {
            env.push(("REPLICA_VERIFY_LOCK", "1".to_owned()));
        }
        env
    }

    /// The command line after `harness`: `replica --name ...` (the DSN is not on it).
    pub fn args(&self) -> Vec<String> {
        fn ms(d: Duration) -> String {
            d.as_millis().to_string()
        }
        let mut a = vec![
            "replica".to_owned(),
            "--name".to_owned(),
            self.name.clone(),
            "--check-interval-ms".to_owned(),
            ms(self.check_interval),
        ];
        let mut opt = |flag: &str, value: Option<String>| {
            if let Some(v) = value {
                a.push(flag.to_owned());
                a.push(v);
            }
        };
        opt("--tick-ms", self.tick.map(ms));
        opt("--http", self.http.clone());
        opt("--pool-max-size", self.pool_max_size.map(|n| n.to_string()));
        opt("--pool-max-lifetime-ms", self.pool_max_lifetime.map(ms));
        opt(
            "--restart-budget",
            self.restart_budget.map(|n| n.to_string()),
        );
        opt("--restart-window-ms", self.restart_window.map(ms));
        opt("--restart-backoff-ms", self.restart_backoff.map(ms));
        if self.verify_lock {
            a.push("--verify-lock".to_owned());
        }
        if self.no_shared_session_guard {
            a.push("--no-shared-session-guard".to_owned());
        }
        if self.wake {
            a.push("--wake".to_owned());
        }
        if self.fence {
            a.push("--fence".to_owned());
        }
        for l in &self.fail_loops {
            a.extend(["--fail-loop".to_owned(), l.clone()]);
        }
        for l in &self.panic_loops {
            a.extend(["--panic-loop".to_owned(), l.clone()]);
        }
        a.extend(self.extra_args.iter().cloned());
        a
    }
}
