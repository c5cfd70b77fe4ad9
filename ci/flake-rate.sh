#!/usr/bin/env bash
# The pass rate of a correct program, per scenario and clause (docs/gate.md#flake-rates): every
# scenario (or those named) run N times (default 10) through the release harness, each run on
# fresh containers and processes; prints the table the docs publish. Each run's evidence stays
# under the output folder (default target/flake-rate/).
#   ci/flake-rate.sh [--repeat N] [--out DIR] [-- HARNESS-RUN-ARGS...]
# e.g. ci/flake-rate.sh --repeat 20 -- --pg 15
#      ci/flake-rate.sh --repeat 10 --out target/flake-python -- --impl python:2 frozen-leader
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/env.sh
source ci/env.sh
# shellcheck source=ci/prereqs.sh
source ci/prereqs.sh
prereqs docker cargo openssl python-replicas
bash ci/build-images.sh --pg "${ELECTOR_PG_VERSIONS:-15}"
cargo build --quiet --release -p harness
exec python3 ci/flake_rate.py "$@"
