// The sections of the benchmark harness (`bench SECTION [options]`, apps/bench.cu), what each takes and its entry
// point. Each section holds, side by side, what it measures against (the streaming-read roofline of the same run, or
// the plain variant), the variants and their timing; each prints a markdown table (and, asked, JSON) and returns the
// exit status. Host declarations only: the command line fills these structs; the sections are CUDA code.
//   gemv            GB/s of each GEMV mapping (or quantized form) on the Llama 3.1 8B decode shapes
//   probes          batched GEMV (B = 1..8) against B separate GEMVs; tiny K: where "warp" overtakes
//   attn            decode attention GB/s at long contexts and causal prefill TFLOP/s
//   dep             what one dependency between the resident blocks of a persistent kernel costs
//   profile-target  one launch per mapping and shape behind a marker kernel, for Nsight Compute (tools/ncu-gemv.sh)
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace llm::bench {

using Shapes = std::vector<std::pair<int, int>>;  // N x K

// The Llama 3.1 8B decode projections: q and o, k and v, gate and up, down, lm_head.
inline Shapes llama8b_shapes() { return {{4096, 4096}, {1024, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096}}; }

struct GemvOptions {
  std::vector<std::string> mappings;  // empty: all registered (or, with quant, every quantized form)
  Shapes shapes = llama8b_shapes();
  int repeats = 7;
  bool csv = false;
  std::string json_path;
  std::vector<std::string> quant;  // q4_0, q8_0, q4_k: quantized weights through the quantized forms instead
};
int run_gemv(const GemvOptions& o);  // measure/bench/gemv_section.cu

struct ProbesOptions {
  std::string part = "all";  // batch, qbatch, tiny or all
  // qbatch: the batch-k quantized GEMV (kernels/quant/gemv_quant_batch.h) per shape, type and k, against one
  // warp-dp4a GEMV (the one-token decode step's) on the same planes
  Shapes qbatch_shapes = {{4096, 4096}, {14336, 4096}, {4096, 14336}};
  std::vector<std::string> qbatch_types = {"q4_0", "q8_0", "q4_k"};
  std::vector<int> qbatch_k = {1, 2, 4, 8, 16};
  Shapes batch_shapes = {{4096, 4096}, {14336, 4096}};
  std::vector<int> batches = {1, 2, 4, 8};
  int tiny_n = 65536;
  std::vector<int> tiny_k = {8, 16, 24, 32, 48, 64, 96, 128, 192, 256};  // ascending
  int repeats = 7;
  std::string json_path;
};
int run_probes(const ProbesOptions& o);  // measure/bench/probes_section.cu

struct AttnOptions {
  int heads = 32, kv_heads = 8, head_dim = 128;  // Llama 3.1 8B
  int layers = 0;  // caches rotated through; 0 = per length, enough to exceed 4x L2 (as many as memory allows)
  std::vector<int> contexts = {8192, 32768, 131072};  // decode: cache rows read (position + 1)
  std::vector<int> prefill = {512, 8192};             // prefill: prompt tokens over a fresh cache
  int reps = 10;
  int model_layers = 32;  // the "x layers" columns: per-token cost of the whole model's attention
  std::string json_path;
};
int run_attn(const AttnOptions& o);  // measure/bench/attn_section.cu

struct DepOptions {
  int stages = 1000, repeats = 5, vector = 576;
  std::vector<int> blocks = {32, 64, 128};
  std::vector<int> weights_kb = {8, 16, 64};
  std::vector<int> clusters = {8, 16};
};
int run_dep(const DepOptions& o);  // measure/bench/dep_section.cu

struct ProfileTargetOptions {
  std::vector<std::string> mappings;  // registered mappings, in the order given
  Shapes shapes = llama8b_shapes();
  int warmup = 2;
  std::string manifest;  // "" = stdout
};
int run_profile_target(const ProfileTargetOptions& o);  // measure/bench/profile_section.cu

}  // namespace llm::bench
