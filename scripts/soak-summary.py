#!/usr/bin/env python3
"""Sums the report.json files of a soak (scripts/soak.sh) into $OUT/summary.md and summary.json.

    python3 scripts/soak-summary.py OUT [--explore-seconds S] [--determinism-seconds S]

A false alarm is a scenario of a reference that failed; a harness error is a run whose
report.json has `error` set, a run that wrote no report.json, or a run that exited non-zero
(seed-N.exit) although its report passed. Distinct schedules count the
`schedule` ids (UUID v5 of the schedule text) of every explored case, per scenario. Exit 0 when
there is no false alarm, no harness error and no determinism failure, else 1.
"""
import argparse
import json
import platform
import subprocess
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path


def runs(part: Path):
    """(run directory name, report or None) for each seed directory of a part."""
    for d in sorted((p for p in part.iterdir() if p.is_dir()), key=lambda p: int(p.name.split("-")[-1])):
        f = d / "report.json"
        yield d.name, (json.loads(f.read_text()) if f.exists() else None)


def summarise(part: Path):
    s = {
        "runs": 0, "schedules": 0, "distinct": 0, "false_alarms": [], "harness_errors": [],
        "coverage": defaultdict(lambda: defaultdict(lambda: defaultdict(int))),
        "faults": defaultdict(lambda: defaultdict(int)), "wall_s": 0.0, "per_scenario": defaultdict(int),
    }
    seen = defaultdict(set)
    for name, report in runs(part):
        s["runs"] += 1
        if report is None:
            s["harness_errors"].append(f"{name}: no report.json (see {name}.log)")
            continue
        s["wall_s"] += report["wall_s"]
        exit_file = part / f"{name}.exit"
        code = int(exit_file.read_text().strip() or 0) if exit_file.exists() else 0
        if report.get("error"):
            s["harness_errors"].append(f"{name}: {report['error'].splitlines()[0]}")
        elif code != 0 and report["verdict"] == "pass":
            s["harness_errors"].append(f"{name}: exited {code} with a passing report (see {name}.log)")
        for sc in report["scenarios"]:
            s["schedules"] += sc["schedules"]
            s["per_scenario"][sc["name"]] += sc["schedules"]
            seen[sc["name"]].update(c["schedule"] for c in sc["cases"])
            if sc["verdict"] != sc["expected"]:
                f = sc.get("failure") or {}
                why = "; ".join(f.get("violated", [])) or "failed"
                repro = (f.get("repro") or [""])[0]
                s["false_alarms"].append(f"{name} {sc['name']} ({sc['system']}): {why} — {repro}")
            for point, c in sc["coverage"].items():
                for k, v in c.items():
                    s["coverage"][sc["name"]][point][k] += v
            for kind, n in sc["faults"].items():
                s["faults"][sc["name"]][kind] += n
    s["distinct"] = sum(len(v) for v in seen.values())
    s["distinct_per_scenario"] = {k: len(v) for k, v in seen.items()}
    return s


def machine():
    cores = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    mem_kb = next((int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal")), 0)
    return f"{platform.machine()}, {cores} cores, {mem_kb / 2**20:.0f} GiB, {platform.system()} {platform.release()}"


def table(rows, head):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--explore-seconds", type=float, default=0)
    ap.add_argument("--determinism-seconds", type=float, default=0)
    a = ap.parse_args()
    ex = summarise(a.out / "explore")
    det = summarise(a.out / "determinism")
    ok = not (ex["false_alarms"] or ex["harness_errors"] or det["false_alarms"] or det["harness_errors"])
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    md = [
        f"# Soak, {date}",
        "",
        f"Machine: {machine()}. Every fault on the menu (`--all-faults`).",
        "",
        table(
            [
                ["explore", ex["runs"], ex["schedules"], ex["distinct"], len(ex["false_alarms"]), len(ex["harness_errors"]), f"{a.explore_seconds:.0f}"],
                ["determinism (each run twice)", det["runs"], det["schedules"], det["distinct"], len(det["false_alarms"]), len(det["harness_errors"]), f"{a.determinism_seconds:.0f}"],
            ],
            ["part", "runs (seeds)", "schedules", "distinct schedules", "false alarms", "harness errors", "wall s"],
        ),
        "",
        "Schedules per scenario (explore): " + ", ".join(f"{k} {v} ({ex['distinct_per_scenario'].get(k, 0)} distinct)" for k, v in sorted(ex["per_scenario"].items())),
        "",
        f"Verdict: {'PASS' if ok else 'FAIL'}",
    ]
    for title, items in [("False alarms", ex["false_alarms"] + det["false_alarms"]), ("Harness errors", ex["harness_errors"] + det["harness_errors"])]:
        if items:
            md += ["", f"## {title}", ""] + [f"- {i}" for i in items]
    md += ["", "## Crash-point coverage (explore)", ""]
    for sc, points in sorted(ex["coverage"].items()):
        md += [f"### {sc}", "", table([[p, c["passed"], c["crashed"], c["failed"]] for p, c in points.items()], ["crash point", "schedules through it", "crashes", "failures"]), ""]
    md += ["## Faults (explore): schedules that used each", ""]
    for sc, faults in sorted(ex["faults"].items()):
        md += [f"### {sc}", "", table(sorted(faults.items()), ["fault", "schedules"]), ""]
    text = "\n".join(md) + "\n"
    (a.out / "summary.md").write_text(text)
    summary = {"date": date, "machine": machine(), "ok": ok, "explore": ex, "determinism": det,
               "explore_s": a.explore_seconds, "determinism_s": a.determinism_seconds}
    (a.out / "summary.json").write_text(json.dumps(summary, indent=2, default=dict))
    print(text)
    print(f"soak: summary in {a.out}/summary.md")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
