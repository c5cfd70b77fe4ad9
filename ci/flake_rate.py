#!/usr/bin/env python3
"""The pass rate of correct programs, per scenario and clause; run by ci/flake-rate.sh.

Runs `harness run --repeat N` with the harness arguments given after `--` (the program, the
scenarios, the major), then reads each run's checks.json in its evidence folder and prints a
Markdown table: per scenario, how many runs, and each clause that failed in some run with how
many runs failed it and the first failure's message. A failure of a correct program is a
harness defect until its evidence shows a defect of the program. Exits 1 when a clause failed
in any run, 2 when a run left no checks to read or the harness did not reach a verdict.
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS = os.path.join("target", "release", "harness")


def checks_of(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return data if isinstance(data, list) else data.get("checks", [])


def sources(out):
    """Each report's evidence: (label, folder): `<out>/scenarios`, or with `--pg` and `--impl`
    one per major or implementation (`<out>/pg15/scenarios`, `<out>/python/scenarios`)."""
    found = []
    for here, dirs, _ in os.walk(os.path.join(ROOT, out)):
        if "scenarios" in dirs:
            label = os.path.relpath(here, os.path.join(ROOT, out))
            found.append(("" if label == "." else label, os.path.join(here, "scenarios")))
            dirs.remove("scenarios")
    return sorted(found)


def runs_of(base, repeat):
    """Each scenario's runs: {scenario: [checks of run 1, ..., checks of run N]}."""
    names = sorted(d for d in os.listdir(base) if "." not in d)
    runs = {}
    for name in names:
        runs[name] = []
        for i in range(1, repeat + 1):
            folder = name if i == 1 else f"{name}.{i}"
            path = os.path.join(base, folder, "checks.json")
            if not os.path.exists(path):
                # A scenario not run (not-run: a need the program lacks) leaves no checks.
                if i == 1:
                    del runs[name]
                    break
                print(f"{name}: run {i} left no {path}", file=sys.stderr)
                sys.exit(2)
            runs[name].append(checks_of(path))
    return runs


def table(label, runs):
    """The Markdown rows, and whether any clause failed."""
    rows, failed_any = [], False
    for name, each in runs.items():
        failed = {}
        for i, checks in enumerate(each, 1):
            for c in (c for c in checks if c.get("verdict") == "invalid"):
                for clause in c.get("clauses", []):
                    failed.setdefault(clause, []).append((i, c.get("message", "")))
        decided = sorted({cl for checks in each for c in checks
                          if c.get("verdict") in ("valid", "invalid") for cl in c.get("clauses", [])})
        failed_any |= bool(failed)
        cells = "; ".join(
            f"{cl} {len({i for i, _ in f})}/{len(each)} (run {f[0][0]}: {f[0][1][:120]})"
            for cl, f in sorted(failed.items())) or "none"
        passed = sum(1 for checks in each if not any(c.get("verdict") == "invalid" for c in checks))
        rows.append(f"| {label or '-'} | {name} | {passed}/{len(each)} | {len(decided)} | {cells} |")
    return rows, failed_any


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, metavar="N")
    parser.add_argument("--out", default=os.path.join("target", "flake-rate"))
    parser.add_argument("harness_args", nargs=argparse.REMAINDER,
                        help="-- then `harness run` arguments (program, scenarios, --pg ...)")
    args = parser.parse_args()
    rest = [a for a in args.harness_args if a != "--"]
    if os.path.exists(args.out) and os.listdir(args.out):
        parser.error(f"{args.out} is not empty: give another --out or remove it")
    cmd = [HARNESS, "run", "--repeat", str(args.repeat), "--out", args.out, *rest]
    # A failed clause makes the harness exit 1: that is a measurement here, not an error.
    code = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL).returncode
    if code not in (0, 1):
        sys.exit(f"{' '.join(cmd)}: exit {code}, not a verdict")
    found = sources(args.out)
    if not found:
        sys.exit(f"{args.out}: no evidence folder was written")
    print(f"`harness run --repeat {args.repeat} {' '.join(rest)}`\n")
    print("| report | scenario | runs with no failed clause | clauses decided "
          "| clauses failed (runs) |")
    print("|---|---|---|---|---|")
    failed_any = False
    for label, base in found:
        rows, failed = table(label, runs_of(base, args.repeat))
        failed_any |= failed
        print("\n".join(rows))
    sys.exit(1 if failed_any else 0)


if __name__ == "__main__":
    main()
