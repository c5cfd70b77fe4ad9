//! The local-process backend, for hosts without Docker: PostgreSQL and PgBouncer from the
//! host's binaries, and the bundled Toxiproxy server in-process, all on 127.0.0.1.
//!
//! - PostgreSQL: the binaries of `/usr/lib/postgresql/<major>/bin` (the highest major found, or
//!   [`LocalOptions::pg_bin`], or `ELECTOR_PG_BIN`). `initdb` is slow, so a template cluster
//!   (database `plexsphere`, user `postgres` / `postgres`, SCRAM over TCP) is made once per
//!   machine under `/var/tmp` and copied for each run.
//! - PgBouncer: the `pgbouncer` binary (Debian: `apt-get install pgbouncer`).
//! - Toxiproxy: [`toxiproxy_server::Server`] on the caller's runtime, with upstream
//!   Toxiproxy's semantics.
//!
//! PostgreSQL and PgBouncer refuse to run as root: when the harness runs as root they run as
//! `nobody` (through `setpriv`), and the run's directory is handed to that user. Every child is
//! started with `setpriv --pdeathsig KILL` from a thread that lives as long as the topology, so
//! a SIGKILLed harness takes its servers with it; the run's directory
//! (`$TMPDIR/elector-run-<run>`) is swept by the next run (see [`cleanup`](super::cleanup)).

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};

use super::cleanup::{self, Resource};
use super::{password, PoolMode, APP_USER, DATABASE, USER};

/// How long a server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stopping server gets before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// What a local topology runs.
#[derive(Clone, Debug, Default)]
pub struct LocalOptions {
    /// PostgreSQL's `bin` directory (default: `ELECTOR_PG_BIN`, else the highest
    /// `/usr/lib/postgresql/*/bin`).
    pub pg_bin: Option<PathBuf>,
    /// The `pgbouncer` binary (default: found on `PATH`, `/usr/sbin`, `/usr/bin`).
    pub pgbouncer_bin: Option<PathBuf>,
    /// Which PgBouncers to run.
    pub pgbouncers: Vec<PoolMode>,
    /// Extra `-c name=value` settings for PostgreSQL.
    pub postgres_settings: Vec<(String, String)>,
}

/// Per-service start-up times.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LocalTimings {
    /// Making the template cluster (zero when it existed).
    pub initdb: Duration,
    /// Copying the template and starting PostgreSQL until it accepts connections.
    pub postgres: Duration,
    /// Starting the in-process Toxiproxy server.
    pub toxiproxy: Duration,
    /// Each PgBouncer until it accepts connections.
    pub pgbouncers: Vec<(PoolMode, Duration)>,
}

/// A user to run servers as: `(uid, gid)`, or `None` to run as the current user.
type RunAs = Option<(u32, u32)>;

type SpawnRequest = (
    Command,
    tokio::sync::oneshot::Sender<std::io::Result<Child>>,
);

/// Starts children from one long-lived thread, so `--pdeathsig` (tied to the spawning thread)
/// fires when the topology's thread ends, never when some pool thread retires.
struct Spawner {
    tx: Mutex<Option<std::sync::mpsc::Sender<SpawnRequest>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Spawner {
    fn new() -> anyhow::Result<Spawner> {
        let (tx, rx) = std::sync::mpsc::channel::<SpawnRequest>();
        let thread = std::thread::Builder::new()
            .name("elector-local-spawner".into())
            .spawn(move || {
                while let Ok((mut cmd, reply)) = rx.recv() {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .context("starting the spawner thread")?;
        Ok(Spawner {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    async fn spawn(&self, cmd: Command) -> anyhow::Result<Child> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let tx = self.tx.lock().ok().and_then(|t| t.clone());
        tx.ok_or_else(|| anyhow!("the topology is shut down"))?
            .send((cmd, reply))
            .map_err(|_| anyhow!("the spawner thread is gone"))?;
        Ok(answer
            .await
            .map_err(|_| anyhow!("the spawner thread is gone"))??)
    }

    /// Ends the thread (after the children it started are gone).
    fn close(&self) {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        if let Some(t) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = t.join();
        }
    }
}

/// A server child process.
struct Server {
    child: Option<Child>,
}

/// The services of one run as local processes.
pub struct LocalServices {
    run: String,
    dir: PathBuf,
    run_as: RunAs,
    pg_bin: PathBuf,
    postgres_port: u16,
    postgres_settings: Vec<(String, String)>,
    postgres: tokio::sync::Mutex<Server>,
    pgbouncers: Mutex<Vec<(PoolMode, u16, Child)>>,
    toxiproxy: Mutex<Option<toxiproxy_server::ServerHandle>>,
    toxiproxy_api: SocketAddr,
    runtime: tokio::runtime::Handle,
    spawner: Spawner,
    timings: LocalTimings,
}

impl std::fmt::Debug for LocalServices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalServices")
            .field("run", &self.run)
            .field("dir", &self.dir)
            .field("postgres_port", &self.postgres_port)
            .field("toxiproxy_api", &self.toxiproxy_api)
            .finish()
    }
}

/// The highest `/usr/lib/postgresql/<major>/bin` with a `postgres` binary.
fn find_pg_bin(options: &LocalOptions) -> anyhow::Result<PathBuf> {
    if let Some(p) = options
        .pg_bin
        .clone()
        .or_else(|| std::env::var_os("ELECTOR_PG_BIN").map(PathBuf::from))
    {
        return Ok(p);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((major, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).ok_or_else(|| {
        anyhow!(
            "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin: install them \
             (Debian: `apt-get install postgresql-15`) or set ELECTOR_PG_BIN"
        )
    })
}

fn find_pgbouncer(options: &LocalOptions) -> anyhow::Result<PathBuf> {
    if let Some(p) = &options.pgbouncer_bin {
        return Ok(p.clone());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([
            "/usr/sbin".into(),
            "/usr/bin".into(),
            "/usr/local/bin".into(),
        ])
        .map(|d| d.join("pgbouncer"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            anyhow!(
                "the local backend needs the `pgbouncer` binary for a PgBouncer path, and none \
                 was found on PATH: install it (Debian/Ubuntu: `apt-get install pgbouncer`), \
                 or use the Docker backend"
            )
        })
}

/// `(uid, gid)` of `nobody` when this process is root (PostgreSQL refuses to run as root).
fn run_as() -> RunAs {
    let euid = std::fs::metadata("/proc/self").map(|m| m.uid()).ok()?;
    if euid != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let ids = passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.first() == Some(&"nobody") && f.len() > 3)
            .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
            .flatten()
    });
    Some(ids.unwrap_or((65534, 65534)))
}

/// A command that runs `program` as `run_as`, dying with its parent thread.
fn command(program: &Path, run_as: RunAs) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.arg("--pdeathsig").arg("KILL");
    if let Some((uid, gid)) = run_as {
        cmd.arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups");
    }
    cmd.arg("--").arg(program);
    cmd.stdin(Stdio::null());
    cmd
}

fn chown_tree(path: &Path, run_as: RunAs) -> anyhow::Result<()> {
    let Some((uid, gid)) = run_as else {
        return Ok(());
    };
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))
        .with_context(|| format!("chown {}", path.display()))?;
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path)? {
            chown_tree(&entry?.path(), run_as)?;
        }
    }
    Ok(())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .context("finding a free port")?
        .local_addr()?
        .port())
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Runs a command to completion on a blocking thread; an error carries its output.
async fn run_to_end(mut cmd: Command, what: &str, stdin: Option<String>) -> anyhow::Result<()> {
    let what = what.to_owned();
    tokio::task::spawn_blocking(move || {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("{what}: cannot start"))?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(input.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "{what} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    })
    .await?
}

/// The per-machine template cluster for `pg_bin` and `run_as`; made on first use.
async fn template(pg_bin: &Path, run_as: RunAs) -> anyhow::Result<(PathBuf, Duration)> {
    let key: String = pg_bin
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let uid = run_as.map_or_else(
        || {
            std::fs::metadata("/proc/self")
                .map(|m| m.uid())
                .unwrap_or(0)
        },
        |(u, _)| u,
    );
    let base = PathBuf::from("/var/tmp");
    let base = if base.is_dir() {
        base
    } else {
        std::env::temp_dir()
    };
    let done = base.join(format!("elector-pg-template{key}-{uid}"));
    if done.join("data/PG_VERSION").exists() {
        return Ok((done.join("data"), Duration::ZERO));
    }
    let clock = Instant::now();
    let building = base.join(format!(
        "elector-pg-template{key}-{uid}.building-{}-{}",
        std::process::id(),
        fastrand::u32(..)
    ));
    std::fs::create_dir_all(&building)?;
    let result = async {
        std::fs::write(building.join("pwfile"), format!("{}\n", password()))?;
        chown_tree(&building, run_as)?;
        let mut initdb = command(&pg_bin.join("initdb"), run_as);
        initdb
            .arg("-D")
            .arg(building.join("data"))
            .args(["-U", USER, "-E", "UTF8", "--no-sync", "--auth-local=trust"])
            .arg("--auth-host=scram-sha-256")
            .arg(format!("--pwfile={}", building.join("pwfile").display()));
        run_to_end(initdb, "initdb", None).await?;
        let mut single = command(&pg_bin.join("postgres"), run_as);
        single
            .args(["--single", "-F", "-c", "fsync=off", "-D"])
            .arg(building.join("data"))
            .arg("postgres");
        run_to_end(
            single,
            "postgres --single (CREATE DATABASE)",
            Some(format!("CREATE DATABASE {DATABASE};\n")),
        )
        .await?;
        anyhow::Ok(())
    }
    .await;
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&building);
        return Err(e.context("making the local PostgreSQL template cluster"));
    }
    if std::fs::rename(&building, &done).is_err() {
        // Another process made it first.
        let _ = std::fs::remove_dir_all(&building);
    }
    Ok((done.join("data"), clock.elapsed()))
}

/// Connects with `dsn` until it works, the child exits, or `limit` passes.
async fn wait_accepting(
    dsn: &str,
    child: &mut Child,
    log: &Path,
    what: &str,
    limit: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("{what} exited ({status}):\n{}", log_tail(log));
        }
        match super::try_connect(dsn, Duration::from_secs(2)).await {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                bail!(
                    "{what} did not accept connections in {limit:?} ({e:#}):\n{}",
                    log_tail(log)
                )
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(25)).await,
        }
    }
}

fn dsn(addr: SocketAddr) -> String {
    super::dsn_for(addr)
}

impl LocalServices {
    /// Starts PostgreSQL (from the template), the PgBouncers and the in-process Toxiproxy server.
    ///
    /// # Errors
    /// A binary is missing (the error says how to install it), or a server does not start.
    pub async fn start(run: &str, options: &LocalOptions) -> anyhow::Result<LocalServices> {
        let pg_bin = find_pg_bin(options)?;
        let pgbouncer_bin = if options.pgbouncers.is_empty() {
            None
        } else {
            Some(find_pgbouncer(options)?)
        };
        let setpriv_found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .chain([PathBuf::from("/usr/bin"), PathBuf::from("/bin")])
            .any(|d| d.join("setpriv").is_file());
        if !setpriv_found {
            bail!(
                "the local backend starts its servers with `setpriv` (util-linux), which is not \
                 on PATH: install util-linux"
            );
        }
        let run_as = run_as();
        let dir = std::env::temp_dir().join(format!("{}{run}", cleanup::LOCAL_DIR_PREFIX));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("owner"), cleanup::owner())?;
        cleanup::register(Resource::Dir(dir.clone()));
        let spawner = Spawner::new()?;
        let toxiproxy_clock = Instant::now();
        let toxiproxy = toxiproxy_server::Server::new()
            .start("127.0.0.1:0")
            .await
            .context("starting the in-process Toxiproxy server")?;
        let toxiproxy_api = toxiproxy.local_addr();
        let toxiproxy_time = toxiproxy_clock.elapsed();
        let mut services = LocalServices {
            run: run.to_owned(),
            dir: dir.clone(),
            run_as,
            pg_bin: pg_bin.clone(),
            postgres_port: 0,
            postgres_settings: options.postgres_settings.clone(),
            postgres: tokio::sync::Mutex::new(Server { child: None }),
            pgbouncers: Mutex::new(Vec::new()),
            toxiproxy: Mutex::new(Some(toxiproxy)),
            toxiproxy_api,
            runtime: tokio::runtime::Handle::current(),
            spawner,
            timings: LocalTimings {
                toxiproxy: toxiproxy_time,
                ..Default::default()
            },
        };
        // From here on, dropping `services` cleans up after a failure.
        let (template, initdb_time) = template(&pg_bin, run_as).await?;
        services.timings.initdb = initdb_time;
        let clock = Instant::now();
        let copy = Command::new("cp")
            .arg("-a")
            .arg(&template)
            .arg(dir.join("pgdata"))
            .output()
            .context("copying the template cluster")?;
        if !copy.status.success() {
            bail!(
                "cp -a {}: {}",
                template.display(),
                String::from_utf8_lossy(&copy.stderr)
            );
        }
        std::fs::create_dir_all(dir.join("sock"))?;
        chown_tree(&dir, run_as)?;
        services.postgres_port = free_port()?;
        services.start_postgres().await?;
        // The application role first: each PgBouncer is ready once it logs in as it.
        super::provision(services.postgres_addr()).await?;
        services.timings.postgres = clock.elapsed();

        if let Some(bin) = pgbouncer_bin {
            std::fs::write(
                dir.join("userlist.txt"),
                format!("\"{APP_USER}\" \"{}\"\n", password()),
            )?;
            chown_tree(&dir.join("userlist.txt"), run_as)?;
            for &mode in &options.pgbouncers {
                let clock = Instant::now();
                services.start_pgbouncer(&bin, mode).await?;
                services.timings.pgbouncers.push((mode, clock.elapsed()));
            }
        }
        Ok(services)
    }

    async fn spawn(&self, cmd: Command) -> anyhow::Result<Child> {
        let child = self.spawner.spawn(cmd).await?;
        cleanup::register(Resource::Pid(child.id()));
        let mut pids = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("pids"))?;
        pids.write_all(cleanup::pid_line(child.id()).as_bytes())?;
        Ok(child)
    }

    async fn start_postgres(&self) -> anyhow::Result<()> {
        let mut server = self.postgres.lock().await;
        if server.child.is_some() {
            return Ok(());
        }
        let log_path = self.dir.join("postgres.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        let mut cmd = command(&self.pg_bin.join("postgres"), self.run_as);
        cmd.arg("-D")
            .arg(self.dir.join("pgdata"))
            .arg("-p")
            .arg(self.postgres_port.to_string())
            .arg("-k")
            .arg(self.dir.join("sock"))
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "full_page_writes=off", "-c", "synchronous_commit=off"]);
        for (k, v) in &self.postgres_settings {
            cmd.arg("-c").arg(format!("{k}={v}"));
        }
        cmd.stdout(log.try_clone()?).stderr(log);
        let mut child = self.spawn(cmd).await.context("starting postgres")?;
        let ready = wait_accepting(
            &dsn(self.postgres_addr()),
            &mut child,
            &log_path,
            "PostgreSQL",
            READY_TIMEOUT,
        )
        .await;
        server.child = Some(child);
        ready
    }

    async fn start_pgbouncer(&self, bin: &Path, mode: PoolMode) -> anyhow::Result<()> {
        let port = free_port()?;
        let ini = self.dir.join(format!("pgbouncer-{mode}.ini"));
        std::fs::write(
            &ini,
            format!(
                "[databases]\n{DATABASE} = host=127.0.0.1 port={pg} user={APP_USER} password={password}\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
                 auth_type = scram-sha-256\nauth_file = {users}\npool_mode = {setting}\n\
                 max_client_conn = 200\ndefault_pool_size = {size}\nserver_login_retry = {retry}\n\
                 ignore_startup_parameters = extra_float_digits,options\nlogfile =\npidfile =\n",
                pg = self.postgres_port,
                password = password(),
                users = self.dir.join("userlist.txt").display(),
                setting = mode.setting(),
                size = mode.pool_size(),
                retry = super::POOLER_LOGIN_RETRY.as_secs(),
            ),
        )?;
        chown_tree(&ini, self.run_as)?;
        let log_path = self.dir.join(format!("pgbouncer-{mode}.log"));
        let log = std::fs::File::create(&log_path)?;
        let mut cmd = command(bin, self.run_as);
        cmd.arg(&ini).stdout(log.try_clone()?).stderr(log);
        let mut child = self
            .spawn(cmd)
            .await
            .with_context(|| format!("starting pgbouncer ({mode} mode)"))?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        // PgBouncer knows the application role alone (its server sessions log in as it).
        let ready = wait_accepting(
            &super::app_dsn_for(addr),
            &mut child,
            &log_path,
            &format!("PgBouncer ({mode} mode)"),
            READY_TIMEOUT,
        )
        .await;
        self.pgbouncers
            .lock()
            .map_err(|_| anyhow!("pgbouncer lock"))?
            .push((mode, port, child));
        ready
    }

    /// The run's directory (data, logs, configuration).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The start-up times.
    pub fn timings(&self) -> &LocalTimings {
        &self.timings
    }

    /// PostgreSQL's address.
    pub fn postgres_addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.postgres_port))
    }

    /// The Toxiproxy API's address.
    pub fn toxiproxy_api(&self) -> SocketAddr {
        self.toxiproxy_api
    }

    /// A PgBouncer's address.
    pub fn pgbouncer_addr(&self, mode: PoolMode) -> Option<SocketAddr> {
        self.pgbouncers
            .lock()
            .ok()?
            .iter()
            .find(|(m, _, _)| *m == mode)
            .map(|(_, p, _)| SocketAddr::from((Ipv4Addr::LOCALHOST, *p)))
    }

    /// Where Toxiproxy reaches PostgreSQL, or a PgBouncer.
    pub fn upstream(&self, via: Option<PoolMode>) -> Option<String> {
        match via {
            None => Some(self.postgres_addr().to_string()),
            Some(mode) => self.pgbouncer_addr(mode).map(|a| a.to_string()),
        }
    }

    /// Stops PostgreSQL (SIGINT: a fast shutdown; SIGKILL after 10 s).
    ///
    /// # Errors
    /// The signal could not be sent.
    pub async fn stop_server(&self) -> anyhow::Result<()> {
        let mut server = self.postgres.lock().await;
        if let Some(mut child) = server.child.take() {
            stop_child(&mut child, nix::sys::signal::Signal::SIGINT).await;
            cleanup::unregister(&Resource::Pid(child.id()));
        }
        Ok(())
    }

    /// Starts PostgreSQL again on the same port and waits until it accepts connections.
    ///
    /// # Errors
    /// It did not start.
    pub async fn start_server(&self) -> anyhow::Result<()> {
        self.start_postgres().await
    }

    /// Stops every server, the Toxiproxy server, and removes the run's directory. Idempotent.
    pub async fn shutdown(&self) {
        let bouncers = self
            .pgbouncers
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default();
        for (_, _, mut child) in bouncers {
            stop_child(&mut child, nix::sys::signal::Signal::SIGTERM).await;
            cleanup::unregister(&Resource::Pid(child.id()));
        }
        let _ = self.stop_server().await;
        let toxiproxy = self.toxiproxy.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = toxiproxy {
            t.shutdown().await;
        }
        self.spawner.close();
        let _ = std::fs::remove_dir_all(&self.dir);
        cleanup::unregister(&Resource::Dir(self.dir.clone()));
    }
}

/// Sends `signal`, waits up to [`STOP_TIMEOUT`] for the exit, then SIGKILLs.
async fn stop_child(child: &mut Child, signal: nix::sys::signal::Signal) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    while Instant::now() < deadline {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for LocalServices {
    /// Without [`shutdown`](LocalServices::shutdown): SIGKILLs the servers, stops the Toxiproxy
    /// server (on its runtime, if that still runs) and removes the directory.
    fn drop(&mut self) {
        let mut children: Vec<Child> = Vec::new();
        if let Ok(v) = self.pgbouncers.get_mut() {
            children.extend(v.drain(..).map(|(_, _, c)| c));
        }
        children.extend(self.postgres.get_mut().child.take());
        for child in &mut children {
            let _ = child.kill();
            let _ = child.wait();
            cleanup::unregister(&Resource::Pid(child.id()));
        }
        if let Some(t) = self.toxiproxy.get_mut().ok().and_then(Option::take) {
            drop(self.runtime.spawn(t.shutdown()));
        }
        self.spawner.close();
        let _ = std::fs::remove_dir_all(&self.dir);
        cleanup::unregister(&Resource::Dir(self.dir.clone()));
    }
}
