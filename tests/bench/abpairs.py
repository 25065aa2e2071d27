#!/usr/bin/env python3
"""Paired A/B timing of two builds on a shared, noisy machine.

    abpairs.py --runs N [--setup-a CMD --setup-b CMD] --row LABEL CMD_A CMD_B [--row ...]

For each row the two commands run in pairs, in a random order within each
pair, so that changes in the machine's load hit both alike; each run is timed
with the monotonic clock around its process (the same spawn cost for both).
--setup-a/--setup-b (shell commands, not timed) run before each A or B run
(srun.sh switches the cluster's plugstack.conf with them). Prints a markdown
table: the medians, the median of the per-pair ratios B/A with a 95 %
bootstrap interval, and "within noise" when that interval holds 1.00.
A command that fails stops the bench (exit 1)."""
import argparse, random, statistics, subprocess, sys, time


def run(cmd, setup):
    if setup:
        subprocess.run(setup, shell=True, check=True)
    t0 = time.perf_counter_ns()
    r = subprocess.run(cmd, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t1 = time.perf_counter_ns()
    if r.returncode != 0:
        sys.exit(f"abpairs: failed (exit {r.returncode}): {cmd}: {r.stderr.decode(errors='replace')[:300]}")
    return (t1 - t0) / 1e6


def ci_median(xs, rng, n=2000):
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--setup-a", default="")
    ap.add_argument("--setup-b", default="")
    ap.add_argument("--label-a", default="A")
    ap.add_argument("--label-b", default="B")
    ap.add_argument("--row", nargs=3, action="append", metavar=("LABEL", "CMD_A", "CMD_B"), required=True)
    o = ap.parse_args()
    rng = random.Random(1)
    print(f"| {o.runs} pairs each | {o.label_a} median ms | {o.label_b} median ms | median ratio {o.label_b}/{o.label_a} "
          f"| 95 % interval | median paired diff ms | |")
    print("|---|---:|---:|---:|---|---:|---|")
    for label, ca, cb in o.row:
        for _ in range(o.warmup):
            run(ca, o.setup_a)
            run(cb, o.setup_b)
        a, b = [], []
        for _ in range(o.runs):
            if rng.random() < 0.5:
                a.append(run(ca, o.setup_a))
                b.append(run(cb, o.setup_b))
            else:
                b.append(run(cb, o.setup_b))
                a.append(run(ca, o.setup_a))
        ratios = [y / x for x, y in zip(a, b)]
        r = statistics.median(ratios)
        lo, hi = ci_median(ratios, rng)
        d = statistics.median([y - x for x, y in zip(a, b)])
        verdict = "within noise" if lo <= 1.0 <= hi else (f"{o.label_b} faster" if hi < 1.0 else f"{o.label_b} slower")
        print(f"| {label} | {statistics.median(a):.2f} | {statistics.median(b):.2f} | {r:.3f} | {lo:.3f}–{hi:.3f} "
              f"| {d:+.2f} | {verdict} |", flush=True)


if __name__ == "__main__":
    main()
