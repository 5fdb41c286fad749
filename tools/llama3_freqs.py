#!/usr/bin/env python3
"""Reference RoPE inverse frequencies with Llama 3.1 scaling -> tests/data/llama3_inv_freq.json.

An independent re-implementation (numpy, float64, vectorised with masks) of transformers'
`_compute_llama3_parameters` (modeling_rope_utils.py):
    inv_freq  = 1 / theta ** (arange(0, head_dim, 2) / head_dim)
    wavelen   = 2 pi / inv_freq
    wavelen > original / low_freq_factor   -> inv_freq / factor            (long wavelengths slowed)
    wavelen < original / high_freq_factor  -> inv_freq                     (short ones kept)
    otherwise smooth = (original / wavelen - low) / (high - low);
              (1 - smooth) * inv_freq / factor + smooth * inv_freq
The C++ side (models/config.cpp rope_inv_freq) is compared with this file at a relative tolerance of 1e-6.

Usage: python3 tools/llama3_freqs.py [OUT.json]   (default: tests/data/llama3_inv_freq.json)
"""
import json
import math
import os
import sys

import numpy as np

# The two configs of the test, copied from models/synthetic.cpp (llama3.1-8b matches Meta's config.json).
CONFIGS = {
    "llama3.1-8b": dict(head_dim=128, rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                        high_freq_factor=4.0, original_max_position_embeddings=8192),
    "tiny-gqa": dict(head_dim=16, rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
                     high_freq_factor=4.0, original_max_position_embeddings=64),
}


def llama3_inv_freq(head_dim, rope_theta, factor, low_freq_factor, high_freq_factor,
                    original_max_position_embeddings):
    exponents = np.arange(0, head_dim, 2, dtype=np.float64) / head_dim
    base = 1.0 / np.power(np.float64(rope_theta), exponents)
    wavelen = 2.0 * math.pi / base
    low_wavelen = original_max_position_embeddings / low_freq_factor
    high_wavelen = original_max_position_embeddings / high_freq_factor
    smooth = (original_max_position_embeddings / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1.0 - smooth) * base / factor + smooth * base
    out = np.where(wavelen > low_wavelen, base / factor, np.where(wavelen < high_wavelen, base, blended))
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "tests", "data", "llama3_inv_freq.json")
    doc = {"generator": "tools/llama3_freqs.py", "configs": {}}
    for name, cfg in CONFIGS.items():
        inv = llama3_inv_freq(**cfg)
        doc["configs"][name] = dict(cfg, inv_freq=[float(x) for x in inv])
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
