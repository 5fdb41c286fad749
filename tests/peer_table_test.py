#!/usr/bin/env python3
"""CPU test of tools/peer_table.py (the peer benchmark's table, scripts/peer-bench.sh): the committed fixtures join
into the committed table; GGUF headers written here report their projection types and the engine's default mapping;
bad input fails with one line. Exits 1 on the first failure. Run by ctest (tests/CMakeLists.txt) or by hand."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

from tool_checks import SRC, check, failures, tool_path

TOOL = tool_path("peer_table")
DATA = os.path.join(SRC, "tests", "data", "peer_table")
FIXTURES = [os.path.join(DATA, d) for d in ("llama3.1-8b-f16", "llama3.1-8b-q4_0")]
F32, F16, Q4_0, Q8_0, Q4_K, Q6_K = 0, 1, 2, 8, 12, 14


def tool(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, tensors, n_layers=2, dims=(64, 64)):
    """A GGUF v3 header: a few metadata pairs (a string, a u32, a string array like a vocabulary) and tensor infos of
    shape dims each; no tensor data (the tool reads the header only)."""
    kv = [gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("llama"),
          gguf_string("llama.block_count") + struct.pack("<I", 4) + struct.pack("<I", n_layers),
          gguf_string("tokenizer.ggml.tokens") + struct.pack("<I", 9) + struct.pack("<IQ", 8, 3) +
          gguf_string("<s>") + gguf_string("a") + gguf_string("b"),
          gguf_string("tokenizer.ggml.scores") + struct.pack("<I", 9) + struct.pack("<IQ", 6, 3) +
          struct.pack("<3f", 0, -1, -2)]
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)) + b"".join(kv)
    for name, ggml_type in tensors:
        out += gguf_string(name) + struct.pack("<I", 2) + struct.pack("<QQ", *dims) + struct.pack("<IQ", ggml_type, 0)
    with open(path, "wb") as f:
        f.write(out)


def layer_tensors(n_layers, proj_type, down_type=None):
    t = []
    for i in range(n_layers):
        t.append((f"blk.{i}.attn_norm.weight", F32))
        for p in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up"):
            t.append((f"blk.{i}.{p}.weight", proj_type))
        t.append((f"blk.{i}.ffn_down.weight", down_type if down_type is not None else proj_type))
    return t


def main():
    # 1. The committed fixtures give the committed table, byte for byte.
    r = tool("table", *FIXTURES)
    with open(os.path.join(DATA, "expected.md")) as f:
        expected = f.read()
    check(r.returncode == 0, f"table on the fixtures exits 0 (stderr: {r.stderr.strip()})")
    check(r.stdout == expected, "table on the fixtures equals tests/data/peer_table/expected.md")
    if r.stdout != expected:
        for got, want in zip(r.stdout.splitlines(), expected.splitlines()):
            if got != want:
                print(f"  got:  {got}\n  want: {want}")
                break
    row = ("| llama3.1-8b-q4_0.gguf | llama 8B Q4_0 | Q4_0 x 224, Q6_K x 1 | 4.22 GB | 327.7 ± 0.4 | warp "
           "| 702.2 ± 1.5 | 2.14x | 4501 | 1066.4 |")
    check(row in r.stdout, "the Q4_0 warp row: ratio 702.25 / 327.7 = 2.14x, ceiling 4501.2 / 4.221 = 1066.4 t/s")

    tmp = tempfile.mkdtemp(prefix="peer_table_test.")
    try:
        # 2. GGUF headers: a Q4_K_M-like mix with a tied head (no output.weight: the embedding is the head).
        p = os.path.join(tmp, "mix.gguf")
        write_gguf(p, [("token_embd.weight", Q6_K)] + layer_tensors(2, Q4_K, down_type=Q6_K) +
                   [("output_norm.weight", F32)])
        r = tool("gguf", p)
        info = json.loads(r.stdout) if r.returncode == 0 else {}
        check(info.get("projection_types") == {"Q4_K": 12, "Q6_K": 3},
              f"gguf: Q4_K x 12, Q6_K x 3 (2 down + tied head) (got {info.get('projection_types')})")
        check(info.get("default_mapping") == "warp", "gguf: quantized projections -> default mapping warp")
        check(info.get("architecture") == "llama", "gguf: architecture read past the metadata arrays")
        # The same mix at 8B's size (15 matrices of 4096 x 14336 in 4.5 to 6.6 bits: over 1 GiB) runs warp-dp4a, as
        # the engine's default_quant_gemv_name picks; one F16 projection among them keeps warp.
        write_gguf(p, [("token_embd.weight", Q6_K)] + layer_tensors(2, Q4_K, down_type=Q6_K), dims=(4096, 14336 * 8))
        info = json.loads(tool("gguf", p).stdout or "{}")
        check(info.get("default_mapping") == "warp-dp4a", f"gguf: over 1 GiB of Q4_K/Q6_K -> warp-dp4a (got {info})")
        t = [("token_embd.weight", Q6_K)] + layer_tensors(2, Q4_K, down_type=F16)
        write_gguf(p, t, dims=(4096, 14336 * 8))
        info = json.loads(tool("gguf", p).stdout or "{}")
        check(info.get("default_mapping") == "warp", "gguf: over 1 GiB with an F16 projection -> warp")
        write_gguf(p, [("token_embd.weight", Q6_K)] + layer_tensors(2, Q4_K, down_type=Q6_K))
        # Untied head in F16 with F16 projections: the BF16 default.
        p = os.path.join(tmp, "f16.gguf")
        write_gguf(p, [("token_embd.weight", Q8_0)] + layer_tensors(2, F16) + [("output.weight", F16)])
        info = json.loads(tool("gguf", p).stdout or "{}")
        check(info.get("projection_types") == {"F16": 15}, f"gguf: F16 x 15, the untied head counted "
              f"(got {info.get('projection_types')})")
        check(info.get("default_mapping") == "warp-r2", "gguf: float projections -> default mapping warp-r2")
        # Not a GGUF file; a truncated header.
        p = os.path.join(tmp, "bad.gguf")
        with open(p, "wb") as f:
            f.write(b"GGML" + bytes(20))
        r = tool("gguf", p)
        check(r.returncode == 1 and r.stderr.startswith("peer_table: error:") and "magic" in r.stderr,
              "gguf: a file without the GGUF magic fails with one line")
        with open(os.path.join(tmp, "mix.gguf"), "rb") as f:
            head = f.read(60)
        with open(p, "wb") as f:
            f.write(head)
        r = tool("gguf", p)
        check(r.returncode == 1 and "truncated" in r.stderr, "gguf: a truncated header fails with one line")

        # 3. Bad result directories fail with one line naming the file.
        bad = os.path.join(tmp, "no_tg")
        shutil.copytree(FIXTURES[1], bad)
        with open(os.path.join(bad, "llama-bench.json")) as f:
            entries = json.load(f)
        entries[0]["n_prompt"] = 512  # a pp512 result only: no text-generation test
        with open(os.path.join(bad, "llama-bench.json"), "w") as f:
            json.dump(entries, f)
        r = tool("table", FIXTURES[0], bad)
        check(r.returncode == 1 and "text-generation" in r.stderr and r.stdout == "",
              "table: llama-bench JSON without a tg test fails, printing no table")
        missing = os.path.join(tmp, "missing")
        shutil.copytree(FIXTURES[0], missing)
        os.remove(os.path.join(missing, "ours.json"))
        r = tool("table", missing)
        check(r.returncode == 1 and "ours.json not found" in r.stderr, "table: a missing ours.json is named")
    finally:
        shutil.rmtree(tmp)

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
