#include "models/config.h"

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace llm {

std::string format_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  const bool is_float = std::fabs(v) <= double(FLT_MAX) && double(float(v)) == v;
  char buf[40];
  if (std::fabs(v) < 1e7 && v == std::floor(v)) {  // whole numbers as written: 10000, not 1e+04
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (is_float ? std::strtof(buf, nullptr) == float(v) : std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

float checked_rope_theta(double v, const std::string& where, const std::string& key) {
  if (!(v >= kMinRopeTheta && v <= kMaxRopeTheta))
    fail(where, ": ", key, " must be between ", format_number(kMinRopeTheta), " and ", format_number(kMaxRopeTheta),
         ", found ", format_number(v));
  return float(v);
}

float checked_norm_eps(double v, const std::string& where, const std::string& key) {
  if (!(v >= kMinNormEps && v <= kMaxNormEps))
    fail(where, ": ", key, " must be between ", format_number(kMinNormEps), " and ", format_number(kMaxNormEps),
         ", found ", format_number(v));
  return float(v);
}

void ModelConfig::validate(const std::string& where) const { validate(where, ConfigKeys{}); }

void ModelConfig::validate(const std::string& where, const ConfigKeys& keys) const {
  auto in_range = [&](const char* key, long v, long max) {
    if (v <= 0 || v > max) fail(where, ": ", key, " must be between 1 and ", max, ", found ", v);
  };
  in_range(keys.dim, dim, kMaxDim);
  in_range(keys.hidden_dim, hidden_dim, kMaxHiddenDim);
  in_range(keys.n_layers, n_layers, kMaxLayers);
  in_range(keys.n_heads, n_heads, kMaxHeads);
  in_range(keys.n_kv_heads, n_kv_heads, kMaxHeads);
  in_range(keys.head_dim, head_dim, kMaxHeadDim);
  in_range(keys.vocab_size, vocab_size, kMaxVocabSize);
  in_range(keys.max_seq_len, max_seq_len, kMaxPositions);
  if (n_heads % n_kv_heads != 0)
    fail(where, ": ", keys.n_heads, " (", n_heads, ") is not a multiple of ", keys.n_kv_heads, " (", n_kv_heads, ")");
  if (head_dim % 2 != 0) fail(where, ": ", keys.head_dim, " must be even for RoPE, found ", head_dim);
  checked_norm_eps(norm_eps, where, keys.norm_eps);
  checked_rope_theta(rope_theta, where, keys.rope_theta);
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
    if (id < 0 || id >= vocab_size)
      fail(where, ": ", keys.eos_id, " ", id, " is outside the vocabulary of ", vocab_size);
  if (bos_id >= vocab_size) fail(where, ": ", keys.bos_id, " ", bos_id, " is outside the vocabulary of ", vocab_size);
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
