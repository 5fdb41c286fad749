// bench gemv: GB/s of each GEMV mapping on the Llama 3.1 8B decode shapes, beside a streaming-read roofline measured
// in the same run; weights rotated over copies >= 4x L2 so every call streams from HBM. With --quant, random weights
// quantized on the host run through the quantized forms instead, GB/s of the bytes each form reads. The table and
// the JSON keys are gemv-bench's, as docs/results and scripts/h200-check.sh read them.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/counter_rng.h"             // rng_value: the quantized benchmark's weights
#include "core/gemv_table.h"              // kGemvTable: the quantized forms
#include "engine/backend.h"               // require_cuda_device
#include "engine/cuda_quant.h"            // quant_host_view
#include "engine/gemv_choice.h"           // gemv_plan: a --mappings name's forms
#include "kernels/cuda_check.h"           // CUDA_CHECK
#include "kernels/gemv/gemv.h"            // the mappings
#include "kernels/quant/gemv_quant.h"     // the quantized forms
#include "measure/bench/harness.h"        // StreamEvents, measure_roofline, rotation_bytes, fmt, rounded, write_file
#include "measure/bench/sections.h"       // GemvOptions
#include "measure/cuda_timing.h"          // time_ms, graph_ms_per_call, current_device, median
#include "measure/probes/bench_kernels.h" // random fills
#include "models/quant.h"                 // quantize_matrix, pack_quant

namespace llm::bench {
namespace {

struct Result {
  std::string mapping;
  int N = 0, K = 0;
  int copies = 0, iters = 0;
  double us_b2b = 0.0, us_graph = 0.0;  // per call, median over repeats
  double gbps_b2b = 0.0, gbps_graph = 0.0, pct_graph = 0.0;
  GemvLaunchShape shape;
};

// Per repeat, aim for ~10 ms of launches (at least one full rotation, at most 2,000 calls) so a repeat is long against
// event resolution yet the slow "thread" mapping on the lm_head shape stays within a few tens of milliseconds.
constexpr double kTargetRepeatMs = 10.0;
constexpr int kMaxIters = 2000;

// The timing protocol of every row: r.copies calls (one full rotation) as warm-up (lazy state such as the cuBLAS handle
// is created there), one timed rotation to size the runs, then `repeats` back-to-back runs and the same calls in a
// CUDA graph; fills iters, us_b2b, us_graph and their GB/s for `useful` bytes per call.
template <typename Call>
void time_rotation(Result& r, size_t useful, int repeats, cudaStream_t stream, cudaEvent_t e0, cudaEvent_t e1,
                   Call call) {
  for (int i = 0; i < r.copies; ++i) call(i);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const double rotation_ms = time_ms(stream, e0, e1, [&] {
    for (int i = 0; i < r.copies; ++i) call(i);
  });
  const double est_ms = std::max(rotation_ms / r.copies, 1e-4);
  r.iters = int(std::min<double>(kMaxIters, std::max<double>(r.copies, kTargetRepeatMs / est_ms)));
  r.iters = (r.iters + r.copies - 1) / r.copies * r.copies;  // whole rotations: every copy used equally

  std::vector<double> b2b;
  for (int rep = 0; rep < repeats; ++rep)
    b2b.push_back(time_ms(stream, e0, e1, [&] {
      for (int i = 0; i < r.iters; ++i) call(i);
    }) / r.iters);
  r.us_graph = graph_ms_per_call(stream, e0, e1, r.iters, repeats, call) * 1e3;  // syncs the stream
  r.us_b2b = median(b2b) * 1e3;
  r.gbps_b2b = double(useful) / (r.us_b2b * 1e-6) / 1e9;
  r.gbps_graph = double(useful) / (r.us_graph * 1e-6) / 1e9;
}

Result bench_one(const GemvMapping& m, int N, int K, const uint16_t* d_src, const float* d_x, float* d_y,
                 size_t rotation_bytes, int repeats, GemvContext* ctx, cudaEvent_t e0, cudaEvent_t e1) {
  cudaStream_t stream = ctx->stream;
  Result r;
  r.mapping = m.name;
  r.N = N;
  r.K = K;
  r.shape = m.shape(N, K);
  const size_t useful = size_t(N) * size_t(K) * 2;
  r.copies = int(std::max<size_t>(2, (rotation_bytes + useful - 1) / useful));
  std::vector<GemvWeight> copies(size_t(r.copies));
  for (GemvWeight& w : copies) m.prepack(d_src, N, K, &w, stream);
  time_rotation(r, useful, repeats, stream, e0, e1,
                [&](int i) { m.launch(copies[size_t(i % r.copies)], d_x, d_y, false, {}, ctx); });
  for (GemvWeight& w : copies) gemv_free(&w);
  return r;
}

// The same protocol for a quantized form: `copies` uploads of one quantized matrix rotated, bytes = what the form
// reads.
Result bench_quant_one(QuantGemvKind kind, const std::string& label, const std::vector<uint8_t>& blocks, int type_id,
                       int N, int K, const float* d_x, float* d_y, size_t rotation_bytes, int repeats,
                       cudaStream_t stream, cudaEvent_t e0, cudaEvent_t e1) {
  Result r;
  r.mapping = label;
  r.N = N;
  r.K = K;
  PackedQuant packed;  // kept alive while the copies upload
  QuantGemvWeight host = quant_gemv_describe(type_id, N, K);
  if (kind == QuantGemvKind::AsStored) {
    host.blocks = blocks.data();
  } else {
    packed = pack_quant(blocks.data(), GgmlQuantType(type_id), N, K);
    host = quant_host_view(packed);
  }
  const size_t useful = size_t(quant_gemv_bytes_read(kind, host));
  r.copies = int(std::max<size_t>(2, (rotation_bytes + useful - 1) / useful));
  std::vector<QuantGemvWeight> copies;
  for (int i = 0; i < r.copies; ++i) copies.push_back(quant_gemv_upload(host, stream));
  r.shape = quant_gemv_shape(kind, copies[0]);
  time_rotation(r, useful, repeats, stream, e0, e1, [&](int i) {
    quant_gemv_launch(kind, copies[size_t(i % r.copies)], d_x, d_y, false, stream);
  });
  for (QuantGemvWeight& w : copies) quant_gemv_free(&w);
  return r;
}

const char* flag_of(const Result& r) { return r.pct_graph > 100.0 ? "L2 hits? measurement error" : ""; }

void print_markdown(const Device& dev, const RooflineResult& roof, int repeats, size_t rotation_bytes,
                    const std::vector<Result>& results) {
  std::cout << "roofline: " << fmt(roof.gbps, 0) << " GB/s (streaming read of " << fmt(roof.bytes / 1073741824.0, 2)
            << " GiB with 16-byte loads, best of " << roof.shapes_tried << " grid shapes: " << roof.grid << " x "
            << roof.block << "; median of " << repeats << ")\n";
  std::cout << "device: " << dev.name << ", " << dev.sms << " SMs, " << (dev.l2_bytes >> 20)
            << " MiB L2; weights rotated over >= " << (rotation_bytes >> 20) << " MiB of copies; median of "
            << repeats << " repeats; GB/s of weight bytes (N x K x 2)\n\n";
  std::cout << "| mapping | shape | GB/s back-to-back | GB/s graph | % roofline (graph) | us/call |\n"
            << "| --- | --- | ---: | ---: | ---: | ---: |\n";
  for (const Result& r : results) {
    std::string pct = fmt(r.pct_graph, 1) + "%";
    if (*flag_of(r)) pct += " (" + std::string(flag_of(r)) + ")";
    std::cout << "| " << r.mapping << " | " << r.N << " x " << r.K << " | " << fmt(r.gbps_b2b, 0) << " | "
              << fmt(r.gbps_graph, 0) << " | " << pct << " | " << fmt(r.us_graph, 2) << " |\n";
  }
  std::cout << "\nus/call: per call inside the CUDA graph (back-to-back launches: GB/s column 3).\n";
}

void print_csv(const RooflineResult& roof, const std::vector<Result>& results) {
  std::cout << "mapping,N,K,gbps_back_to_back,gbps_graph,pct_roofline_graph,us_per_call_graph,"
               "us_per_call_back_to_back,flag\n";
  std::cout << "roofline,,," << fmt(roof.gbps, 1) << "," << fmt(roof.gbps, 1) << ",100.0,,,\n";
  for (const Result& r : results)
    std::cout << r.mapping << "," << r.N << "," << r.K << "," << fmt(r.gbps_b2b, 1) << "," << fmt(r.gbps_graph, 1)
              << "," << fmt(r.pct_graph, 2) << "," << fmt(r.us_graph, 3) << "," << fmt(r.us_b2b, 3) << ","
              << flag_of(r) << "\n";
}

// Keys and rounding as gemv-bench has always written them (docs/results, scripts/h200-check.sh).
void write_json(const std::string& path, const Device& dev, const RooflineResult& roof, int repeats,
                size_t rotation_bytes, const std::vector<Result>& results) {
  using json = nlohmann::ordered_json;
  json j;
  j["device"] = dev.name;
  j["sms"] = dev.sms;
  j["l2_bytes"] = dev.l2_bytes;
  j["repeats"] = repeats;
  j["rotation_min_bytes"] = rotation_bytes;
  j["roofline"] = {{"gbps", rounded(roof.gbps, 1)}, {"bytes", roof.bytes}, {"grid", roof.grid},
                   {"block", roof.block}, {"kernels_tried", roof.shapes_tried}};
  j["results"] = json::array();
  for (const Result& r : results)
    j["results"].push_back({{"mapping", r.mapping},
                            {"N", r.N},
                            {"K", r.K},
                            {"gbps_back_to_back", rounded(r.gbps_b2b, 1)},
                            {"gbps_graph", rounded(r.gbps_graph, 1)},
                            {"pct_roofline_graph", rounded(r.pct_graph, 2)},
                            {"us_per_call_graph", rounded(r.us_graph, 3)},
                            {"us_per_call_back_to_back", rounded(r.us_b2b, 3)},
                            {"copies", r.copies},
                            {"iters", r.iters},
                            {"grid", r.shape.grid},
                            {"block", r.shape.block},
                            {"bytes_in_flight_per_thread", r.shape.bytes_in_flight_per_thread},
                            {"flag", flag_of(r)}});
  write_file("--json", path, j.dump(2) + "\n");
}

// Everything the rows of one run share.
struct Run {
  int repeats = 7;
  size_t rotation_bytes = 0;
  RooflineResult roof;
  StreamEvents se;
  GemvContext ctx;
};

// Every BF16 mapping at every shape: random weights, vector and output per shape.
void bench_bf16(Run& run, const std::vector<const GemvMapping*>& mappings, const Shapes& shapes,
                std::vector<Result>* results) {
  const cudaStream_t stream = run.se.stream;
  for (const auto& [N, K] : shapes) {
    uint16_t* d_src = nullptr;
    float* d_x = nullptr;
    float* d_y = nullptr;
    CUDA_CHECK(cudaMalloc(&d_src, size_t(N) * size_t(K) * 2));
    CUDA_CHECK(cudaMalloc(&d_x, size_t(K) * 4));
    CUDA_CHECK(cudaMalloc(&d_y, size_t(N) * 4));
    gemv_fill_random_bf16(d_src, size_t(N) * size_t(K), 0x5eedull + uint64_t(N) * 131 + uint64_t(K), stream);
    gemv_fill_random_f32(d_x, size_t(K), 0x5eedull ^ uint64_t(K), stream);
    for (const GemvMapping* m : mappings) {
      Result r = bench_one(*m, N, K, d_src, d_x, d_y, run.rotation_bytes, run.repeats, &run.ctx, run.se.e0,
                           run.se.e1);
      r.pct_graph = 100.0 * r.gbps_graph / run.roof.gbps;
      std::cerr << r.mapping << " " << N << "x" << K << ": " << fmt(r.gbps_graph, 0) << " GB/s graph ("
                << fmt(r.pct_graph, 1) << "%), " << fmt(r.gbps_b2b, 0) << " back-to-back\n";
      results->push_back(r);
    }
    CUDA_CHECK(cudaFree(d_src));
    CUDA_CHECK(cudaFree(d_x));
    CUDA_CHECK(cudaFree(d_y));
  }
}

// Every quantized form `names` at every format and shape: random weights quantized on the host (what
// llama-quantize does), one vector and output sized for the largest shape.
void bench_quant(Run& run, const GemvOptions& opt, std::vector<Result>* results) {
  const cudaStream_t stream = run.se.stream;
  std::vector<std::string> names = opt.mappings;
  if (names.empty())
    for (const GemvRow& r : kGemvTable)
      if (r.has_quant()) names.push_back(r.name);
  std::vector<QuantGemvKind> kinds;  // each name's quantized form, resolved once
  for (const std::string& name : names) {
    const GemvPlan p = gemv_plan(name);
    if (!p.has_quant)
      fail("bench gemv --quant: GEMV mapping '", name, "' has no quantized form (quantized forms: ",
           gemv_mapping_list(/*quant=*/true), ")");
    kinds.push_back(p.quant);
  }
  int max_k = 1, max_n = 1;
  for (const auto& sh : opt.shapes) max_k = std::max(max_k, sh.second), max_n = std::max(max_n, sh.first);
  float* d_x = nullptr;
  float* d_y = nullptr;
  CUDA_CHECK(cudaMalloc(&d_x, size_t(max_k) * 4));
  CUDA_CHECK(cudaMalloc(&d_y, size_t(max_n) * 4));
  gemv_fill_random_f32(d_x, size_t(max_k), 0x5eedull, stream);
  for (const std::string& q : opt.quant) {
    const GgmlQuantType t = q == "q4_0"   ? GgmlQuantType::Q4_0
                            : q == "q4_1" ? GgmlQuantType::Q4_1
                            : q == "q8_0" ? GgmlQuantType::Q8_0
                            : q == "q5_0" ? GgmlQuantType::Q5_0
                            : q == "q5_1" ? GgmlQuantType::Q5_1
                            : q == "q6_k" ? GgmlQuantType::Q6_K
                            : q == "q5_k" ? GgmlQuantType::Q5_K
                                          : GgmlQuantType::Q4_K;
    for (const auto& [N, K] : opt.shapes) {
      // Random weights in [-1, 1) from the counter-based generator, quantized on the host.
      std::vector<float> w(size_t(N) * size_t(K));
      for (size_t i = 0; i < w.size(); ++i) w[i] = rng_value(0x5eedull + uint64_t(N), uint64_t(K), i, 0.0f, 1.0f);
      const std::vector<uint8_t> blocks = quantize_matrix(t, w.data(), N, K);
      w = std::vector<float>();
      for (size_t i = 0; i < names.size(); ++i) {
        Result r = bench_quant_one(kinds[i], q + "/" + names[i], blocks, int(t), N, K, d_x, d_y,
                                   run.rotation_bytes, run.repeats, stream, run.se.e0, run.se.e1);
        r.pct_graph = 100.0 * r.gbps_graph / run.roof.gbps;
        std::cerr << r.mapping << " " << N << "x" << K << ": " << fmt(r.gbps_graph, 0) << " GB/s graph ("
                  << fmt(r.pct_graph, 1) << "%), " << fmt(r.us_graph, 2) << " us\n";
        results->push_back(r);
      }
    }
  }
  CUDA_CHECK(cudaFree(d_x));
  CUDA_CHECK(cudaFree(d_y));
}

}  // namespace

int run_gemv(const GemvOptions& opt) {
  require_cuda_device();  // the one line every CUDA program prints without a GPU
  std::vector<const GemvMapping*> mappings;
  if (!opt.quant.empty())
    ;  // the quantized forms, bench_quant
  else if (opt.mappings.empty())
    mappings = gemv_mappings();
  else
    for (const std::string& name : opt.mappings) {
      const GemvPlan p = gemv_plan(name);
      if (p.bf16 == GemvBf16Form::None)
        fail("bench gemv: GEMV mapping '", name, "' runs quantized weights only: time it with --quant");
      mappings.push_back(&gemv_mapping(p.bf16));
    }

  const Device dev = current_device();
  Run run;
  run.repeats = opt.repeats;
  run.rotation_bytes = rotation_bytes(dev);
  run.roof = measure_roofline(opt.repeats);
  std::cerr << "roofline " << fmt(run.roof.gbps, 0) << " GB/s\n";

  int max_k = 1;
  for (const auto& s : opt.shapes) max_k = std::max(max_k, s.second);
  gemv_context_init(&run.ctx, run.se.stream, max_k);
  std::vector<Result> results;
  if (!opt.quant.empty())
    bench_quant(run, opt, &results);
  else
    bench_bf16(run, mappings, opt.shapes, &results);
  gemv_context_destroy(&run.ctx);

  if (opt.csv)
    print_csv(run.roof, results);
  else
    print_markdown(dev, run.roof, opt.repeats, run.rotation_bytes, results);
  if (!opt.json_path.empty()) write_json(opt.json_path, dev, run.roof, opt.repeats, run.rotation_bytes, results);
  return 0;
}

}  // namespace llm::bench
