#!/usr/bin/env bash
# The README's test command: checks (and installs what it can of) its prerequisites, builds the
# local images (skipped when up to date), checks the format and lints, then runs every test
# against real containers through nextest, and the doctests.
#   ci/test.sh [nextest filter args...]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/env.sh
source ci/env.sh
# shellcheck source=ci/prereqs.sh
source ci/prereqs.sh
# local-backend: the local-process backend's tests need a PostgreSQL server and PgBouncer on the
# host; with them installed, a missing binary is a failure, not a skip (ELECTOR_REQUIRE_LOCAL).
# actionlint: the workflow lint test (harness/tests/ci) reads ACTIONLINT.
prereqs docker cargo openssl lints nextest local-backend actionlint python-replicas
# PostgreSQL 15 for the tests, and 13 for the elector's pre-14 test (X-PGVER).
bash ci/build-images.sh --pg 13,15
export ELECTOR_REQUIRE_LOCAL=1
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
profile=default; [ "${CI:-}" = true ] && profile=ci
cargo nextest run --workspace --profile "$profile" "$@"
cargo test --workspace --doc --quiet
