// Which counter-based fill each synthetic weight gets (core/counter_rng.h). Defined once, here: the synthetic
// loader, the Hugging Face writer and tools/synthetic.py (mirrors these numbers by hand) all follow it.
// Element index = file_row * cols + col in the Hugging Face FILE order (q/k rows in rotate-half order).
#pragma once
#include <cmath>
#include <cstdint>

namespace llm {
namespace synth {

constexpr uint64_t kEmbeddingId = 1;   // model.embed_tokens.weight
constexpr uint64_t kFinalNormId = 2;   // model.norm.weight
constexpr uint64_t kHeadId = 3;        // lm_head.weight (untied models only)

// Per-layer roles: tensor id = (layer + 1) * 16 + role.
enum LayerRole : int {
  kAttnNorm = 0,
  kWq = 1,
  kWk = 2,
  kWv = 3,
  kWo = 4,
  kFfnNorm = 5,
  kWGate = 6,
  kWUp = 7,
  kWDown = 8,
};
constexpr uint64_t layer_tensor_id(int layer, int role) { return uint64_t(layer + 1) * 16 + uint64_t(role); }

// RMSNorm weights near 1 so activations keep their scale through the layers.
constexpr float kNormOffset = 1.0f;
constexpr float kNormScale = 0.2f;
constexpr float kEmbeddingOffset = 0.0f;
constexpr float kEmbeddingScale = 1.0f;
// Uniform on [-s, s] has variance s^2/3: s = sqrt(3/K) gives each output unit variance for unit-variance inputs.
// Computed in float (3.0f / K, then sqrtf) so the Python mirror can reproduce the exact bits.
inline float linear_scale(int64_t in_features) { return std::sqrt(3.0f / float(in_features)); }

}  // namespace synth
}  // namespace llm
