// Hand-made llama2.c checkpoints for the hostile-number tests (tests/cpu/hostile_numbers_test.cpp and
// tests/gpu/hostile_gpu_test.cu): tiny shapes, every weight chosen so the logits are known in advance.
//
// With every projection zero the residual stream stays the token's embedding row, so the logits are
// head · rmsnorm(embedding[token]) * final_norm: the embedding rows are all ones (rmsnorm(ones) = ones), so logit i is
// the sum of head row i. Real rows (i < real_vocab) get small distinct sums, 0.001 * (i % 7) * dim, the highest at
// i = 6; padding rows (i >= real_vocab) sum to `padding_logit`, far above every real one, so a sampler that looks
// past the tokenizer's vocabulary picks a padding id.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace llm_test {

struct Llama2cSpec {
  int dim = 64, hidden = 96, layers = 2, heads = 4, kv_heads = 2, vocab = 600, seq_len = 64;
  bool untied = true;             // a separate classifier (negative vocab_size in the header)
  int real_vocab = 512;           // rows below this are "real"; the rest padding (see above)
  float padding_logit = 64.0f;    // sum of each padding row of the classifier
  bool nan_final_norm = false;    // rms_final_weight all NaN: every logit NaN
};

inline std::string llama2c_bytes(const Llama2cSpec& s) {
  std::string out;
  auto put_i = [&](int32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  auto put_f = [&](float v, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out.append(reinterpret_cast<const char*>(&v), 4);
  };
  const int64_t d = s.dim, hd = s.dim / s.heads, q = int64_t(s.heads) * hd, kv = int64_t(s.kv_heads) * hd,
                L = s.layers, h = s.hidden, V = s.vocab;
  for (int32_t v : {s.dim, s.hidden, s.layers, s.heads, s.kv_heads, s.untied ? -s.vocab : s.vocab, s.seq_len})
    put_i(v);
  put_f(1.0f, V * d);                   // token_embedding_table: all ones
  put_f(1.0f, L * d);                   // rms_att_weight
  put_f(0.0f, L * (q * d + 2 * kv * d + d * q));  // wq, wk, wv, wo
  put_f(1.0f, L * d);                   // rms_ffn_weight
  put_f(0.0f, L * 3 * h * d);           // w1, w2, w3
  put_f(s.nan_final_norm ? std::numeric_limits<float>::quiet_NaN() : 1.0f, d);  // rms_final_weight
  put_f(0.0f, int64_t(s.seq_len) * hd);  // freq_cis_real, freq_cis_imag (ignored by the loader)
  if (s.untied) {
    for (int64_t i = 0; i < V; ++i)
      put_f(i < s.real_vocab ? 0.001f * float(i % 7) : s.padding_logit / float(d), d);  // wcls
  }
  return out;
}

}  // namespace llm_test
