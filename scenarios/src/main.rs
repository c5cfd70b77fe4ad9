//! The harness command, built inside this package so its tests find it as a binary.

fn main() -> std::process::ExitCode {
    harness::cli::main()
}
