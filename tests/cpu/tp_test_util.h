// Helpers of the tensor-parallel tests (tp_plan_test.cpp, tp_backend_test.cpp): tiny synthetic shapes the named
// synthetic models do not have (GQA with KV heads divisible by 4, a vocabulary no N divides).
#pragma once
#include <string>

#include "models/model.h"

namespace llm_test {

// 2 layers, dim 64, `heads` query heads over `kv` KV heads of head_dim `hd`, FFN `ffn`, vocabulary `vocab`.
inline llm::Model tiny_tp_model(int heads, int kv, int hd, int ffn, int vocab, bool tied, uint64_t seed = 7) {
  llm::ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.n_layers = 2;
  c.dim = 64;
  c.n_heads = heads;
  c.n_kv_heads = kv;
  c.head_dim = hd;
  c.hidden_dim = ffn;
  c.vocab_size = vocab;
  c.max_seq_len = 64;
  c.tied_embeddings = tied;
  return llm::synthetic_model("tiny-tp(" + std::to_string(heads) + "/" + std::to_string(kv) + " heads, ffn " +
                                  std::to_string(ffn) + ", vocab " + std::to_string(vocab) + ")",
                              c, seed);
}

// The shape most tests use: 8 query heads over 4 KV heads (GQA groups of 2) of 8, FFN 128, vocabulary 1001
// (1001 = 7 * 11 * 13: split unevenly over 2 and 4 ranks), untied head.
inline llm::Model tiny_gqa_odd_vocab(bool tied = false) { return tiny_tp_model(8, 4, 8, 128, 1001, tied); }

}  // namespace llm_test
