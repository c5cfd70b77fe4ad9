#!/usr/bin/env bash
# The README's main job: the conformance suite. Builds the local images (skipped when up to
# date), runs the elector's tests (their clause verdicts join the report; only when 15 is among
# the majors), then every scenario under scenarios/ on each PostgreSQL major
# (ELECTOR_PG_VERSIONS, default 13,15,17), and writes
# target/conformance/{report.html,report.md,junit.xml} (a column per major) and each major's own
# report and evidence folders (timeline.jsonl, timeline.svg, checks, replica logs) under
# target/conformance/pg<major>/.
#   ci/conformance.sh [harness run flags and scenario names...]   e.g. --t 250ms leader-partition
#   ELECTOR_PG_VERSIONS=13 ci/conformance.sh --shard 1/2 --out target/shard-13-1
#     (one CI shard; `target/release/harness report merge --out DIR SHARD...` joins them)
# Exits non-zero when a clause or an elector test fails; a build or setup error stops it before
# the report.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/env.sh
source ci/env.sh
# shellcheck source=ci/prereqs.sh
source ci/prereqs.sh
log() { printf '[conformance] %s\n' "$*" >&2; }
# python-replicas: scenarios/rolling-upgrade.toml runs the Python example as its new build.
prereqs docker cargo openssl nextest python-replicas
# X-PGVER: the PostgreSQL majors the report gives a verdict on, a column each (13, 15 and 17 by
# default). The elector's tests run on 15 (one of them on 13, the pre-14 path) and decide the 15
# column's in-process clauses, so they run only when 15 is a column: a CI job per major
# (ELECTOR_PG_VERSIONS=13) runs the scenarios alone, and `harness report merge` joins the jobs.
versions=${ELECTOR_PG_VERSIONS:-13,15,17}
with_tests=false
case ",$versions," in *,15,*) with_tests=true ;; esac
# Scenarios split over machines (`--shard K/N`): the elector's tests run in shard 1 only, so
# that the merged report has them once.
prev=
for a in "$@"; do
  case "$prev/$a" in --shard/[0-9]*/* | */--shard=[0-9]*/*) shard=${a#--shard=}
    [ "${shard%%/*}" = 1 ] || with_tests=false ;; esac
  prev=$a
done
images=$versions
[ "$with_tests" = true ] && images="13,15,$versions"
bash ci/build-images.sh --pg "$images"
cargo build --quiet --release -p harness

junit_args=()
if [ "$with_tests" = true ]; then
  # The elector's tests. Their JUnit file feeds the report, so an earlier run's file goes
  # first: the report must never read old results. nextest exits 100 when tests failed (its
  # documented TEST_RUN_FAILED); then the report is still written, with those clauses failed.
  # Any other non-zero code (101 build failed, 96 setup error, 92 nextest too old, 4 no tests,
  # 1 other) is not a verdict: stop with it.
  junit=target/nextest/conformance/junit.xml
  rm -f "$junit"
  tests=0
  cargo nextest run --profile conformance -p elector -p elector-typecheck --no-fail-fast || tests=$?
  case $tests in
    0) ;;
    100) log "elector tests failed: the report shows their clauses as failed" ;;
    *) log "error: cargo nextest exited with $tests: a build or setup error, not a test failure; no report"
       exit "$tests" ;;
  esac
  [ -f "$junit" ] || { log "error: cargo nextest exited with $tests but wrote no $junit; no report"; exit 1; }
  junit_args=(--elector-junit "$junit")
else
  tests=0
  log "PostgreSQL $versions: the elector's tests (run on 15) are not part of this report"
fi

report=0
target/release/harness run "${junit_args[@]}" --pg "$versions" "$@" || report=$?
if [ "$report" -ne 0 ]; then exit "$report"; fi
if [ "$tests" -ne 0 ]; then
  log "error: the report passed, but elector tests failed (see nextest's output above)"
  exit 1
fi
