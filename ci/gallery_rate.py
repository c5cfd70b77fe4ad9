#!/usr/bin/env python3
"""The gallery's detection rate; run by ci/gallery-rate.sh, which builds what it needs.

For each flaw, `harness run --repeat N` on its scenarios; then, run by run, the clauses its
checks failed (each run's checks.json in its evidence folder) against the clauses it breaks.
Prints a Markdown table: how many runs failed every clause it breaks, how many failed exactly
those, and which other clauses failed in which runs. Exits 1 when a flaw slipped through in any
run, 2 when a run left no checks to read.
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join("replicas", "python", "replica.py")
HARNESS = os.path.join("target", "release", "harness")


def flaws():
    out = subprocess.run([sys.executable, SCRIPT, "--flaw", "json"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def failed_clauses(checks_json):
    with open(checks_json, encoding="utf-8") as f:
        data = json.load(f)
    checks = data if isinstance(data, list) else data.get("checks", [])
    return {c for check in checks if check.get("verdict") == "invalid"
            for c in check.get("clauses", [])}


def runs_of(flaw, table, repeat):
    """The clauses failed in each of `repeat` runs of `flaw` (a list of sets)."""
    out = os.path.join("target", "gallery-rate", flaw)
    cmd = [HARNESS, "run", "--replica-cmd", f"python3 {SCRIPT} --flaw {flaw}",
           "--replica-level", "2", "--replica-features", "fence,verify",
           "--repeat", str(repeat), "--out", out,
           *table["scenarios"]]
    # A flawed program fails clauses: the harness exits 1 then, and that is the point.
    code = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL).returncode
    if code not in (0, 1):
        sys.exit(f"{' '.join(cmd)}: exit {code}, not a verdict")
    runs = []
    for i in range(1, repeat + 1):
        failed = set()
        for scenario in table["scenarios"]:
            folder = scenario if i == 1 else f"{scenario}.{i}"
            path = os.path.join(ROOT, out, "scenarios", folder, "checks.json")
            if not os.path.exists(path):
                print(f"{flaw}: run {i} of {scenario} left no {path}", file=sys.stderr)
                sys.exit(2)
            failed |= failed_clauses(path)
        runs.append(failed)
    return runs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, metavar="N")
    parser.add_argument("flaw", nargs="*", help="only these flaws (default: every one)")
    args = parser.parse_args()
    table = flaws()
    unknown = [f for f in args.flaw if f not in table]
    if unknown:
        parser.error(f"no flaw {', '.join(unknown)}; known: {', '.join(table)}")
    chosen = args.flaw or list(table)
    print(f"| flaw | breaks | scenarios | failed them | failed exactly them | other clauses failed |")
    print("|---|---|---|---|---|---|")
    slipped = False
    for flaw in chosen:
        breaks = set(table[flaw]["breaks"])
        runs = runs_of(flaw, table[flaw], args.repeat)
        caught = sum(breaks <= r for r in runs)
        exact = sum(breaks == r for r in runs)
        others = {}
        for r in runs:
            for c in sorted(r - breaks):
                others[c] = others.get(c, 0) + 1
        slipped |= caught < len(runs)
        other = ", ".join(f"{c} ({n})" for c, n in others.items()) or "none"
        print(f"| `{flaw}` | {', '.join(sorted(breaks))} | {', '.join(table[flaw]['scenarios'])} "
              f"| {caught}/{len(runs)} | {exact}/{len(runs)} | {other} |", flush=True)
    sys.exit(1 if slipped else 0)


if __name__ == "__main__":
    main()
