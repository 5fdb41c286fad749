// bench probes: two kernel-level probes beside the decode mappings, graph-timed with weights rotated beyond L2 and a
// streaming-read roofline measured in the same run (gemv-probes' tables and JSON keys, as docs/results read them).
//   batch:  Y[B, N] = X[B, K] W^T for B = 1, 2, 4, 8 with each weight chunk reused from registers
//           (kernels/gemv/gemv_batched.h), against B separate "warp" GEMVs on the same weight (the reference).
//   qbatch: the batch-k quantized GEMV (kernels/quant/gemv_quant_batch.h) for k = 1 .. 16 vectors on Q4_0, Q8_0 and
//           Q4_K planes, against one warp-dp4a GEMV on the same planes (what one decode step's matrix costs).
//   tiny K: "warp" vs "colmajor" vs several rows per warp for K of a few dozen, and the K where "warp" overtakes.
#include <algorithm>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend.h"                // require_cuda_device
#include "kernels/cuda_check.h"            // CUDA_CHECK
#include "kernels/gemv/gemv.h"             // the mappings
#include "kernels/gemv/gemv_batched.h"     // gemv_batched_launch, gemv_rows_per_warp_launch
#include "kernels/quant/gemv_quant.h"      // quant_gemv_upload, quant_gemv_launch (warp-dp4a)
#include "kernels/quant/gemv_quant_batch.h"  // quant_batch_quantize_x, quant_batch_gemv_launch
#include "engine/cuda_quant.h"             // quant_host_view
#include "models/quant.h"                  // quantize_matrix, pack_quant
#include "models/quantize_model.h"         // parse_quantize_type
#include "core/counter_rng.h"              // rng_value
#include "measure/bench/harness.h"         // StreamEvents, measure_roofline, rotation_bytes, fmt, rounded, write_file
#include "measure/bench/sections.h"        // ProbesOptions
#include "measure/cuda_timing.h"           // graph_ms_per_call, current_device
#include "measure/probes/bench_kernels.h"  // random fills

namespace llm::bench {
namespace {

using Options = ProbesOptions;

// Everything a probe needs from the run: stream, events, the rotation size, the context for registry mappings.
struct Bench {
  Device dev;
  RooflineResult roof;
  int repeats = 7;
  size_t rotation_bytes = 0;  // weights rotated over at least this many bytes of copies: no call hits L2
  StreamEvents se;
  cudaStream_t stream = se.stream;
  cudaEvent_t e0 = se.e0, e1 = se.e1;
  GemvContext ctx;
};

// Copies of one random [N, K] weight in a layout, enough to exceed bench.rotation_bytes (at least 2).
std::vector<GemvWeight> make_copies(const Bench& b, int N, int K,
                                    const std::function<void(const uint16_t*, GemvWeight*)>& prepack) {
  const size_t useful = size_t(N) * size_t(K) * 2;
  const size_t n = std::max<size_t>(2, (b.rotation_bytes + useful - 1) / useful);
  uint16_t* src = nullptr;
  CUDA_CHECK(cudaMalloc(&src, useful));
  gemv_fill_random_bf16(src, size_t(N) * size_t(K), 0xb47cull + uint64_t(N) * 31 + uint64_t(K), b.stream);
  std::vector<GemvWeight> copies(n);
  for (GemvWeight& w : copies) prepack(src, &w);
  CUDA_CHECK(cudaStreamSynchronize(b.stream));
  CUDA_CHECK(cudaFree(src));
  return copies;
}

void free_copies(std::vector<GemvWeight>* copies) {
  for (GemvWeight& w : *copies) gemv_free(&w);
}

// Median microseconds per call of call(copy) over whole rotations, graph-timed: warm-up rotation on the stream first
// (creates lazy state), then at least `min_calls` calls per replay.
// Weight: a GemvWeight or a QuantGemvWeight; call(const Weight&) enqueues one call.
template <typename Weight, typename Call>
double graph_us(const Bench& b, const std::vector<Weight>& copies, int min_calls, const Call& call) {
  const int n = int(copies.size());
  for (int i = 0; i < n; ++i) call(copies[size_t(i)]);
  CUDA_CHECK(cudaStreamSynchronize(b.stream));
  const int iters = (std::max(min_calls, n) + n - 1) / n * n;
  return 1e3 * graph_ms_per_call(b.stream, b.e0, b.e1, iters, b.repeats,
                                 [&](int i) { call(copies[size_t(i % n)]); });
}

// ---- batch ----

struct BatchResult {
  int N = 0, K = 0, B = 0;
  double us_batched = 0.0, us_separate = 0.0;
  double gbps = 0.0, gflops = 0.0, pct_roofline = 0.0;
};

std::vector<BatchResult> probe_batch(Bench& b, const Options& o) {
  std::vector<BatchResult> out;
  const GemvMapping& warp = gemv_mapping(GemvBf16Form::Warp);
  for (const auto& shape : o.batch_shapes) {
    const int N = shape.first, K = shape.second;
    std::vector<GemvWeight> copies =
        make_copies(b, N, K, [&](const uint16_t* src, GemvWeight* w) { gemv_batched_prepack(src, N, K, w, b.stream); });
    float* x = nullptr;  // [kGemvMaxBatch, K]
    float* y = nullptr;  // [kGemvMaxBatch, N]
    CUDA_CHECK(cudaMalloc(&x, size_t(kGemvMaxBatch) * size_t(K) * 4));
    CUDA_CHECK(cudaMalloc(&y, size_t(kGemvMaxBatch) * size_t(N) * 4));
    gemv_fill_random_f32(x, size_t(kGemvMaxBatch) * size_t(K), 0x5a7eull ^ uint64_t(K), b.stream);
    for (int B : o.batches) {
      BatchResult r;
      r.N = N;
      r.K = K;
      r.B = B;
      r.us_batched = graph_us(b, copies, 200, [&](const GemvWeight& w) {
        gemv_batched_launch(w, B, x, K, y, N, b.stream);
      });
      r.us_separate = graph_us(b, copies, 200, [&](const GemvWeight& w) {
        for (int i = 0; i < B; ++i) warp.launch(w, x + size_t(i) * K, y + size_t(i) * N, false, {}, &b.ctx);
      });
      const double bytes = double(N) * double(K) * 2.0;
      r.gbps = bytes / (r.us_batched * 1e-6) / 1e9;
      r.gflops = 2.0 * double(N) * double(K) * B / (r.us_batched * 1e-6) / 1e9;
      r.pct_roofline = 100.0 * r.gbps / b.roof.gbps;
      std::cerr << "batch " << N << "x" << K << " B=" << B << ": " << fmt(r.us_batched, 2) << " us batched, "
                << fmt(r.us_separate, 2) << " us separate\n";
      out.push_back(r);
    }
    CUDA_CHECK(cudaFree(x));
    CUDA_CHECK(cudaFree(y));
    free_copies(&copies);
  }
  return out;
}

// ---- qbatch ----

struct QBatchResult {
  int N = 0, K = 0, k = 0;
  std::string type;
  double us = 0.0, us_quantize = 0.0, us_one = 0.0;  // batch GEMV; its x pass; one warp-dp4a GEMV
  double us_dp4a = 0.0, us_mma = 0.0;  // each kernel named (QuantBatchKernel); us is the one kAuto picks
  double gbps = 0.0, pct_roofline = 0.0;
};

std::vector<QBatchResult> probe_qbatch(Bench& b, const Options& o) {
  std::vector<QBatchResult> out;
  for (const auto& shape : o.qbatch_shapes) {
    const int N = shape.first, K = shape.second;
    std::vector<float> wf(size_t(N) * size_t(K));
    for (size_t i = 0; i < wf.size(); ++i) wf[i] = rng_value(0x9b47ull, uint64_t(N) ^ (uint64_t(K) << 20), i, -1.0f, 1.0f);
    for (const std::string& name : o.qbatch_types) {
      const GgmlQuantType t = parse_quantize_type(name).type;
      const std::vector<uint8_t> blocks = quantize_matrix(t, wf.data(), N, K);
      const PackedQuant packed = pack_quant(blocks.data(), t, N, K, "bench");
      QuantGemvWeight host = quant_host_view(packed);
      host.blocks = nullptr;
      const double bytes = double(quant_gemv_bytes_read(QuantGemvKind::WarpDp4a, host));
      const size_t n = std::max<size_t>(2, size_t((double(b.rotation_bytes) + bytes - 1) / bytes));
      std::vector<QuantGemvWeight> copies(n);
      for (QuantGemvWeight& w : copies) w = quant_gemv_upload(host, b.stream);
      const int kmax = *std::max_element(o.qbatch_k.begin(), o.qbatch_k.end());
      float* x = nullptr;
      float* y = nullptr;
      void* xq = nullptr;
      CUDA_CHECK(cudaMalloc(&x, size_t(kmax) * size_t(K) * 4));
      CUDA_CHECK(cudaMalloc(&y, size_t(kmax) * size_t(N) * 4));
      CUDA_CHECK(cudaMalloc(&xq, size_t(quant_batch_x_bytes(kmax, K))));
      gemv_fill_random_f32(x, size_t(kmax) * size_t(K), 0x5a7full ^ uint64_t(K), b.stream);
      const double us_one = graph_us(b, copies, 200, [&](const QuantGemvWeight& w) {
        quant_gemv_launch(QuantGemvKind::WarpDp4a, w, x, y, false, b.stream);
      });
      for (int k : o.qbatch_k) {
        QBatchResult r;
        r.N = N;
        r.K = K;
        r.k = k;
        r.type = ggml_quant_name(t);
        r.us_one = us_one;
        r.us_quantize = graph_us(b, copies, 200, [&](const QuantGemvWeight&) {
          quant_batch_quantize_x(x, false, K, k, K, xq, b.stream);
        });
        auto batched = [&](QuantBatchKernel kernel) {
          return graph_us(b, copies, 200, [&](const QuantGemvWeight& w) {
            quant_batch_gemv_launch(w, 0, N, xq, k, y, N, false, b.stream, kQuantBatchRows, kernel);
          });
        };
        r.us = batched(QuantBatchKernel::kAuto);
        r.us_dp4a = batched(QuantBatchKernel::kDp4a);
        r.us_mma = batched(QuantBatchKernel::kMma);
        r.gbps = bytes / (r.us * 1e-6) / 1e9;
        r.pct_roofline = 100.0 * r.gbps / b.roof.gbps;
        std::cerr << "qbatch " << r.type << " " << N << "x" << K << " k=" << k << ": " << fmt(r.us, 2) << " us ("
                  << fmt(r.us / us_one, 2) << "x one warp-dp4a GEMV of " << fmt(us_one, 2) << " us; dp4a "
                  << fmt(r.us_dp4a, 2) << " us, tensor cores " << fmt(r.us_mma, 2) << " us)\n";
        out.push_back(r);
      }
      CUDA_CHECK(cudaFree(x));
      CUDA_CHECK(cudaFree(y));
      CUDA_CHECK(cudaFree(xq));
      for (QuantGemvWeight& w : copies) quant_gemv_free(&w);
    }
  }
  return out;
}

void print_qbatch(const Bench& b, const std::vector<QBatchResult>& rs) {
  std::cout << "## Batch-k quantized GEMV: Y[k, N] = X[k, K] W^T from the prepacked planes, each weight read once per "
               "16 vectors\n\n"
            << "GB/s of the planes' bytes (counted once per call); one = one warp-dp4a GEMV on the same planes (a "
               "decode step's matrix); x pass = quant_batch_quantize_x of the k vectors (run once per pass and input, "
               "shared by the matrices reading it); us = the kernel the engine picks (QuantBatchKernel::kAuto), "
               "dp4a and mma = each kernel named; roofline "
            << fmt(b.roof.gbps, 0) << " GB/s\n\n"
            << "| type | shape | k | us | GB/s | % roofline | us one | k-step / one-step | us x pass | us dp4a | "
               "us mma |\n"
            << "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const QBatchResult& r : rs)
    std::cout << "| " << r.type << " | " << r.N << " x " << r.K << " | " << r.k << " | " << fmt(r.us, 2) << " | "
              << fmt(r.gbps, 0) << " | " << fmt(r.pct_roofline, 1) << "% | " << fmt(r.us_one, 2) << " | "
              << fmt(r.us / r.us_one, 2) << "x | " << fmt(r.us_quantize, 2) << " | " << fmt(r.us_dp4a, 2) << " | "
              << fmt(r.us_mma, 2) << " |\n";
  std::cout << "\n";
}

void print_batch(const Bench& b, const std::vector<BatchResult>& rs) {
  std::cout << "## Batch: Y[B, N] = X[B, K] W^T, weights read once per batch\n\n"
            << "GB/s of weight bytes (N x K x 2, counted once); GFLOP/s = 2 N K B / time; separate = B launches of the "
               "'warp' mapping on the same weight copy (a matrix under the "
            << (b.dev.l2_bytes >> 20) << " MiB L2 may serve its repeats from L2)\n\n"
            << "| shape | B | us batched | GB/s | % roofline | GFLOP/s | us B x warp | speedup |\n"
            << "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const BatchResult& r : rs)
    std::cout << "| " << r.N << " x " << r.K << " | " << r.B << " | " << fmt(r.us_batched, 2) << " | "
              << fmt(r.gbps, 0) << " | " << fmt(r.pct_roofline, 1) << "% | " << fmt(r.gflops, 0) << " | "
              << fmt(r.us_separate, 2) << " | " << fmt(r.us_separate / r.us_batched, 2) << "x |\n";
  std::cout << "\n";
}

// ---- tiny K ----

struct TinyResult {
  int K = 0;
  int rows_per_warp = 0;
  double gbps_warp = 0.0, gbps_colmajor = 0.0, gbps_rows = 0.0;
  double us_warp = 0.0, us_colmajor = 0.0, us_rows = 0.0;
};

std::vector<TinyResult> probe_tiny(Bench& b, const Options& o) {
  std::vector<TinyResult> out;
  const int N = o.tiny_n;
  const GemvMapping& warp = gemv_mapping(GemvBf16Form::Warp);
  const GemvMapping& colmajor = gemv_mapping(GemvBf16Form::Colmajor);
  float* x = nullptr;  // [max K]
  float* y = nullptr;  // [N]
  CUDA_CHECK(cudaMalloc(&x, size_t(o.tiny_k.back()) * 4));
  CUDA_CHECK(cudaMalloc(&y, size_t(N) * 4));
  gemv_fill_random_f32(x, size_t(o.tiny_k.back()), 0x71e4ull, b.stream);
  for (int K : o.tiny_k) {
    TinyResult r;
    r.K = K;
    r.rows_per_warp = gemv_rows_per_warp(K);
    // Small GEMVs take microseconds: 2,000 calls per replay keep a replay well above event resolution.
    auto measure = [&](const GemvMapping* m, bool rows) {
      std::vector<GemvWeight> copies = make_copies(b, N, K, [&](const uint16_t* src, GemvWeight* w) {
        if (m)
          m->prepack(src, N, K, w, b.stream);
        else
          gemv_batched_prepack(src, N, K, w, b.stream);
      });
      const double us = graph_us(b, copies, 2000, [&](const GemvWeight& w) {
        if (rows)
          gemv_rows_per_warp_launch(w, x, y, b.stream);
        else
          m->launch(w, x, y, false, {}, &b.ctx);
      });
      free_copies(&copies);
      return us;
    };
    r.us_warp = measure(&warp, false);
    r.us_colmajor = measure(&colmajor, false);
    r.us_rows = measure(nullptr, true);
    const double bytes = double(N) * double(K) * 2.0;
    r.gbps_warp = bytes / (r.us_warp * 1e-6) / 1e9;
    r.gbps_colmajor = bytes / (r.us_colmajor * 1e-6) / 1e9;
    r.gbps_rows = bytes / (r.us_rows * 1e-6) / 1e9;
    std::cerr << "tiny K=" << K << ": warp " << fmt(r.gbps_warp, 0) << ", colmajor " << fmt(r.gbps_colmajor, 0)
              << ", rows-per-warp " << fmt(r.gbps_rows, 0) << " GB/s\n";
    out.push_back(r);
  }
  CUDA_CHECK(cudaFree(x));
  CUDA_CHECK(cudaFree(y));
  return out;
}

// The smallest K from which warp is at least as fast as `other` for that K and every larger K measured; -1: never.
int crossover_k(const std::vector<TinyResult>& rs, double TinyResult::*other) {
  int k = -1;
  for (auto it = rs.rbegin(); it != rs.rend(); ++it) {
    if (it->gbps_warp < (*it).*other) break;
    k = it->K;
  }
  return k;
}

std::string describe_crossover(int k, const std::vector<TinyResult>& rs, const char* other) {
  if (k < 0) return std::string("warp stays behind ") + other + " up to K = " + std::to_string(rs.back().K);
  if (k == rs.front().K) return std::string("warp is at least as fast as ") + other + " from the smallest K measured";
  return std::string("warp overtakes ") + other + " at K = " + std::to_string(k) + " (and stays ahead)";
}

const char* winner(const TinyResult& r) {
  if (r.gbps_warp >= r.gbps_colmajor && r.gbps_warp >= r.gbps_rows) return "warp";
  return r.gbps_rows >= r.gbps_colmajor ? "rows-per-warp" : "colmajor";
}

void print_tiny(const Bench& b, const Options& o, const std::vector<TinyResult>& rs) {
  std::cout << "## Tiny K: N = " << o.tiny_n << ", GB/s of weight bytes (N x K x 2)\n\n"
            << "rows-per-warp: a row of ceil(K / 8) 16-byte chunks takes the next power-of-two number of lanes, so "
               "one warp covers 32 / that rows (kernels/gemv/gemv_batched.cu)\n\n"
            << "| K | row bytes | warp GB/s | colmajor GB/s | rows-per-warp GB/s (rows/warp) | best | "
               "best % roofline |\n"
            << "| ---: | ---: | ---: | ---: | ---: | --- | ---: |\n";
  for (const TinyResult& r : rs) {
    const double best = std::max({r.gbps_warp, r.gbps_colmajor, r.gbps_rows});
    std::cout << "| " << r.K << " | " << 2 * r.K << " | " << fmt(r.gbps_warp, 0) << " | " << fmt(r.gbps_colmajor, 0)
              << " | " << fmt(r.gbps_rows, 0) << " (" << r.rows_per_warp << ") | " << winner(r) << " | "
              << fmt(100.0 * best / b.roof.gbps, 1) << "% |\n";
  }
  std::cout << "\n- " << describe_crossover(crossover_k(rs, &TinyResult::gbps_colmajor), rs, "colmajor") << "\n- "
            << describe_crossover(crossover_k(rs, &TinyResult::gbps_rows), rs, "rows-per-warp") << "\n\n";
}

// Keys and rounding as gemv-probes has always written them (docs/results, scripts/h200-check.sh).
void write_json(const std::string& path, const Bench& b, const Options& o, const std::vector<BatchResult>& batch,
                const std::vector<TinyResult>& tiny) {
  using json = nlohmann::ordered_json;
  json j;
  j["device"] = b.dev.name;
  j["sms"] = b.dev.sms;
  j["l2_bytes"] = b.dev.l2_bytes;
  j["repeats"] = b.repeats;
  j["rotation_min_bytes"] = b.rotation_bytes;
  j["roofline_gbps"] = rounded(b.roof.gbps, 1);
  j["batch"] = json::array();
  for (const BatchResult& r : batch)
    j["batch"].push_back({{"N", r.N},
                          {"K", r.K},
                          {"B", r.B},
                          {"us_batched", rounded(r.us_batched, 3)},
                          {"us_separate_warp", rounded(r.us_separate, 3)},
                          {"gbps", rounded(r.gbps, 1)},
                          {"gflops", rounded(r.gflops, 1)},
                          {"pct_roofline", rounded(r.pct_roofline, 2)}});
  j["tiny_n"] = o.tiny_n;
  j["tiny"] = json::array();
  for (const TinyResult& r : tiny)
    j["tiny"].push_back({{"K", r.K},
                         {"rows_per_warp", r.rows_per_warp},
                         {"gbps_warp", rounded(r.gbps_warp, 1)},
                         {"gbps_colmajor", rounded(r.gbps_colmajor, 1)},
                         {"gbps_rows_per_warp", rounded(r.gbps_rows, 1)},
                         {"us_warp", rounded(r.us_warp, 3)},
                         {"us_colmajor", rounded(r.us_colmajor, 3)},
                         {"us_rows_per_warp", rounded(r.us_rows, 3)},
                         {"best", winner(r)}});
  j["crossover_k_vs_colmajor"] = tiny.empty() ? -1 : crossover_k(tiny, &TinyResult::gbps_colmajor);
  j["crossover_k_vs_rows_per_warp"] = tiny.empty() ? -1 : crossover_k(tiny, &TinyResult::gbps_rows);
  write_file("--json", path, j.dump(2) + "\n");
}

}  // namespace

int run_probes(const Options& o) {
  require_cuda_device();  // the one line every CUDA program prints without a GPU
  Bench b;
  b.dev = current_device();
  b.repeats = o.repeats;
  b.rotation_bytes = rotation_bytes(b.dev);
  b.roof = measure_roofline(o.repeats);  // its 2 GiB buffer is freed before the weights are allocated
  int max_k = o.tiny_k.back();
  for (const auto& s : o.batch_shapes) max_k = std::max(max_k, s.second);
  gemv_context_init(&b.ctx, b.stream, max_k);

  std::vector<BatchResult> batch;
  std::vector<TinyResult> tiny;
  std::vector<QBatchResult> qbatch;
  if (o.part == "all" || o.part == "batch") batch = probe_batch(b, o);
  if (o.part == "all" || o.part == "qbatch") qbatch = probe_qbatch(b, o);
  if (o.part == "all" || o.part == "tiny") tiny = probe_tiny(b, o);

  std::cout << "roofline: " << fmt(b.roof.gbps, 0) << " GB/s (streaming read, best of " << b.roof.shapes_tried
            << " grid shapes); device: " << b.dev.name << "; weights rotated over >= " << (b.rotation_bytes >> 20)
            << " MiB of copies; CUDA-graph timed, median of " << b.repeats << " repeats\n\n";
  if (!batch.empty()) print_batch(b, batch);
  if (!qbatch.empty()) print_qbatch(b, qbatch);
  if (!tiny.empty()) print_tiny(b, o, tiny);
  if (!o.json_path.empty()) write_json(o.json_path, b, o, batch, tiny);
  gemv_context_destroy(&b.ctx);
  return 0;
}

}  // namespace llm::bench
