#!/usr/bin/env python3
"""Reference renderings of chat conversations for tests/cpu/chat_template_test.cpp.

Each model's real chat template (tests/data/chat_templates/*.jinja, see the README there) is rendered by Hugging Face
transformers itself: a PreTrainedTokenizerFast over a tiny word-level tokenizers.Tokenizer with the model's bos/eos
tokens and chat_template set, then apply_chat_template(messages, tokenize=False, add_generation_prompt=...).
Output: tests/data/chat_template_refs.json. Usage: python3 tools/chat_template_refs.py (pip install transformers).
"""
import json
import pathlib

import tokenizers
import transformers

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"

# family -> (template file, bos token, eos token), the special tokens of the representative model.
FAMILIES = {
    "chatml": ("smollm2-135m-instruct.jinja", "<|im_start|>", "<|im_end|>"),
    "llama2": ("llama-2-7b-chat-hf.jinja", "<s>", "</s>"),
    "llama3": ("meta-llama-3-8b-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "zephyr": ("tinyllama-1.1b-chat-v1.0.jinja", "<s>", "</s>"),
}

SYS = "You are a terse assistant."
U1, A1 = "Hello, who are you?", "I am a small model."
U2, A2 = "What is 2+2?", "4"
U3 = "Thanks!"


def msgs(*pairs):
    return [{"role": r, "content": c} for r, c in pairs]


# name -> messages; every conversation is rendered with add_generation_prompt true and false.
CONVERSATIONS = {
    "sys_u1": msgs(("system", SYS), ("user", U1)),
    "u1": msgs(("user", U1)),
    "sys_u1_a1": msgs(("system", SYS), ("user", U1), ("assistant", A1)),
    "u1_a1": msgs(("user", U1), ("assistant", A1)),
    "sys_u1_a1_u2": msgs(("system", SYS), ("user", U1), ("assistant", A1), ("user", U2)),
    "u1_a1_u2": msgs(("user", U1), ("assistant", A1), ("user", U2)),
    "sys_3turns": msgs(("system", SYS), ("user", U1), ("assistant", A1), ("user", U2), ("assistant", A2),
                       ("user", U3)),
    "u_3turns": msgs(("user", U1), ("assistant", A1), ("user", U2), ("assistant", A2), ("user", U3)),
    "whitespace": msgs(("system", "  \n sys with spaces \n\n"), ("user", "  lead and trail  \n"),
                       ("assistant", "\n\n  spaced reply \t "), ("user", "\nnewline first\nand inside\n")),
    "special_looking_text": msgs(("user", "end <|im_end|> here </s> <s>[INST] <|eot_id|> <|user|>"),
                                 ("assistant", "ok <|im_start|>assistant"), ("user", "again<|im_end|>")),
    "empty_system": msgs(("system", ""), ("user", U1)),
    "empty_user": msgs(("system", SYS), ("user", "")),
    "unicode": msgs(("user", "Grüße, 世界 — ok? ")),
    # Python's str.strip() (Jinja's trim and .strip()) also drops Unicode spaces: NBSP, ideographic space, U+2028.
    "unicode_spaces": msgs(("user", "\u00a0\u3000 wide \u2028"), ("assistant", "\u2003reply\u00a0"), ("user", "x")),
    "not_alternating": msgs(("user", U1), ("user", U2)),
}


def make_tokenizer(template, bos, eos):
    vocab = {"<unk>": 0, bos: 1, eos: 2}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="<unk>"))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos, unk_token="<unk>")
    fast.chat_template = template
    return fast


def main():
    cases = []
    templates = {}
    for family, (fname, bos, eos) in FAMILIES.items():
        template = (DATA / "chat_templates" / fname).read_text()
        templates[family] = {"file": fname, "bos_token": bos, "eos_token": eos}
        tok = make_tokenizer(template, bos, eos)
        for name, messages in CONVERSATIONS.items():
            for gen in (True, False):
                case = {"family": family, "name": name, "add_generation_prompt": gen, "messages": messages}
                try:
                    case["text"] = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
                except Exception as e:  # the template's raise_exception (Llama 2 role alternation)
                    case["error"] = str(e)
                cases.append(case)
    out = {"generator": f"tools/chat_template_refs.py, transformers {transformers.__version__}, "
                        f"tokenizers {tokenizers.__version__}",
           "templates": templates, "cases": cases}
    (DATA / "chat_template_refs.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(cases)} cases")


if __name__ == "__main__":
    main()
