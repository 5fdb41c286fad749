#!/usr/bin/env python3
"""Speculative decoding's speed-up from measured verify costs (issue 36's chart), before any drafter runs.

Input: llama-ab stderr with `--verify-k` lines, one file per model/build, as LABEL=FILE:
    ab: verify of 8 tokens at position 16: 5.588 ms = 2.20 x one decode step (2.542 ms, ...)
A verify of k tokens checks the pending token and k - 1 drafts. With each draft accepted with probability a
(independently, the usual model), a verify step yields E = 1 + a + ... + a^(k-1) = (1 - a^k) / (1 - a) tokens, so
tokens/s = E / t_verify(k) against 1 / t_step without speculation (drafting cost left out: prompt lookup costs ~0).

Prints, per label, a markdown table of the speed-up for each measured k and acceptance rate, the best k per rate and
the break-even rate of each k; --png FILE draws speed-up against acceptance rate (needs matplotlib; without it, says
so and prints the table only).

usage: spec_chart.py [--png FILE] LABEL=FILE [LABEL=FILE ...]
"""
import re
import sys

LINE = re.compile(r"verify of (\d+) tokens at position \d+: ([0-9.]+) ms = [0-9.]+ x one decode step \(([0-9.]+) ms")
RATES = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]


def parse(path):
    """{k: verify ms} and the decode step's ms (the last seen) from one llama-ab stderr file."""
    costs, step = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = LINE.search(line)
            if m:
                costs[int(m.group(1))] = float(m.group(2))
                step = float(m.group(3))
    if not costs:
        sys.exit(f"spec_chart: no 'verify of K tokens' lines in {path} (run llama-ab --verify-k)")
    return costs, step


def tokens_per_verify(k, a):
    return float(k) if a >= 1.0 else (1.0 - a ** k) / (1.0 - a)


def speedup(k, a, t_verify, t_step):
    return tokens_per_verify(k, a) * t_step / t_verify


def break_even(k, t_verify, t_step):
    """The acceptance rate above which k beats no speculation (bisection; None when even a = 1 does not)."""
    if speedup(k, 0.999999, t_verify, t_step) <= 1.0:
        return None
    lo, hi = 0.0, 0.999999
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if speedup(k, mid, t_verify, t_step) <= 1.0 else (lo, mid)
    return hi


def table(label, costs, step):
    ks = sorted(k for k in costs if k > 1)
    out = [f"### {label}: one decode step {step:.3f} ms\n",
           "| acceptance | " + " | ".join(f"k={k} ({costs[k]:.2f} ms)" for k in ks) + " | best k |",
           "| ---: | " + " | ".join("---:" for _ in ks) + " | ---: |"]
    for a in RATES:
        s = {k: speedup(k, a, costs[k], step) for k in ks}
        best = max(ks, key=lambda k: s[k])
        out.append(f"| {a:.1f} | " + " | ".join(f"{s[k]:.2f}x" for k in ks) +
                   f" | {best if s[best] > 1.0 else 'none'} |")
    be = []
    for k in ks:
        r = break_even(k, costs[k], step)
        be.append(f"k={k}: {'never' if r is None else f'{r:.2f}'}")
    out.append("\nbreak-even acceptance rate: " + ", ".join(be) + "\n")
    return "\n".join(out)


def main(argv):
    png = None
    if len(argv) >= 2 and argv[0] == "--png":
        png, argv = argv[1], argv[2:]
    if not argv or any("=" not in a for a in argv):
        sys.exit(__doc__.strip().splitlines()[-1])
    runs = []
    for a in argv:
        label, path = a.split("=", 1)
        costs, step = parse(path)
        runs.append((label, costs, step))
        print(table(label, costs, step))
    if png:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print(f"spec_chart: matplotlib is not installed; {png} not drawn", file=sys.stderr)
            return 0
        rates = [i / 100 for i in range(0, 100)]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for label, costs, step in runs:
            for k in sorted(k for k in costs if k > 1):
                ax.plot(rates, [speedup(k, a, costs[k], step) for a in rates], label=f"{label} k={k}")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("acceptance rate per draft")
        ax.set_ylabel("tokens/s over plain decode")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(png, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
