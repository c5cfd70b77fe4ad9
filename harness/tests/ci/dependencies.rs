//! What the elector, a library, makes its users build.

use std::process::Command;

use super::repo;

/// The elector names the tokio features it uses; the workspace does not force `full` on it (a
/// user's build would otherwise get every tokio feature through this crate).
#[test]
fn the_elector_does_not_force_tokio_full() {
    let out = Command::new(env!("CARGO"))
        .current_dir(repo())
        .args([
            "tree",
            "--offline",
            "-p",
            "elector",
            "-e",
            "normal,features",
            "-i",
            "tokio",
        ])
        .output()
        .expect("cargo tree runs");
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(tree.contains("tokio feature \"rt\""), "{tree}");
    assert!(!tree.contains("tokio feature \"full\""), "{tree}");
}
