// Counter-based generator for deterministic synthetic weights: value = f(seed, tensor id, element index).
// No state, so the CPU, the GPU (generating in place) and tools/synthetic.py produce identical bits.
// Definition (mirror it exactly in Python):
//   mix(z)  = splitmix64 finaliser of z + 0x9E3779B97F4A7C15
//   u       = mix(mix(seed ^ (tensor_id << 32)) ^ index)
//   unit    = (u >> 40) * 2^-24                       in [0, 1)
//   value   = offset + scale * (2 * unit - 1)        then rounded to BF16 by the caller
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace llm {

LLM_HD uint64_t rng_mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

LLM_HD float rng_unit(uint64_t seed, uint64_t tensor_id, uint64_t index) {
  uint64_t u = rng_mix(rng_mix(seed ^ (tensor_id << 32)) ^ index);
  return float(u >> 40) * (1.0f / 16777216.0f);
}

// Multiply and add rounded separately (no fused multiply-add), so the GPU gives the host's and numpy's bits.
LLM_HD float rng_value(uint64_t seed, uint64_t tensor_id, uint64_t index, float offset, float scale) {
  float t = 2.0f * rng_unit(seed, tensor_id, index) - 1.0f;  // exact: 2u and 2u - 1 need no rounding
#if defined(__CUDA_ARCH__)
  return __fadd_rn(offset, __fmul_rn(scale, t));
#else
  volatile float prod = scale * t;  // volatile: keeps a host compiler with FMA enabled from contracting
  return offset + prod;
#endif
}

}  // namespace llm
