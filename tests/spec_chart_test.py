#!/usr/bin/env python3
"""CPU test of tools/spec_chart.py (speculative decoding's speed-up from llama-ab --verify-k costs): the expected
tokens per verify step, the speed-up and break-even rate on known numbers, the table from the committed H100 costs,
and the one-line refusal of a file without verify lines. Exits 1 on the first failure. Run by ctest."""
import os
import subprocess
import sys
import tempfile

from tool_checks import SRC, check, failures, load_tool, tool_path

TOOL = tool_path("spec_chart")
COSTS = os.path.join(SRC, "docs", "results", "verify-costs-h100-q4_0.txt")
sc = load_tool("spec_chart")

# E = 1 + a + ... + a^(k-1)
check(abs(sc.tokens_per_verify(1, 0.7) - 1.0) < 1e-12, "k = 1 yields the pending token only")
check(abs(sc.tokens_per_verify(4, 0.0) - 1.0) < 1e-12, "a = 0 yields one token whatever k")
check(abs(sc.tokens_per_verify(4, 0.5) - 1.875) < 1e-12, "k = 4, a = 0.5: 1 + 0.5 + 0.25 + 0.125")
check(abs(sc.tokens_per_verify(3, 1.0) - 3.0) < 1e-12, "a = 1 accepts every draft")
# A verify as cheap as a step doubles the rate at E = 2; one twice as dear breaks even there.
check(abs(sc.speedup(2, 1.0, 1.0, 1.0) - 2.0) < 1e-12, "speed-up of 2 tokens per step-priced verify")
r = sc.break_even(2, 1.5, 1.0)  # 1 + a = 1.5
check(r is not None and abs(r - 0.5) < 1e-6, f"break-even of a verify 1.5x a step at k = 2 is 0.5 ({r})")
check(sc.break_even(2, 3.0, 1.0) is None, "a verify 3x a step never pays at k = 2")

out = subprocess.run([sys.executable, TOOL, f"H100={COSTS}"], capture_output=True, text=True)
check(out.returncode == 0, "the committed costs make a table")
check("one decode step 2.542 ms" in out.stdout and "| 0.8 |" in out.stdout, "the table names the step and the rates")
check("break-even acceptance rate: k=2:" in out.stdout, "the break-even line is printed")

with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
    f.write("ab: nothing here\n")
bad = subprocess.run([sys.executable, TOOL, f"x={f.name}"], capture_output=True, text=True)
os.unlink(f.name)
check(bad.returncode != 0 and "no 'verify of K tokens' lines" in bad.stderr, "a file without verify lines is refused")
usage = subprocess.run([sys.executable, TOOL], capture_output=True, text=True)
check(usage.returncode != 0 and "usage:" in (usage.stderr + usage.stdout), "no arguments: the usage line")

sys.exit(1 if failures else 0)
