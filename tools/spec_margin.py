#!/usr/bin/env python3
"""Where a speculative run's greedy output departs from the plain run's, and how close the target's top two logits
were there (issue 36: greedy speculation may change the output only at near ties, a top-2 margin under 1e-3).

  spec_margin.py --run-llama BIN --plain PLAIN.ids --spec SPEC.ids [--tie 1e-3] [-- RUN-LLAMA ARGS...]

PLAIN.ids and SPEC.ids are `run-llama --dump-ids` files of the same prompt (the prompt's ids on the first line, the
generated ids on the second). At the first generated token that differs, the plain run's prompt and generated ids up
to it are run teacher-forced as the plain run computed them: the prompt through one prefill, then each generated id
one decode step (`run-llama --prompt-ids @FILE --dump-logits FILE --logits-prefill P`, with RUN-LLAMA ARGS: the
model, device and engine options of the runs), and the last row's two largest logits give the margin: the plain
run's own, whose top-1 is the plain token (a line says so where the rerun's is not: the runs are not deterministic).
Prints one line; exit 0, or 1 with one line on stderr for a missing or malformed file or a failed run. Standard
library only."""
import argparse
import array
import os
import subprocess
import sys
import tempfile


def fail(msg):
    print(f"spec_margin: {msg}", file=sys.stderr)
    sys.exit(1)


def read_ids(path):
    """(prompt ids, generated ids) of a --dump-ids file."""
    try:
        with open(path) as f:
            lines = f.read().split("\n")
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    if len(lines) < 2:
        fail(f"{path}: expected two lines (prompt ids, generated ids), found {len(lines)}")
    try:
        return [int(t) for t in lines[0].split()], [int(t) for t in lines[1].split()]
    except ValueError:
        fail(f"{path}: a line holds something other than token ids")


def first_difference(a, b):
    """Index of the first position where a and b differ (the shorter's length when one is a prefix), None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def top2(row):
    """(best id, best logit, second id, second logit) of a row (ties: the lower id first, as argmax)."""
    if len(row) < 2:
        fail(f"a logits row of {len(row)} values has no second choice")
    order = sorted(range(len(row)), key=lambda i: (-row[i], i))[:2]
    return order[0], row[order[0]], order[1], row[order[1]]


def last_row(path, rows):
    """The last of `rows` float32 rows of a --dump-logits file."""
    size = os.path.getsize(path)
    if rows < 1 or size % (4 * rows) != 0 or size == 0:
        fail(f"{path}: {size} bytes is not {rows} rows of float32 logits")
    vocab = size // (4 * rows)
    a = array.array("f")
    with open(path, "rb") as f:
        f.seek((rows - 1) * vocab * 4)
        a.fromfile(f, vocab)
    if sys.byteorder != "little":
        a.byteswap()
    return list(a)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-llama", required=True, help="the run-llama binary")
    ap.add_argument("--plain", required=True, help="--dump-ids of the run without speculation")
    ap.add_argument("--spec", required=True, help="--dump-ids of the speculative run")
    ap.add_argument("--tie", type=float, default=1e-3, help="a margin under this is a near tie (default 1e-3)")
    ap.add_argument("rest", nargs="*", help="run-llama's model, device and engine options (after --)")
    a = ap.parse_args()
    p_prompt, p_gen = read_ids(a.plain)
    s_prompt, s_gen = read_ids(a.spec)
    if p_prompt != s_prompt:
        fail(f"{a.plain} and {a.spec} hold different prompts")
    j = first_difference(p_gen, s_gen)
    if j is None:
        print(f"the same {len(p_gen)} generated tokens")
        return
    if j >= len(p_gen) or j >= len(s_gen):
        print(f"one run stopped early: {len(p_gen)} and {len(s_gen)} tokens, the same up to {j}")
        return
    ids = p_prompt + p_gen[:j]
    with tempfile.TemporaryDirectory() as d:
        ids_file, logits_file = os.path.join(d, "ids.txt"), os.path.join(d, "logits.f32")
        with open(ids_file, "w") as f:
            f.write(" ".join(map(str, ids)) + "\n")
        cmd = [a.run_llama, *a.rest, "--prompt-ids", "@" + ids_file, "--dump-logits", logits_file,
               "--logits-prefill", str(len(p_prompt))]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            msg = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
            fail(f"run-llama --dump-logits failed (exit {r.returncode}): {msg}")
        row = last_row(logits_file, len(ids) - len(p_prompt) + 1)
    best, lb, second, ls = top2(row)
    want, got = p_gen[j], s_gen[j]
    if max(want, got) >= len(row):
        fail(f"token {max(want, got)} is outside the {len(row)} logits of a row")
    margin = lb - ls
    near = "yes" if margin < a.tie else "no"
    same = "" if best == want else f" (the rerun's top-1 is {best}, not the plain run's {want}: not reproduced)"
    print(f"first difference at generated token {j} of {len(p_gen)}: plain {want}, speculative {got}; teacher-forced "
          f"top-2 {best} / {second}, margin {margin:.3g} (plain's logit - speculative's: {row[want] - row[got]:.3g}); "
          f"near tie (< {a.tie:g}): {near}{same}")


if __name__ == "__main__":
    main()
