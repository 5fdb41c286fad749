// Timing on the GPU for the benchmarks and the roofline: event timing of a body of launches, the median time per
// call of a captured CUDA graph, and the device facts a benchmark reports. CUDA builds only (header-only templates).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"  // CUDA_CHECK
#include "measure/ab_stats.h"    // median

namespace llm {

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

// The current device as a benchmark reports it.
struct Device {
  std::string name;
  int sms = 0;
  size_t l2_bytes = 0;
  int max_warps_per_sm = 0;
};

inline Device current_device() {
  int dev_id = 0;
  CUDA_CHECK(cudaGetDevice(&dev_id));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev_id));
  return Device{prop.name, prop.multiProcessorCount, size_t(prop.l2CacheSize), prop.maxThreadsPerMultiProcessor / 32};
}

}  // namespace llm
