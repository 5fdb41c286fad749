// The streaming-read roofline: the one measurement of what the GPU's memory can stream, used by llama-ab (through
// measure/ab_run.cpp, once per round) and by the sections of bench (measure/bench/, once per run), so "% of roofline"
// means the same thing everywhere.
//
// Method: gemv_stream_read (measure/probes/bench_kernels.cu: grid-stride 16-byte __ldcs loads, 4 in flight per thread,
// XOR-folded so no load is dead) over a 2 GiB buffer, far beyond any L2 (50 MB on the H200), so every byte comes from
// HBM; at each of 5 grid shapes (blocks per SM x threads per block: 2 x 1024, 4 x 512, 8 x 256, 16 x 128, 32 x 256,
// full occupancy from several directions) one untimed launch, then `reps` launches each timed with CUDA events; the
// figure is the best shape's median. CUDA builds only.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace llm {

struct RooflineResult {
  double gbps = 0.0;     // the best shape's median, 1e9 bytes per second
  size_t bytes = 0;      // bytes read per launch
  int grid = 0, block = 0;  // the best shape
  int shapes_tried = 0;
};

// Owns the buffer, a stream and two events on the current device; construct it before other large allocations so a
// later memory check sees what is left. Throws llm::Error when the buffer does not fit.
class Roofline {
 public:
  static constexpr size_t kBytes = size_t(2) << 30;
  static constexpr int kDefaultReps = 5;

  explicit Roofline(int reps = kDefaultReps);
  ~Roofline();
  Roofline(const Roofline&) = delete;
  Roofline& operator=(const Roofline&) = delete;

  RooflineResult measure();
  // One line for reports: "gemv_stream_read of a 2 GiB buffer, 16-byte loads, best of 5 grid shapes of the median of
  // <reps> CUDA-event timings".
  std::string method() const;

 private:
  int reps_ = kDefaultReps;
  int sm_count_ = 0;
  cudaStream_t stream_ = nullptr;
  void* buf_ = nullptr;
  uint32_t* sink_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace llm
