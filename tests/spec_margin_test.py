#!/usr/bin/env python3
"""CPU test of tools/spec_margin.py (where a speculative run's greedy output departs from the plain run's, and the
target's top-2 margin there): its helpers on known values; then, with run-llama on stories260K on the CPU, a plain
run's --dump-ids against a copy with one generated token changed reports that position, the plain token as the
teacher-forced best, and a logit difference at least the margin; identical files say so; a malformed file is one line
on stderr and exit 1. Usage: spec_margin_test.py RUN_LLAMA. Exits 1 on the first failure. Run by ctest."""
import os
import re
import subprocess
import sys
import tempfile

from tool_checks import SRC, check, failures, load_tool, tool_path

TOOL = tool_path("spec_margin")
STORIES = os.path.join(SRC, "tests", "data", "models", "stories260K")
sm = load_tool("spec_margin")

check(sm.first_difference([1, 2, 3], [1, 2, 3]) is None, "equal lists have no difference")
check(sm.first_difference([1, 2, 3], [1, 5, 3]) == 1, "the first differing index")
check(sm.first_difference([1, 2], [1, 2, 3]) == 2, "a prefix differs where it ends")
check(sm.top2([0.5, 2.0, 2.0, 1.0]) == (1, 2.0, 2, 2.0), "ties rank the lower id first, as argmax")
check(sm.top2([3.0, -1.0, 2.5])[:3:2] == (0, 2), "best and second ids")

run_llama = sys.argv[1] if len(sys.argv) > 1 else ""
if not os.access(run_llama, os.X_OK):
    print(f"FAIL run-llama not given or not executable: '{run_llama}'")
    sys.exit(1)
model = ["--device", "cpu", "--model", os.path.join(STORIES, "stories260K.bin"), "--tokenizer",
         os.path.join(STORIES, "tok512.model")]
with tempfile.TemporaryDirectory() as d:
    plain = os.path.join(d, "plain.ids")
    r = subprocess.run([run_llama, *model, "--prompt", "Once upon a time", "-n", "16", "--temp", "0", "--ignore-eos",
                        "--dump-ids", plain], capture_output=True, text=True)
    check(r.returncode == 0, f"run-llama wrote the plain run's ids ({r.stderr.strip()[-200:]})")
    prompt_line, gen_line = open(plain).read().split("\n")[:2]
    gen = [int(t) for t in gen_line.split()]
    check(len(gen) == 16, f"16 generated ids ({len(gen)})")
    changed = list(gen)
    changed[5] = (gen[5] + 1) % 512
    spec_ids = os.path.join(d, "spec.ids")
    with open(spec_ids, "w") as f:
        f.write(prompt_line + "\n" + " ".join(map(str, changed)) + "\n")
    r = subprocess.run([sys.executable, TOOL, "--run-llama", run_llama, "--plain", plain, "--spec", spec_ids, "--",
                        *model], capture_output=True, text=True)
    check(r.returncode == 0, f"the tool ran ({r.stderr.strip()})")
    out = r.stdout.strip()
    m = re.match(r"first difference at generated token (\d+) of 16: plain (\d+), speculative (\d+); teacher-forced "
                 r"top-2 (\d+) / (\d+), margin (\S+) \(plain's logit - speculative's: (\S+)\); near tie \(< 0.001\): "
                 r"(yes|no)$", out)
    check(m is not None, f"one line in the documented form: {out}")
    if m:
        check(int(m.group(1)) == 5, "the changed position is reported")
        check(int(m.group(2)) == gen[5] and int(m.group(3)) == changed[5], "the two tokens there")
        check(int(m.group(4)) == gen[5], "teacher-forced, the plain token is the best (greedy)")
        check(float(m.group(7)) >= float(m.group(6)) - 1e-6, "the plain-minus-speculative gap is at least the margin")
        check((m.group(8) == "yes") == (float(m.group(6)) < 1e-3), "the near-tie verdict follows the margin")
    r = subprocess.run([sys.executable, TOOL, "--run-llama", run_llama, "--plain", plain, "--spec", plain, "--",
                        *model], capture_output=True, text=True)
    check(r.returncode == 0 and r.stdout.strip() == "the same 16 generated tokens", f"identical runs: {r.stdout}")
    # --logits-prefill P: the first P ids as one prompt, then decode steps: rows from the P-th id on.
    ids_file, lf = os.path.join(d, "ids.txt"), os.path.join(d, "l.f32")
    with open(ids_file, "w") as f:
        f.write(" ".join(map(str, [1] + gen[:9])) + "\n")
    r = subprocess.run([run_llama, *model, "--prompt-ids", "@" + ids_file, "--dump-logits", lf,
                        "--logits-prefill", "4"], capture_output=True, text=True)
    check(r.returncode == 0 and os.path.getsize(lf) == (10 - 4 + 1) * 512 * 4,
          f"--logits-prefill 4 of 10 ids writes 7 rows ({r.stderr.strip()[-200:]})")
    r = subprocess.run([run_llama, *model, "--prompt-ids", "@" + ids_file, "--dump-logits", lf,
                        "--logits-prefill", "11"], capture_output=True, text=True)
    check(r.returncode != 0 and "--logits-prefill 11 exceeds the prompt's 10 ids" in r.stderr,
          f"a prefill past the prompt is refused by name: {r.stderr.strip()[-200:]}")
    bad = os.path.join(d, "bad.ids")
    with open(bad, "w") as f:
        f.write("1 2 x\n3\n")
    r = subprocess.run([sys.executable, TOOL, "--run-llama", run_llama, "--plain", bad, "--spec", plain],
                       capture_output=True, text=True)
    check(r.returncode == 1 and r.stderr.count("\n") == 1 and bad in r.stderr, f"a malformed file: {r.stderr}")

sys.exit(1 if failures else 0)
