#!/usr/bin/env bash
# The README's test command: builds the local images (skipped when up to date), checks the
# format and lints, then runs every test against real containers through nextest.
#   ci/test.sh [nextest filter args...]
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/env.sh
bash ci/build-images.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
profile=default; [ "${CI:-}" = true ] && profile=ci
cargo nextest run --workspace --profile "$profile" "$@"
cargo test --workspace --doc --quiet
