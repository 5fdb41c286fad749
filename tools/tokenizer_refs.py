#!/usr/bin/env python3
# Writes tests/data/tokenizer_refs.json: encodings and decodings from the Python sentencepiece library (an
# independent build of the library our C++ Tokenizer wraps), for tests/cpu/tokenizer_test.cpp.
#
#   pip install sentencepiece
#   python3 tools/tokenizer_refs.py [MODELS_DIR]     (MODELS_DIR defaults to tests/data/models)
import argparse
import json
import os
import sys

import sentencepiece as spm

MODELS = [
    ("tok512", "stories260K/tok512.model"),
    ("llama2", "llama2-tokenizer/tokenizer.model"),
]

# (name, text): the names let the C++ test pick out the cases that must fall back to byte tokens in tok512.
TEXTS = [
    ("plain", "Once upon a time, there was a little girl named Lily. She loved to play outside."),
    ("leading_space", " Hello world"),
    ("trailing_space", "Hello world "),
    ("multiple_spaces", "Hello   world,  two  spaces"),
    ("leading_spaces", "   three leading spaces"),
    ("newlines", "line one\nline two\n\nline four\n"),
    ("tab", "a\tb"),
    ("accents", "café naïve"),
    ("cjk", "日本語のテキスト"),
    ("emoji", "🦙🚀"),
    ("mixed", "Lily said: \"café 日本 🦙!\" and 42 € 3.5%"),
    ("empty", ""),
    ("only_spaces", "     "),
]


def piece_id(sp, piece):
    i = sp.piece_to_id(piece)
    if sp.id_to_piece(i) != piece:
        sys.exit(f"piece {piece!r} not in the vocabulary")
    return i


def byte_id(sp, b):
    return piece_id(sp, f"<0x{b:02X}>")


def decode_cases(sp):
    """Hand-built id sequences that encode() never produces but generation can: split and malformed byte runs,
    control and unknown ids, and leading "▁" pieces (the library's leading-space rule)."""
    bos, eos, unk = sp.bos_id(), sp.eos_id(), sp.unk_id()
    llama = [byte_id(sp, b) for b in "🦙".encode()]
    space = piece_id(sp, "\u2581")
    word = sp.encode("Once")[0]  # "▁Once" in llama2, "▁O" in tok512: a piece with a leading space
    letter = piece_id(sp, "a")  # a piece with no leading space
    a_byte = byte_id(sp, ord("A"))
    cases = {
        "bos_word": [bos, word, letter, eos],
        "word_first": [word, letter],
        "no_space_first": [letter, word],
        "space_then_word": [space, word],
        "bos_space_then_word": [bos, space, word],
        "two_spaces_then_word": [space, space, word],
        "byte_then_word": [a_byte, word],
        "unk_then_word": [unk, word],
        "emoji_bytes": [bos] + llama,
        "emoji_after_word": [word] + llama,
        "truncated_emoji": llama[:3],
        "emoji_split_by_control": llama[:2] + [eos] + llama[2:],
        "emoji_split_by_word": llama[:2] + [letter] + llama[2:],
        "lone_continuation": [byte_id(sp, 0x9F), letter],
        "invalid_bytes": [byte_id(sp, b) for b in (0xFF, 0xC0, 0x80, 0xED, 0xA0, 0x80, 0xF4, 0x90, 0x80, 0x80)],
        "replacement_char_bytes": [byte_id(sp, b) for b in "\ufffd".encode()],
    }
    return [{"name": n, "ids": ids, "text": sp.decode(ids)} for n, ids in cases.items()]


def model_refs(shared, name, rel):
    sp = spm.SentencePieceProcessor(model_file=os.path.join(shared, rel))
    cases = []
    for case, text in TEXTS:
        ids = sp.encode(text)
        ids_bos = sp.encode(text, add_bos=True)
        cases.append({
            "name": case,
            "text": text,
            "ids": ids,
            "ids_bos": ids_bos,
            "pieces": [sp.id_to_piece(i) for i in ids],
            "decoded": sp.decode(ids),
            "decoded_bos": sp.decode(ids_bos),
        })
    return {
        "name": name,
        "model": rel,
        "vocab_size": sp.vocab_size(),
        "bos_id": sp.bos_id(),
        "eos_id": sp.eos_id(),
        "unk_id": sp.unk_id(),
        "cases": cases,
        "decode_cases": decode_cases(sp),
    }


def dump(refs):
    """JSON with one case per line: small diffs, and ids stay readable."""
    lines = ["{", f'  "generator": {json.dumps(refs["generator"])},', '  "models": [']
    for m, model in enumerate(refs["models"]):
        head = {k: v for k, v in model.items() if k not in ("cases", "decode_cases")}
        lines.append("    {")
        for k, v in head.items():
            lines.append(f"      {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},")
        for key in ("cases", "decode_cases"):
            lines.append(f'      "{key}": [')
            rows = [json.dumps(c, ensure_ascii=False) for c in model[key]]
            lines.extend("        " + r + ("," if i + 1 < len(rows) else "") for i, r in enumerate(rows))
            lines.append("      ]" + ("," if key == "cases" else ""))
        lines.append("    }" + ("," if m + 1 < len(refs["models"]) else ""))
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description="Writes tests/data/tokenizer_refs.json from Python sentencepiece.")
    ap.add_argument("models", nargs="?", default=os.path.join(here, "..", "tests", "data", "models"))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "tokenizer_refs.json"))
    args = ap.parse_args()
    refs = {
        "generator": f"tools/tokenizer_refs.py, Python sentencepiece {spm.__version__}",
        "models": [model_refs(args.models, name, rel) for name, rel in MODELS],
    }
    text = dump(refs)
    json.loads(text)  # the hand-made layout must still be valid JSON
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
