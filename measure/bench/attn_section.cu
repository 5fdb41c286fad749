// bench attn: the attention kernels of kernels/ops/ops.h at long contexts, Llama 3.1 8B's shape by default
// (attn-bench's tables and JSON keys, as docs/results read them). Decode attention as GB/s of the KV-cache bytes it
// must read, beside the streaming-read roofline measured in the same run (measure/roofline.h); causal prefill
// attention as TFLOP/s. Caches hold random BF16 and every call takes the next of several caches whose bytes together
// exceed 4x L2, so each decode call streams its cache from HBM.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend.h"                // require_cuda_device
#include "kernels/cuda_check.h"            // CUDA_CHECK
#include "kernels/ops/ops.h"               // attention_decode, attention_decode_scratch_bytes, attention_prefill
#include "measure/bench/harness.h"         // StreamEvents, measure_roofline, fmt, rounded, write_file
#include "measure/bench/sections.h"        // AttnOptions
#include "measure/cuda_timing.h"           // time_ms, graph_ms_per_call, current_device, median
#include "measure/probes/bench_kernels.h"  // gemv_fill_random_bf16, gemv_fill_random_f32: random caches and queries

namespace llm::bench {
namespace {

using Options = AttnOptions;

constexpr size_t kReserveBytes = size_t(256) << 20;  // left free for the CUDA context, kernels, fragmentation
constexpr int kMinDecodeCallsPerRep = 64;            // graph replays of at least this many calls: far above event noise
constexpr int kMaxDefaultCaches = 1024;              // short lengths: a rotation (and graph) of at most this many calls

double mib(double bytes) { return bytes / double(size_t(1) << 20); }
double gib(double bytes) { return bytes / double(size_t(1) << 30); }

struct Bench {
  Options o;
  Device dev;
  RooflineResult roof;
  StreamEvents se;
  cudaStream_t stream = se.stream;
  cudaEvent_t e0 = se.e0, e1 = se.e1;
  int kv_dim() const { return o.kv_heads * o.head_dim; }
  int q_dim() const { return o.heads * o.head_dim; }
};

// K or V of one cache of `rows` positions [rows, kv_dim] BF16, padded so every plane starts on a 256-byte boundary.
size_t plane_elems(int rows, int kv_dim) {
  const size_t bytes = size_t(rows) * size_t(kv_dim) * 2;
  return (bytes + 255) / 256 * 256 / 2;
}

// The caches one length is timed over: --layers of them, or enough that their bytes exceed 4x L2 (at least 2, so
// consecutive calls never read the same cache; at most kMaxDefaultCaches), as far as free memory allows beside the
// length's other buffers.
struct CachePlan {
  int count = 0;   // 0: not even one fits (or fewer than --layers asked): the length is skipped
  int wanted = 0;
  size_t cache_bytes = 0, other_bytes = 0, free_bytes = 0;
  size_t working_set() const { return size_t(count) * cache_bytes; }
};

CachePlan plan_caches(const Bench& b, int rows, size_t other_bytes) {
  CachePlan p;
  p.cache_bytes = 2 * plane_elems(rows, b.kv_dim()) * 2;
  p.other_bytes = other_bytes;
  const size_t l2_rotation = 4 * b.dev.l2_bytes / p.cache_bytes + 1;
  p.wanted = b.o.layers > 0 ? b.o.layers : int(std::clamp<size_t>(l2_rotation, 2, size_t(kMaxDefaultCaches)));
  size_t total = 0;
  CUDA_CHECK(cudaMemGetInfo(&p.free_bytes, &total));
  const size_t keep = kReserveBytes + other_bytes;
  const size_t fit = p.free_bytes > keep ? (p.free_bytes - keep) / p.cache_bytes : 0;
  p.count = fit >= size_t(p.wanted) ? p.wanted : b.o.layers > 0 ? 0 : int(fit);  // --layers: exactly that or none
  return p;
}

// One line on stdout: what a length is timed over, or why it is skipped; false when skipped.
bool say_plan(const Bench& b, const char* part, int length, const CachePlan& p) {
  const double l2 = double(b.dev.l2_bytes);
  std::cout << part << " " << length << ": ";
  if (p.count == 0) {
    std::cout << "skipped: " << p.wanted << " cache(s) of " << fmt(mib(double(p.cache_bytes)), 1) << " MiB need "
              << fmt(gib(double(p.wanted * p.cache_bytes + p.other_bytes + kReserveBytes)), 2)
              << " GiB with the other buffers and a reserve, " << fmt(gib(double(p.free_bytes)), 2) << " GiB free\n";
    return false;
  }
  std::cout << p.count << " caches of " << fmt(mib(double(p.cache_bytes)), 1) << " MiB (K and V) rotated, working set "
            << fmt(mib(double(p.working_set())), 1) << " MiB = " << fmt(double(p.working_set()) / l2, 1) << "x L2";
  if (p.count < p.wanted) std::cout << " (memory allows " << p.count << " of the " << p.wanted << " wanted)";
  if (double(p.working_set()) <= 4 * l2) std::cout << "; not above 4x L2: L2 may serve part of the reads";
  std::cout << "\n" << std::flush;
  return true;
}

// `p.count` caches of `rows` positions, K then V each, in one allocation of random BF16.
struct Caches {
  uint16_t* base = nullptr;
  size_t plane_elems = 0;
  int count = 0;
  const uint16_t* k(int i) const { return base + size_t(2 * (i % count)) * plane_elems; }
  const uint16_t* v(int i) const { return k(i) + plane_elems; }
};

Caches alloc_caches(const Bench& b, int rows, const CachePlan& p, uint64_t seed) {
  Caches c;
  c.plane_elems = plane_elems(rows, b.kv_dim());
  c.count = p.count;
  const size_t elems = 2 * c.plane_elems * size_t(c.count);
  CUDA_CHECK(cudaMalloc(&c.base, elems * 2));
  gemv_fill_random_bf16(c.base, elems, seed, b.stream);  // uniform in [-1, 1): softmax weights stay well spread
  return c;
}

struct DecodeRow {
  int context = 0, max_ctx = 0, chunk = 0, caches = 0, calls_per_rep = 0;
  size_t working_set = 0;
  int64_t kv_bytes = 0;  // K and V rows 0 .. L - 1 (q and out not counted)
  double us = 0, gbps = 0, pct_roofline = 0, model_ms = 0;
};

struct PrefillRow {
  int tokens = 0, caches = 0;
  size_t working_set = 0;
  double ms = 0, flops = 0, tflops = 0, model_ms = 0, model_tokens_per_s = 0;
};

struct Skip {
  std::string part;
  int length = 0;
};

// Decode at every context length: query at position L - 1 (*d_pos, device memory, as the engine passes it), timed in
// CUDA-graph replays of whole rotations over the caches after one untimed rotation and one untimed replay.
void bench_decode(const Bench& b, std::vector<DecodeRow>* rows, std::vector<Skip>* skipped) {
  const Options& o = b.o;
  if (o.contexts.empty()) return;
  const int largest = *std::max_element(o.contexts.begin(), o.contexts.end());
  size_t scratch_bytes = 16;
  for (int L : o.contexts)
    scratch_bytes = std::max({scratch_bytes, attention_decode_scratch_bytes(o.heads, o.head_dim, L),
                              attention_decode_scratch_bytes(o.heads, o.head_dim, largest)});
  float *q = nullptr, *out = nullptr;
  int* d_pos = nullptr;
  void* scratch = nullptr;
  CUDA_CHECK(cudaMalloc(&q, size_t(b.q_dim()) * 4));
  CUDA_CHECK(cudaMalloc(&out, size_t(b.q_dim()) * 4));
  CUDA_CHECK(cudaMalloc(&d_pos, sizeof(int)));
  CUDA_CHECK(cudaMalloc(&scratch, scratch_bytes));
  gemv_fill_random_f32(q, size_t(b.q_dim()), 0x9e3779b9ull, b.stream);

  for (int L : o.contexts) {
    const CachePlan plan = plan_caches(b, L, 0);
    if (!say_plan(b, "decode", L, plan)) {
      skipped->push_back({"decode", L});
      continue;
    }
    const Caches c = alloc_caches(b, L, plan, 0xdec0deull + uint64_t(L));
    const int pos = L - 1;
    CUDA_CHECK(cudaMemcpyAsync(d_pos, &pos, sizeof pos, cudaMemcpyHostToDevice, b.stream));
    CUDA_CHECK(cudaStreamSynchronize(b.stream));
    std::vector<int> max_ctxs = {L};
    if (L < largest) max_ctxs.push_back(largest);
    for (int max_ctx : max_ctxs) {
      auto call = [&](int i) {
        attention_decode(q, c.k(i), c.v(i), d_pos, o.heads, o.kv_heads, o.head_dim, max_ctx, out, scratch, b.stream);
      };
      for (int i = 0; i < c.count; ++i) call(i);  // untimed rotation: lazy state, clocks
      CUDA_CHECK(cudaStreamSynchronize(b.stream));
      DecodeRow r;
      r.context = L;
      r.max_ctx = max_ctx;
      r.chunk = attention_decode_chunk(o.kv_heads, L);  // rows per split at this length (any max_ctx)
      r.caches = c.count;
      r.working_set = plan.working_set();
      // Whole rotations: every cache read equally often.
      r.calls_per_rep = (kMinDecodeCallsPerRep + c.count - 1) / c.count * c.count;
      r.us = 1e3 * graph_ms_per_call(b.stream, b.e0, b.e1, r.calls_per_rep, o.reps, call);
      r.kv_bytes = 2 * int64_t(L) * b.kv_dim() * 2;
      r.gbps = double(r.kv_bytes) / (r.us * 1e3);
      r.pct_roofline = 100.0 * r.gbps / b.roof.gbps;
      r.model_ms = r.us * o.model_layers / 1e3;
      std::cerr << "decode " << L << " (max_ctx " << max_ctx << "): " << fmt(r.us, 2) << " us, " << fmt(r.gbps, 0)
                << " GB/s (" << fmt(r.pct_roofline, 1) << "%)\n";
      rows->push_back(r);
    }
    CUDA_CHECK(cudaFree(c.base));
  }
  CUDA_CHECK(cudaFree(q));
  CUDA_CHECK(cudaFree(out));
  CUDA_CHECK(cudaFree(d_pos));
  CUDA_CHECK(cudaFree(scratch));
}

// Prefill of N tokens at positions 0 .. N - 1 over caches holding rows 0 .. N - 1: one untimed call, then `reps`
// calls each timed with CUDA events, each on the next cache.
void bench_prefill(const Bench& b, std::vector<PrefillRow>* rows, std::vector<Skip>* skipped) {
  const Options& o = b.o;
  for (int N : o.prefill) {
    const size_t act_bytes = 2 * size_t(N) * size_t(b.q_dim()) * 4;  // q and out, FP32
    const CachePlan plan = plan_caches(b, N, act_bytes);
    if (!say_plan(b, "prefill", N, plan)) {
      skipped->push_back({"prefill", N});
      continue;
    }
    float *q = nullptr, *out = nullptr;
    CUDA_CHECK(cudaMalloc(&q, act_bytes / 2));
    CUDA_CHECK(cudaMalloc(&out, act_bytes / 2));
    gemv_fill_random_f32(q, size_t(N) * size_t(b.q_dim()), 0x9e3779b9ull + uint64_t(N), b.stream);
    const Caches c = alloc_caches(b, N, plan, 0x9ef111ull + uint64_t(N));
    auto call = [&](int i) {
      attention_prefill(q, c.k(i), c.v(i), 0, N, o.heads, o.kv_heads, o.head_dim, out, b.stream);
    };
    call(0);  // untimed
    CUDA_CHECK(cudaStreamSynchronize(b.stream));
    std::vector<double> ms;
    for (int rep = 0; rep < o.reps; ++rep) ms.push_back(time_ms(b.stream, b.e0, b.e1, [&] { call(rep + 1); }));
    PrefillRow r;
    r.tokens = N;
    r.caches = c.count;
    r.working_set = plan.working_set();
    r.ms = median(ms);
    r.flops = 4.0 * o.heads * o.head_dim * (double(N) * (double(N) + 1) / 2);  // QK^T and PV over the causal half
    r.tflops = r.flops / (r.ms * 1e9);
    r.model_ms = r.ms * o.model_layers;
    r.model_tokens_per_s = 1e3 * N / r.model_ms;
    std::cerr << "prefill " << N << ": " << fmt(r.ms, 3) << " ms, " << fmt(r.tflops, 1) << " TFLOP/s\n";
    rows->push_back(r);
    CUDA_CHECK(cudaFree(c.base));
    CUDA_CHECK(cudaFree(q));
    CUDA_CHECK(cudaFree(out));
  }
}

void print_tables(const Bench& b, const std::vector<DecodeRow>& decode, const std::vector<PrefillRow>& prefill) {
  const Options& o = b.o;
  const std::string x_layers = "x " + std::to_string(o.model_layers) + " layers";
  if (!decode.empty()) {
    std::cout << "\n| context | max_ctx | chunk | caches | us/call | KV MB/call | GB/s | % roofline | " << x_layers
              << " ms/token |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for (const DecodeRow& r : decode)
      std::cout << "| " << r.context << " | " << r.max_ctx << " | " << r.chunk << " | " << r.caches << " | "
                << fmt(r.us, 2) << " | " << fmt(double(r.kv_bytes) / 1e6, 1) << " | " << fmt(r.gbps, 0) << " | "
                << fmt(r.pct_roofline, 1) << "% | " << fmt(r.model_ms, 3) << " |\n";
  }
  if (!prefill.empty()) {
    std::cout << "\n| prefill tokens | caches | ms/call | TFLOP/s | " << x_layers << " ms | " << x_layers
              << " tokens/s |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for (const PrefillRow& r : prefill)
      std::cout << "| " << r.tokens << " | " << r.caches << " | " << fmt(r.ms, 3) << " | " << fmt(r.tflops, 1)
                << " | " << fmt(r.model_ms, 1) << " | " << fmt(r.model_tokens_per_s, 0) << " |\n";
  }
}

void write_json(const std::string& path, const Bench& b, const std::vector<DecodeRow>& decode,
                const std::vector<PrefillRow>& prefill, const std::vector<Skip>& skipped) {
  using json = nlohmann::ordered_json;
  const Options& o = b.o;
  json j;
  j["device"] = b.dev.name;
  j["sms"] = b.dev.sms;
  j["l2_bytes"] = b.dev.l2_bytes;
  j["shape"] = {{"heads", o.heads}, {"kv_heads", o.kv_heads}, {"head_dim", o.head_dim}, {"kv_dtype", "bf16"}};
  j["model_layers"] = o.model_layers;
  j["reps"] = o.reps;
  j["roofline"] = {{"gbps", rounded(b.roof.gbps, 1)}, {"bytes", b.roof.bytes}, {"grid", b.roof.grid},
                   {"block", b.roof.block}, {"shapes_tried", b.roof.shapes_tried}};
  j["decode"] = json::array();
  for (const DecodeRow& r : decode)
    j["decode"].push_back({{"context", r.context},
                           {"max_ctx", r.max_ctx},
                           {"chunk", r.chunk},
                           {"caches", r.caches},
                           {"working_set_bytes", r.working_set},
                           {"calls_per_rep", r.calls_per_rep},
                           {"us_per_call", rounded(r.us, 3)},
                           {"kv_bytes", r.kv_bytes},
                           {"gbps", rounded(r.gbps, 1)},
                           {"pct_roofline", rounded(r.pct_roofline, 2)},
                           {"model_ms_per_token", rounded(r.model_ms, 4)}});
  j["prefill"] = json::array();
  for (const PrefillRow& r : prefill)
    j["prefill"].push_back({{"tokens", r.tokens},
                            {"caches", r.caches},
                            {"working_set_bytes", r.working_set},
                            {"ms_per_call", rounded(r.ms, 4)},
                            {"causal_flops", r.flops},
                            {"tflops", rounded(r.tflops, 2)},
                            {"model_ms", rounded(r.model_ms, 3)},
                            {"model_tokens_per_s", rounded(r.model_tokens_per_s, 1)}});
  j["skipped"] = json::array();
  for (const Skip& s : skipped) j["skipped"].push_back({{"part", s.part}, {"length", s.length}});
  write_file("--json", path, j.dump(2) + "\n");
}

}  // namespace

int run_attn(const Options& o) {
  require_cuda_device();  // the one line every CUDA program prints without a GPU
  Bench b;
  b.o = o;
  b.dev = current_device();
  b.roof = measure_roofline(o.reps);  // its 2 GiB buffer is freed before the caches are allocated
  std::cout << "attn-bench: " << b.dev.name << ", " << b.dev.sms << " SMs, " << (b.dev.l2_bytes >> 20)
            << " MiB L2; " << o.heads << " heads, " << o.kv_heads << " KV heads, head_dim " << o.head_dim
            << ", BF16 K and V\n";
  std::cout << "roofline: " << fmt(b.roof.gbps, 0) << " GB/s (streaming read of " << fmt(gib(double(b.roof.bytes)), 2)
            << " GiB with 16-byte loads, best of " << b.roof.shapes_tried << " grid shapes: " << b.roof.grid << " x "
            << b.roof.block << ")\n";
  std::cout << "decode: median of " << o.reps << " CUDA-graph replays of whole rotations (>= "
            << kMinDecodeCallsPerRep << " calls, call i on cache i mod caches) after an untimed rotation and replay; "
            << "KV bytes = 2 x context x " << b.kv_dim() << " x 2 B (q and out, " << b.q_dim() * 8
            << " B, not counted); max_ctx above the context: a cache of max_ctx positions read to the context, as the "
            << "engine's (the split rows follow the length on the device)\n";
  std::cout << "prefill: median of " << o.reps << " calls timed with CUDA events, each on the next cache, after one "
            << "untimed call; causal FLOPs = 4 x " << o.heads << " x " << o.head_dim << " x N (N + 1) / 2 (for "
            << "scale: an H100/H200 SXM's dense BF16 tensor-core peak is 989 TFLOP/s by NVIDIA's datasheet, not "
            << "measured here)\n";

  std::vector<DecodeRow> decode;
  std::vector<PrefillRow> prefill;
  std::vector<Skip> skipped;
  bench_decode(b, &decode, &skipped);
  bench_prefill(b, &prefill, &skipped);
  print_tables(b, decode, prefill);
  if (!o.json_path.empty()) write_json(o.json_path, b, decode, prefill, skipped);
  return 0;
}

}  // namespace llm::bench
