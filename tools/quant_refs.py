#!/usr/bin/env python3
"""Writes tests/data/quant_refs.json: reference blocks for tests/cpu/quant_test.cpp, made by the `gguf` Python package.

    pip install gguf==0.19.0 numpy
    tools/quant_refs.py [OUT.json]

For Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: inputs (a few 32-weight blocks, edge cases included) quantized by
gguf.quants.quantize (which implements ggml's reference quantize_row_*_ref) and dequantized by gguf.quants.dequantize.
For Q4_K, Q6_K and Q5_K (gguf 0.19.0 has no quantizer for them): hand-built blocks (random bytes with chosen fp16
d/dmin) dequantized by gguf.quants.dequantize.
For the Q4_K and Q5_K quantizers' RMS criterion: ggml's quantize_row_q4_K_ref / quantize_row_q5_K_ref ported here in
double precision (independent of the C++ port in models/quant.cpp), run on an approximately normal tensor that the C++
test regenerates bit for bit (Irwin-Hall: the sum of 12 counter-based uniforms of core/counter_rng.h, minus 6, in
float32), their RMS errors stored.

Floats are stored as the hex of their little-endian float32 bytes, blocks as the hex of their bytes.
"""
import json
import math
import os
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synthetic import rng_mix, U64  # noqa: E402  (core/counter_rng.h mirror)

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "tests", "data", "quant_refs.json")


def hexf(a):
    return np.ascontiguousarray(a, dtype="<f4").tobytes().hex()


def hexb(a):
    return np.ascontiguousarray(a, dtype=np.uint8).tobytes().hex()


def legacy_inputs(rng):
    """Eight 32-weight blocks: typical values and the edge cases of the reference quantizers."""
    b = []
    b.append(rng.standard_normal(32))                       # typical
    b.append(rng.uniform(0.5, 2.0, 32))                     # all positive (Q4_1/Q5_1 min > 0)
    b.append(np.zeros(32))                                  # all zero: d = 0, id = 0
    b.append(rng.standard_normal(32) * 1e-6)                # fp16-subnormal scales
    b.append(rng.standard_normal(32) * 3000.0)              # large values
    x = rng.standard_normal(32); x[5] = -4.0                # the largest magnitude is negative
    b.append(x)
    b.append(np.full(32, 0.25))                             # constant block (max == min)
    b.append(np.arange(-16, 16) / 8.0)                      # values on the code grids: rounding ties
    return np.concatenate(b).astype(np.float32)


def hand_blocks(rng, qtype, n_blocks):
    """Random block bytes with chosen fp16 scales (normal, negative, subnormal, zero)."""
    _, size = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    ds = [0.0123, -0.5, 6.0e-6, 0.0, 1.75]
    dmins = [0.004, 0.25, 1.0e-6, 0.3, 0.0]
    for i in range(n_blocks):
        d = np.array([ds[i % len(ds)]], dtype=np.float16).view(np.uint8)
        m = np.array([dmins[i % len(dmins)]], dtype=np.float16).view(np.uint8)
        if qtype in (T.Q4_K, T.Q5_K):
            blocks[i, 0:2] = d
            blocks[i, 2:4] = m
        else:  # Q6_K: d last
            blocks[i, 208:210] = d
    return blocks


# ---- ggml's quantize_row_q4_K_ref, in double precision ---------------------------------------------------------------

def nearest_int(v):
    return int(np.rint(v))  # ties to even, as ggml's nearest_int


def make_qkx2_quants(x, weights, nmax, rmin, rdelta, nstep):
    n = len(x)
    mn, mx = min(x), max(x)
    sum_w = sum(weights)
    sum_x = sum(w * v for w, v in zip(weights, x))
    if mn > 0:
        mn = 0.0
    if mx == mn:
        return 0.0, -mn, [0] * n
    iscale = nmax / (mx - mn)
    scale = 1 / iscale
    L = [max(0, min(nmax, nearest_int(iscale * (v - mn)))) for v in x]
    best = sum(w * (scale * l + mn - v) ** 2 for w, l, v in zip(weights, L, x))
    for s in range(nstep + 1):
        iscale = (rmin + rdelta * s + nmax) / (mx - mn)
        La = [max(0, min(nmax, nearest_int(iscale * (v - mn)))) for v in x]
        sum_l = sum(w * l for w, l in zip(weights, La))
        sum_l2 = sum(w * l * l for w, l in zip(weights, La))
        sum_xl = sum(w * l * v for w, l, v in zip(weights, La, x))
        D = sum_w * sum_l2 - sum_l * sum_l
        if D > 0:
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            if this_min > 0:
                this_min = 0.0
                this_scale = sum_xl / sum_l2
            err = sum(w * (this_scale * l + this_min - v) ** 2 for w, l, v in zip(weights, La, x))
            if err < best:
                best, scale, mn, L = err, this_scale, this_min, La
    return scale, -mn, L


def f16(v):
    return float(np.float32(v).astype(np.float16))


def q4_k_ref_dequant(x, nmax=15, rmin=-1.0, nstep=20):
    """Quantizes one 256-weight super-block as quantize_row_q4_K_ref (as quantize_row_q5_K_ref with nmax 31, rmin
    -0.5, nstep 15) and returns its dequantized values."""
    scales, mins = [], []
    for j in range(8):
        xs = [float(v) for v in x[32 * j:32 * j + 32]]
        av_x = math.sqrt(sum(v * v for v in xs) / 32)
        w = [av_x + abs(v) for v in xs]
        s, m, _ = make_qkx2_quants(xs, w, nmax, rmin, 0.1, nstep)
        scales.append(s)
        mins.append(m)
    max_scale, max_min = max([0.0] + scales), max([0.0] + mins)
    inv_scale = 63 / max_scale if max_scale > 0 else 0.0
    inv_min = 63 / max_min if max_min > 0 else 0.0
    ls = [min(63, nearest_int(inv_scale * s) & 255) for s in scales]
    lm = [min(63, nearest_int(inv_min * m) & 255) for m in mins]
    d, dmin = f16(max_scale / 63), f16(max_min / 63)
    out = np.zeros(256)
    for j in range(8):
        dd, dm = d * ls[j], dmin * lm[j]
        for i in range(32):
            v = float(x[32 * j + i])
            q = 0 if dd == 0 else max(0, min(nmax, nearest_int((v + dm) / dd)))
            out[32 * j + i] = dd * q - dm
    return out


def irwin_hall(seed, tensor_id, count):
    """float32 sum of 12 counter-based uniforms minus 6 (mirrored by the C++ test)."""
    key = rng_mix(np.array([(seed ^ (tensor_id << 32)) & 0xFFFFFFFFFFFFFFFF], dtype=U64))[0]
    idx = np.arange(12 * count, dtype=U64).reshape(count, 12)
    unit = (rng_mix(idx ^ key) >> U64(40)).astype(np.float32) * np.float32(1.0 / 16777216.0)
    acc = np.zeros(count, dtype=np.float32)
    for t in range(12):
        acc = (acc + unit[:, t]).astype(np.float32)
    return (acc - np.float32(6.0)).astype(np.float32)


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    rng = np.random.default_rng(20240613)
    refs = {"generator": f"tools/quant_refs.py, gguf {gguf.__version__ if hasattr(gguf, '__version__') else '0.19.0'}, "
                         f"numpy {np.__version__}", "legacy": {}, "kquant": {}}
    for name, qt in [("Q8_0", T.Q8_0), ("Q4_0", T.Q4_0), ("Q4_1", T.Q4_1), ("Q5_0", T.Q5_0), ("Q5_1", T.Q5_1)]:
        x = legacy_inputs(rng)
        q = quantize(x.reshape(1, -1), qt)
        y = dequantize(q, qt).reshape(-1)
        refs["legacy"][name] = {"input": hexf(x), "blocks": hexb(q), "dequant": hexf(y)}
    for name, qt in [("Q4_K", T.Q4_K), ("Q6_K", T.Q6_K), ("Q5_K", T.Q5_K)]:
        blocks = hand_blocks(rng, qt, 5)
        y = dequantize(blocks.reshape(1, -1), qt).reshape(-1)
        refs["kquant"][name] = {"blocks": hexb(blocks), "dequant": hexf(y)}

    seed, tensor_id, rows, k = 7, 13, 32, 1024
    x = irwin_hall(seed, tensor_id, rows * k)
    deq = np.concatenate([q4_k_ref_dequant(x[i:i + 256]) for i in range(0, rows * k, 256)])
    rms = float(np.sqrt(np.mean((deq - x.astype(np.float64)) ** 2)))
    refs["q4_k_rms"] = {"seed": seed, "tensor_id": tensor_id, "rows": rows, "k": k,
                        "input_rms": float(np.sqrt(np.mean(x.astype(np.float64) ** 2))),
                        "ref_rms_error": rms,
                        "what": "ggml quantize_row_q4_K_ref ported to Python (double precision) on Irwin-Hall inputs"}
    deq5 = np.concatenate([q4_k_ref_dequant(x[i:i + 256], 31, -0.5, 15) for i in range(0, rows * k, 256)])
    refs["q4_k_rms"]["ref_rms_error_q5_k"] = float(np.sqrt(np.mean((deq5 - x.astype(np.float64)) ** 2)))
    with open(out_path, "w") as f:
        json.dump(refs, f, indent=1)
        f.write("\n")
    print(f"wrote {out_path}: Q4_K reference RMS error {rms:.6f} (input RMS {refs['q4_k_rms']['input_rms']:.4f})")


if __name__ == "__main__":
    main()
