// The KV cache's element types (--kv-dtype, BackendOptions::kv_dtype): their names, and the FP8 form's block of
// positions. Standard library only: the apps parse the option through apps/cli.h, the engine stores the cache
// (engine/kv_cache.h on the CPU, kernels/attention/kv_fp8.h on the CUDA engine).
#pragma once
#include <cstdint>
#include <string>

namespace llm {

enum class KvDtype : uint8_t {
  Default,  // what each engine stores without --kv-dtype: F32 on the CPU reference, BF16 on the CUDA engine
  F32,      // the CPU reference's own precision (CPU only)
  BF16,     // as the CUDA engine stores it (round to nearest even)
  FP8,      // E4M3 codes (core/fp8.h) with one FP32 scale per (layer, K or V, KV head, block of kKvFp8Block positions)
};

// Positions per FP8 scale. 32: it divides every KV split of the CUDA decode attention (64 * 2^j rows,
// kernels/ops/ops.h attention_decode_chunk) and its 16-key tiles lie inside one block; the scales cost 4 bytes per 32 x head_dim
// codes (0.2% at head_dim 64, 0.1% at 128); and a decode step re-encodes at most the 31 earlier rows of the block it
// writes (engine/kv_cache.h). E4M3's error relative to each element does not depend on the block (only the
// subnormal floor, 2^-10 of the scale, does), so a smaller block buys little.
constexpr int kKvFp8Block = 32;

inline const char* kv_dtype_name(KvDtype t) {
  switch (t) {
    case KvDtype::Default: return "default";
    case KvDtype::F32: return "f32";
    case KvDtype::BF16: return "bf16";
    case KvDtype::FP8: return "fp8";
  }
  return "?";
}

// The names --kv-dtype takes, for messages and --help.
constexpr const char* kKvDtypeNames = "f32, bf16, fp8";

// "f32", "bf16" or "fp8" -> true and *out; anything else (case matters) -> false.
inline bool kv_dtype_from_name(const std::string& name, KvDtype* out) {
  for (KvDtype t : {KvDtype::F32, KvDtype::BF16, KvDtype::FP8})
    if (name == kv_dtype_name(t)) {
      *out = t;
      return true;
    }
  return false;
}

}  // namespace llm
