#!/usr/bin/env python3
"""Markdown tables of the `bucket` and `keyed` benchmarks' medians, from
criterion's output.

Usage (after `cargo bench --bench bucket --bench keyed --all-features`):

    python3 benches/report.py [CRITERION_DIR] [--json FILE]

CRITERION_DIR defaults to `$CARGO_TARGET_DIR/criterion` or `target/criterion`.
Reads `<group>/<bench>/new/{benchmark,estimates}.json`, that is, the latest
run of each benchmark, and prints one table per group: criterion's median
point estimate with its 95 % confidence interval, and for `allow` and `deny`
the ratios tollgate/floor and tollgate/governor within each clock class; for
`keyed_hot` and `keyed_100k`, how many times faster tollgate is than governor
(default hasher) and than governor with ahash.
The fastest sample (time per iteration of criterion's least disturbed sample)
is shown beside the median as a cross-check on a shared, noisy machine.
`--json FILE` also writes `{"allow/monotonic/floor": {"median": ns,
"fastest": ns}, ...}`.
"""

import json
import os
import sys
from pathlib import Path

KEYED_GROUPS = ("keyed_hot", "keyed_100k", "keyed_1m", "keyed_zipf")
GROUPS = ("clock", "allow", "deny") + KEYED_GROUPS
KEYED_TARGET = 2.0  # tollgate at least 2x faster than governor's keyed limiter
CLASSES = ("monotonic", "tsc", "coarse")
TARGET = 1.2  # tollgate within 1.2x of the floor for the same clock
# `clock` rows, grouped by clock class: (benchmark, class).
CLOCK_ROWS = (
    ("std_instant_now", "monotonic"),
    ("tollgate_monotonic", "monotonic"),
    ("governor_monotonic", "monotonic"),
    ("quanta_raw", "tsc"),
    ("quanta_now", "tsc"),
    ("tollgate_tsc", "tsc"),
    ("governor_quanta", "tsc"),
    ("tollgate_coarse", "coarse"),
    ("governor_quanta_upkeep", "coarse"),
)


def load(root):
    """{full_id: (median, lower, upper, fastest)} for every benchmark of GROUPS.

    `median` is criterion's point estimate of the median time per iteration,
    `lower`/`upper` its 95 % confidence interval, and `fastest` the time per
    iteration of the fastest sample: on a shared machine, the least disturbed.
    """
    out = {}
    for group in GROUPS:
        for meta in sorted((root / group).glob("*/new/benchmark.json")):
            full_id = json.loads(meta.read_text())["full_id"]
            est = json.loads((meta.parent / "estimates.json").read_text())["median"]
            ci = est["confidence_interval"]
            sample = json.loads((meta.parent / "sample.json").read_text())
            fastest = min(t / n for t, n in zip(sample["times"], sample["iters"]))
            out[full_id] = (est["point_estimate"], ci["lower_bound"], ci["upper_bound"], fastest)
    return out


def ns(x):
    return f"{x:.2f}" if x < 10 else f"{x:.1f}"


def clock_table(data):
    rows = [
        "| class | reading | median ns | 95 % CI of median | fastest sample ns |",
        "|---|---|---:|---|---:|",
    ]
    for name, cls in CLOCK_ROWS:
        if f"clock/{name}" in data:
            m, lo, hi, fast = data[f"clock/{name}"]
            rows.append(f"| {cls} | `{name}` | {ns(m)} | {ns(lo)} – {ns(hi)} | {ns(fast)} |")
    return "\n".join(rows)


def path_table(data, group):
    rows = [
        "| clock | floor ns | tollgate ns | governor ns | tollgate − floor ns "
        "| tollgate / floor | tollgate / governor | fastest-sample tollgate / floor "
        f"| within {TARGET}x of floor |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for cls in CLASSES:
        try:
            floor, toll, gov = (data[f"{group}/{cls}/{who}"] for who in ("floor", "tollgate", "governor"))
        except KeyError:
            continue  # e.g. `tsc` without `--features tsc`
        ratio = toll[0] / floor[0]
        verdict = "yes" if ratio <= TARGET else "no"
        rows.append(
            f"| {cls} | {ns(floor[0])} | {ns(toll[0])} | {ns(gov[0])} | {toll[0] - floor[0]:+.2f} "
            f"| {ratio:.2f} | {toll[0] / gov[0]:.2f} | {toll[3] / floor[3]:.2f} | {verdict} |"
        )
    return "\n".join(rows)


def keyed_table(data, group):
    rows = [
        "| clock | tollgate ns | governor ns | governor+ahash ns | governor / tollgate "
        "| governor+ahash / tollgate | fastest-sample governor / tollgate "
        f"| at least {KEYED_TARGET}x faster |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for cls in CLASSES:
        try:
            toll, gov, gah = (data[f"{group}/{cls}/{who}"] for who in ("tollgate", "governor", "governor_ahash"))
        except KeyError:
            continue
        speedup = gov[0] / toll[0]
        verdict = "yes" if speedup >= KEYED_TARGET else "no"
        rows.append(
            f"| {cls} | {ns(toll[0])} | {ns(gov[0])} | {ns(gah[0])} | {speedup:.2f} "
            f"| {gah[0] / toll[0]:.2f} | {gov[3] / toll[3]:.2f} | {verdict} |"
        )
    return "\n".join(rows)


def main(argv):
    json_out = None
    if "--json" in argv:
        i = argv.index("--json")
        json_out = argv[i + 1]
        del argv[i : i + 2]
    if argv:
        root = Path(argv[0])
    else:
        root = Path(os.environ.get("CARGO_TARGET_DIR", "target")) / "criterion"
    data = load(root)
    if not data:
        sys.exit(f"no criterion results under {root}")
    print("### clock\n\n" + clock_table(data) + "\n")
    for group in ("allow", "deny"):
        print(f"### {group}\n\n" + path_table(data, group) + "\n")
    for group in KEYED_GROUPS:
        print(f"### {group}\n\n" + keyed_table(data, group) + "\n")
    if json_out:
        Path(json_out).write_text(json.dumps({k: {"median": v[0], "fastest": v[3]} for k, v in data.items()}, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
