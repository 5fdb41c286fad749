// The parts a decode step is timed in: the one list shared by the CUDA engine's profiler (engine/cuda_backend.h
// DecodeProfile) and the A/B report (measure/ab_data.h, ab_stats.h, ab_render.h). The order is the file format:
// JSON part_names and CSV ms_* columns follow it, so new parts go at the end. Standard library only, so the engine
// may include it; kernels/ does not.
#pragma once
#include <array>
#include <string_view>

namespace llm {

// A class used as a scope for the enum, so DecodeProfile (which derives from it) and the report spell a part the same
// way: ProfileParts::kQKV, DecodeProfile::kQKV.
struct ProfileParts {
  // kOther: norms, RoPE + KV store, sampling, launch gaps. kQKV / kGateUp: the fused q|k|v and gate|up GEMVs (with
  // fused projections q, k, v, gate and up stay zero; unfused, kQKV and kGateUp stay zero). They come after kOther so
  // the older indices hold. kAttention: the decode attention (split pass and merge), which reads the KV cache.
  // kWait: the persistent path's blocks waiting for a stage's producers (zero on the graph path, whose waits are the
  // gaps between kernels, inside the parts they fall in). kNorm: RMSNorm (on the persistent path, staging each GEMV's
  // input vector in shared memory too). Every part but kOther, kAttention, kWait and kNorm is GEMV time.
  enum Part { kQ, kK, kV, kO, kGate, kUp, kDown, kHead, kOther, kQKV, kGateUp, kAttention, kWait, kNorm, kParts };

  // "q", "k", "v", "o", "gate", "up", "down", "head", "other", "qkv", "gate_up", "attention", "wait", "norm"; "?"
  // outside the range.
  static const char* part_name(int part) {
    static constexpr const char* kNames[kParts] = {"q",     "k",   "v",       "o",         "gate", "up",  "down",
                                                   "head",  "other", "qkv", "gate_up", "attention", "wait", "norm"};
    return part >= 0 && part < kParts ? kNames[part] : "?";
  }
  // The part named `name`, or -1.
  static int part_of(std::string_view name) {
    for (int p = 0; p < kParts; ++p)
      if (name == part_name(p)) return p;
    return -1;
  }
  static constexpr bool is_gemv(int part) {
    return part >= 0 && part < kParts && part != kOther && part != kAttention && part != kWait && part != kNorm;
  }
};

// Milliseconds per part, indexed by ProfileParts::Part.
using PartMs = std::array<double, ProfileParts::kParts>;

}  // namespace llm
