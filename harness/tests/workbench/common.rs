//! A `harness up` child process whose output the test reads as it comes, and the `harness`
//! commands typed at it.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// The harness binary.
pub const HARNESS: &str = env!("CARGO_BIN_EXE_harness");

/// A fresh folder under the target's temp folder.
pub fn fresh_dir(what: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("wb-{what}-{}", fastrand::u32(..)));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A running `harness up` and every line it printed so far.
pub struct Up {
    pub child: Child,
    pub stdout: Arc<Mutex<Vec<String>>>,
    pub stderr: Arc<Mutex<Vec<String>>>,
    pub env: Vec<(String, String)>,
}

fn collect<R>(reader: R, into: Arc<Mutex<Vec<String>>>)
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut lines = BufReader::new(reader).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            into.lock().unwrap().push(line);
        }
    });
}

impl Up {
    /// Starts `harness up ARGS` with its own control folder and `env`.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> Up {
        let control_dir = fresh_dir("control");
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .chain([(
                "ELECTOR_UP_DIR".to_owned(),
                control_dir.display().to_string(),
            )])
            .collect();
        let mut child = Command::new(HARNESS)
            .arg("up")
            .args(args)
            .envs(env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn harness up");
        let (stdout, stderr) = (Arc::default(), Arc::default());
        collect(child.stdout.take().unwrap(), Arc::clone(&stdout));
        collect(child.stderr.take().unwrap(), Arc::clone(&stderr));
        Up {
            child,
            stdout,
            stderr,
            env,
        }
    }

    /// The lines printed so far on stdout.
    pub fn lines(&self) -> Vec<String> {
        self.stdout.lock().unwrap().clone()
    }

    /// Waits until a stdout line at index `from` or later satisfies `pred`; its index.
    pub async fn wait_line(
        &self,
        from: usize,
        limit: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> usize {
        let start = Instant::now();
        loop {
            let lines = self.lines();
            if let Some(i) = (from..lines.len()).find(|&i| pred(&lines[i])) {
                return i;
            }
            if start.elapsed() > limit {
                panic!(
                    "no such line within {limit:?}; stdout:\n{}\nstderr:\n{}",
                    lines.join("\n"),
                    self.stderr.lock().unwrap().join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The value after `prefix` on the first stdout line that starts with it.
    pub fn value_after(&self, prefix: &str) -> String {
        let lines = self.lines();
        let line = lines.iter().find(|l| l.starts_with(prefix)).unwrap();
        line[prefix.len()..].trim().to_owned()
    }

    /// The pids of the replicas, from the `replica    r1 (pid N): ...` lines.
    pub fn replica_pids(&self) -> Vec<i32> {
        (self.lines().iter())
            .filter_map(|l| l.trim().strip_prefix("replica"))
            .filter_map(|l| l.split("(pid ").nth(1)?.split(')').next()?.parse().ok())
            .collect()
    }

    /// Runs `harness ARGS` against this instance.
    pub async fn harness(&self, args: &[&str]) -> Output {
        Command::new(HARNESS)
            .args(args)
            .envs(self.env.iter().cloned())
            .output()
            .await
            .expect("run harness")
    }

    /// Sends `signal` and waits for the exit.
    pub async fn signal_and_wait(
        &mut self,
        signal: nix::sys::signal::Signal,
    ) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id().unwrap() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
        let status = tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .expect("harness up exits")
            .unwrap();
        // Let the readers take the last lines.
        tokio::time::sleep(Duration::from_millis(200)).await;
        status
    }
}

/// stdout and stderr of a finished command, as text.
pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether process `pid` still runs (a zombie waiting for its reaper does not).
pub fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|s| s.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X") | None)
        }
        Err(_) => false,
    }
}

/// Every file under `dir`, recursively.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    (walkdir::WalkDir::new(dir).into_iter().flatten())
        .filter(|e| e.file_type().is_file())
        .map(walkdir::DirEntry::into_path)
        .collect()
}
