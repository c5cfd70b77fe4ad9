//! The Docker backend: PostgreSQL, PgBouncer and Toxiproxy containers on a network of the run's
//! own, started with testcontainers.
//!
//! Containers reach each other by container name (testcontainers has no network aliases), so
//! every name carries the run id: `elector-<run>-postgres`, `elector-<run>-toxiproxy`,
//! `elector-<run>-pgbouncer-session`, `elector-<run>-pgbouncer-transaction`, on the network
//! `elector-<run>`. The network is created here, labelled, and removed after the containers
//! (testcontainers leaves a network it did not create alone). Every container and the network
//! carry the labels of [`cleanup`](super::cleanup).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use bollard::models::NetworkCreateRequest;
use bollard::Docker;
use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};
use testcontainers_modules::postgres::Postgres;

use super::cleanup::{self, Resource};
use super::images::{ImageRef, Images, BUILD_HINT};
use super::{password, PoolMode, APP_USER, DATABASE, POSTGRES_PORT, USER};

/// Toxiproxy's API port inside its container.
pub const TOXIPROXY_API_PORT: u16 = 8474;
/// The first proxy port exposed by the Toxiproxy container (as upstream's test-container
/// modules do).
pub const FIRST_PROXY_PORT: u16 = 8666;
/// How many proxy ports the Toxiproxy container exposes by default (8666–8673). Upstream's
/// test-container modules expose 32 (8666–8697); every exposed port costs Docker a
/// `docker-proxy` process at start and at removal (measured here: 33 ports took 2.5–4 s to
/// start and 2.3 s to remove, 9 ports 1.1–1.5 s and 0.7–0.9 s), so only what a run needs is
/// exposed: raise [`TopologyConfig::proxy_ports`](super::TopologyConfig::proxy_ports) for more
/// than eight proxies.
pub const DEFAULT_PROXY_PORTS: u16 = 8;
/// The most proxy ports the Toxiproxy container can expose (8666–8697).
pub const MAX_PROXY_PORTS: u16 = 32;
/// PostgreSQL's data directory in the image (the upstream image's `PGDATA`).
pub const PGDATA: &str = facts::pg::PGDATA;
/// How long a container may take to report ready.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a stopped PostgreSQL container gets to shut down before SIGKILL.
const STOP_TIMEOUT_SECS: i32 = 10;

/// What a Docker topology runs.
#[derive(Clone, Debug)]
pub struct DockerOptions {
    /// The images.
    pub images: Images,
    /// Which PgBouncers to run in front of PostgreSQL.
    pub pgbouncers: Vec<PoolMode>,
    /// How many proxy ports the Toxiproxy container exposes (from 8666).
    pub proxy_ports: u16,
    /// Extra `-c name=value` settings for PostgreSQL.
    pub postgres_settings: Vec<(String, String)>,
    /// PostgreSQL's data on a tmpfs instead of a volume ([`facts::pg::data_in_memory`]).
    pub data_in_memory: bool,
}

/// Per-service start-up times.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DockerTimings {
    /// Creating the network.
    pub network: Duration,
    /// PostgreSQL container until ready.
    pub postgres: Duration,
    /// Toxiproxy container until its API answers.
    pub toxiproxy: Duration,
    /// Each PgBouncer container until ready.
    pub pgbouncers: Vec<(PoolMode, Duration)>,
}

struct Containers {
    postgres: Option<ContainerAsync<Postgres>>,
    toxiproxy: Option<ContainerAsync<GenericImage>>,
    pgbouncers: Vec<ContainerAsync<GenericImage>>,
}

impl Containers {
    fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.pgbouncers.iter().map(|c| c.id().to_owned()).collect();
        ids.extend(self.toxiproxy.as_ref().map(|c| c.id().to_owned()));
        ids.extend(self.postgres.as_ref().map(|c| c.id().to_owned()));
        ids
    }

    fn is_empty(&self) -> bool {
        self.postgres.is_none() && self.toxiproxy.is_none() && self.pgbouncers.is_empty()
    }
}

/// The services of one run in Docker.
pub struct DockerServices {
    run: String,
    network: String,
    postgres_name: String,
    toxiproxy_name: String,
    pgbouncer_names: Vec<(PoolMode, String)>,
    postgres_port: AtomicU16,
    toxiproxy_api: SocketAddr,
    /// `(container port, host port)` of each exposed proxy port.
    proxy_ports: Vec<(u16, u16)>,
    pgbouncer_ports: Vec<(PoolMode, u16)>,
    containers: tokio::sync::Mutex<Containers>,
    timings: DockerTimings,
}

impl std::fmt::Debug for DockerServices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerServices")
            .field("run", &self.run)
            .field("network", &self.network)
            .field("postgres", &self.postgres_name)
            .field("toxiproxy", &self.toxiproxy_name)
            .field("pgbouncers", &self.pgbouncer_names)
            .finish()
    }
}

fn container_name(run: &str, role: &str) -> String {
    format!("elector-{run}-{role}")
}

/// Connects to the Docker daemon and checks that it answers.
///
/// # Errors
/// No daemon answers.
pub async fn docker() -> anyhow::Result<Docker> {
    let docker = Docker::connect_with_defaults().context(
        "cannot reach the Docker daemon (is Docker running? DOCKER_HOST?); \
         the local backend (--backend local) runs without Docker",
    )?;
    docker.ping().await.context(
        "the Docker daemon does not answer (is Docker running?); \
         the local backend (--backend local) runs without Docker",
    )?;
    Ok(docker)
}

/// Whether `image` is present locally.
async fn image_present(docker: &Docker, image: &ImageRef) -> bool {
    docker.inspect_image(&image.to_string()).await.is_ok()
}

/// Wraps a container start error with what the user can do about it.
fn start_error(
    service: &str,
    image: &ImageRef,
    present: bool,
    e: testcontainers::TestcontainersError,
) -> anyhow::Error {
    if present {
        anyhow!("{service} ({image}) did not start: {e}")
    } else {
        anyhow!(
            "{service}: the image {image} is not present locally and could not be pulled \
             ({e}); {BUILD_HINT}"
        )
    }
}

/// Which images were present locally before the start (for the error message).
#[derive(Clone, Copy)]
struct Present {
    postgres: bool,
    toxiproxy: bool,
    pgbouncer: bool,
}

impl DockerServices {
    /// Creates the network and starts every container in parallel; returns once PostgreSQL
    /// accepts connections, the PgBouncers are up and the Toxiproxy API answers.
    ///
    /// # Errors
    /// Docker is not reachable, an image is missing and cannot be pulled, or a container does
    /// not become ready; whatever started is removed again.
    pub async fn start(run: &str, options: &DockerOptions) -> anyhow::Result<DockerServices> {
        let docker = docker().await?;
        let images = &options.images;
        let (pg_present, tp_present, pgb_present) = tokio::join!(
            image_present(&docker, &images.postgres),
            image_present(&docker, &images.toxiproxy),
            async {
                options.pgbouncers.is_empty() || image_present(&docker, &images.pgbouncer).await
            },
        );

        let clock = Instant::now();
        let network = format!("elector-{run}");
        cleanup::refuse_if_closing("the Docker network")?;
        docker
            .create_network(NetworkCreateRequest {
                name: network.clone(),
                driver: Some("bridge".into()),
                labels: Some(cleanup::labels(run, "network")),
                ..Default::default()
            })
            .await
            .with_context(|| format!("creating the Docker network {network}"))?;
        cleanup::register(Resource::Network(network.clone()));
        let network_time = clock.elapsed();

        let present = Present {
            postgres: pg_present,
            toxiproxy: tp_present,
            pgbouncer: pgb_present,
        };
        match Self::start_containers(run, &network, options, present).await {
            Ok(mut services) => {
                services.timings.network = network_time;
                Ok(services)
            }
            Err(e) => {
                cleanup::remove_network(&docker, &network).await;
                cleanup::unregister(&Resource::Network(network));
                Err(e)
            }
        }
    }

    async fn start_containers(
        run: &str,
        network: &str,
        options: &DockerOptions,
        present: Present,
    ) -> anyhow::Result<DockerServices> {
        let images = &options.images;
        let postgres_name = container_name(run, "postgres");
        let toxiproxy_name = container_name(run, "toxiproxy");

        let postgres = async {
            let clock = Instant::now();
            let mut pg = Postgres::default()
                .with_db_name(DATABASE)
                .with_user(USER)
                .with_password(password())
                .with_name(&images.postgres.name)
                .with_tag(&images.postgres.tag)
                .with_network(network)
                .with_container_name(&postgres_name)
                .with_labels(cleanup::labels(run, "postgres"))
                .with_host_config_modifier(match options.data_in_memory {
                    true => facts::pg::data_in_memory,
                    false => facts::pg::data_volume,
                })
                .with_startup_timeout(STARTUP_TIMEOUT);
            if !options.postgres_settings.is_empty() {
                let mut cmd = vec!["-c".to_owned(), "fsync=off".to_owned()];
                for (k, v) in &options.postgres_settings {
                    cmd.push("-c".into());
                    cmd.push(format!("{k}={v}"));
                }
                pg = pg.with_cmd(cmd);
            }
            cleanup::refuse_if_closing("PostgreSQL")?;
            let c = pg
                .start()
                .await
                .map_err(|e| start_error("PostgreSQL", &images.postgres, present.postgres, e))?;
            cleanup::register(Resource::Container(c.id().to_owned()));
            let port = c
                .get_host_port_ipv4(POSTGRES_PORT)
                .await
                .context("PostgreSQL's mapped port")?;
            Ok::<_, anyhow::Error>((c, port, clock.elapsed()))
        };

        let toxiproxy = async {
            let clock = Instant::now();
            let mut image =
                GenericImage::new(images.toxiproxy.name.clone(), images.toxiproxy.tag.clone())
                    .with_exposed_port(TOXIPROXY_API_PORT.tcp())
                    .with_wait_for(WaitFor::message_on_either_std(
                        "Starting Toxiproxy HTTP server",
                    ));
            for i in 0..options.proxy_ports.min(MAX_PROXY_PORTS) {
                image = image.with_exposed_port((FIRST_PROXY_PORT + i).tcp());
            }
            cleanup::refuse_if_closing("Toxiproxy")?;
            // Upstream's semantics (the default): `partition` holds closes with a `slow_close`,
            // so it needs no partition mode, and the upstream image gives the same results.
            let c = image
                .with_network(network)
                .with_container_name(&toxiproxy_name)
                .with_labels(cleanup::labels(run, "toxiproxy"))
                .with_startup_timeout(STARTUP_TIMEOUT)
                .start()
                .await
                .map_err(|e| start_error("Toxiproxy", &images.toxiproxy, present.toxiproxy, e))?;
            cleanup::register(Resource::Container(c.id().to_owned()));
            let ports = c.ports().await.context("Toxiproxy's mapped ports")?;
            let api = ports
                .map_to_host_port_ipv4(TOXIPROXY_API_PORT)
                .ok_or_else(|| {
                    anyhow!("Toxiproxy's API port {TOXIPROXY_API_PORT} is not mapped")
                })?;
            let mut proxy_ports = Vec::new();
            for i in 0..options.proxy_ports.min(MAX_PROXY_PORTS) {
                let port = FIRST_PROXY_PORT + i;
                let host = ports
                    .map_to_host_port_ipv4(port)
                    .ok_or_else(|| anyhow!("Toxiproxy's proxy port {port} is not mapped"))?;
                proxy_ports.push((port, host));
            }
            let api = SocketAddr::from((Ipv4Addr::LOCALHOST, api));
            super::proxy::Toxiproxy::new(api)
                .wait_ready(STARTUP_TIMEOUT)
                .await?;
            Ok::<_, anyhow::Error>((c, api, proxy_ports, clock.elapsed()))
        };

        let pgbouncers = futures::future::join_all(options.pgbouncers.iter().map(|&mode| {
            let name = container_name(run, &format!("pgbouncer-{mode}"));
            let postgres_name = postgres_name.clone();
            async move {
                let clock = Instant::now();
                cleanup::refuse_if_closing("PgBouncer")?;
                let c =
                    GenericImage::new(images.pgbouncer.name.clone(), images.pgbouncer.tag.clone())
                        .with_exposed_port(POSTGRES_PORT.tcp())
                        .with_wait_for(WaitFor::message_on_either_std("process up: PgBouncer"))
                        .with_env_var("DB_HOST", &postgres_name)
                        .with_env_var("DB_PORT", POSTGRES_PORT.to_string())
                        .with_env_var("DB_USER", APP_USER)
                        .with_env_var("DB_PASSWORD", password())
                        .with_env_var("DB_NAME", DATABASE)
                        .with_env_var("POOL_MODE", mode.setting())
                        .with_env_var("DEFAULT_POOL_SIZE", mode.pool_size().to_string())
                        .with_env_var("AUTH_TYPE", "scram-sha-256")
                        .with_env_var(
                            "SERVER_LOGIN_RETRY",
                            super::POOLER_LOGIN_RETRY.as_secs().to_string(),
                        )
                        .with_env_var("LISTEN_PORT", POSTGRES_PORT.to_string())
                        .with_network(network)
                        .with_container_name(&name)
                        .with_labels(cleanup::labels(run, &format!("pgbouncer-{mode}")))
                        .with_startup_timeout(STARTUP_TIMEOUT)
                        .start()
                        .await
                        .map_err(|e| {
                            start_error(
                                &format!("PgBouncer ({mode} mode)"),
                                &images.pgbouncer,
                                present.pgbouncer,
                                e,
                            )
                        })?;
                cleanup::register(Resource::Container(c.id().to_owned()));
                let port = c
                    .get_host_port_ipv4(POSTGRES_PORT)
                    .await
                    .context("PgBouncer's mapped port")?;
                Ok::<_, anyhow::Error>((mode, name, c, port, clock.elapsed()))
            }
        }));

        let (postgres, toxiproxy, pgbouncers) = tokio::join!(postgres, toxiproxy, pgbouncers);
        // On any failure, whatever started is dropped here (testcontainers removes it).
        let unregister_all = |ids: Vec<String>| {
            for id in ids {
                cleanup::unregister(&Resource::Container(id));
            }
        };
        let mut ids: Vec<String> = Vec::new();
        if let Ok((c, ..)) = &postgres {
            ids.push(c.id().to_owned());
        }
        if let Ok((c, ..)) = &toxiproxy {
            ids.push(c.id().to_owned());
        }
        for (_, _, c, _, _) in pgbouncers.iter().flatten() {
            ids.push(c.id().to_owned());
        }
        let failure = [postgres.as_ref().err(), toxiproxy.as_ref().err()]
            .into_iter()
            .chain(pgbouncers.iter().map(|r| r.as_ref().err()))
            .flatten()
            .map(|e| format!("{e:#}"))
            .collect::<Vec<_>>();
        if !failure.is_empty() {
            drop((postgres, toxiproxy, pgbouncers));
            unregister_all(ids);
            bail!("the Docker topology did not start: {}", failure.join("; "));
        }
        let (postgres, postgres_port, postgres_time) = postgres?;
        let (toxiproxy, toxiproxy_api, proxy_ports, toxiproxy_time) = toxiproxy?;
        let mut pgbouncer_names = Vec::new();
        let mut pgbouncer_ports = Vec::new();
        let mut pgbouncer_times = Vec::new();
        let mut pgbouncer_containers = Vec::new();
        for r in pgbouncers {
            let (mode, name, c, port, time) = r?;
            pgbouncer_names.push((mode, name));
            pgbouncer_ports.push((mode, port));
            pgbouncer_times.push((mode, time));
            pgbouncer_containers.push(c);
        }
        Ok(DockerServices {
            run: run.to_owned(),
            network: network.to_owned(),
            postgres_name,
            toxiproxy_name,
            pgbouncer_names,
            postgres_port: AtomicU16::new(postgres_port),
            toxiproxy_api,
            proxy_ports,
            pgbouncer_ports,
            containers: tokio::sync::Mutex::new(Containers {
                postgres: Some(postgres),
                toxiproxy: Some(toxiproxy),
                pgbouncers: pgbouncer_containers,
            }),
            timings: DockerTimings {
                network: Duration::ZERO,
                postgres: postgres_time,
                toxiproxy: toxiproxy_time,
                pgbouncers: pgbouncer_times,
            },
        })
    }

    /// The network's name.
    pub fn network(&self) -> &str {
        &self.network
    }

    /// Container names by role (`postgres`, `toxiproxy`, `pgbouncer-session`, ...).
    pub fn container_names(&self) -> Vec<(String, String)> {
        let mut names = vec![
            ("postgres".to_owned(), self.postgres_name.clone()),
            ("toxiproxy".to_owned(), self.toxiproxy_name.clone()),
        ];
        for (mode, name) in &self.pgbouncer_names {
            names.push((format!("pgbouncer-{mode}"), name.clone()));
        }
        names
    }

    /// The start-up times.
    pub fn timings(&self) -> &DockerTimings {
        &self.timings
    }

    /// PostgreSQL's address on the host (changes when the container restarts).
    pub fn postgres_addr(&self) -> SocketAddr {
        SocketAddr::from((
            Ipv4Addr::LOCALHOST,
            self.postgres_port.load(Ordering::SeqCst),
        ))
    }

    /// The Toxiproxy API's address on the host.
    pub fn toxiproxy_api(&self) -> SocketAddr {
        self.toxiproxy_api
    }

    /// A PgBouncer's address on the host.
    pub fn pgbouncer_addr(&self, mode: PoolMode) -> Option<SocketAddr> {
        self.pgbouncer_ports
            .iter()
            .find(|(m, _)| *m == mode)
            .map(|(_, p)| SocketAddr::from((Ipv4Addr::LOCALHOST, *p)))
    }

    /// Where Toxiproxy reaches PostgreSQL, or a PgBouncer (container name and port).
    pub fn upstream(&self, via: Option<PoolMode>) -> Option<String> {
        match via {
            None => Some(format!("{}:{POSTGRES_PORT}", self.postgres_name)),
            Some(mode) => self
                .pgbouncer_names
                .iter()
                .find(|(m, _)| *m == mode)
                .map(|(_, name)| format!("{name}:{POSTGRES_PORT}")),
        }
    }

    /// The `index`-th proxy slot: the listen address inside the Toxiproxy container and the
    /// address it is reachable at on the host.
    pub fn proxy_slot(&self, index: usize) -> Option<(String, SocketAddr)> {
        self.proxy_ports.get(index).map(|&(inside, host)| {
            (
                format!("0.0.0.0:{inside}"),
                SocketAddr::from((Ipv4Addr::LOCALHOST, host)),
            )
        })
    }

    /// How many proxy slots there are.
    pub fn proxy_slots(&self) -> usize {
        self.proxy_ports.len()
    }

    /// Stops the PostgreSQL container (SIGINT: a fast shutdown; SIGKILL after 10 s).
    ///
    /// # Errors
    /// Docker refused.
    pub async fn stop_server(&self) -> anyhow::Result<()> {
        let containers = self.containers.lock().await;
        let pg = containers
            .postgres
            .as_ref()
            .ok_or_else(|| anyhow!("the topology is shut down"))?;
        pg.stop_with_timeout(Some(STOP_TIMEOUT_SECS))
            .await
            .context("docker stop postgres")
    }

    /// Starts the stopped PostgreSQL container again; returns once Docker runs it (readiness is
    /// the caller's to poll: the host port changes).
    ///
    /// # Errors
    /// Docker refused.
    pub async fn start_server(&self) -> anyhow::Result<()> {
        let containers = self.containers.lock().await;
        let pg = containers
            .postgres
            .as_ref()
            .ok_or_else(|| anyhow!("the topology is shut down"))?;
        pg.start().await.context("docker start postgres")?;
        let port = pg
            .get_host_port_ipv4(POSTGRES_PORT)
            .await
            .context("PostgreSQL's mapped port after a start")?;
        self.postgres_port.store(port, Ordering::SeqCst);
        Ok(())
    }

    /// Removes every container in parallel, then the network. Idempotent.
    pub async fn shutdown(&self) {
        let taken = {
            let mut guard = self.containers.lock().await;
            Containers {
                postgres: guard.postgres.take(),
                toxiproxy: guard.toxiproxy.take(),
                pgbouncers: std::mem::take(&mut guard.pgbouncers),
            }
        };
        if !taken.is_empty() {
            remove_all(taken, self.network.clone()).await;
        }
    }
}

impl Drop for DockerServices {
    /// Without [`shutdown`](DockerServices::shutdown) (a panic, an early return): removes the
    /// containers in parallel, then the network, on a thread with a runtime of its own, so it
    /// works inside any runtime flavour or none (bollard opens a connection per request, so
    /// nothing waits on the caller's runtime).
    fn drop(&mut self) {
        let containers = self.containers.get_mut();
        if containers.is_empty() {
            return;
        }
        let taken = Containers {
            postgres: containers.postgres.take(),
            toxiproxy: containers.toxiproxy.take(),
            pgbouncers: std::mem::take(&mut containers.pgbouncers),
        };
        let network = self.network.clone();
        cleanup::block_on_fresh(remove_all(taken, network));
    }
}

/// Removes the containers in parallel (testcontainers' `rm`, then a forced removal of any it
/// missed), then the network.
async fn remove_all(containers: Containers, network: String) {
    let ids = containers.ids();
    let mut removals: Vec<futures::future::BoxFuture<'static, ()>> = Vec::new();
    if let Some(c) = containers.postgres {
        removals.push(Box::pin(async move {
            let _ = c.rm().await;
        }));
    }
    if let Some(c) = containers.toxiproxy {
        removals.push(Box::pin(async move {
            let _ = c.rm().await;
        }));
    }
    for c in containers.pgbouncers {
        removals.push(Box::pin(async move {
            let _ = c.rm().await;
        }));
    }
    futures::future::join_all(removals).await;
    if let Ok(docker) = Docker::connect_with_defaults() {
        futures::future::join_all(ids.iter().map(|id| cleanup::remove_container(&docker, id)))
            .await;
        cleanup::remove_network(&docker, &network).await;
    }
    for id in ids {
        cleanup::unregister(&Resource::Container(id));
    }
    cleanup::unregister(&Resource::Network(network));
}

/// Counts the containers and networks labelled with run `run` (for tests and diagnostics).
///
/// # Errors
/// Docker did not answer.
pub async fn count_labelled(run: &str) -> anyhow::Result<(usize, usize)> {
    count_with_label(cleanup::LABEL_RUN, run).await
}

/// Counts the containers and networks whose label `key` is `value` (for tests and
/// diagnostics: [`cleanup::LABEL_OWNER`] and [`cleanup::owner_of`] find a process's).
///
/// # Errors
/// Docker did not answer.
pub async fn count_with_label(key: &str, value: &str) -> anyhow::Result<(usize, usize)> {
    let docker = docker().await?;
    let filter = HashMap::from([("label".to_owned(), vec![format!("{key}={value}")])]);
    let containers = docker
        .list_containers(Some(bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some(filter.clone()),
            ..Default::default()
        }))
        .await?;
    let networks = docker
        .list_networks(Some(bollard::query_parameters::ListNetworksOptions {
            filters: Some(filter),
        }))
        .await?;
    Ok((containers.len(), networks.len()))
}
