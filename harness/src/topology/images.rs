//! Container image names: from flags and the environment, defaulting to the upstream images a
//! user with a registry would pull.
//!
//! | service | flag | environment | default (upstream) | offline build (`ci/build-images.sh`) |
//! |---|---|---|---|---|
//! | PostgreSQL | `--postgres-image` | `ELECTOR_POSTGRES_IMAGE` | `postgres:15` | `elector-local/postgres:15` |
//! | PgBouncer | `--pgbouncer-image` | `ELECTOR_PGBOUNCER_IMAGE` | `edoburu/pgbouncer:latest` | `elector-local/pgbouncer:1.18` |
//! | Toxiproxy | `--toxiproxy-image` | `ELECTOR_TOXIPROXY_IMAGE` | `ghcr.io/shopify/toxiproxy:2.12.0` | `elector-local/toxiproxy:dev` |

use std::fmt;
use std::str::FromStr;

/// The upstream PostgreSQL image.
pub const UPSTREAM_POSTGRES: &str = "postgres:15";
/// The upstream PgBouncer image (its environment contract: `DB_HOST`, `DB_PORT`, `DB_USER`,
/// `DB_PASSWORD`, `DB_NAME`, `POOL_MODE`, `AUTH_TYPE`, `LISTEN_PORT`).
pub const UPSTREAM_PGBOUNCER: &str = "edoburu/pgbouncer:latest";
/// The upstream Toxiproxy image (HTTP API on 8474).
pub const UPSTREAM_TOXIPROXY: &str = "ghcr.io/shopify/toxiproxy:2.12.0";

/// Environment variable naming the PostgreSQL image.
pub const ENV_POSTGRES: &str = "ELECTOR_POSTGRES_IMAGE";
/// Environment variable naming the PgBouncer image.
pub const ENV_PGBOUNCER: &str = "ELECTOR_PGBOUNCER_IMAGE";
/// Environment variable naming the Toxiproxy image.
pub const ENV_TOXIPROXY: &str = "ELECTOR_TOXIPROXY_IMAGE";

/// What to tell a user whose image is missing.
pub const BUILD_HINT: &str = "without a registry, build the local images with \
`bash ci/build-images.sh` and select them with `source ci/env.sh` (or the --postgres-image, \
--pgbouncer-image and --toxiproxy-image flags)";

/// An image reference, `name:tag` (`name` may carry a registry and a port, e.g.
/// `localhost:5000/postgres:15`; without a tag, `latest`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ImageRef {
    /// The repository, e.g. `postgres` or `ghcr.io/shopify/toxiproxy`.
    pub name: String,
    /// The tag, e.g. `15`.
    pub tag: String,
}

impl ImageRef {
    /// Parses `name[:tag]`; never fails (an empty tag becomes `latest`).
    pub fn parse(reference: &str) -> ImageRef {
        let reference = reference.trim();
        match reference.rsplit_once(':') {
            Some((name, tag)) if !tag.is_empty() && !tag.contains('/') => ImageRef {
                name: name.to_owned(),
                tag: tag.to_owned(),
            },
            _ => ImageRef {
                name: reference.trim_end_matches(':').to_owned(),
                tag: "latest".to_owned(),
            },
        }
    }
}

impl FromStr for ImageRef {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(ImageRef::parse(s))
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.name, self.tag)
    }
}

/// The three images a Docker topology runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Images {
    /// PostgreSQL, with the upstream `postgres` image's contract.
    pub postgres: ImageRef,
    /// PgBouncer, with the `edoburu/pgbouncer` environment contract.
    pub pgbouncer: ImageRef,
    /// A Toxiproxy server (upstream or the workspace's), API on 8474.
    pub toxiproxy: ImageRef,
}

impl Images {
    /// The upstream images.
    pub fn upstream() -> Images {
        Images {
            postgres: ImageRef::parse(UPSTREAM_POSTGRES),
            pgbouncer: ImageRef::parse(UPSTREAM_PGBOUNCER),
            toxiproxy: ImageRef::parse(UPSTREAM_TOXIPROXY),
        }
    }

    /// The images named by `ELECTOR_POSTGRES_IMAGE`, `ELECTOR_PGBOUNCER_IMAGE` and
    /// `ELECTOR_TOXIPROXY_IMAGE`, each defaulting to its upstream image.
    pub fn from_env() -> Images {
        let pick = |var: &str, default: &str| {
            ImageRef::parse(
                &std::env::var(var)
                    .ok()
                    .filter(|v| !v.trim().is_empty())
                    .unwrap_or_else(|| default.to_owned()),
            )
        };
        Images {
            postgres: pick(ENV_POSTGRES, UPSTREAM_POSTGRES),
            pgbouncer: pick(ENV_PGBOUNCER, UPSTREAM_PGBOUNCER),
            toxiproxy: pick(ENV_TOXIPROXY, UPSTREAM_TOXIPROXY),
        }
    }
}

impl Default for Images {
    /// [`Images::from_env`].
    fn default() -> Self {
        Images::from_env()
    }
}

/// The image flags of a command line (each also read from its environment variable).
#[derive(Clone, Debug, clap::Args)]
pub struct ImageArgs {
    /// The PostgreSQL image (upstream `postgres` contract).
    #[arg(long, env = ENV_POSTGRES, default_value = UPSTREAM_POSTGRES)]
    pub postgres_image: String,
    /// The PgBouncer image (`edoburu/pgbouncer` environment contract).
    #[arg(long, env = ENV_PGBOUNCER, default_value = UPSTREAM_PGBOUNCER)]
    pub pgbouncer_image: String,
    /// The Toxiproxy image (API on 8474).
    #[arg(long, env = ENV_TOXIPROXY, default_value = UPSTREAM_TOXIPROXY)]
    pub toxiproxy_image: String,
}

impl From<&ImageArgs> for Images {
    fn from(args: &ImageArgs) -> Images {
        Images {
            postgres: ImageRef::parse(&args.postgres_image),
            pgbouncer: ImageRef::parse(&args.pgbouncer_image),
            toxiproxy: ImageRef::parse(&args.toxiproxy_image),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_references() {
        let r = ImageRef::parse("postgres:15");
        assert_eq!((r.name.as_str(), r.tag.as_str()), ("postgres", "15"));
        let r = ImageRef::parse("localhost:5000/pg");
        assert_eq!(
            (r.name.as_str(), r.tag.as_str()),
            ("localhost:5000/pg", "latest")
        );
        let r = ImageRef::parse("localhost:5000/pg:16");
        assert_eq!(
            (r.name.as_str(), r.tag.as_str()),
            ("localhost:5000/pg", "16")
        );
        let r = ImageRef::parse("ghcr.io/shopify/toxiproxy:2.12.0");
        assert_eq!(r.to_string(), "ghcr.io/shopify/toxiproxy:2.12.0");
        assert_eq!(ImageRef::parse("busybox").to_string(), "busybox:latest");
    }
}
