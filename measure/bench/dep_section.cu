// bench dep: what one dependency between the resident blocks of a persistent kernel costs (measure/probes/dep_probe.h),
// by way of synchronisation, grid size, the vector staged after it and the weights streamed per stage; CUDA-event
// timed, median of the repeats (the first run excluded), weights rotated over 2 GiB, beside the streaming-read
// roofline measured in the same run. The probe validates as it times: the section returns 1 when any block read a
// stale vector element (the barrier is then broken). dep-probe's table.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "engine/backend.h"              // require_cuda_device
#include "kernels/cuda_check.h"          // CUDA_CHECK
#include "measure/bench/harness.h"       // StreamEvents, measure_roofline, fmt
#include "measure/bench/sections.h"      // DepOptions
#include "measure/cuda_timing.h"         // current_device
#include "measure/probes/dep_probe.h"    // the probe kernel

namespace llm::bench {
namespace {

struct Row {
  DepProbeConfig c;
  double us = 0.0;
  unsigned stale = 0;
};

// The probe's device buffers, weights rotated over 2 GiB.
struct Buffers {
  DepProbeBuffers b;
  void* w = nullptr;
  explicit Buffers(int stages) {
    b.weight_bytes = size_t(2) << 30;
    CUDA_CHECK(cudaMalloc(&b.counters, dep_probe_counter_words(stages) * 4));
    CUDA_CHECK(cudaMalloc(&b.vec, 2 * kDepProbeMaxVector * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&b.errors, sizeof(unsigned)));
    CUDA_CHECK(cudaMalloc(&w, b.weight_bytes));
    CUDA_CHECK(cudaMalloc(&b.sink, 4096 * sizeof(float)));
    CUDA_CHECK(cudaMemset(w, 0x3c, b.weight_bytes));  // BF16 pairs of ~0.011
    CUDA_CHECK(cudaMemset(b.errors, 0, sizeof(unsigned)));
    b.weights = w;
  }
  ~Buffers() {
    cudaFree(w);
    cudaFree(b.counters);
    cudaFree(b.vec);
    cudaFree(b.errors);
    cudaFree(b.sink);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
};

// One row: `repeats` timed runs of c (each after an untimed one that resets the counters and the vector), the first
// timed run dropped, microseconds per stage of the median; the stale reads the runs counted.
Row measure(DepProbeConfig c, const DepOptions& o, const DepProbeBuffers& b, const StreamEvents& se) {
  c.stages = o.stages;
  std::vector<float> ms;
  unsigned before = 0, after = 0;
  CUDA_CHECK(cudaMemcpy(&before, b.errors, sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (int r = 0; r < o.repeats + 1; ++r) {
    dep_probe_launch(c, b, se.stream);  // resets the counters and the vector first (outside the timed region below)
    CUDA_CHECK(cudaStreamSynchronize(se.stream));
    CUDA_CHECK(cudaEventRecord(se.e0, se.stream));
    dep_probe_launch(c, b, se.stream);
    CUDA_CHECK(cudaEventRecord(se.e1, se.stream));
    CUDA_CHECK(cudaEventSynchronize(se.e1));
    float t = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&t, se.e0, se.e1));
    if (r > 0) ms.push_back(t);
  }
  CUDA_CHECK(cudaMemcpy(&after, b.errors, sizeof(unsigned), cudaMemcpyDeviceToHost));
  std::sort(ms.begin(), ms.end());
  return Row{c, 1e3 * double(ms[ms.size() / 2]) / o.stages, after - before};
}

// The rows, in table order: the counter bare and with the vector per grid size; weights after and before the wait at
// the largest grid; then per cluster size the cluster barrier bare, with the vector and with weights.
std::vector<Row> measure_all(const DepOptions& o, const DepProbeBuffers& b, const StreamEvents& se) {
  std::vector<Row> rows;
  const int most = dep_probe_max_blocks();
  for (int g : o.blocks) {
    if (g > most) continue;
    for (int vec : {0, o.vector}) rows.push_back(measure({DepSync::kCounter, g, 0, vec, 0, false}, o, b, se));
  }
  const int g = std::min(most, *std::max_element(o.blocks.begin(), o.blocks.end()));
  for (int kb : o.weights_kb)
    for (bool before : {false, true})
      rows.push_back(measure({DepSync::kCounter, g, 0, o.vector, kb, before}, o, b, se));
  const int max_cluster = dep_probe_max_cluster();
  for (int c : o.clusters) {
    if (c > max_cluster) {
      std::printf("(a cluster of %d blocks: this device schedules at most %d)\n", c, max_cluster);
      continue;
    }
    for (int vec : {0, o.vector}) rows.push_back(measure({DepSync::kCluster, c, 0, vec, 0, false}, o, b, se));
    for (int kb : o.weights_kb)
      rows.push_back(measure({DepSync::kCluster, c, 0, o.vector, kb, false}, o, b, se));
  }
  return rows;
}

// The table; returns the stale reads over all rows.
unsigned print_table(const DepOptions& o, const Device& dev, const RooflineResult& roof, const std::vector<Row>& rows) {
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
  return stale;
}

}  // namespace

int run_dep(const DepOptions& o) {
  require_cuda_device();
  const Device dev = current_device();
  const RooflineResult roof = measure_roofline(o.repeats);  // its buffer is freed before the probe's
  const StreamEvents se;
  const Buffers buffers(o.stages);
  const std::vector<Row> rows = measure_all(o, buffers.b, se);
  const unsigned stale = print_table(o, dev, roof, rows);
  if (stale) {
    std::fprintf(stderr, "error: %u stale vector reads: a barrier let a block read before its producers' writes\n",
                 stale);
    return 1;
  }
  return 0;
}

}  // namespace llm::bench
