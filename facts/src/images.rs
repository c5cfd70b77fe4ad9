//! Which container image each service runs: the one named in the environment, else the one
//! `ci/build-images.sh` built on this machine, else the upstream image a user with a registry
//! would pull. The choice is printed once per service, so a pull error is never a mystery.
//!
//! | service | environment | built locally | upstream |
//! |---|---|---|---|
//! | PostgreSQL | `ELECTOR_POSTGRES_IMAGE` | `elector-local/postgres:15` | `postgres:15` |
//! | PgBouncer | `ELECTOR_PGBOUNCER_IMAGE` | `elector-local/pgbouncer:1.18` | `edoburu/pgbouncer:latest` |
//! | Toxiproxy | `ELECTOR_TOXIPROXY_IMAGE` | `elector-local/toxiproxy:dev` | `ghcr.io/shopify/toxiproxy:2.12.0` |

use std::fmt;
use std::str::FromStr;

/// What to tell a user whose image is missing.
pub const BUILD_HINT: &str = "without a registry, build the local images with \
`bash ci/build-images.sh` (they are then used when no image is named), or name images with \
ELECTOR_POSTGRES_IMAGE, ELECTOR_PGBOUNCER_IMAGE and ELECTOR_TOXIPROXY_IMAGE";

/// One service's image names: its environment variable, its local build and its upstream image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Service {
    /// The service's name, for messages.
    pub name: &'static str,
    /// The environment variable that names its image.
    pub env: &'static str,
    /// The image `ci/build-images.sh` builds.
    pub local: &'static str,
    /// The upstream image.
    pub upstream: &'static str,
}

/// PostgreSQL, with the upstream `postgres` image's contract.
pub const POSTGRES: Service = Service {
    name: "postgres",
    env: "ELECTOR_POSTGRES_IMAGE",
    local: "elector-local/postgres:15",
    upstream: "postgres:15",
};

/// PgBouncer, with the `edoburu/pgbouncer` environment contract (`DB_HOST`, `DB_PORT`,
/// `DB_USER`, `DB_PASSWORD`, `DB_NAME`, `POOL_MODE`, `AUTH_TYPE`, `LISTEN_PORT`).
pub const PGBOUNCER: Service = Service {
    name: "pgbouncer",
    env: "ELECTOR_PGBOUNCER_IMAGE",
    local: "elector-local/pgbouncer:1.18",
    upstream: "edoburu/pgbouncer:latest",
};

/// A Toxiproxy server (upstream or the workspace's), HTTP API on 8474.
pub const TOXIPROXY: Service = Service {
    name: "toxiproxy",
    env: "ELECTOR_TOXIPROXY_IMAGE",
    local: "elector-local/toxiproxy:dev",
    upstream: "ghcr.io/shopify/toxiproxy:2.12.0",
};

/// X-PGVER: a PostgreSQL major version the matrix runs, with the PgBouncer of the same Debian
/// release (`ci/build-images.sh --pg 13,15,17` builds them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Major {
    /// The major version.
    pub version: u32,
    /// Its PostgreSQL image.
    pub postgres: Service,
    /// The PgBouncer packaged beside it.
    pub pgbouncer: Service,
}

/// X-PGVER: the majors of the matrix, oldest first. 15 is the default [`POSTGRES`] and
/// [`PGBOUNCER`]; 13 (Debian bullseye, PgBouncer 1.15) has no `idle_session_timeout`; 17
/// (Debian trixie, PgBouncer 1.24).
pub const MAJORS: [Major; 3] = [
    Major {
        version: 13,
        postgres: Service {
            name: "postgres",
            env: "ELECTOR_POSTGRES_13_IMAGE",
            local: "elector-local/postgres:13",
            upstream: "postgres:13",
        },
        pgbouncer: Service {
            name: "pgbouncer",
            env: "ELECTOR_PGBOUNCER_13_IMAGE",
            local: "elector-local/pgbouncer:1.15",
            upstream: "edoburu/pgbouncer:latest",
        },
    },
    Major {
        version: 15,
        postgres: POSTGRES,
        pgbouncer: PGBOUNCER,
    },
    Major {
        version: 17,
        postgres: Service {
            name: "postgres",
            env: "ELECTOR_POSTGRES_17_IMAGE",
            local: "elector-local/postgres:17",
            upstream: "postgres:17",
        },
        pgbouncer: Service {
            name: "pgbouncer",
            env: "ELECTOR_PGBOUNCER_17_IMAGE",
            local: "elector-local/pgbouncer:1.24",
            upstream: "edoburu/pgbouncer:latest",
        },
    },
];

impl Major {
    /// The major `version` of the matrix, if it is one.
    pub fn of(version: u32) -> Option<&'static Major> {
        MAJORS.iter().find(|m| m.version == version)
    }

    /// The images a topology on this major runs (Toxiproxy as for every major).
    pub fn images(&self) -> Images {
        Images {
            postgres: self.postgres.resolve(),
            pgbouncer: self.pgbouncer.resolve(),
            toxiproxy: TOXIPROXY.resolve(),
        }
    }
}

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

/// Why an image was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Named by the service's environment variable (or a flag).
    Named,
    /// Built on this machine by `ci/build-images.sh`.
    Local,
    /// The upstream image (pulled when missing).
    Upstream,
}

impl Service {
    /// The image named in the environment, if any.
    pub fn named(&self) -> Option<String> {
        std::env::var(self.env)
            .ok()
            .filter(|v| !v.trim().is_empty())
    }

    /// The image to run: `named` (a flag's value, or the environment's), else the local build
    /// when Docker has it, else upstream. Says which on stderr, once per choice.
    pub fn choose(&self, named: Option<&str>) -> ImageRef {
        let (image, source) = match named.filter(|n| !n.trim().is_empty()) {
            Some(name) => (ImageRef::parse(name), Source::Named),
            None if local_image_exists(self.local) => (ImageRef::parse(self.local), Source::Local),
            None => (ImageRef::parse(self.upstream), Source::Upstream),
        };
        let line = self.describe(&image, source);
        let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
        if !said.contains(&line) {
            eprintln!("{line}");
            said.push(line);
        }
        image
    }

    /// [`Service::choose`] with the image the environment names.
    pub fn resolve(&self) -> ImageRef {
        self.choose(self.named().as_deref())
    }

    /// One line saying which image runs and why.
    pub fn describe(&self, image: &ImageRef, source: Source) -> String {
        let why = match source {
            Source::Named => format!("named by --{}-image or {}", self.name, self.env),
            Source::Local => format!(
                "built locally by ci/build-images.sh; {} is not set",
                self.env
            ),
            Source::Upstream => format!(
                "upstream; neither {} nor the local build {} exists",
                self.env, self.local
            ),
        };
        format!("[images] {}: {image} ({why})", self.name)
    }
}

/// The choices already said.
static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Whether the Docker daemon has `image`, asked through the `docker` command (false when it
/// cannot be asked: then the upstream image is pulled, as before).
pub fn local_image_exists(image: &str) -> bool {
    std::process::Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", image])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The three images a topology runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Images {
    /// PostgreSQL.
    pub postgres: ImageRef,
    /// PgBouncer.
    pub pgbouncer: ImageRef,
    /// Toxiproxy.
    pub toxiproxy: ImageRef,
}

impl Images {
    /// The upstream images.
    pub fn upstream() -> Images {
        Images {
            postgres: ImageRef::parse(POSTGRES.upstream),
            pgbouncer: ImageRef::parse(PGBOUNCER.upstream),
            toxiproxy: ImageRef::parse(TOXIPROXY.upstream),
        }
    }

    /// Each service's image as the environment names it, else local, else upstream (see
    /// [`Service::choose`]).
    pub fn from_env() -> Images {
        Images {
            postgres: POSTGRES.resolve(),
            pgbouncer: PGBOUNCER.resolve(),
            toxiproxy: TOXIPROXY.resolve(),
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

    #[test]
    fn says_why_an_image_was_chosen() {
        let local = ImageRef::parse(POSTGRES.local);
        let line = POSTGRES.describe(&local, Source::Local);
        assert_eq!(
            line,
            "[images] postgres: elector-local/postgres:15 (built locally by \
             ci/build-images.sh; ELECTOR_POSTGRES_IMAGE is not set)"
        );
        let up = ImageRef::parse(POSTGRES.upstream);
        assert!(POSTGRES
            .describe(&up, Source::Upstream)
            .contains("postgres:15 (upstream; neither ELECTOR_POSTGRES_IMAGE nor the local build"));
        assert!(POSTGRES
            .describe(&local, Source::Named)
            .contains("(named by --postgres-image or ELECTOR_POSTGRES_IMAGE)"));
    }
}
