#!/usr/bin/env python3
"""Reference data for tests/cpu/bpe_test.cpp, from Hugging Face `tokenizers` (the independent judge).

Writes
  tests/data/bpe_smollm_style.json  a small BPE trained on tests/data/bpe_train.txt with SmolLM2's pre-tokenizer
                                    (Sequence[Digits(individual_digits), ByteLevel(use_regex)]), specials first;
  tests/data/bpe_llama3_style.json  the same text with Llama 3's layout: Split(Llama 3 regex, Isolated) +
                                    ByteLevel(use_regex=false), ignore_merges, specials after the vocabulary,
                                    a TemplateProcessing post-processor putting <|begin_of_text|> first, plus two
                                    vocabulary words that no merge reaches (only ignore_merges finds them) and a
                                    non-special added token;
  tests/fuzz/corpus/fuzz_bpe/seed-* seeds for tests/fuzz/fuzz_bpe.cpp (mode byte, then tokenizer.json NUL text, or
                                    a text for the target's fixed tokenizers);
  tests/data/bpe_refs.json          ids and decoded text of a fixed string set for both, and for the real SmolLM2
                                    vocabulary read from the GGUF (ids only: the vocabulary itself is not copied),
                                    plus decoded text of random id sequences.
Usage: python3 tools/bpe_refs.py [path/to/SmolLM2-135M-Instruct.Q4_1.gguf]   (pip install tokenizers gguf)
Encoding uses add_special_tokens=False and encode_special_tokens=True: special tokens are never parsed out of text,
as in our tokenizer. Decoding uses skip_special_tokens=True.
"""
import json
import os
import random
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")
GGUF = os.path.join(ROOT, "models-cache", "SmolLM2-135M-Instruct.Q4_1.gguf")

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")

PARAGRAPH = (
    "In 1887, the survey team measured 3,412 m of coastline near Ålesund - twice what the 1852 chart showed! "
    "Their notes (now scanned at 600 dpi) mix Norwegian, English and the odd German word: \"Küste\", \"fjord\", "
    "'skerry'. We've checked them against today's GPS tracks; they're accurate to within 12.5 m, which isn't bad "
    "for men who'd rowed out at 5:30 each morning.\n\n"
    "    for (size_t i = 0; i < n; ++i) {\n\t\tsum += x[i] * w[i];  // dot product\n    }\n\n"
    "東京の天気は晴れです。你好！ Привет мир. "
    "Emoji check: 🚀🔥👍🏽 and 👩‍💻 at work, flags 🇳🇴🇩🇪.\n"
    "Prices went from $4.99 to €7.50 (a 50.3% rise) between 2019-03-01 and 2023-11-30... or so THEY'RE saying. "
    "Tabs\tand  double  spaces,   triple   too;\r\nWindows line ends, and a trailing space \n"
    "Numbers like 0001, 1e-9, 6.022e23, 1/3, -42 and 1,000,000 stress the digit rules; so do ٣٤٥ and ①②③. "
    "The end <|im_end|> is just text here, as is <|begin_of_text|>.")

STRINGS = [
    "",
    "Hello world! This is a simple sentence.",
    "the quick brown fox jumps over the lazy dog",
    "def foo(x):\n\tif x > 0:\n\t\treturn x * 2\n    else:\n        return None\n",
    "int main() {\n  printf(\"%d\\n\", 42);\n  return 0;\n}",
    "1234567",
    "3.14159",
    "2024-01-15 and 12/31/1999 at 23:59:59",
    "Call 555-0123 or +1 (800) 123-4567.",
    "café naïve Ångström résumé façade",
    "你好，世界！日本語のテキスト 한국어",
    "👍🏽 👨‍👩‍👧‍👦 🇺🇸 ❤️ 🎉",
    "a    b     c",
    "   leading spaces",
    "trailing spaces   ",
    "\n\n\n",
    "line1\n\nline2\r\n\tindented\n",
    "  \n  \n",
    " ",
    "It's they're we've I'm you'll he'd IT'S DON'T We'VE",
    "Wait... what?!?! (yes) [no] {maybe} --- *** ::",
    "<|im_end|>",
    "<|im_start|>user\nhi<|im_end|>\n",
    "<|endoftext|><|begin_of_text|><|eot_id|>",
    "٣٤٥ and ①②③ and ½",
    "a\u00a0b\u3000c\u2009d\u200be",
    "supercalifragilistic antidisestablishment",
    PARAGRAPH,
]

SMOLLM_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
UNREACHABLE_WORDS = ["Ġsupercalifragilistic", "Ġantidisestablishment"]  # in the vocabulary, made by no merge


def train(pre_tokenizer, specials_first):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=800, min_frequency=2, show_progress=False,
                                  special_tokens=specials_first,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([os.path.join(DATA, "bpe_train.txt")], trainer)
    return tok


def make_smollm_style():
    pre = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok = train(pre, SMOLLM_SPECIALS)
    return tok


def make_llama3_style():
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok = train(pre, [])
    doc = json.loads(tok.to_str())
    doc["model"]["ignore_merges"] = True
    vocab = doc["model"]["vocab"]
    for w in UNREACHABLE_WORDS:
        vocab[w] = len(vocab)
    tok = Tokenizer.from_str(json.dumps(doc))
    tok.add_special_tokens(LLAMA3_SPECIALS)  # ids after the model's vocabulary, as in Llama 3
    tok.add_tokens([AddedToken("<|reserved_x|>", special=False, normalized=False)])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return tok


def smollm2_from_gguf(path):
    from gguf import GGUFReader
    r = GGUFReader(path)
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    merges = [tuple(m.split(" ", 1)) for m in r.fields["tokenizer.ggml.merges"].contents()]
    types = r.fields["tokenizer.ggml.token_type"].contents()
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    # SmolLM2's tokenizer.json: no normalizer, Digits(individual) then ByteLevel with the GPT-2 regex.
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    specials = [t for t, ty in zip(tokens, types) if ty == 3]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    for t in specials:
        assert tok.token_to_id(t) == tokens.index(t)
    return tok, {t: tokens.index(t) for t in specials[:3]}


def random_sequences(tok, specials, rng):
    """Id sequences decode() must handle: random ids (partial UTF-8 pieces among them), slices of multi-byte text
    cut anywhere, and specials in the middle of a split character."""
    n = tok.get_vocab_size()
    seqs = [[rng.randrange(n) for _ in range(rng.randrange(1, 16))] for _ in range(16)]
    multibyte = ["你好，世界！日本語のテキスト 한국어", "👍🏽 👨‍👩‍👧‍👦 🇺🇸 ❤️ 🎉", "café naïve Ångström"]
    for s in multibyte:
        ids = tok.encode(s, add_special_tokens=False).ids
        for _ in range(4):
            a = rng.randrange(len(ids))
            b = rng.randrange(a, len(ids)) + 1
            cut = ids[a:b]
            cut.insert(rng.randrange(len(cut) + 1), rng.choice(list(specials.values())))
            seqs.append(cut)
    return [{"ids": s, "text": tok.decode(s, skip_special_tokens=True)} for s in seqs]


def refs_for(tok, specials, rng, bos_text=None):
    tok.encode_special_tokens = True
    cases = []
    for s in STRINGS:
        ids = tok.encode(s, add_special_tokens=False).ids
        assert not set(ids) & set(specials.values()), s  # text never turns into a special token
        cases.append({"text": s, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=True)})
    out = {"vocab_size": tok.get_vocab_size(), "specials": specials, "cases": cases,
           "random": random_sequences(tok, specials, rng)}
    if bos_text is not None:
        out["with_bos"] = {"text": bos_text, "ids": tok.encode(bos_text, add_special_tokens=True).ids}
    return out


def write_seeds():
    corpus = os.path.join(ROOT, "tests", "fuzz", "corpus", "fuzz_bpe")
    os.makedirs(corpus, exist_ok=True)
    text = "It's 2024: café, 你好, 👍🏽!\n\n  x = 12345;\t<|im_end|> xyzzy".encode()
    def put(name, data):
        with open(os.path.join(corpus, "seed-" + name), "wb") as f:
            f.write(data)
    for style in ["smollm_style", "llama3_style"]:
        with open(os.path.join(DATA, f"bpe_{style}.json"), "rb") as f:
            put(style, b"\0" + f.read() + b"\0" + text)
    tiny = {"normalizer": None, "decoder": {"type": "ByteLevel"},
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
            "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3}, "merges": [["a", "b"]]},
            "added_tokens": [{"id": 4, "content": "<s>", "special": True}],
            "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                               {"Sequence": {"id": "A", "type_id": 0}}],
                               "special_tokens": {"<s>": {"id": "<s>", "ids": [4], "tokens": ["<s>"]}}}}
    put("tiny", b"\0" + json.dumps(tiny).encode() + b"\0ab ba abab \xff\xe2\x82")
    put("text-llama3", b"\x01" + PARAGRAPH.encode())
    put("text-smollm", b"\x02" + PARAGRAPH.encode())
    put("text-invalid", b"\x01a\xffb\xe2\x82x\xed\xa0\x80 \xf0\x9f\x98 \xc0\xaf 12345 xyzzy")
    put("text-spaces", b"\x02" + "   \n\n\n\t\t  x  \r\n \u00a0\u3000 \u0663\u0664\u0665".encode())


def main():
    gguf = sys.argv[1] if len(sys.argv) > 1 else GGUF
    rng = random.Random(20240615)
    refs = {"strings": STRINGS, "tokenizers": {}}

    smol = make_smollm_style()
    smol.save(os.path.join(DATA, "bpe_smollm_style.json"))
    refs["tokenizers"]["smollm_style"] = dict(
        file="tests/data/bpe_smollm_style.json",
        **refs_for(smol, {t: smol.token_to_id(t) for t in SMOLLM_SPECIALS}, rng))

    llama = make_llama3_style()
    llama.save(os.path.join(DATA, "bpe_llama3_style.json"))
    specials = {t: llama.token_to_id(t) for t in LLAMA3_SPECIALS}
    r = refs_for(llama, specials, rng, bos_text="Hello world")
    r["non_special_added"] = {"<|reserved_x|>": llama.token_to_id("<|reserved_x|>")}
    r["unreachable_words"] = {w: llama.token_to_id(w) for w in UNREACHABLE_WORDS}
    refs["tokenizers"]["llama3_style"] = dict(file="tests/data/bpe_llama3_style.json", **r)

    real, specials = smollm2_from_gguf(gguf)
    refs["tokenizers"]["smollm2_gguf"] = dict(file="models-cache/SmolLM2-135M-Instruct.Q4_1.gguf",
                                             **refs_for(real, specials, rng))

    with open(os.path.join(DATA, "bpe_refs.json"), "w", encoding="utf-8") as f:
        json.dump(refs, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    write_seeds()
    for name, t in refs["tokenizers"].items():
        print(name, t["vocab_size"], sum(len(c["ids"]) for c in t["cases"]), "ids")


if __name__ == "__main__":
    main()
