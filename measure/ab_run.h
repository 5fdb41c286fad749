// The A/B run: one model, one prompt, exactly N greedy decode steps under each GEMV mapping, mappings alternating
// round by round (A B C A B C ...) so drift on a shared machine hits all of them; per mapping the graph-replayed
// wall time, an un-graphed profiling pass split per projection, and the launch shapes; the read roofline measured in
// the same run (measure/roofline.h). Fills measure/ab_data.h's plain data; measure/ab_stats.h summarises it and
// measure/ab_render.h renders it. run_ab needs the CUDA engine; a build without one keeps the CPU-only parts.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "measure/ab_data.h"     // AbReportData: what the run measures
#include "engine/backend.h"      // Backend
#include "models/model.h"        // Model

namespace llm {

struct AbOptions {
  std::vector<std::string> mappings{"warp", "thread", "colmajor", "cublas"};  // GEMV registry names, in run order
  std::vector<int> prompt;   // token ids, BOS first; prefilled at position 0 before every pass
  int n_decode = 128;        // decode steps per pass, EOS ignored
  int repeats = 5;           // timed rounds
  int warmup = 1;            // untimed rounds first (prepack, graph capture, clocks)
  uint64_t seed = 42;        // sampler seed (greedy: recorded, no effect on the tokens)
  int ctx_size = 0;          // 0 = prompt + n_decode (a small KV cache leaves memory for every mapping's copy)
  bool dequantize = false;   // GGUF quantized weights as BF16 (BackendOptions::dequantize)
  std::FILE* progress = stderr;  // one line per pass; nullptr = quiet
};

using AbResult = AbReportData;

// Runs the protocol above. Throws llm::Error for bad options, an unknown mapping, no CUDA device, or (in a build
// without CUDA) "the A/B run needs the CUDA engine; this build has none".
AbResult run_ab(const Model& model, const AbOptions& opt);

// One pass of the protocol through the one decode loop (engine/decode_loop.h), on any backend: prefill `prompt` at
// position 0, then exactly n_decode greedy decode steps, EOS ignored. tokens = the n_decode + 1 tokens sampled.
struct AbPass {
  double prefill_ms = 0;    // the prompt's prefill plus its sample (wall clock; the sample syncs)
  double ms_per_token = 0;  // decode + sample, per step
  std::vector<int> tokens;
};
AbPass ab_decode_pass(Backend& backend, const std::vector<int>& prompt, int n_decode, uint64_t seed);

// "warp, thread,cublas" -> {"warp", "thread", "cublas"}; throws llm::Error on an empty list, item or repeat, or a
// name core/gemv_names.h does not list.
std::vector<std::string> parse_ab_mappings(const std::string& list);

}  // namespace llm
