// Host-side measurement helpers shared by the GEMV benchmark apps (gemv-bench, gemv-probes): argument parsing, event
// timing, graph timing, the streaming-read roofline, number formatting. CUDA apps only.
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"          // llm::fail
#include "kernels/cuda_check.h"  // CUDA_CHECK
#include "kernels/gemv.h"        // gemv_stream_read, gemv_fill_random_bf16

namespace llm {

inline std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// "NxK" -> (N, K), both positive; fails naming the flag's expected form.
inline std::pair<int, int> parse_shape(const std::string& s) {
  const size_t x = s.find('x');
  char* end1 = nullptr;
  char* end2 = nullptr;
  const long n = x == std::string::npos ? 0 : std::strtol(s.c_str(), &end1, 10);
  const long k = x == std::string::npos ? 0 : std::strtol(s.c_str() + x + 1, &end2, 10);
  if (x == std::string::npos || end1 != s.c_str() + x || *end2 != '\0' || n <= 0 || k <= 0 || n > (1L << 30) ||
      k > (1L << 30))
    fail("--shapes: expected NxK with positive integers (e.g. 4096x14336), found '", s, "'");
  return {int(n), int(k)};
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Times `body` between two events on `stream`; milliseconds.
template <typename F>
double time_ms(cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop, F body) {
  CUDA_CHECK(cudaEventRecord(start, stream));
  body();
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  return double(ms);
}

// Captures `iters` calls of body(i) into one CUDA graph, replays it once to warm up, then `repeats` times between
// events; returns the median milliseconds per call. body must not allocate or synchronise (it is being captured).
template <typename F>
double graph_ms_per_call(cudaStream_t stream, cudaEvent_t e0, cudaEvent_t e1, int iters, int repeats, F body) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    for (int i = 0; i < iters; ++i) body(i);
  } catch (...) {
    cudaStreamEndCapture(stream, &g);
    if (g) cudaGraphDestroy(g);
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(stream, &g));
  CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
  CUDA_CHECK(cudaGraphUpload(exec, stream));
  CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm-up replay
  std::vector<double> ms;
  for (int rep = 0; rep < repeats; ++rep)
    ms.push_back(time_ms(stream, e0, e1, [&] { CUDA_CHECK(cudaGraphLaunch(exec, stream)); }) / iters);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(g));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return median(ms);
}

struct Device {
  std::string name;
  int sms = 0;
  size_t l2_bytes = 0;
};

inline Device current_device() {
  int dev_id = 0;
  CUDA_CHECK(cudaGetDevice(&dev_id));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev_id));
  return Device{prop.name, prop.multiProcessorCount, size_t(prop.l2CacheSize)};
}

struct Roofline {
  double gbps = 0.0;
  size_t bytes = 0;
  int grid = 0, block = 0, kernels_tried = 0;
};

// Best median over a few grid shapes of a 16-byte-load streaming read of a buffer far larger than L2 (~2 GiB).
inline Roofline measure_roofline(const Device& dev, int repeats, cudaStream_t stream, cudaEvent_t e0, cudaEvent_t e1) {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  Roofline best;
  best.bytes = std::min<size_t>(size_t(2) << 30, free_bytes / 4) / 256 * 256;
  if (best.bytes < 8 * dev.l2_bytes)
    fail("roofline: only ", free_bytes >> 20, " MiB free, need ", 8 * dev.l2_bytes >> 20);
  void* buf = nullptr;
  uint32_t* sink = nullptr;
  CUDA_CHECK(cudaMalloc(&buf, best.bytes));
  const std::vector<std::pair<int, int>> configs = {  // (blocks per SM, threads per block)
      {4, 256}, {8, 256}, {16, 256}, {4, 512}, {2, 1024}};
  CUDA_CHECK(cudaMalloc(&sink, sizeof(uint32_t) * size_t(dev.sms) * 16));
  gemv_fill_random_bf16(static_cast<uint16_t*>(buf), best.bytes / 2, 0x5eed, stream);
  for (const auto& config : configs) {
    const int grid = dev.sms * config.first, block = config.second;
    gemv_stream_read(buf, best.bytes, grid, block, sink, stream);  // warm-up
    std::vector<double> ms;
    for (int r = 0; r < repeats; ++r)
      ms.push_back(time_ms(stream, e0, e1, [&] { gemv_stream_read(buf, best.bytes, grid, block, sink, stream); }));
    const double gbps = double(best.bytes) / (median(ms) * 1e-3) / 1e9;
    ++best.kernels_tried;
    if (gbps > best.gbps) {
      best.gbps = gbps;
      best.grid = grid;
      best.block = block;
    }
  }
  CUDA_CHECK(cudaFree(sink));
  CUDA_CHECK(cudaFree(buf));
  return best;
}

inline std::string fmt(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

inline std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

}  // namespace llm
