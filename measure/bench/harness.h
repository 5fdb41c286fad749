// What every section of the benchmark harness (measure/bench/, run as `bench SECTION`) shares: number formatting and
// the result files, and the fixed parts of a run (a stream with two
// timing events, the streaming-read roofline, the rotation size that keeps weights out of L2). The timing protocols
// themselves are measure/cuda_timing.h's (event timing, graph replays); the roofline is measure/roofline.h's.
// CUDA builds only.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"           // llm::fail
#include "kernels/cuda_check.h"   // CUDA_CHECK
#include "measure/cuda_timing.h"  // Device
#include "measure/roofline.h"     // Roofline, RooflineResult

namespace llm::bench {

inline std::string fmt(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// v rounded to `decimals` places: the precision the JSON files keep (nlohmann writes the shortest exact form).
inline double rounded(double v, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(v * scale) / scale;
}

// Writes `text` to `path` (a --json or --manifest file), or fails "FLAG: cannot write 'PATH'" / "FLAG: error
// writing 'PATH'".
inline void write_file(const std::string& flag, const std::string& path, const std::string& text) {
  std::ofstream f(path);
  if (!f) fail(flag, ": cannot write '", path, "'");
  f << text;
  if (!f) fail(flag, ": error writing '", path, "'");
}

// The weights (or caches) a section rotates over: at least 4x L2 and at least 256 MiB, so a call finds none of its
// bytes in L2.
inline size_t rotation_bytes(const Device& dev) { return std::max<size_t>(4 * dev.l2_bytes, size_t(256) << 20); }

// The roofline of this run; its 2 GiB buffer is freed before the caller allocates its own buffers.
inline RooflineResult measure_roofline(int reps) {
  Roofline roofline(reps);
  return roofline.measure();
}

// A non-blocking stream and two timing events, destroyed with the object.
struct StreamEvents {
  cudaStream_t stream = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  StreamEvents() {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
  }
  ~StreamEvents() {
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(stream);
  }
  StreamEvents(const StreamEvents&) = delete;
  StreamEvents& operator=(const StreamEvents&) = delete;
};

}  // namespace llm::bench
