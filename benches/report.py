#!/usr/bin/env python3
"""Markdown tables of every benchmark's medians, from criterion's output.

Usage (after `cargo bench -p tollgate-benches`, or some of its benches):

    python3 benches/report.py [CRITERION_DIR ...] [--json FILE]

CRITERION_DIR defaults to `$CARGO_TARGET_DIR/criterion` or `target/criterion`.
Reads `<group>/.../new/{benchmark,estimates,sample}.json`, that is, the
latest run of each benchmark, and prints one table per group found. Given
several directories (copies of `target/criterion` after successive rounds
of the same benches), each benchmark's figure is the median of its rounds'
medians, its interval the lowest and highest of them, and its fastest
sample the fastest of all rounds. `clock`
lists each reading's median with its 95 % confidence interval. The others
give, for each row (a clock class, a thread count, a cost, a depth or a
store), criterion's median time per iteration of every implementation (in
ns, or µs where marked), then how many times slower each baseline is than
the reference (tollgate; for `allowance`, the local allowance: above 1, the
reference is faster), and the verdict on the group's target where it has
one. The fastest sample (time per iteration of criterion's least disturbed
sample) cross-checks the verdicts on a shared, noisy machine.

`--json FILE` also writes `{"allow/monotonic/floor": {"median": ns,
"fastest": ns}, ...}`.

`--svg DIR` also draws, from the same figures as the tables (needs
matplotlib): `keyed.svg`, governor / tollgate on every keyed row beside the
2x target, and `scaling.svg`, decisions per second against threads for each
implementation of every thread group.
"""

import json
import os
import sys
from pathlib import Path

FLOOR_TARGET = 1.2  # tollgate's allow path within 1.2x of the floor
KEYED_TARGET = 2.0  # tollgate at least 2x faster than governor's keyed limiter
KEYED_FLOOR_TARGET = 1.3  # a keyed decision on one hot key within 1.3x of the bucket
KEYED_GROUPS = ("keyed_hot", "keyed_100k", "keyed_1m", "keyed_zipf")
# Groups of throughput over threads: a decisions-per-second column each.
THREAD_GROUPS = ("contention", "keyed_disjoint", "keyed_shared", "keyed_churn_threads")
CLASSES = ("default", "default_2t", "monotonic", "coarse")

# Groups whose ids are `<group>/<row>/<implementation>` (a clock class per
# row); the others are `<group>/<implementation>/<row>` (criterion's
# `BenchmarkId::new(implementation, parameter)`).
ROW_FIRST = ("allow", "deny", "keyed_hot", "keyed_100k", "keyed_1m", "keyed_zipf", "keyed_churn")
# The order groups are printed in, and what each row is.
GROUPS = {
    "clock": "reading",
    "allow": "clock",
    "deny": "clock",
    "weighted": "cost",
    "hierarchy": "depth",
    "hierarchy_refused": "depth",
    "keyed_hot": "clock",
    "keyed_100k": "clock",
    "keyed_1m": "clock",
    "keyed_zipf": "clock",
    "keyed_churn": "clock",
    "contention": "threads",
    "keyed_disjoint": "threads",
    "keyed_shared": "threads",
    "keyed_churn_threads": "threads",
    "allowance": "store",
}
# The implementation each group's ratios are taken against.
REFERENCE = {"allowance": "local_allowance"}
# `clock` rows, grouped by clock class: (reading, class).
CLOCK_ROWS = (
    ("std_instant_now", "monotonic"),
    ("tollgate_monotonic", "monotonic"),
    ("governor_monotonic", "monotonic"),
    ("quanta_raw", "default"),
    ("quanta_now", "default"),
    ("tollgate_tsc", "default"),
    ("governor_quanta", "default"),
    ("tollgate_coarse", "coarse"),
    ("governor_quanta_upkeep", "coarse"),
)
# The target columns of the groups that have one.
VERDICTS = {
    "allow": (f"tollgate / floor (target ≤ {FLOOR_TARGET})", "fastest-sample tollgate / floor", "tollgate / governor (target ≤ 1)"),
    **{g: (f"governor / tollgate (target ≥ {KEYED_TARGET})", "fastest-sample governor / tollgate") for g in KEYED_GROUPS},
    "keyed_hot": (f"governor / tollgate (target ≥ {KEYED_TARGET})", "fastest-sample governor / tollgate",
                  f"tollgate / bucket (target ≤ {KEYED_FLOOR_TARGET}, `monotonic`)"),
}


def load(root):
    """{full_id: (median, lower, upper, fastest)} for every benchmark under root."""
    out = {}
    for meta in sorted(root.glob("**/new/benchmark.json")):
        full_id = json.loads(meta.read_text())["full_id"]
        est = json.loads((meta.parent / "estimates.json").read_text())["median"]
        ci = est["confidence_interval"]
        sample = json.loads((meta.parent / "sample.json").read_text())
        fastest = min(t / n for t, n in zip(sample["times"], sample["iters"]))
        out[full_id] = (est["point_estimate"], ci["lower_bound"], ci["upper_bound"], fastest)
    return out


def combine(rounds):
    """One {full_id: (median, lower, upper, fastest)} from several rounds:
    the median of the medians, their range, the fastest sample of all."""
    out = {}
    for full_id in set().union(*rounds):
        got = sorted(r[full_id] for r in rounds if full_id in r)
        medians = sorted(m for m, _, _, _ in got)
        mid = len(medians) // 2
        median = medians[mid] if len(medians) % 2 else (medians[mid - 1] + medians[mid]) / 2
        out[full_id] = (median, medians[0], medians[-1], min(f for _, _, _, f in got))
    return out


def cells(data, group):
    """{(row, implementation): measurement} of one group."""
    out = {}
    for full_id, value in data.items():
        parts = full_id.split("/")
        if parts[0] != group or len(parts) != 3:
            continue
        row, who = (parts[1], parts[2]) if group in ROW_FIRST else (parts[2], parts[1])
        out[(row, who)] = value
    return out


def ordered(keys):
    """Clock classes in their usual order, numbers numerically, the rest as found."""
    def rank(k):
        if k in CLASSES:
            return (0, CLASSES.index(k), "")
        if k.isdigit():
            return (1, int(k), "")
        return (2, 0, k)
    return sorted(set(keys), key=rank)


def ns(x):
    if x >= 1e4:
        return f"{x / 1e3:,.1f} µs"
    return f"{x:.2f}" if x < 10 else f"{x:.1f}"


def ratio(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:.2f}"


def verdicts(group, row, got):
    """The target cells of one row, in the order of VERDICTS[group]."""
    toll = got.get("tollgate")
    if group == "allow" and toll and "floor" in got and "governor" in got:
        ratio = toll[0] / got["floor"][0]
        slower = toll[0] / got["governor"][0]
        return [f"{ratio:.2f} {'met' if ratio <= FLOOR_TARGET else 'not met'}",
                f"{toll[3] / got['floor'][3]:.2f}",
                f"{slower:.2f} {'met' if slower <= 1 else 'not met'}"]
    if group in KEYED_GROUPS and toll and "governor" in got:
        speedup = got["governor"][0] / toll[0]
        # A two-thread sample of few iterations times mostly the barrier's
        # release: its fastest sample says nothing.
        fastest = "–" if row.endswith("_2t") else f"{got['governor'][3] / toll[3]:.2f}"
        out = [f"{speedup:.2f} {'met' if speedup >= KEYED_TARGET else 'not met'}", fastest]
        if group == "keyed_hot":
            floor = toll[0] / got["bucket"][0] if "bucket" in got else None
            verdict = (" met" if floor <= KEYED_FLOOR_TARGET else " not met") if floor and row == "monotonic" else ""
            out.append("–" if floor is None else f"{floor:.2f}{verdict}")
        return out
    return ["–"] * len(VERDICTS.get(group, ()))


def clock_table(data):
    rows = [
        "| class | reading | median ns | 95 % CI of median | fastest sample ns |",
        "|---|---|---:|---|---:|",
    ]
    for name, cls in CLOCK_ROWS:
        if f"clock/{name}" in data:
            m, lo, hi, fast = data[f"clock/{name}"]
            rows.append(f"| {cls} | `{name}` | {ns(m)} | {ns(lo)} – {ns(hi)} | {ns(fast)} |")
    return "\n".join(rows) if len(rows) > 2 else None


def group_table(data, group):
    if group == "clock":
        return clock_table(data)
    table = cells(data, group)
    if not table:
        return None
    rows = ordered(r for r, _ in table)
    who = []
    for _, w in table:
        if w not in who:
            who.append(w)
    reference = REFERENCE.get(group, "tollgate")
    if reference in who:
        who.remove(reference)
        who.insert(0, reference)
    # The floors (`floor`, and `bucket` beside a keyed decision) are bounds,
    # not rivals: their ratios are the targets' columns.
    baselines = [w for w in who if w not in (reference, "floor", "bucket")] if reference in who else []
    header = [GROUPS.get(group, "row")] + list(who)
    if group in THREAD_GROUPS:
        header += [f"{w} M/s" for w in who]
    header += [f"{w} / {reference}" for w in baselines] + list(VERDICTS.get(group, ()))
    out = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for row in rows:
        got = {w: table[(row, w)] for w in who if (row, w) in table}
        line = [row] + [ns(got[w][0]) if w in got else "–" for w in who]
        if group in THREAD_GROUPS:
            line += [f"{1e3 / got[w][0]:.0f}" if w in got else "–" for w in who]
        for w in baselines:
            ok = w in got and reference in got
            line.append(ratio(got[w][0] / got[reference][0]) if ok else "–")
        line += verdicts(group, row, got)
        out.append("| " + " | ".join(line) + " |")
    return "\n".join(out)


def plot_keyed(data, path, plt):
    """governor / tollgate on every keyed row and clock class, as bars."""
    labels, ratios = [], []
    for group in KEYED_GROUPS:
        table = cells(data, group)
        for row in ordered(r for r, _ in table):
            if (row, "tollgate") in table and (row, "governor") in table:
                labels.append(f"{group.removeprefix('keyed_')}\n{row}")
                ratios.append(table[(row, "governor")][0] / table[(row, "tollgate")][0])
    if not ratios:
        return False
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(ratios)), 3.6))
    ax.bar(range(len(ratios)), ratios, color=["tab:green" if r >= KEYED_TARGET else "tab:orange" for r in ratios])
    ax.axhline(KEYED_TARGET, color="black", linestyle="--", linewidth=1, label=f"target {KEYED_TARGET}x")
    ax.axhline(1, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(ratios)), labels, fontsize=7)
    ax.set_ylabel("governor / tollgate (higher: tollgate faster)")
    ax.set_title("Keyed decision, each crate's clock class (medians)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def plot_scaling(data, path, plt):
    """Decisions per second against threads, one panel per thread group."""
    groups = [g for g in THREAD_GROUPS if cells(data, g)]
    if not groups:
        return False
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.6), squeeze=False)
    for ax, group in zip(axes[0], groups):
        table = cells(data, group)
        threads = [t for t in ordered(r for r, _ in table) if t.isdigit()]
        for who in dict.fromkeys(w for _, w in table):
            xs = [int(t) for t in threads if (t, who) in table]
            ys = [1e3 / table[(t, who)][0] for t in threads if (t, who) in table]
            ax.plot(xs, ys, marker="o", label=who)
        ax.set_xscale("log", base=2)
        ax.set_xticks([int(t) for t in threads], threads)
        ax.set_xlabel("threads (2 cores: 4 and 8 over-subscribed)")
        ax.set_ylabel("million decisions / s")
        ax.set_title(group)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def option(argv, flag):
    """The value after `flag` in argv (removing both), or None."""
    if flag not in argv:
        return None
    i = argv.index(flag)
    if i + 1 == len(argv):
        sys.exit(f"{flag} needs a value")
    value = argv[i + 1]
    del argv[i : i + 2]
    return value


def main(argv):
    json_out = option(argv, "--json")
    svg_dir = option(argv, "--svg")
    roots = [Path(a) for a in argv] or [Path(os.environ.get("CARGO_TARGET_DIR", "target")) / "criterion"]
    rounds = [load(root) for root in roots]
    for root, data in zip(roots, rounds):
        if not data:
            sys.exit(f"no criterion results under {root}")
    data = rounds[0] if len(rounds) == 1 else combine(rounds)
    for group in GROUPS:
        table = group_table(data, group)
        if table:
            print(f"### {group}\n\n{table}\n")
    if svg_dir:
        import matplotlib
        matplotlib.use("svg")
        import matplotlib.pyplot as plt
        matplotlib.rcParams["svg.hashsalt"] = "tollgate"  # stable ids: diffs show data changes only
        Path(svg_dir).mkdir(parents=True, exist_ok=True)
        for name, plot in (("keyed.svg", plot_keyed), ("scaling.svg", plot_scaling)):
            if plot(data, Path(svg_dir) / name, plt):
                print(f"wrote {Path(svg_dir) / name}", file=sys.stderr)
    if json_out:
        Path(json_out).write_text(json.dumps({k: {"median": v[0], "fastest": v[3]} for k, v in data.items()}, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
