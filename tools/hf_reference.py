#!/usr/bin/env python3
"""Golden logits from Hugging Face transformers for Hugging Face directories written by tools/make-hf-model.

Runs where transformers is installed (the H200 machine has it; its CPU is enough for tiny models). Teacher-forced:
one forward pass over a fixed token sequence, FP32 math on the stored weights (BF16/F16 upcast exactly), eager
attention. Output: JSON {variant: {"tokens": [...], "logits": [[vocab floats] per position]}}.

    python3 tools/hf_reference.py --out tests/data/hf_golden.json NAME=DIR [NAME=DIR ...]
"""
import argparse
import json
import sys

import torch
from transformers import LlamaForCausalLM


def golden_tokens(vocab, n=32):
    # The same sequence tests/cpu/hf_golden_test.cpp feeds: deterministic, spread over the vocabulary, BOS first.
    return [1] + [(i * 37 + 11) % vocab for i in range(1, n)]


def run(dirpath):
    try:
        model = LlamaForCausalLM.from_pretrained(dirpath, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        model = LlamaForCausalLM.from_pretrained(dirpath, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    vocab = model.config.vocab_size
    tokens = golden_tokens(vocab)
    with torch.no_grad():
        out = model(torch.tensor([tokens]), use_cache=False)
    logits = out.logits[0].to(torch.float32).tolist()
    return {"tokens": tokens, "logits": [[round(v, 7) for v in row] for row in logits],
            "transformers": __import__("transformers").__version__, "torch": torch.__version__}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("models", nargs="+", help="NAME=DIR")
    args = ap.parse_args()
    result = {}
    for spec in args.models:
        name, _, d = spec.partition("=")
        result[name] = run(d)
        print(f"{name}: {len(result[name]['logits'])} positions, vocab {len(result[name]['logits'][0])}",
              file=sys.stderr)
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
