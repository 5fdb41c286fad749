// What an A/B run of GEMV mappings measures on one model: plain data, filled by measure/ab_run.cpp (or read back from
// its JSON by measure/ab_render.h), summarised by measure/ab_stats.h. Host code only: no CUDA, no engine types.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "measure/profile_parts.h"  // ProfileParts, PartMs: the parts a decode step is timed in

namespace llm {

// One kind of projection matrix of a decode step.
struct AbProjection {
  std::string name;      // a ProfileParts::part_name other than "other"
  int64_t N = 0, K = 0;  // y[N] = W[N, K] x[K], BF16 weights
  int count = 0;         // matrices of this kind per token: n_layers, or 1 for the head
  int64_t bytes_per_token() const { return N * K * 2 * int64_t(count); }
};

// How one mapping launches its kernel for one projection kind (kernels/gemv.h GemvLaunchShape).
struct AbLaunch {
  std::string projection;            // AbProjection::name
  int64_t N = 0, K = 0;
  int grid = 0, block = 0;           // grid 0: not known (cuBLAS picks its own kernels)
  int bytes_in_flight_per_thread = 0;
};

// Everything measured for one mapping. Vectors indexed by timed repeat (warm-up excluded).
struct AbMappingRun {
  std::string mapping;
  std::vector<double> ms_per_token;           // graph-replayed decode (the real speed), wall clock
  std::vector<double> profiled_ms_per_token;  // the un-graphed pass with CUDA events, wall clock
  std::vector<PartMs> part_ms;                // that pass's device ms/token per part (events)
  std::vector<AbLaunch> launches;             // one per projection kind
  int tokens_matching_first = -1;  // of the n_decode + 1 sampled tokens, leading ones equal to the first mapping's
};

struct AbReportData {
  std::string model;          // what was opened
  std::string device;         // GPU name
  int sm_count = 0;
  int max_warps_per_sm = 0;   // resident-warp limit of one SM (64 on Hopper)
  int prompt_tokens = 0;
  int depth = 0;              // context depth before the timed steps (llama-bench -d); 0 = the prompt alone
  double depth_prefill_ms = 0;  // depth > 0: the one prefill of the depth tokens (and its sample), wall clock
  int n_decode = 0;           // decode steps per pass (EOS ignored)
  int repeats = 0;            // timed repeats per mapping
  int warmup = 0;             // untimed rounds before them
  uint64_t seed = 0;
  int64_t gemv_bytes_per_token = 0;     // weights one decode step reads through the GEMVs (backend's figure)
  std::vector<AbProjection> projections;
  std::vector<double> roofline_gbps;    // streaming-read bandwidth, one figure per timed round (measure/roofline.h)
  std::string roofline_method;          // one line: how roofline_gbps was measured
  std::string profiling_method;         // one line: how part_ms was measured
  std::vector<AbMappingRun> runs;       // in run order; the first is the baseline of the attribution
};

}  // namespace llm
