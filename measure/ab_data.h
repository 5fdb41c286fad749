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
  int64_t N = 0, K = 0;  // y[N] = W[N, K] x[K]
  int count = 0;         // matrices of this kind per token: n_layers, or 1 for the head
  // The GGML type id decode keeps these matrices quantized in (layer 0's first member stands for every layer), 0 when
  // decode reads them as BF16: which sector model predicts them (analysis/quant_sector_model.h or sector_model.h).
  uint32_t quant = 0;
  // What the matrices hold as BF16. Not what a mapping reads where decode keeps weights quantized: that is
  // AbLaunch::bytes_read.
  int64_t bf16_bytes_per_token() const { return N * K * 2 * int64_t(count); }
};

// How one mapping launches its kernel for one projection kind (kernels/gemv/gemv.h GemvLaunchShape), and what it reads.
struct AbLaunch {
  std::string projection;            // AbProjection::name
  int64_t N = 0, K = 0;
  int grid = 0, block = 0;           // grid 0: not known (cuBLAS picks its own kernels; the persistent path
                                     // launches no GEMV kernel)
  int bytes_in_flight_per_thread = 0;
  // Weight bytes this mapping reads per token through this projection kind, every matrix of it (measure/ab_run.h
  // ab_projection_bytes: codes + scales, or GGUF's blocks, where decode keeps the weights quantized; N x K x 2
  // otherwise). 0: not recorded (JSON written before it), read as bf16_bytes_per_token().
  int64_t bytes_read = 0;
};

// Everything measured for one entry (a mapping on a decode path). Vectors indexed by timed repeat (warm-up excluded).
struct AbMappingRun {
  // The entry as measure/ab_run.h ab_entry_name writes it: the GEMV mapping, "@persistent" appended where decode ran
  // the persistent kernel (JSON written before the decode paths has plain names: the graph path).
  std::string mapping;
  std::vector<double> ms_per_token;           // the entry's decode (the real speed), wall clock: graph-replayed, or
                                              // one persistent kernel per token
  std::vector<double> profiled_ms_per_token;  // the profiling pass, wall clock
  std::vector<PartMs> part_ms;                // that pass's device ms/token per part: CUDA events around each region
                                              // (graph path, un-graphed), or the persistent kernel's event-timed
                                              // time split by its blocks' clock cycles per part
  std::vector<AbLaunch> launches;             // one per projection kind
  // That pass's device ms/token of decode attention, when the engine's profile times it apart from "other" (a part
  // named "attention"); empty while it does not (attention is then inside "other").
  std::vector<double> attention_ms_per_token;
  int tokens_matching_first = -1;  // of the n_decode + 1 sampled tokens, leading ones equal to the first mapping's
  int kernels_per_token = 0;       // kernel boundaries of one decode step (CudaBackend::kernels_per_step); 0: unknown
  int waits_per_token = 0;         // @persistent: grid-wide waits of one step (persistent_decode_waits_per_step); 0:
                                   // the graph path, or unknown
};

struct AbReportData {
  std::string model;          // what was opened
  std::string device;         // GPU name
  int sm_count = 0;
  int max_warps_per_sm = 0;   // resident-warp limit of one SM (64 on Hopper)
  int prompt_tokens = 0;
  int depth = 0;              // context depth before the timed steps (llama-bench -d); 0 = the prompt alone
  // --verify-k: the wall-clock median of a verify of k tokens (forward pass, every row's logits copied to the host)
  // and of one decode step (decode + greedy sample) at the same position, same loop.
  struct VerifyCost {
    int k = 0;
    double ms = 0, step_ms = 0;
  };
  std::vector<VerifyCost> verify;
  // --spec: medians over the repeats of a speculative pass and of a plain pass beside it (same mapping, graph path),
  // ms per produced token after the prefill; the counts of the last speculative pass.
  struct SpecRun {
    std::string drafter;  // "lookup", "draft"
    std::string mapping;
    double ms_per_token = 0, plain_ms_per_token = 0;
    int64_t drafted = 0, accepted = 0, steps = 0;
    int tokens = 0;                 // tokens per pass (n_decode + 1)
    int tokens_matching_plain = 0;  // leading tokens equal to the plain pass's
  };
  std::vector<SpecRun> spec;  // empty: no --spec
  double depth_prefill_ms = 0;  // depth > 0: the one prefill of the depth tokens (and its sample), wall clock
  int n_decode = 0;           // decode steps per pass (EOS ignored)
  int repeats = 0;            // timed repeats per mapping
  int warmup = 0;             // untimed rounds before them
  uint64_t seed = 0;
  int64_t gemv_bytes_per_token = 0;     // weights one decode step reads through the GEMVs (backend's figure)
  // What decode attention reads from the KV cache at the timed steps (measure/ab_run.h ab_kv_read); 0: not recorded.
  std::string kv_dtype;                 // the cache's element type: "bf16", "fp8"
  double attention_rows = 0;            // cache rows one timed step reads, mean over the steps
  int64_t kv_bytes_per_token = 0;       // K and V bytes of every layer one timed step reads, mean over the steps
  std::vector<AbProjection> projections;
  std::vector<double> roofline_gbps;    // streaming-read bandwidth, one figure per timed round (measure/roofline.h)
  std::string roofline_method;          // one line: how roofline_gbps was measured
  std::string profiling_method;         // one line: how part_ms was measured
  std::vector<AbMappingRun> runs;       // in run order; the first is the baseline of the attribution
};

}  // namespace llm
