#!/usr/bin/env python3
"""The server benchmark's pictures, from the run's own output.

Usage (after `cargo bench -p tollgate-benches --bench server`):

    python3 benches/plot_server.py [SERVER_JSON] [--out SVG]

SERVER_JSON defaults to `$CARGO_TARGET_DIR/serverbench/server.json` or
`target/serverbench/server.json`; the SVG to `docs/img/server_latency.svg`.
Left: each server's end-to-end latency distribution (every request of every
round, as the load generator saw it). Right: what each layer adds to a
request handed straight to the router, the median over rounds of its
difference from the unlimited router in the same round. The SVG carries no
date and fixed ids, so the same run draws the same file.

Needs matplotlib (`pip install matplotlib`).
"""

import json
import os
import sys
from pathlib import Path

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

# The same server keeps its colour in both panels and across runs.
COLOURS = {
    "unlimited": "#555555",
    "noop_layer": "#999999",
    "body_layer": "#c7c7c7",
    "tollgate": "#1f77b4",
    "tollgate_inner_body": "#17becf",
    "tollgate_fields": "#aec7e8",
    "tower_governor": "#d62728",
    "tower_governor_headers": "#ff9896",
}


def default_input():
    target = Path(os.environ.get("CARGO_TARGET_DIR", "target"))
    return target / "serverbench" / "server.json"


def parse_args(argv):
    source, out = default_input(), Path("docs/img/server_latency.svg")
    args = iter(argv)
    for arg in args:
        if arg == "--out":
            out = Path(next(args))
        else:
            source = Path(arg)
    return source, out


def plot(report, out):
    plt.rcParams["svg.hashsalt"] = "tollgate-server-bench"
    fig, (cdf, added) = plt.subplots(
        1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [3, 2]}
    )
    servers = report["servers"]
    for row in servers:
        points = row["cdf_us"]
        cdf.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            label=row["server"],
            color=COLOURS.get(row["server"]),
            linewidth=1.4,
        )
    # The last few requests of a run on a shared machine waited for other
    # programs, by milliseconds: the axis stops at the slowest p99.5.
    tail = max(p[0] for row in servers for p in row["cdf_us"] if p[1] <= 0.995)
    fastest = min(row["cdf_us"][0][0] for row in servers)
    cdf.set_xscale("log")
    cdf.set_xlim(fastest / 1.2, tail * 1.5)
    cdf.set_xlabel("latency, µs (log scale)")
    cdf.set_ylabel("fraction of requests at most this slow (to p99.5)")
    cdf.set_ylim(0, 1.0)
    cdf.grid(True, which="both", alpha=0.3)
    cdf.legend(loc="lower right", fontsize=8)
    cdf.set_title(
        f"{report['connections']} keep-alive connections, "
        f"{report['requests_per_round']} requests × {report['rounds']} rounds",
        fontsize=9,
    )

    layered = [r for r in report["in_process"]["servers"] if r["server"] != "unlimited"]
    names = [r["server"] for r in layered]
    values = [r["median_ns_over_unlimited"] for r in layered]
    bars = added.barh(names, values, color=[COLOURS.get(n) for n in names])
    added.bar_label(bars, labels=[f"{v:.0f} ns" for v in values], fontsize=8, padding=2)
    added.invert_yaxis()
    added.set_xlabel("CPU ns added per request, router called directly")
    added.set_xlim(0, max(values) * 1.25 if values else 1)
    added.grid(True, axis="x", alpha=0.3)
    added.set_title(
        f"median of {report['rounds']} rounds of "
        f"{report['in_process']['calls_per_round']} calls",
        fontsize=9,
    )

    machine = report["machine"]
    fig.suptitle(
        f"An axum hello server with and without a limit "
        f"({machine.get('cpus')} vCPUs, {machine.get('cpu')}; one server thread, one client thread)",
        fontsize=10,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="svg", metadata={"Date": None})


def main():
    source, out = parse_args(sys.argv[1:])
    report = json.loads(source.read_text())
    plot(report, out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
