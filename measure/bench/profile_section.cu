// bench profile-target: the workload tools/ncu-gemv.sh profiles (gemv-profile-target's). For each mapping and shape:
// prepack random weights, launch the GEMV a few times unprofiled (warm-up, lazy state such as the cuBLAS handle),
// then exactly once inside cudaProfilerStart/Stop behind a marker kernel whose grid size is the launch group's id
// (run ncu with --profile-from-start off). The manifest (CSV: id,mapping,N,K,matrix_bytes,alloc_bytes,ld) names each
// id. A section of bench rather than a program of its own: ncu profiles only the launches between
// cudaProfilerStart and Stop, so the rest of the harness in the same binary costs the profile nothing.
#include <cuda_profiler_api.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "engine/backend.h"                // require_cuda_device
#include "engine/gemv_choice.h"            // gemv_plan: a --mappings name's BF16 form
#include "kernels/cuda_check.h"            // CUDA_CHECK
#include "kernels/gemv/gemv.h"             // the mappings
#include "kernels/gemv/gemv_batched.h"     // gemv_profile_marker
#include "measure/bench/harness.h"         // write_file
#include "measure/bench/sections.h"        // ProfileTargetOptions
#include "measure/probes/bench_kernels.h"  // random fills

namespace llm::bench {
namespace {

// One profiled launch of mapping m on a fresh random [N, K] weight; returns the manifest line (without the id).
std::string profile_one(const GemvMapping& m, int N, int K, int id, int warmup, GemvContext* ctx) {
  cudaStream_t stream = ctx->stream;
  uint16_t* d_src = nullptr;  // [N, K] row-major BF16
  float* d_x = nullptr;       // [K]
  float* d_y = nullptr;       // [N]
  CUDA_CHECK(cudaMalloc(&d_src, size_t(N) * size_t(K) * 2));
  CUDA_CHECK(cudaMalloc(&d_x, size_t(K) * 4));
  CUDA_CHECK(cudaMalloc(&d_y, size_t(N) * 4));
  gemv_fill_random_bf16(d_src, size_t(N) * size_t(K), 0x9e37ull + uint64_t(N) * 131 + uint64_t(K), stream);
  gemv_fill_random_f32(d_x, size_t(K), 0x7f4aull ^ uint64_t(K), stream);
  GemvWeight w;
  m.prepack(d_src, N, K, &w, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaFree(d_src));
  for (int i = 0; i < warmup; ++i) m.launch(w, d_x, d_y, false, {}, ctx);
  CUDA_CHECK(cudaStreamSynchronize(stream));

  CUDA_CHECK(cudaProfilerStart());
  gemv_profile_marker(id, stream);
  m.launch(w, d_x, d_y, false, {}, ctx);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaProfilerStop());

  const std::string line = std::string(m.name) + "," + std::to_string(N) + "," + std::to_string(K) + "," +
                           std::to_string(w.useful_bytes()) + "," + std::to_string(w.bytes) + "," +
                           std::to_string(w.ld);
  gemv_free(&w);
  CUDA_CHECK(cudaFree(d_x));
  CUDA_CHECK(cudaFree(d_y));
  return line;
}

}  // namespace

int run_profile_target(const ProfileTargetOptions& opt) {
  require_cuda_device();  // the one line every CUDA program prints without a GPU
  int max_k = 1;
  for (const auto& s : opt.shapes) max_k = std::max(max_k, s.second);
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  GemvContext ctx;
  gemv_context_init(&ctx, stream, max_k);

  std::string manifest = "id,mapping,N,K,matrix_bytes,alloc_bytes,ld\n";
  int id = 0;
  for (const std::string& name : opt.mappings) {
    const GemvMapping& m = gemv_mapping(gemv_plan(name).bf16);  // bench.cu checked it has a BF16 form
    for (const auto& [N, K] : opt.shapes) {
      ++id;
      manifest += std::to_string(id) + "," + profile_one(m, N, K, id, opt.warmup, &ctx) + "\n";
      std::cerr << "profiled " << name << " " << N << "x" << K << " (marker " << id << ")\n";
    }
  }
  gemv_context_destroy(&ctx);
  CUDA_CHECK(cudaStreamDestroy(stream));

  if (opt.manifest.empty())
    std::cout << manifest;
  else
    write_file("--manifest", opt.manifest, manifest);
  return 0;
}

}  // namespace llm::bench
