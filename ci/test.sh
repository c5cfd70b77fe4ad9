#!/usr/bin/env bash
# The README's test command: checks (and installs what it can of) its prerequisites, builds the
# local images (skipped when up to date), checks the format and lints, runs the doctests, then
# every test against real containers through nextest, whose summary ends the output.
#   ci/test.sh [nextest filter args...]
# The CI workflow splits the same work over machines (docs/gate.md):
#   ci/test.sh --archive FILE                     format, lints, doctests, and every test binary
#                                                 built once into a nextest archive
#   ci/test.sh --from-archive FILE [nextest args] the archive's tests, e.g. --partition slice:2/3
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/env.sh
source ci/env.sh
# shellcheck source=ci/prereqs.sh
source ci/prereqs.sh
mode=all archive=
case "${1:-}" in
  --archive | --from-archive)
    mode=${1#--}
    archive=${2:?"ci/test.sh $1 FILE: the archive file is missing"}
    shift 2 ;;
esac
profile=default; [ "${CI:-}" = true ] && profile=ci

checks() {
  cargo fmt --all --check
  cargo clippy --workspace --all-targets --quiet -- -D warnings
}

run_tests() {
  # local-backend: the local-process backend's tests need a PostgreSQL server and PgBouncer on
  # the host; with them installed, a missing binary is a failure, not a skip
  # (ELECTOR_REQUIRE_LOCAL). actionlint: the workflow lint test (harness/tests/ci) reads
  # ACTIONLINT. go-replica: the Go example replica, compiled on the trixie base image
  # (scenarios/tests/implementations.rs runs it; ELECTOR_REQUIRE_GO_REPLICA makes a missing
  # binary a failure there, not a skip).
  prereqs docker cargo openssl lints nextest local-backend actionlint python-replicas go-replica
  # PostgreSQL 15 for the tests, and 13 for the elector's pre-14 test (X-PGVER).
  bash ci/build-images.sh --pg 13,15
  export ELECTOR_REQUIRE_LOCAL=1 ELECTOR_REQUIRE_GO_REPLICA=1
}

case $mode in
  all)
    run_tests
    checks
    # The doctests first, so that the run ends with nextest's summary (README).
    cargo test --workspace --doc --quiet
    cargo nextest run --workspace --profile "$profile" "$@" ;;
  archive)
    prereqs cargo openssl lints nextest
    checks
    cargo test --workspace --doc --quiet
    cargo nextest archive --workspace --archive-file "$archive" "$@" ;;
  from-archive)
    run_tests
    # Extracted over the checkout, where it was built (a CI runner's checkout has the same
    # path on every machine): the tests find the binaries they name at build time
    # (env!("CARGO_BIN_EXE_harness")) where cargo put them.
    cargo nextest run --profile "$profile" --archive-file "$archive" --workspace-remap . \
      --extract-to . --extract-overwrite "$@" ;;
esac
