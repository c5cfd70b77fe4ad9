#!/usr/bin/env bash
# The gallery's detection rate (docs/gallery.md): each flaw of the Python example
# (`replicas/python/replica.py --flaw json`) run N times (default 10) on the scenarios that
# decide its clauses, through the release harness at contract level 2; prints the table the
# docs publish. Each run's evidence stays under target/gallery-rate/<flaw>/.
#   ci/gallery-rate.sh [--repeat N] [FLAW...]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/env.sh
source ci/env.sh
# shellcheck source=ci/prereqs.sh
source ci/prereqs.sh
prereqs docker cargo openssl python-replicas
bash ci/build-images.sh --pg 15
cargo build --quiet --release -p harness
exec python3 ci/gallery_rate.py "$@"
