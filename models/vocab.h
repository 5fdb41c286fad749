// EmbeddedVocab: a tokenizer vocabulary stored inside a checkpoint (GGUF tokenizer.ggml.* keys), as plain data.
// models/ only reads it out of the file; tokenizer/ turns it into a Tokenizer (tokenizer_from_vocab in tokenizer/load.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace llm {

struct EmbeddedVocab {
  std::string source;               // file it came from, for messages
  std::string model;                // tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (sentencepiece)
  std::string pre;                  // tokenizer.ggml.pre: pre-tokenizer name ("smollm", "llama-bpe", ...); may be empty
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens, id order
  std::vector<float> scores;        // tokenizer.ggml.scores (llama vocabularies), empty when absent
  std::vector<int32_t> token_types; // tokenizer.ggml.token_type: 1 normal, 2 unknown, 3 control, 4 user-defined,
                                    // 5 unused, 6 byte; empty when absent
  std::vector<std::string> merges;  // tokenizer.ggml.merges ("a b" per merge, rank order; gpt2 vocabularies)
  int bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  int eot_id = -1;                  // tokenizer.ggml.eot_token_id (end of turn), -1 when absent
  bool add_bos = false;             // tokenizer.ggml.add_bos_token (absent: true for llama, false for gpt2)
  bool add_space_prefix = true;     // tokenizer.ggml.add_space_prefix (llama vocabularies)
};

}  // namespace llm
