//! Leaving nothing behind: who owns a resource, a process-wide registry of live resources, a
//! signal guard that removes them on SIGINT / SIGTERM / SIGHUP, and the sweep that removes what
//! a SIGKILLed run left.
//!
//! Every container and network of a Docker topology carries the labels
//! [`LABEL_HARNESS`]` = 1`, [`LABEL_RUN`]` = <run id>`, [`LABEL_OWNER`]` = <boot id>/<pid>/<start
//! time>` and [`LABEL_CREATED`]` = <unix seconds>`; a local topology's directory is named
//! `elector-run-<run id>` and holds an `owner` file with the same owner string. A resource is
//! stale when its owner process is gone: the sweep compares the owner's boot id, pid and process
//! start time with the live process table, so it never touches the resources of a run still in
//! progress (parallel test processes included). A resource from another boot or host (another
//! boot id) is stale once older than [`FOREIGN_MAX_AGE`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bollard::query_parameters::{
    ListContainersOptions, ListNetworksOptions, RemoveContainerOptions,
};
use bollard::Docker;

/// Label on everything a topology creates.
pub const LABEL_HARNESS: &str = "org.elector.harness";
/// Label naming the run.
pub const LABEL_RUN: &str = "org.elector.run";
/// Label naming the owner process (`<boot id>/<pid>/<start time>`).
pub const LABEL_OWNER: &str = "org.elector.owner";
/// Label with the creation time (unix seconds).
pub const LABEL_CREATED: &str = "org.elector.created";
/// Label naming the service (`postgres`, `toxiproxy`, `pgbouncer-session`, ...).
pub const LABEL_ROLE: &str = "org.elector.role";
/// A resource owned by another boot or host is swept once older than this.
pub const FOREIGN_MAX_AGE: Duration = Duration::from_secs(6 * 3600);
/// Prefix of a local topology's directory (under the system's temp dir).
pub const LOCAL_DIR_PREFIX: &str = "elector-run-";

/// This process as an owner string: `<boot id>/<pid>/<start time in clock ticks>`.
pub fn owner() -> &'static str {
    static OWNER: OnceLock<String> = OnceLock::new();
    OWNER.get_or_init(|| {
        let pid = std::process::id();
        owner_of(pid).unwrap_or_else(|| format!("{}/{pid}/0", boot_id()))
    })
}

/// The owner string of a live process `pid` (as [`owner`] is this process's): what its
/// resources carry as [`LABEL_OWNER`]. `None` once it has ended.
pub fn owner_of(pid: u32) -> Option<String> {
    Some(format!("{}/{pid}/{}", boot_id(), start_time(pid)?))
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown-boot".to_owned())
}

/// Field 22 of `/proc/<pid>/stat`: the process's start time after boot, in clock ticks.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the owner string names a process that is gone (a stale resource). `created` (unix
/// seconds) decides for owners of another boot or host, and for resources without an owner.
pub fn owner_is_gone(owner: Option<&str>, created: Option<u64>) -> bool {
    let old = || created.is_none_or(|c| now_secs().saturating_sub(c) > FOREIGN_MAX_AGE.as_secs());
    let Some(owner) = owner else { return old() };
    let mut parts = owner.split('/');
    let (Some(boot), Some(pid), Some(start)) = (parts.next(), parts.next(), parts.next()) else {
        return old();
    };
    if boot != boot_id() {
        return old();
    }
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return old();
    };
    start_time(pid) != Some(start)
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// The labels of a resource of run `run` with role `role`.
pub fn labels(run: &str, role: &str) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_HARNESS.to_owned(), "1".to_owned()),
        (LABEL_RUN.to_owned(), run.to_owned()),
        (LABEL_OWNER.to_owned(), owner().to_owned()),
        (LABEL_CREATED.to_owned(), now_secs().to_string()),
        (LABEL_ROLE.to_owned(), role.to_owned()),
    ])
}

/// What a sweep removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Container ids.
    pub containers: Vec<String>,
    /// Network names.
    pub networks: Vec<String>,
    /// Local topology directories.
    pub dirs: Vec<PathBuf>,
}

impl SweepReport {
    /// Whether nothing was removed.
    pub fn is_empty(&self) -> bool {
        self.containers.is_empty() && self.networks.is_empty() && self.dirs.is_empty()
    }
}

/// Which resources a sweep removes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SweepScope {
    /// Those whose owner process is gone.
    Stale,
    /// Those of one run, whoever owns them.
    Run(String),
    /// Those of this process (the signal guard's: a container still starting is not
    /// registered yet, but it carries this process's owner label from its creation).
    Mine,
}

/// Removes the harness's containers and networks in `scope` (Docker, when a daemon answers) and
/// its local topology directories (whose processes are killed first).
///
/// # Errors
/// The Docker daemon answered with an error while listing.
pub async fn sweep(scope: SweepScope) -> anyhow::Result<SweepReport> {
    let mut report = SweepReport::default();
    if let Ok(docker) = Docker::connect_with_defaults() {
        if docker.ping().await.is_ok() {
            sweep_docker(&docker, &scope, &mut report).await?;
        }
    }
    report.dirs = sweep_local_dirs(&scope);
    Ok(report)
}

fn selected(labels: Option<&HashMap<String, String>>, scope: &SweepScope) -> bool {
    let get = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    match scope {
        SweepScope::Run(run) => get(LABEL_RUN) == Some(run.as_str()),
        SweepScope::Mine => get(LABEL_OWNER) == Some(owner()),
        SweepScope::Stale => owner_is_gone(
            get(LABEL_OWNER),
            get(LABEL_CREATED).and_then(|c| c.parse().ok()),
        ),
    }
}

async fn sweep_docker(
    docker: &Docker,
    scope: &SweepScope,
    report: &mut SweepReport,
) -> anyhow::Result<()> {
    let filter = HashMap::from([("label".to_owned(), vec![format!("{LABEL_HARNESS}=1")])]);
    let containers = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filter.clone()),
            ..Default::default()
        }))
        .await?;
    let doomed: Vec<String> = containers
        .iter()
        .filter(|c| selected(c.labels.as_ref(), scope))
        .filter_map(|c| c.id.clone())
        .collect();
    let removals = doomed.iter().map(|id| remove_container(docker, id));
    for (id, ok) in doomed.iter().zip(futures::future::join_all(removals).await) {
        if ok {
            report.containers.push(id.clone());
        }
    }
    let networks = docker
        .list_networks(Some(ListNetworksOptions {
            filters: Some(filter),
        }))
        .await?;
    for network in networks {
        if selected(network.labels.as_ref(), scope) {
            if let Some(name) = network.name {
                if docker.remove_network(&name).await.is_ok() {
                    report.networks.push(name);
                }
            }
        }
    }
    Ok(())
}

/// Force-removes a container (and its anonymous volumes); true when it is gone.
pub(crate) async fn remove_container(docker: &Docker, id: &str) -> bool {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => true,
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => true,
        Err(_) => false,
    }
}

/// Removes a network, retrying briefly while Docker still detaches its last containers.
pub(crate) async fn remove_network(docker: &Docker, name: &str) -> bool {
    for _ in 0..20 {
        match docker.remove_network(name).await {
            Ok(()) => return true,
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => return true,
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    false
}

fn sweep_local_dirs(scope: &SweepScope) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return removed;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(run) = name.strip_prefix(LOCAL_DIR_PREFIX) else {
            continue;
        };
        let dir = entry.path();
        let owner = std::fs::read_to_string(dir.join("owner")).ok();
        let created = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_secs());
        let doomed = match scope {
            SweepScope::Run(r) => r == run,
            SweepScope::Mine => owner.as_deref().map(str::trim) == Some(self::owner()),
            SweepScope::Stale => owner_is_gone(owner.as_deref().map(str::trim), created),
        };
        if doomed {
            kill_pids_in(&dir);
            if std::fs::remove_dir_all(&dir).is_ok() {
                removed.push(dir);
            }
        }
    }
    removed
}

/// SIGKILLs the processes whose pids a local topology wrote to `<dir>/pids` (each line
/// `<pid> <start time>`, so a reused pid is left alone).
fn kill_pids_in(dir: &Path) {
    let Ok(text) = std::fs::read_to_string(dir.join("pids")) else {
        return;
    };
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(Ok(pid)), Some(Ok(start))) = (
            parts.next().map(str::parse::<u32>),
            parts.next().map(str::parse::<u64>),
        ) else {
            continue;
        };
        if start_time(pid) == Some(start) {
            kill_pid(pid);
        }
    }
}

/// SIGKILLs a process.
pub(crate) fn kill_pid(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// The line a local topology writes to its `pids` file for `pid`.
pub(crate) fn pid_line(pid: u32) -> String {
    format!("{pid} {}\n", start_time(pid).unwrap_or_default())
}

/// The live resources of this process, removed by the signal guard.
#[derive(Default)]
struct Registry {
    containers: BTreeSet<String>,
    networks: BTreeSet<String>,
    /// Each process with its start time when registered (so a reused pid is left alone).
    pids: BTreeMap<u32, Option<u64>>,
    dirs: BTreeSet<PathBuf>,
}

fn registry() -> &'static Mutex<Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(Mutex::default)
}

fn with_registry(f: impl FnOnce(&mut Registry)) {
    f(&mut registry().lock().unwrap_or_else(|p| p.into_inner()));
}

/// A resource the guard removes if a signal ends the process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Resource {
    Container(String),
    Network(String),
    Pid(u32),
    Dir(PathBuf),
}

/// Registers a live resource.
pub(crate) fn register(resource: Resource) {
    with_registry(|r| match resource {
        Resource::Container(id) => {
            r.containers.insert(id);
        }
        Resource::Network(n) => {
            r.networks.insert(n);
        }
        Resource::Pid(p) => {
            r.pids.insert(p, start_time(p));
        }
        Resource::Dir(d) => {
            r.dirs.insert(d);
        }
    });
}

/// Forgets a resource that was removed.
pub(crate) fn unregister(resource: &Resource) {
    with_registry(|r| match resource {
        Resource::Container(id) => {
            r.containers.remove(id);
        }
        Resource::Network(n) => {
            r.networks.remove(n);
        }
        Resource::Pid(p) => {
            r.pids.remove(p);
        }
        Resource::Dir(d) => {
            r.dirs.remove(d);
        }
    });
}

/// A registered resource, forgotten when dropped: a process the harness started, from its
/// spawn until it is reaped.
#[derive(Debug)]
pub(crate) struct Registration(Resource);

impl Registration {
    /// Registers `resource` until the returned value is dropped.
    pub(crate) fn new(resource: Resource) -> Self {
        register(resource.clone());
        Self(resource)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        unregister(&self.0);
    }
}

/// Set by the signal guard when a signal came: nothing new is created from then on.
static CLOSING: AtomicBool = AtomicBool::new(false);

/// How long the guard waits, after its first removal, for a creation that was already under
/// way when the signal came (a Docker create call answered after the first sweep listed), before
/// it removes what this process owns once more.
const IN_FLIGHT: Duration = Duration::from_millis(500);

/// Fails once a signal is being handled: called before a container, network or process is
/// created, so that the guard's removal is not raced by new ones.
///
/// # Errors
/// The signal guard is removing this process's resources.
pub fn refuse_if_closing(what: &str) -> anyhow::Result<()> {
    if CLOSING.load(Ordering::SeqCst) {
        anyhow::bail!("not starting {what}: the harness is shutting down on a signal");
    }
    Ok(())
}

/// Never returns while the signal guard is at work (it ends the process with `128 + signal`
/// once everything is removed): the main thread calls it before it ends the process, so that a
/// run that failed because the guard killed its replicas, or refused to start a container, does
/// not exit under the guard with status 1 and a half-done removal.
pub fn wait_if_closing() {
    if CLOSING.load(Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
}

/// Installs (once per process) a thread that, on SIGINT, SIGTERM or SIGHUP, removes every
/// registered container, network, process and directory, and every container and network
/// labelled with this process as their owner (those still starting), then exits with
/// `128 + signal`.
///
/// Installing it replaces the default action of those signals for the whole process: a caller
/// that handles them itself (and calls `Topology::shutdown`) does not install it.
pub fn install_signal_guard() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("elector-topology-guard".into())
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    let _ = ready_tx.send(());
                    return;
                };
                rt.block_on(async move {
                    use tokio::signal::unix::{signal, SignalKind};
                    let kinds = [
                        (SignalKind::interrupt(), 2),
                        (SignalKind::terminate(), 15),
                        (SignalKind::hangup(), 1),
                    ];
                    let mut streams = Vec::new();
                    for (kind, number) in kinds {
                        if let Ok(s) = signal(kind) {
                            streams.push((s, number));
                        }
                    }
                    let _ = ready_tx.send(());
                    let waits = streams.iter_mut().map(|(s, n)| {
                        let n = *n;
                        Box::pin(async move {
                            s.recv().await;
                            n
                        })
                    });
                    let (number, _, _) = futures::future::select_all(waits).await;
                    eprintln!(
                        "harness: signal {number}: removing this run's containers, networks and \
                         processes"
                    );
                    remove_registered().await;
                    std::process::exit(128 + number);
                });
            });
        if spawned.is_ok() {
            let _ = ready_rx.recv_timeout(Duration::from_secs(5));
        }
    });
}

/// Removes everything registered and everything labelled as this process's (the guard's work):
/// new creations are refused first, the ones under way get [`IN_FLIGHT`] to show, and are then
/// removed too.
async fn remove_registered() {
    CLOSING.store(true, Ordering::SeqCst);
    remove_registered_now().await;
    let _ = sweep(SweepScope::Mine).await;
    tokio::time::sleep(IN_FLIGHT).await;
    remove_registered_now().await;
    let _ = sweep(SweepScope::Mine).await;
}

async fn remove_registered_now() {
    let (containers, networks, pids, dirs) = {
        let r = registry().lock().unwrap_or_else(|p| p.into_inner());
        (
            r.containers.clone(),
            r.networks.clone(),
            r.pids.clone(),
            r.dirs.clone(),
        )
    };
    for (pid, start) in pids {
        if start_time(pid) == start {
            kill_pid(pid);
        }
    }
    if let Ok(docker) = Docker::connect_with_defaults() {
        futures::future::join_all(containers.iter().map(|id| remove_container(&docker, id))).await;
        for network in &networks {
            remove_network(&docker, network).await;
        }
    }
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Runs `future` to completion on a fresh thread with a runtime of its own and waits for it:
/// usable from `Drop`, inside or outside any runtime, without touching the caller's runtime.
pub(crate) fn block_on_fresh<F>(future: F) -> Option<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    std::thread::Builder::new()
        .name("elector-topology-cleanup".into())
        .spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()
                .map(|rt| rt.block_on(future))
        })
        .ok()?
        .join()
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_of_live_and_dead_processes() {
        assert!(!owner_is_gone(Some(owner()), None), "this process lives");
        let mut parts: Vec<String> = owner().split('/').map(str::to_owned).collect();
        parts[2] = "1".into(); // same pid, another start time: a reused pid
        assert!(owner_is_gone(Some(&parts.join("/")), None));
        let foreign = "other-boot/1/1".to_owned();
        assert!(
            !owner_is_gone(Some(&foreign), Some(now_secs())),
            "young: kept"
        );
        assert!(owner_is_gone(Some(&foreign), Some(0)), "old: swept");
        assert!(owner_is_gone(None, None));
    }
}
