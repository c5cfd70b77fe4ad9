//! The `harness` command: see `harness --help`.

fn main() -> std::process::ExitCode {
    harness::cli::main()
}
