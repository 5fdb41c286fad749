// gemv-profile-target: the workload tools/ncu-gemv.sh profiles. For each mapping and shape: prepack random weights,
// launch the GEMV a few times unprofiled (warm-up, lazy state such as the cuBLAS handle), then exactly once inside
// cudaProfilerStart/Stop behind a marker kernel whose grid size is the launch group's id (run ncu with
// --profile-from-start off). The manifest (CSV: id,mapping,N,K,matrix_bytes,alloc_bytes,ld) names each id.
//
//   gemv-profile-target [--mappings a,b] [--shapes NxK,...] [--warmup W] [--manifest FILE]
// --mappings defaults to every mapping of the registry (core/gemv_table.h), in its order.
#include <cuda_profiler_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "apps/bench_util.h"      // split_commas, parse_shape
#include "apps/cli.h"             // value, parse_int, run_main
#include "engine/backend.h"        // require_cuda_device
#include "core/error.h"           // llm::fail
#include "core/gemv_table.h"      // gemv_mapping_list, gemv_mapping_lines, check_gemv_mapping
#include "kernels/cuda_check.h"   // CUDA_CHECK
#include "kernels/gemv/gemv.h"         // the mappings, random fills
#include "kernels/gemv/gemv_batched.h" // gemv_profile_marker

namespace llm {
namespace {

struct Options {
  std::vector<std::string> mappings = split_commas(gemv_mapping_list());  // every mapping, in registry order
  std::vector<std::pair<int, int>> shapes = {{4096, 4096}, {1024, 4096}, {14336, 4096}, {4096, 14336},
                                             {128256, 4096}};
  int warmup = 2;
  std::string manifest;  // "" = stdout
};

const char* kUsage =
    "usage: gemv-profile-target [--mappings a,b,c] [--shapes NxK,...] [--warmup W] [--manifest FILE]\n"
    "  One profiled GEMV launch per mapping and shape, each behind a marker kernel (grid size = id); run under\n"
    "  ncu --profile-from-start off. Writes the id -> mapping, shape manifest as CSV.\n"
    "  --mappings defaults to every mapping of the first list below, in its order:\n";

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return cli::value(argc, argv, i, a); };
    if (a == "--mappings") {
      o.mappings = split_commas(value());
      if (o.mappings.empty()) fail("--mappings: no mapping given");
    } else if (a == "--shapes") {
      o.shapes.clear();
      for (const std::string& s : split_commas(value())) o.shapes.push_back(parse_shape(s));
      if (o.shapes.empty()) fail("--shapes: no shape given");
    } else if (a == "--warmup") {
      o.warmup = int(cli::parse_int(a, value(), 1, 100));
    } else if (a == "--manifest") {
      o.manifest = value();
    } else if (a == "-h" || a == "--help") {
      std::cout << kUsage << gemv_mapping_lines("  ");
      std::exit(0);
    } else {
      fail("unknown option '", a, "'");
    }
  }
  for (const std::string& m : o.mappings) {  // unknown names are bad usage, found before any GPU work
    check_gemv_mapping("--mappings", m, /*on_cpu=*/false);
    gemv_find(m);  // and the registry has it (not a form for quantized weights only)
  }
  return o;
}

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
  for (int i = 0; i < warmup; ++i) m.launch(w, d_x, d_y, false, ctx);
  CUDA_CHECK(cudaStreamSynchronize(stream));

  CUDA_CHECK(cudaProfilerStart());
  gemv_profile_marker(id, stream);
  m.launch(w, d_x, d_y, false, ctx);
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

int run(const Options& opt) {
  require_cuda_device();  // the one line every CUDA program prints without a GPU
  int max_k = 1;
  for (const auto& s : opt.shapes) max_k = std::max(max_k, s.second);
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  GemvContext ctx;
  gemv_context_init(&ctx, stream, max_k);

  std::vector<std::string> lines = {"id,mapping,N,K,matrix_bytes,alloc_bytes,ld"};
  int id = 0;
  for (const std::string& name : opt.mappings) {
    const GemvMapping& m = gemv_find(name);
    for (const auto& [N, K] : opt.shapes) {
      ++id;
      lines.push_back(std::to_string(id) + "," + profile_one(m, N, K, id, opt.warmup, &ctx));
      std::cerr << "profiled " << name << " " << N << "x" << K << " (marker " << id << ")\n";
    }
  }
  gemv_context_destroy(&ctx);
  CUDA_CHECK(cudaStreamDestroy(stream));

  if (opt.manifest.empty()) {
    for (const std::string& l : lines) std::cout << l << "\n";
  } else {
    std::ofstream f(opt.manifest);
    if (!f) fail("--manifest: cannot write '", opt.manifest, "'");
    for (const std::string& l : lines) f << l << "\n";
    if (!f) fail("--manifest: error writing '", opt.manifest, "'");
  }
  return 0;
}

}  // namespace
}  // namespace llm

int main(int argc, char** argv) {
  return llm::cli::run_main("gemv-profile-target", argc, argv, llm::parse_args, llm::run);
}
