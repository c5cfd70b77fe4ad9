#!/usr/bin/env bash
# Mutation testing of the elector (a test decides a clause only if it fails when that clause's
# behaviour breaks), file by file: every mutant of
# a file of elector/src runs against the tests that exercise that file (on real PostgreSQL; the
# table below). With MUTANTS_CONFIRM=1 a mutant those miss runs again against every elector
# test (about 2 min each here), so a "missed" is missed by the whole suite. Slow (about an hour
# for all of elector/src on 2 cores): run it by hand, not in CI.
#
#   ci/mutants.sh                 every file of elector/src
#   ci/mutants.sh term session    some files (names without .rs)
#   MUTANTS_CONFIRM=1 ci/mutants.sh gate
#   MUTANTS_ITERATE=1 ci/mutants.sh   only the last run's survivors (after new tests)
#
# Runs in place: run it in a clone of its own (it edits elector/src while it runs and restores
# it). Each file's results go to target/mutants/<file>/mutants.out/ (missed.txt lists the
# survivors); the summary is printed at the end and written to target/mutants/summary.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/env.sh
source ci/env.sh
command -v cargo-mutants >/dev/null || { echo "cargo-mutants is missing: cargo install cargo-mutants" >&2; exit 1; }

lib='binary_id(elector)'
# The tests that exercise each file (nextest filtersets). The lib's unit tests run first (they
# take milliseconds), then the integration tests in name order; fail-fast ends a caught mutant.
declare -A focus=(
  [attempt]="$lib | test(/^fence::|^lock::|^run::|^wake::|^pre14::|^who::/)"
  [config]="$lib | test(/^config::|^metrics::check_interval|^orphan::idle_session/)"
  [elector]="$lib | test(/^fence::|^term_do::|^metrics::|^orphan::a_frozen|^leadership::|^lock::|^config::|^run::concurrent/)"
  [gate]="$lib | test(/^launchers::/)"
  [gauge]="$lib | test(/^metrics::/)"
  [leadership]="$lib | test(/^leadership::|^launchers::while_leader/)"
  [panic]="$lib | test(/^launchers::probe_follows|^run::abandonment|^run::panic_in_run/)"
  [readiness]="$lib | test(/^launchers::/)"
  [run]="$lib | test(/^fence::|^run::|^demotion::|^lock::|^leadership::|^wake::|^pre14::/)"
  [session]="$lib | test(/^fence::|^run::|^demotion::|^orphan::|^session::|^leadership::|^verify::|^wake::|^pre14::/)"
  [sql]="$lib | test(/^fence::|^lock::|^leadership::|^orphan::|^pre14::|^wake::/)"
  [supervisor]="$lib | test(/^run::abandonment/)"
  [term]="$lib | test(/^fence::|^term_do::|^demotion::|^orphan::a_frozen|^launchers::|^pre14::/)"
  [ticker]="$lib | test(/^launchers::/)"
  [wake]="$lib | test(/^wake::/)"
  [while_leader]="$lib | test(/^launchers::while_leader/)"
  [who]="$lib | test(/^who::/)"
)
# Every elector test but the CFG-1 compile-fail test (it builds a crate of its own for minutes
# and decides a type, not a behaviour).
all='not test(config_without_a_pool_does_not_compile)'

files=("$@")
[ ${#files[@]} -gt 0 ] || mapfile -t files < <(printf '%s\n' "${!focus[@]}" | sort)
mkdir -p target/mutants
run() { # out-dir filter [extra cargo-mutants args...]
  local out=$1 filter=$2; shift 2
  cargo mutants --no-config --in-place --package elector --test-tool nextest --baseline skip \
    --timeout 240 --output "$out" "$@" -- --fail-fast -E "$filter" || true
}
for f in "${files[@]}"; do
  [ -n "${focus[$f]:-}" ] || { echo "no such file in the table: $f" >&2; exit 2; }
  out=target/mutants/$f
  if [ "${MUTANTS_ITERATE:-}" = 1 ] && [ -d "$out/mutants.out" ]; then
    echo "== elector/src/$f.rs: the last run's survivors against its tests"
    run "$out" "${focus[$f]}" --file "elector/src/$f.rs" --iterate
  else
    rm -rf "$out"
    echo "== elector/src/$f.rs: against its tests"
    run "$out" "${focus[$f]}" --file "elector/src/$f.rs"
  fi
  if [ "${MUTANTS_CONFIRM:-}" = 1 ] &&
    { [ -s "$out/mutants.out/missed.txt" ] || [ -s "$out/mutants.out/timeout.txt" ]; }; then
    echo "== elector/src/$f.rs: the survivors against every elector test"
    run "$out" "$all" --file "elector/src/$f.rs" --iterate
  fi
done
summary=target/mutants/summary.txt
{
  printf '%-14s %7s %7s %7s %9s\n' file caught missed timeout unviable
  for f in "${files[@]}"; do
    o=target/mutants/$f/mutants.out
    n() { cat "$o/$1.txt" "$o/previously_$1.txt" 2>/dev/null | grep -c . || true; }
    printf '%-14s %7s %7s %7s %9s\n' "$f.rs" "$(n caught)" "$(n missed)" "$(n timeout)" "$(n unviable)"
  done
  echo
  echo "missed:"
  cat target/mutants/*/mutants.out/missed.txt 2>/dev/null || true
} | tee "$summary"
