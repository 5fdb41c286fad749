// Byte-level BPE tokenizer (GPT-2 style): Hugging Face tokenizer.json files and GGUF "gpt2" vocabularies.
// encode() pre-tokenizes with the model's split regexes (PCRE2), maps bytes through the GPT-2 bytes-to-unicode table
// and applies merges by rank, exactly as Hugging Face `tokenizers` does; added/special tokens are never parsed out of
// the text (chat templates get them with token_id()). decode() skips special tokens and renders the rest as
// from_utf8_lossy does (each maximal ill-formed subsequence -> one U+FFFD).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "models/vocab.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"  // utf8_step (was declared here)

namespace llm {

// Hugging Face tokenizer.json with a BPE model and a byte-level pre-tokenizer.
std::unique_ptr<Tokenizer> load_bpe_json(const std::string& path);
// A GGUF tokenizer.ggml.model == "gpt2" vocabulary (see models/vocab.h: tokens, merges, token_types, pre, ids).
std::unique_ptr<Tokenizer> make_bpe_tokenizer(const EmbeddedVocab& vocab);
// The other way: a tokenizer.json as the GGUF "gpt2" vocabulary llama.cpp's converter writes for it (tokens in id
// order, ids nothing uses as unused "[PADn]"; special added tokens control (3), other added tokens user-defined (4);
// merges "a b"; bos/eos/unk; add_bos) with the pre-tokenizer's llama.cpp name: "smollm" (Digits + ByteLevel),
// "llama-bpe" (the Llama 3 Split + ignore_merges), "gpt-2" (ByteLevel alone). Another pre-tokenizer is refused by
// name: written under a wrong name, llama.cpp would split text differently.
EmbeddedVocab bpe_json_vocab(const std::string& path);


}  // namespace llm
