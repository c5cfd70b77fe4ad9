//! Tests of the CI scripts and the workflow, without containers: how `ci/conformance.sh` treats
//! nextest's exit codes (run in a scratch copy, against stand-in commands), and actionlint on
//! `.github/workflows/*.yml`, the gate that cannot run here.

mod conformance_script;
mod dependencies;
mod docs;
mod mutants_table;
mod workflow_lint;

use std::path::{Path, PathBuf};

/// The workspace root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the workspace root")
}

/// A new, empty folder for one test under the target's temporary directory.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("ci-tests")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating a scratch folder");
    dir
}

/// Writes `text` to `path` (creating its folder), executable when `exec`.
fn write(path: &Path, text: &str, exec: bool) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("creating a folder");
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    if exec {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .expect("making it executable");
    }
}
