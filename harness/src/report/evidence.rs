//! A run's evidence folder (Jepsen's `store/<test>/<time>/`): the timeline as JSON lines and
//! SVG, the checks, the `leader_work` rows, and each replica's log, so a failure can be read
//! days later without running it again.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::check::expect::ReplicaLog;
use crate::timeline::Entry;

/// The evidence folder of one scenario run.
#[derive(Clone, Debug)]
pub struct Evidence {
    dir: PathBuf,
    relative: String,
}

pub use super::svg::Record;

impl Evidence {
    /// The folder of `scenario`'s run number `repeat` (1 for the first), relative to the
    /// output folder: later runs keep theirs in `scenarios/<name>.<repeat>/` so no run
    /// overwrites another's.
    pub fn folder(scenario: &str, repeat: usize) -> String {
        if repeat > 1 {
            format!("scenarios/{scenario}.{repeat}")
        } else {
            format!("scenarios/{scenario}")
        }
    }

    /// Creates the folder `relative` under `out`, empty: an earlier run's folder of the same
    /// name is removed first, so that nothing in it (a replica's log is appended to across its
    /// restarts) can be read as this run's.
    ///
    /// # Errors
    /// It could not be removed or created.
    pub fn create(out: &Path, relative: String) -> anyhow::Result<Evidence> {
        let dir = out.join(&relative);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", dir.display())),
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Evidence { dir, relative })
    }

    /// The folder, relative to the output folder (as the report links it).
    pub fn relative(&self) -> &str {
        &self.relative
    }

    /// Where the replica `name` writes its log (its stderr).
    pub fn replica_log(&self, name: &str) -> PathBuf {
        self.dir.join(format!("replica-{name}.log"))
    }

    /// The logs of `replicas`, as they are now.
    pub fn read_logs<'a>(
        &self,
        replicas: impl IntoIterator<Item = &'a String>,
    ) -> BTreeMap<String, ReplicaLog> {
        replicas
            .into_iter()
            .map(|name| {
                let path = self.replica_log(name);
                let text = std::fs::read_to_string(&path).map_err(|e| e.to_string());
                (name.clone(), ReplicaLog { path, text })
            })
            .collect()
    }

    /// Writes `timeline.jsonl`, `timeline.svg`, `checks.json` and `work.json`.
    ///
    /// # Errors
    /// A file could not be written.
    pub fn write(&self, run: &Record) -> anyhow::Result<()> {
        write_jsonl(&self.dir.join("timeline.jsonl"), run.entries)?;
        std::fs::write(self.dir.join("timeline.svg"), super::svg::render(run))?;
        std::fs::write(
            self.dir.join("checks.json"),
            serde_json::to_string_pretty(run.checks)?,
        )?;
        std::fs::write(
            self.dir.join("work.json"),
            serde_json::to_string_pretty(run.rows)?,
        )?;
        Ok(())
    }
}

impl Evidence {
    /// Writes `wire.json`: whether the proxies kept a journal, how many records were read and
    /// lost, and what decoding cost the proxy per message.
    ///
    /// # Errors
    /// The file could not be written.
    pub fn write_wire(&self, wire: &crate::observe::wire::WireSummary) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(wire)?;
        std::fs::write(self.dir.join("wire.json"), text)?;
        Ok(())
    }
}

/// Writes `entries` as JSON lines.
fn write_jsonl(path: &Path, entries: &[Entry]) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for e in entries {
        serde_json::to_writer(&mut out, e)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run's evidence folder holds that run's files only: a replica log an earlier run of
    /// the same scenario left (logs are appended to, across a replica's restarts) is gone, so a
    /// `log` expectation cannot find an earlier run's line.
    #[test]
    fn a_new_run_starts_from_an_empty_folder() {
        let out = tempfile::tempdir().unwrap();
        let first = Evidence::create(out.path(), "scenarios/x".into()).unwrap();
        std::fs::write(first.replica_log("r1"), "an earlier run's line\n").unwrap();
        let second = Evidence::create(out.path(), "scenarios/x".into()).unwrap();
        assert!(
            !second.replica_log("r1").exists(),
            "the earlier run's log is still there"
        );
        assert!(second.dir.is_dir());
    }
}
