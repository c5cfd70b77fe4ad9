#!/usr/bin/env bash
# The README's main job: the conformance suite. Builds the local images (skipped when up to
# date), runs the elector's tests (their clause verdicts join the report), then every scenario
# under scenarios/, and writes target/conformance/{report.md,report.json,junit.xml} and one
# evidence folder per scenario (timeline.jsonl, timeline.svg, checks, replica logs).
#   ci/conformance.sh [harness run flags and scenario names...]   e.g. --t 250ms leader-partition
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/env.sh
bash ci/build-images.sh
cargo build --quiet --release -p harness
# A failing elector test shows as a failed clause in the report, so carry on to write it.
cargo nextest run --profile conformance -p elector --no-fail-fast || true
exec target/release/harness run --elector-junit target/nextest/conformance/junit.xml "$@"
