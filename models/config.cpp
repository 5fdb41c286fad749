#include "models/config.h"

#include <cmath>

#include "core/error.h"

namespace llm {

void ModelConfig::validate(const std::string& where) const {
  auto positive = [&](const char* key, long v) {
    if (v <= 0) fail(where, ": ", key, " must be positive, found ", v);
  };
  positive("hidden_size", dim);
  positive("intermediate_size", hidden_dim);
  positive("num_hidden_layers", n_layers);
  positive("num_attention_heads", n_heads);
  positive("num_key_value_heads", n_kv_heads);
  positive("head_dim", head_dim);
  positive("vocab_size", vocab_size);
  positive("max_position_embeddings", max_seq_len);
  if (n_heads % n_kv_heads != 0)
    fail(where, ": num_attention_heads (", n_heads, ") is not a multiple of num_key_value_heads (", n_kv_heads, ")");
  if (head_dim % 2 != 0) fail(where, ": head_dim must be even for RoPE, found ", head_dim);
  if (!(norm_eps > 0.0f) || !std::isfinite(norm_eps)) fail(where, ": rms_norm_eps must be positive, found ", norm_eps);
  if (!(rope_theta > 0.0f) || !std::isfinite(rope_theta)) fail(where, ": rope_theta must be positive, found ", rope_theta);
  // Bounds that keep every size product inside int64 and every index inside int32 per row.
  if (dim > (1 << 20) || hidden_dim > (1 << 22) || n_layers > 4096 || n_heads > 4096 || head_dim > 4096 ||
      vocab_size > (1 << 24) || max_seq_len > (1 << 24))
    fail(where, ": implausible model size (hidden_size ", dim, ", intermediate_size ", hidden_dim, ", layers ",
         n_layers, ", heads ", n_heads, ", head_dim ", head_dim, ", vocab ", vocab_size, ", positions ", max_seq_len,
         ")");
  if (rope_scaling.type != "none" && rope_scaling.type != "llama3")
    fail(where, ": unsupported rope scaling type '", rope_scaling.type, "' (supported: llama3)");
  if (rope_scaling.type == "llama3") {
    const auto& s = rope_scaling;
    if (!(s.factor > 0) || !(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor) ||
        s.original_max_position_embeddings <= 0)
      fail(where, ": invalid llama3 rope_scaling (factor ", s.factor, ", low_freq_factor ", s.low_freq_factor,
           ", high_freq_factor ", s.high_freq_factor, ", original_max_position_embeddings ",
           s.original_max_position_embeddings, ")");
  }
  if (!rope_freq_factors.empty() && rope_freq_factors.size() != size_t(head_dim / 2))
    fail(where, ": ", rope_freq_factors.size(), " rope frequency factors, expected head_dim / 2 = ", head_dim / 2);
  for (float x : rope_freq_factors)
    if (!(x > 0.0f) || !std::isfinite(x)) fail(where, ": rope frequency factor ", x, " must be positive");
  for (int id : eos_ids)
    if (id < 0 || id >= vocab_size) fail(where, ": eos_token_id ", id, " is outside the vocabulary of ", vocab_size);
  if (bos_id >= vocab_size) fail(where, ": bos_token_id ", bos_id, " is outside the vocabulary of ", vocab_size);
}

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int half = c.head_dim / 2;
  std::vector<float> out(half);
  const double pi = 3.14159265358979323846;
  for (int i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(double(c.rope_theta), double(2 * i) / double(c.head_dim));
    if (c.rope_scaling.type == "llama3") {
      // Llama 3.1: long wavelengths slowed by `factor`, short ones kept, a smooth blend in between.
      const auto& s = c.rope_scaling;
      double old_ctx = s.original_max_position_embeddings;
      double low_wavelen = old_ctx / s.low_freq_factor;
      double high_wavelen = old_ctx / s.high_freq_factor;
      double wavelen = 2.0 * pi / f;
      if (wavelen > low_wavelen) {
        f = f / s.factor;
      } else if (wavelen >= high_wavelen) {
        double smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    }
    if (!c.rope_freq_factors.empty()) f /= double(c.rope_freq_factors[size_t(i)]);
    out[i] = float(f);
  }
  return out;
}

}  // namespace llm
