#!/usr/bin/env bash
# The README's test command: builds the local images (skipped when up to date), checks the
# format and lints, then runs every test against real containers through nextest.
#   ci/test.sh [nextest filter args...]
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/env.sh
bash ci/build-images.sh
# The local-process backend's tests need PostgreSQL 15 and PgBouncer binaries on the host; with
# them installed, a missing binary is a failure, not a skip.
if ! command -v pgbouncer >/dev/null || [ ! -x /usr/lib/postgresql/15/bin/postgres ]; then
  echo "[test] installing postgresql-15 and pgbouncer for the local backend" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends postgresql-15 pgbouncer >/dev/null
fi
export ELECTOR_REQUIRE_LOCAL=1
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
profile=default; [ "${CI:-}" = true ] && profile=ci
cargo nextest run --workspace --profile "$profile" "$@"
cargo test --workspace --doc --quiet
