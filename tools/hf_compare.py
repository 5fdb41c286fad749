#!/usr/bin/env python3
"""Compare our engine's logits with Hugging Face transformers on the same Hugging Face directory or GGUF file.

    python3 tools/hf_compare.py --model DIR --ids 128000,791,... --ours logits.f32 [--device cuda]
    python3 tools/hf_compare.py --model FILE.gguf --ids-file ids.txt --ours logits.f32 [--rows-only]

A GGUF goes through transformers' own GGUF loader (the `gguf` package dequantizes every tensor to FP32), so the
reference shares no code with ours; --bf16-weights rounds those weights to BF16 as our loader stores them. Also prints the perplexity of ids[1:] under both sets of logits.

`--ours` is what `run-llama --model DIR --prompt-ids IDS --dump-logits FILE` wrote: float32 [positions, vocab],
teacher-forced (the logits after each prompt token). Transformers runs the same ids in FP32 math on the same weights.
Prints the relative L2 error per position, the top-2 margin, and the first position whose greedy token differs.
"""
import argparse
import os
import sys

import numpy as np
import torch
from transformers import LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", help="comma-separated token ids")
    ap.add_argument("--ids-file", help="file with the ids, comma- or space-separated")
    ap.add_argument("--ours", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tol", type=float, default=2e-2)
    ap.add_argument("--bf16-weights", action="store_true",
                    help="round transformers' weights to BF16 first (FP32 math kept): the weights our engine holds, "
                         "so what is left of the difference is the arithmetic")
    args = ap.parse_args()
    text = args.ids if args.ids else open(args.ids_file).read()
    ids = [int(t) for t in text.replace(",", " ").split()]
    if args.model.endswith(".gguf"):
        model = LlamaForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(args.model)),
                                                 gguf_file=os.path.basename(args.model), dtype=torch.float32,
                                                 attn_implementation="eager")
    else:
        model = LlamaForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="eager")
    if args.bf16_weights:
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    model.to(args.device).eval()
    with torch.no_grad():
        ref = model(torch.tensor([ids], device=args.device), use_cache=False).logits[0].float().cpu().numpy()
    ours = np.fromfile(args.ours, dtype=np.float32).reshape(-1, ref.shape[1])
    n = min(len(ours), len(ref))
    worst, first_diff = 0.0, None
    print("| pos | rel L2 err | ours argmax | HF argmax | HF top-2 margin |")
    print("| --- | --- | --- | --- | --- |")
    for p in range(n):
        err = float(np.linalg.norm(ours[p] - ref[p]) / np.linalg.norm(ref[p]))
        top = np.argsort(ref[p])[::-1][:2]
        margin = float(ref[p][top[0]] - ref[p][top[1]])
        a, b = int(np.argmax(ours[p])), int(top[0])
        if a != b and first_diff is None:
            first_diff = p
        worst = max(worst, err)
        print(f"| {p} | {err:.2e} | {a} | {b} | {margin:.3f} |")
    def ppl(logits):
        x = torch.log_softmax(torch.tensor(logits[: n - 1], dtype=torch.float64), dim=-1)
        nll = -x[torch.arange(n - 1), torch.tensor(ids[1:n])].mean().item()
        return float(np.exp(nll))
    if n > 1:
        print(f"\nperplexity of ids[1:{n}]: ours {ppl(ours):.4f}, transformers {ppl(ref):.4f}")
    print(f"\nworst relative L2 error {worst:.2e} over {n} positions (tolerance {args.tol}); "
          f"first greedy disagreement: {first_diff if first_diff is not None else 'none'}")
    sys.exit(0 if worst <= args.tol else 1)


if __name__ == "__main__":
    main()
