// dep-probe: what one dependency between the resident blocks of a persistent kernel costs (kernels/probes/dep_probe.h), by
// way of synchronisation, grid size, the vector staged after it and the weights streamed per stage; CUDA-event timed,
// median of the repeats (the first run excluded), weights rotated over 2 GiB, beside the streaming-read roofline
// measured in the same run. Exits 1 when any block read a stale vector element (the barrier is then broken).
//
//   dep-probe [--stages N] [--repeats R] [--vector N] [--blocks b1,b2,...] [--weights-kb k1,k2,...]
//             [--clusters c1,c2,...]
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "apps/bench_util.h"     // split_commas, fmt
#include "apps/cli.h"            // value, parse_int, run_main
#include "core/error.h"          // llm::fail
#include "engine/backend.h"      // require_cuda_device
#include "kernels/cuda_check.h"  // CUDA_CHECK
#include "kernels/probes/dep_probe.h"   // the probe kernel
#include "measure/cuda_timing.h" // current_device
#include "measure/roofline.h"    // Roofline

namespace llm {
namespace {

struct Options {
  int stages = 1000, repeats = 5, vector = 576;
  std::vector<int> blocks = {32, 64, 128};
  std::vector<int> weights_kb = {8, 16, 64};
  std::vector<int> clusters = {8, 16};
};

const char* kUsage =
    "usage: dep-probe [--stages N] [--repeats R] [--vector N] [--blocks b1,b2,...] [--weights-kb k1,k2,...]\n"
    "                 [--clusters c1,c2,...]\n"
    "  The cost of one grid-wide dependency (counter, as the persistent decode kernel) and of one cluster barrier,\n"
    "  bare, with a vector of N floats staged after it (default 576, SmolLM2's width), and with KiB of weights per\n"
    "  block streamed after (or issued before) the wait. Weight sizes: up to 64, or a multiple of 64.\n";

std::vector<int> int_list(const std::string& opt, const std::string& v, int lo, int hi) {
  std::vector<int> out;
  for (const std::string& s : split_commas(v)) out.push_back(int(cli::parse_int(opt, s, lo, hi)));
  if (out.empty()) fail(opt, ": no value given");
  return out;
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return cli::value(argc, argv, i, a); };
    if (a == "--stages") o.stages = int(cli::parse_int(a, value(), 1, 1000000));
    else if (a == "--repeats") o.repeats = int(cli::parse_int(a, value(), 2, 1000));
    else if (a == "--vector") o.vector = int(cli::parse_int(a, value(), 0, kDepProbeMaxVector));
    else if (a == "--blocks") o.blocks = int_list(a, value(), 1, 4096);
    else if (a == "--weights-kb") o.weights_kb = int_list(a, value(), 0, 1 << 16);
    else if (a == "--clusters") o.clusters = int_list(a, value(), 1, 16);
    else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else {
      fail("unknown option '", a, "'");
    }
  }
  return o;
}

struct Row {
  DepProbeConfig c;
  double us = 0.0;
  unsigned stale = 0;
};

int run(const Options& o) {
  require_cuda_device();
  const Device dev = current_device();
  RooflineResult roof;
  {
    Roofline r(o.repeats);  // its buffer is freed before the probe's
    roof = r.measure();
  }
  cudaStream_t stream = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  DepProbeBuffers b;
  b.weight_bytes = size_t(2) << 30;
  void* w = nullptr;
  CUDA_CHECK(cudaMalloc(&b.counters, dep_probe_counter_words(o.stages) * 4));
  CUDA_CHECK(cudaMalloc(&b.vec, 2 * kDepProbeMaxVector * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&b.errors, sizeof(unsigned)));
  CUDA_CHECK(cudaMalloc(&w, b.weight_bytes));
  CUDA_CHECK(cudaMalloc(&b.sink, 4096 * sizeof(float)));
  CUDA_CHECK(cudaMemset(w, 0x3c, b.weight_bytes));  // BF16 pairs of ~0.011
  CUDA_CHECK(cudaMemset(b.errors, 0, sizeof(unsigned)));
  b.weights = w;

  std::vector<Row> rows;
  auto measure = [&](DepProbeConfig c) {
    c.stages = o.stages;
    std::vector<float> ms;
    unsigned before = 0, after = 0;
    CUDA_CHECK(cudaMemcpy(&before, b.errors, sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (int r = 0; r < o.repeats + 1; ++r) {
      dep_probe_launch(c, b, stream);  // resets the counters and the vector first (outside the timed region below)
      CUDA_CHECK(cudaStreamSynchronize(stream));
      CUDA_CHECK(cudaEventRecord(e0, stream));
      dep_probe_launch(c, b, stream);
      CUDA_CHECK(cudaEventRecord(e1, stream));
      CUDA_CHECK(cudaEventSynchronize(e1));
      float t = 0.0f;
      CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
      if (r > 0) ms.push_back(t);
    }
    CUDA_CHECK(cudaMemcpy(&after, b.errors, sizeof(unsigned), cudaMemcpyDeviceToHost));
    std::sort(ms.begin(), ms.end());
    rows.push_back(Row{c, 1e3 * double(ms[ms.size() / 2]) / o.stages, after - before});
  };
  const int most = dep_probe_max_blocks();
  for (int g : o.blocks) {
    if (g > most) continue;
    for (int vec : {0, o.vector}) measure(DepProbeConfig{DepSync::kCounter, g, 0, vec, 0, false});
  }
  const int g = std::min(most, *std::max_element(o.blocks.begin(), o.blocks.end()));
  for (int kb : o.weights_kb)
    for (bool before : {false, true}) measure(DepProbeConfig{DepSync::kCounter, g, 0, o.vector, kb, before});
  const int max_cluster = dep_probe_max_cluster();
  for (int c : o.clusters) {
    if (c > max_cluster) {
      std::printf("(a cluster of %d blocks: this device schedules at most %d)\n", c, max_cluster);
      continue;
    }
    for (int vec : {0, o.vector}) measure(DepProbeConfig{DepSync::kCluster, c, 0, vec, 0, false});
    for (int kb : o.weights_kb) measure(DepProbeConfig{DepSync::kCluster, c, 0, o.vector, kb, false});
  }

  std::printf("device: %s, %d SMs; roofline %s GB/s (streaming read, best of %d grid shapes); %d stages per run, "
              "median of %d runs (one more untimed); %d threads per block\n\n",
              dev.name.c_str(), dev.sms, fmt(roof.gbps, 0).c_str(), roof.shapes_tried, o.stages, o.repeats,
              kDepProbeThreads);
  std::printf("| sync | blocks | vector | KiB/block | weights loaded | us/stage | weights GB/s | %% roofline | "
              "stale reads |\n| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n");
  unsigned stale = 0;
  for (const Row& r : rows) {
    const double gbps = double(r.c.blocks) * r.c.weight_kb * 1024.0 / (r.us * 1e3);
    std::printf("| %s | %d | %d | %d | %s | %.3f | %s | %s | %u |\n",
                r.c.sync == DepSync::kCounter ? "counter" : "cluster", r.c.blocks, r.c.vector_floats, r.c.weight_kb,
                r.c.weight_kb == 0 ? "-" : r.c.weights_before_wait ? "before the wait" : "after the wait", r.us,
                r.c.weight_kb ? fmt(gbps, 0).c_str() : "-",
                r.c.weight_kb ? fmt(100.0 * gbps / roof.gbps, 1).c_str() : "-", r.stale);
    stale += r.stale;
  }
  CUDA_CHECK(cudaFree(w));
  CUDA_CHECK(cudaFree(b.counters));
  CUDA_CHECK(cudaFree(b.vec));
  CUDA_CHECK(cudaFree(b.errors));
  CUDA_CHECK(cudaFree(b.sink));
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  CUDA_CHECK(cudaStreamDestroy(stream));
  if (stale) {
    std::fprintf(stderr, "error: %u stale vector reads: a barrier let a block read before its producers' writes\n",
                 stale);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace llm

int main(int argc, char** argv) { return llm::cli::run_main("dep-probe", argc, argv, llm::parse_args, llm::run); }
