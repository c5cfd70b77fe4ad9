//! Command-line flags of the `toxiproxy-server` binary, parsed the way Go's `flag` package does
//! so the upstream image's arguments work unchanged: `-host=0.0.0.0`, `-host 0.0.0.0`,
//! `--host=0.0.0.0`, `-port 8474`; boolean flags as `-version` or `-version=true`.
//!
//! (clap cannot parse single-dash long flags, hence this small parser.)
//!
//! One option is this server's own: `-timeout-mode` (or the environment variable
//! `TOXIPROXY_TIMEOUT_MODE`, for containers whose command line should stay upstream's), see the
//! crate docs, "The `timeout` toxic".

use crate::toxic::TimeoutMode;

/// The environment variable that selects the [`TimeoutMode`] when `-timeout-mode` is not given.
/// The upstream image ignores it, so a harness can set it on either image.
pub const ENV_TIMEOUT_MODE: &str = "TOXIPROXY_TIMEOUT_MODE";

/// Upstream's usage text, trimmed to the flags this server implements.
pub const USAGE: &str = "\
Usage of toxiproxy-server:
  -config string
    \tJSON file containing proxies to create on startup
  -host string
    \tHost for toxiproxy's API to listen on (default \"localhost\")
  -port string
    \tPort for toxiproxy's API to listen on (default \"8474\")
  -seed int
    \tSeed for randomizing toxics with
  -timeout-mode string
    \tWhat a timeout toxic does when its input ends: upstream (closes the link, as
    \tToxiproxy 2.1.4 and later) or partition (holds the close, as Toxiproxy up to 2.1.3)
    \t(default \"upstream\", or the TOXIPROXY_TIMEOUT_MODE environment variable)
  -version
    \tshow version
  -proxy-metrics, -runtime-metrics
    \taccepted for compatibility; no metrics are served
Environment: LOG_LEVEL (trace, debug, info, warn, error; default info) or RUST_LOG;
TOXIPROXY_TIMEOUT_MODE (upstream or partition; -timeout-mode wins).
";

/// The parsed flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Args {
    /// Host of the HTTP API (default `localhost`).
    pub host: String,
    /// Port of the HTTP API (default `8474`).
    pub port: String,
    /// A JSON file of proxies to create on start-up.
    pub config: Option<String>,
    /// Seed for toxicity rolls and jitter.
    pub seed: Option<u64>,
    /// `-timeout-mode`, when given (see [`Args::timeout_mode`]).
    pub timeout_mode: Option<TimeoutMode>,
    /// Print the version and exit.
    pub version: bool,
    /// Print usage and exit.
    pub help: bool,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            host: "localhost".into(),
            port: "8474".into(),
            config: None,
            seed: None,
            timeout_mode: None,
            version: false,
            help: false,
        }
    }
}

impl Args {
    /// The API's listen address, `host:port` (an IPv6 host is bracketed).
    pub fn listen_addr(&self) -> String {
        if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The timeout mode to run with: `-timeout-mode` if given, else `env` (the value of
    /// [`ENV_TIMEOUT_MODE`], an empty one counting as unset), else [`TimeoutMode::Upstream`].
    /// An invalid value is an error, never a silent default.
    pub fn timeout_mode(&self, env: Option<&str>) -> Result<TimeoutMode, String> {
        if let Some(mode) = self.timeout_mode {
            return Ok(mode);
        }
        match env.map(str::trim).filter(|v| !v.is_empty()) {
            Some(v) => v
                .parse()
                .map_err(|e| format!("environment variable {ENV_TIMEOUT_MODE}: {e}")),
            None => Ok(TimeoutMode::default()),
        }
    }

    /// Parses arguments (without the program name).
    pub fn parse<I, S>(args: I) -> Result<Self, String>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut out = Self::default();
        let mut args = args.into_iter().map(Into::into);
        while let Some(arg) = args.next() {
            if arg == "--" {
                break;
            }
            let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
                return Err(format!("unexpected argument {arg:?}\n{USAGE}"));
            };
            let (name, inline) = match flag.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (flag, None),
            };
            let mut value = |name: &str| -> Result<String, String> {
                match inline.clone() {
                    Some(v) => Ok(v),
                    None => args
                        .next()
                        .ok_or_else(|| format!("flag needs an argument: -{name}\n{USAGE}")),
                }
            };
            match name {
                "host" => out.host = value(name)?,
                "port" => out.port = value(name)?,
                "config" => out.config = Some(value(name)?),
                "seed" => {
                    let v = value(name)?;
                    let seed = v
                        .parse::<i64>()
                        .map_err(|_| format!("invalid value {v:?} for flag -seed"))?;
                    out.seed = Some(seed as u64);
                }
                "timeout-mode" => {
                    let v = value(name)?;
                    let mode = v
                        .parse()
                        .map_err(|e| format!("invalid value {v:?} for flag -timeout-mode: {e}"))?;
                    out.timeout_mode = Some(mode);
                }
                "version" => out.version = parse_bool(name, inline.as_deref())?,
                "h" | "help" => out.help = true,
                "proxy-metrics" | "runtime-metrics" => {
                    parse_bool(name, inline.as_deref())?;
                }
                _ => return Err(format!("flag provided but not defined: -{name}\n{USAGE}")),
            }
        }
        Ok(out)
    }
}

fn parse_bool(name: &str, inline: Option<&str>) -> Result<bool, String> {
    match inline {
        None => Ok(true),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
        Some(v) => Err(format!("invalid boolean value {v:?} for -{name}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_flags() {
        let a = Args::parse(["-host=0.0.0.0", "-port", "9000"]).unwrap();
        assert_eq!(a.listen_addr(), "0.0.0.0:9000");
        let a = Args::parse(["--host", "::1", "--port=1"]).unwrap();
        assert_eq!(a.listen_addr(), "[::1]:1");
        let a = Args::parse(["-seed", "-3", "-version", "-proxy-metrics=false"]).unwrap();
        assert_eq!(a.seed, Some(-3i64 as u64));
        assert!(a.version);
        assert_eq!(Args::parse(Vec::<String>::new()).unwrap(), Args::default());
        assert_eq!(Args::default().listen_addr(), "localhost:8474");
        assert!(Args::parse(["-nope"]).is_err());
        assert!(Args::parse(["-host"]).is_err());
        assert!(Args::parse(["stray"]).is_err());
    }

    #[test]
    fn timeout_mode_from_flag_then_environment_then_upstream() {
        let none = Args::parse(Vec::<String>::new()).unwrap();
        assert_eq!(none.timeout_mode(None), Ok(TimeoutMode::Upstream));
        assert_eq!(none.timeout_mode(Some("")), Ok(TimeoutMode::Upstream));
        assert_eq!(
            none.timeout_mode(Some("partition")),
            Ok(TimeoutMode::Partition)
        );
        assert!(none.timeout_mode(Some("hold")).is_err());
        let flag = Args::parse(["-timeout-mode=upstream"]).unwrap();
        assert_eq!(
            flag.timeout_mode(Some("partition")),
            Ok(TimeoutMode::Upstream)
        );
        let flag = Args::parse(["--timeout-mode", "partition"]).unwrap();
        assert_eq!(flag.timeout_mode(None), Ok(TimeoutMode::Partition));
        assert!(Args::parse(["-timeout-mode=sometimes"]).is_err());
        assert!(Args::parse(["-timeout-mode"]).is_err());
    }
}
