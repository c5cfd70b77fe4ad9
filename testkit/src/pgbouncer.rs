//! PgBouncer (the image of `ci/images/pgbouncer`, or the one `ELECTOR_PGBOUNCER_IMAGE` names) in
//! front of a [`Pg`] that joined a Docker network ([`PgOptions::network`](crate::pg::PgOptions)).

use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::{runners::AsyncRunner, ContainerAsync, GenericImage, ImageExt};

use crate::images::{BUILD_HINT, PGBOUNCER};
use crate::Pg;

pub use crate::pg::unique_name;

/// A PgBouncer in its own container; removed on drop.
pub struct PgBouncer {
    /// The container.
    pub container: ContainerAsync<GenericImage>,
    /// The host port mapped to its listen port.
    pub port: u16,
}

impl PgBouncer {
    /// Starts PgBouncer in `pool_mode` (`session` or `transaction`) with `pool_size` server
    /// sessions, in front of `pg` (the application role, SCRAM; its server sessions log in as
    /// it). Panics with a clear
    /// message when `pg` joined no network, or Docker or the image is missing.
    pub async fn start(pg: &Pg, pool_mode: &str, pool_size: u32) -> PgBouncer {
        let (network, host) = pg
            .name
            .clone()
            .expect("PgBouncer needs a server started with PgOptions::network");
        let image = PGBOUNCER.resolve();
        let container = GenericImage::new(image.name.clone(), image.tag.clone())
            .with_exposed_port(5432.tcp())
            .with_wait_for(WaitFor::message_on_either_std("process up: PgBouncer"))
            .with_env_var("DB_HOST", host)
            .with_env_var("DB_USER", crate::pg::APP_USER)
            .with_env_var("DB_PASSWORD", crate::pg::APP_USER)
            .with_env_var("DB_NAME", "plexsphere")
            .with_env_var("POOL_MODE", pool_mode)
            .with_env_var("DEFAULT_POOL_SIZE", pool_size.to_string())
            .with_env_var("AUTH_TYPE", "scram-sha-256")
            .with_network(network)
            .with_container_name(unique_name("testkit-pgbouncer"))
            .with_label("org.elector.test", "testkit")
            .start()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "could not start PgBouncer from {image} ({e}). Is Docker running? {BUILD_HINT}"
                )
            });
        let port = container
            .get_host_port_ipv4(5432)
            .await
            .expect("the container maps 5432");
        PgBouncer { container, port }
    }
}
