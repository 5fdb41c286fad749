// The parts a decode step is timed in, and the CUDA engine's profile of decode steps in those parts: the one list
// shared by the engine's profiler hook (engine/cuda/step_profiler.h) and the A/B report (measure/ab_data.h,
// ab_stats.h, ab_render.h). It lives in engine/ because CudaBackend::profile() returns it; measure/ includes it from
// here (measure/profile_parts.h), never the reverse. The order is the file format: JSON part_names and CSV ms_*
// columns follow it, so new parts go at the end. Standard library only; kernels/ does not include it.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

namespace llm {

// A class used as a scope for the enum, so DecodeProfile (which derives from it) and the report spell a part the same
// way: ProfileParts::kQKV, DecodeProfile::kQKV.
struct ProfileParts {
  // kOther: RoPE + KV store, SwiGLU, sampling, launch gaps. kQKV / kGateUp: the fused q|k|v and gate|up GEMVs. kQ,
  // kK, kV, kGate and kUp are the parts of the unfused decode the engine no longer has: always zero, kept so the file
  // format's indices hold. kAttention: the decode attention (split pass and merge), which reads the KV cache.
  // kWait: the persistent path's blocks waiting for a stage's producers; on the graph path the holes between the
  // kernels of a replay's timeline (launch latency, dependency bubbles). kNorm: RMSNorm (on the persistent path, staging each GEMV's
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

// Device time of decode steps split into the parts above, summed over the steps run while profiling was on. Graph
// path: the kernel timeline (CUPTI) of a replay of the step's graph, each kernel's time from the end of the one before
// (PDL overlap stays with the earlier kernel), the holes between kernels in kWait, so the parts sum to the replay's
// first-start-to-last-end span (graph_timeline). Persistent path: the kernel's event time split by its blocks' clock
// cycles per part. On both paths the sample that follows a step (its kernel) joins kOther and total_ms.
struct DecodeProfile : ProfileParts {  // DecodeProfile::kQKV ... kParts, part_name(): ProfileParts'
  double ms[kParts] = {};   // per part, all layers, all steps
  double total_ms = 0.0;    // every step's device time (above), its sample's included
  int64_t steps = 0;
  bool graph_timeline = false;  // some graph steps were timed by the kernel timeline

  double gemv_ms() const {  // sum of the projection parts (everything but kOther, kAttention, kWait, kNorm)
    double s = 0.0;
    for (int p = 0; p < kParts; ++p)
      if (is_gemv(p)) s += ms[p];
    return s;
  }
};

}  // namespace llm
