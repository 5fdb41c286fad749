#!/usr/bin/env python3
r"""Writes tests/data/long_text_gpl3_hf_ref.json: Hugging Face transformers' perplexity of the default model
(SmolLM2-135M-Instruct, the Q4_1 GGUF of scripts/fetch-model.sh) over a long real text, in one window, for
the long-context perplexity check of issue 14 (ours on the CPU: 15.621 against 15.6209).

    python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install torch transformers accelerate gguf numpy sentencepiece
    /tmp/hfvenv/bin/python tools/hf_long_ppl.py                      # writes the committed reference
    /tmp/hfvenv/bin/python tools/hf_long_ppl.py --check              # recomputes it and compares (exit 1 if off)
    /tmp/hfvenv/bin/python tools/hf_long_ppl.py --text FILE --out OUT.json [--model FILE.gguf]

CPU is enough (a CUDA build of torch runs on the CPU too): about 5 GB of memory and one to a few minutes on two
cores for the 7,639 tokens of the GPL-3 text (twice that with --also-fallback-ids).

What is computed is exactly what `run-llama --perplexity FILE` computes (apps/run-llama.cpp, engine/perplexity.cpp):
* the text is the file's bytes as they are, UTF-8, its final newline included (unlike -f, nothing is dropped);
* the ids are the GGUF vocabulary's tokenization of the whole text, `add_special_tokens=False`, with BOS first only
  where the GGUF sets `tokenizer.ggml.add_bos_token` (SmolLM2's file says false: no BOS, the text's first token is
  the context and is not scored). The tokenizer is the one transformers builds from the same GGUF, with one
  correction: transformers (5.24) knows no pre-tokenizer for `tokenizer.ggml.pre = smollm` and falls back to plain
  ByteLevel, which drops SmolLM2's digit split. Here the pre-tokenizer is set to SmolLM2's own (its tokenizer.json:
  Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)]; llama.cpp's `smollm`: `\p{N}`, then the
  GPT-2 regex), as tools/bpe_refs.py does. On the GPL-3 text the two differ at 19 places, all a run of whitespace
  before a digit ("\n\n  0." is `ĊĊĠĠ` `0` for SmolLM2, `ĊĊĠ` `Ġ` `0` for the fallback): 7,639 ids against 7,658.
  The JSON also records the fallback's ids count and, with --also-fallback-ids, its perplexity, for the record;
* one window: every token sees all the tokens before it (the text must fit the model's context, 8,192 for SmolLM2);
* the score is exp(mean over t = 1 .. n-1 of -log p(ids[t] | ids[0..t))), log-softmax in float64 over the float32
  logits.
The model is transformers' own GGUF loader (the `gguf` package dequantizes every tensor to float32), float32 weights
and math, eager attention: no code shared with ours.

The JSON holds the model file's name and sha256, the text's path and sha256, the ids themselves (so the C++ test
checks our tokenizer gives exactly these) and their sha256 (of the ids written as decimal numbers joined by ",",
no spaces, no final newline: the format of run-llama's --dump-logits FILE.ids without its newline), the token and
scored counts, the mean NLL, the perplexity, and the versions of transformers, torch and gguf, and the date.
"""
import argparse
import datetime
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
DEFAULT_MODEL = os.path.join(ROOT, "models-cache", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_TEXT = os.path.join(ROOT, "tests", "data", "long_text_gpl3.txt")
DEFAULT_OUT = os.path.join(ROOT, "tests", "data", "long_text_gpl3_hf_ref.json")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def ids_sha256(ids):
    return hashlib.sha256(",".join(str(i) for i in ids).encode()).hexdigest()


def gguf_add_bos(model_path):
    """tokenizer.ggml.add_bos_token of the file; absent = false for gpt2 vocabularies, true for llama (as our loader,
    models/gguf.cpp)."""
    flag = gguf_field(model_path, "tokenizer.ggml.add_bos_token")
    return bool(flag) if flag is not None else gguf_field(model_path, "tokenizer.ggml.model") == "llama"


def gguf_field(model_path, key):
    import gguf
    f = gguf.GGUFReader(model_path).fields.get(key)
    return None if f is None else f.contents()


def tok_pre_state(tok):
    return json.loads(tok.backend_tokenizer.pre_tokenizer.__getstate__())


def mean_nll_of(model, ids):
    """Mean of -log p(ids[t] | ids[0..t)) for t = 1 .. n-1, one forward pass over all the ids."""
    import torch
    with torch.no_grad():
        logits = model(torch.tensor([ids]), use_cache=False).logits[0]  # [n, vocab], float32
        target = torch.tensor(ids[1:])
        nll = torch.empty(len(ids) - 1, dtype=torch.float64)
        for a in range(0, len(ids) - 1, 512):  # float64 log-softmax, a slice of rows at a time
            b = min(a + 512, len(ids) - 1)
            lp = torch.log_softmax(logits[a:b].double(), dim=-1)
            nll[a:b] = -lp[torch.arange(b - a), target[a:b]]
    return float(nll.mean())


def compute(model_path, text_path, attn, also_fallback=False):
    import numpy as np
    import torch
    import transformers
    import gguf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    d, name = os.path.dirname(os.path.abspath(model_path)), os.path.basename(model_path)
    with open(text_path, "rb") as f:
        text = f.read().decode("utf-8")
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    add_bos = gguf_add_bos(model_path)
    def encode(t):
        ids = t(text, add_special_tokens=False)["input_ids"]
        return [t.bos_token_id] + ids if add_bos else ids
    fallback_ids = encode(tok)  # transformers' own GGUF tokenizer, as it comes
    pre = gguf_field(model_path, "tokenizer.ggml.pre")
    if pre == "smollm":  # SmolLM2's tokenizer.json pre-tokenizer (see the docstring)
        from tokenizers import pre_tokenizers
        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True),
             pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    ids = encode(tok)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation=attn).eval()
    ctx = model.config.max_position_embeddings
    if len(ids) > ctx:
        sys.exit(f"{text_path}: {len(ids)} tokens do not fit the model's context of {ctx} in one window")
    if len(ids) < 2:
        sys.exit(f"{text_path}: {len(ids)} token(s); scoring needs at least 2")
    mean_nll = mean_nll_of(model, ids)
    fallback = {"pre_tokenizer": tok_pre_state(AutoTokenizer.from_pretrained(d, gguf_file=name)),
                "tokens": len(fallback_ids), "equal": fallback_ids == ids}
    if also_fallback and fallback_ids != ids:
        fallback["perplexity"] = float(np.exp(mean_nll_of(model, fallback_ids)))
    return {
        "model_file": name,
        "model_sha256": sha256_file(model_path),
        "text_file": os.path.relpath(os.path.abspath(text_path), ROOT),
        "text_sha256": sha256_file(text_path),
        "text_bytes": os.path.getsize(text_path),
        "bos_added": add_bos,
        "tokens": len(ids),
        "scored": len(ids) - 1,
        "ids_sha256": ids_sha256(ids),
        "mean_nll": mean_nll,
        "perplexity": float(np.exp(mean_nll)),
        "context": ctx,
        "how": "transformers' GGUF loader (gguf dequantizes to float32), float32 weights and math, "
               f"{attn} attention, one window, no KV cache; log-softmax in float64; ids[1:] scored",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "gguf": getattr(gguf, "__version__", None) or _dist_version("gguf"),
        "date": datetime.date.today().isoformat(),
        "generator": "tools/hf_long_ppl.py",
        "tokenizer": {"what": "transformers' GGUF tokenizer, SmolLM2's pre-tokenizer set (see the generator)",
                      "pre_tokenizer": tok_pre_state(tok)},
        "transformers_gguf_tokenizer_as_is": fallback,
        "ids": ids,
    }


def _dist_version(name):
    from importlib.metadata import version
    return version(name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="GGUF file (default: the fetched default model)")
    ap.add_argument("--text", default=DEFAULT_TEXT, help="text file (default: tests/data/long_text_gpl3.txt)")
    ap.add_argument("--out", default=DEFAULT_OUT, help="JSON to write (default: the committed reference)")
    ap.add_argument("--attn", default="eager", choices=["eager", "sdpa"], help="transformers attention (eager)")
    ap.add_argument("--also-fallback-ids", action="store_true",
                    help="also score the ids of transformers' GGUF tokenizer as it comes, where they differ "
                         "(a second forward pass; recorded in the JSON)")
    ap.add_argument("--check", action="store_true",
                    help="do not write: recompute and compare with --out (same ids, perplexity within 1e-4 relative)")
    args = ap.parse_args()
    if not os.path.isfile(args.model):
        sys.exit(f"{args.model} missing: run scripts/fetch-model.sh")
    r = compute(args.model, args.text, args.attn, args.also_fallback_ids)
    print(f"{r['text_file']}: {r['tokens']} tokens ({r['scored']} scored), mean NLL {r['mean_nll']:.6f} nats, "
          f"PPL {r['perplexity']:.4f} (transformers {r['transformers']}, torch {r['torch']})")
    if args.check:
        with open(args.out) as f:
            ref = json.load(f)
        ok = (ref["ids"] == r["ids"] and ref["model_sha256"] == r["model_sha256"]
              and abs(r["perplexity"] / ref["perplexity"] - 1) <= 1e-4)
        print(f"committed {args.out}: PPL {ref['perplexity']:.4f}, ids {'equal' if ref['ids'] == r['ids'] else 'DIFFER'}"
              f" -> {'OK' if ok else 'MISMATCH'}")
        sys.exit(0 if ok else 1)
    with open(args.out, "w") as f:
        # One line per key; the ids on one line.
        f.write("{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in r.items()) + "\n}\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
