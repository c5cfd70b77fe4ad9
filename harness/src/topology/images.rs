//! Container image names: from flags and the environment; where none is named, the image
//! `ci/build-images.sh` built on this machine when Docker has it, else the upstream image a
//! user with a registry would pull. The choice is printed once per service (see
//! [`facts::images`], which the tests share).
//!
//! | service | flag | environment | built locally | upstream |
//! |---|---|---|---|---|
//! | PostgreSQL | `--postgres-image` | `ELECTOR_POSTGRES_IMAGE` | `elector-local/postgres:15` | `postgres:15` |
//! | PgBouncer | `--pgbouncer-image` | `ELECTOR_PGBOUNCER_IMAGE` | `elector-local/pgbouncer:1.18` | `edoburu/pgbouncer:latest` |
//! | Toxiproxy | `--toxiproxy-image` | `ELECTOR_TOXIPROXY_IMAGE` | `elector-local/toxiproxy:dev` | `ghcr.io/shopify/toxiproxy:2.12.0` |

pub use facts::images::{
    local_image_exists, ImageRef, Images, Service, Source, BUILD_HINT, PGBOUNCER, POSTGRES,
    TOXIPROXY,
};

/// The image flags of a command line (each also read from its environment variable).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ImageArgs {
    /// The PostgreSQL image (upstream `postgres` contract). Default: the local build when Docker
    /// has it, else `postgres:15`.
    #[arg(long, env = "ELECTOR_POSTGRES_IMAGE")]
    pub postgres_image: Option<String>,
    /// The PgBouncer image (`edoburu/pgbouncer` environment contract). Default: the local build
    /// when Docker has it, else `edoburu/pgbouncer:latest`.
    #[arg(long, env = "ELECTOR_PGBOUNCER_IMAGE")]
    pub pgbouncer_image: Option<String>,
    /// The Toxiproxy image (API on 8474). Default: the local build when Docker has it, else
    /// `ghcr.io/shopify/toxiproxy:2.12.0`.
    #[arg(long, env = "ELECTOR_TOXIPROXY_IMAGE")]
    pub toxiproxy_image: Option<String>,
}

impl From<&ImageArgs> for Images {
    fn from(args: &ImageArgs) -> Images {
        Images {
            postgres: POSTGRES.choose(args.postgres_image.as_deref()),
            pgbouncer: PGBOUNCER.choose(args.pgbouncer_image.as_deref()),
            toxiproxy: TOXIPROXY.choose(args.toxiproxy_image.as_deref()),
        }
    }
}
