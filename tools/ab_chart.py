#!/usr/bin/env python3
"""ab_chart.py: draws an A/B run's JSON (llama-ab --json) as a PNG: tokens/s and GEMV GB/s per mapping against the
roofline measured in the same run. Called by llama-ab --chart; usable alone:

    python3 tools/ab_chart.py ab.json ab.png

Left panel: median tokens/s (error bar: sd over repeats) with the weight-streaming ceiling, i.e. the read roofline
divided by the GEMV bytes per token. Right panel: achieved GEMV GB/s (profiled) with the roofline itself, and the
sector model's predicted efficiency under each mapping's name.
"""
import json
import os
import sys

SYSTEM_PYTHON = "/usr/bin/python3"  # where the system package python3-matplotlib installs


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"ab_chart: cannot read {path}: {e}")
    try:
        return doc["data"], doc["summary"]
    except KeyError as e:
        sys.exit(f"ab_chart: {path} has no {e} section (expected llama-ab --json output)")


def label(m):
    eff = m.get("sector_efficiency_pred")
    pred = "" if eff is None else f"\n(pred. eff. {100.0 * eff:.0f}%)"
    return m["mapping"] + pred


def draw(data, summary, out_png):
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on a server
        import matplotlib.pyplot as plt
    except ImportError:
        # A python3 earlier on PATH (pyenv, a venv) may lack the system package: retry with the system interpreter.
        if os.path.exists(SYSTEM_PYTHON) and os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON):
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON] + sys.argv)
        sys.exit("ab_chart: matplotlib is missing; install it with: apt-get install python3-matplotlib "
                 "(scripts/setup.sh lists it)")

    maps = summary["mappings"]
    names = [label(m) for m in maps]
    x = list(range(len(maps)))
    tps = [m["tps"]["median"] for m in maps]
    tps_sd = [m["tps"]["sd"] for m in maps]
    gbps = [m["gemv_gbps"] for m in maps]
    roof = summary["roofline_gbps"]["median"]
    ceiling = summary["ceiling_tps"]

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(min(18, 4 + 1.8 * len(maps)), 5.5))
    depth = f" @ d{data['depth']}" if data.get("depth", 0) > 0 else ""
    title = (f"{data['model']} on {data['device']}: prompt {data['prompt_tokens']}, tg{data['n_decode']}{depth}, "
             f"{data['repeats']} repeats")
    fig.suptitle(title, fontsize=11)

    bars = ax1.bar(x, tps, yerr=tps_sd, capsize=4, color="#4C72B0")
    ax1.axhline(ceiling, color="#C44E52", linestyle="--",
                label=f"weight-streaming ceiling {ceiling:.1f} t/s\n(roofline / {data['gemv_bytes_per_token'] / 1e9:.2f}"
                      " GB per token)")
    ax1.bar_label(bars, labels=[f"{v:.1f}" for v in tps], padding=3, fontsize=8)
    ax1.set_ylabel("tokens/s (median ± sd)")
    ax1.set_title("decode speed")
    ax1.set_xticks(x, names, fontsize=8)
    ax1.set_ylim(0, max(max(tps) * 1.15, ceiling * 1.1))
    ax1.legend(fontsize=8, loc="upper right")

    bars = ax2.bar(x, gbps, color="#55A868")
    ax2.axhline(roof, color="#C44E52", linestyle="--", label=f"read roofline {roof:.0f} GB/s (same run)")
    pct = [m.get("pct_roofline") for m in maps]
    ax2.bar_label(bars, labels=[f"{v:.0f}" + ("" if p is None else f"\n{p:.0f}%") for v, p in zip(gbps, pct)],
                  padding=3, fontsize=8)
    ax2.set_ylabel("GEMV GB/s (weights read / GEMV time)")
    ax2.set_title("GEMV bandwidth")
    ax2.set_xticks(x, names, fontsize=8)
    ax2.set_ylim(0, max(max(gbps), roof) * 1.2)
    ax2.legend(fontsize=8, loc="upper right")

    fig.tight_layout()
    fig.savefig(out_png, dpi=120)


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: ab_chart.py AB.json OUT.png")
    data, summary = load(argv[1])
    if not summary.get("mappings"):
        sys.exit(f"ab_chart: {argv[1]} lists no mapping")
    draw(data, summary, argv[2])


if __name__ == "__main__":
    main(sys.argv)
