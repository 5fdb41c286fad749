// The streaming-read roofline (see measure/roofline.h for the method).
#include "measure/roofline.h"

#include <vector>

#include "core/error.h"           // llm::fail
#include "kernels/cuda_check.h"   // CUDA_CHECK
#include "measure/probes/bench_kernels.h"  // gemv_stream_read
#include "measure/ab_stats.h"     // median
#include "measure/cuda_timing.h"  // time_ms

namespace llm {

namespace {

// (blocks per SM, threads per block): full occupancy from several directions; the best is the roofline.
constexpr int kShapes[][2] = {{2, 1024}, {4, 512}, {8, 256}, {16, 128}, {32, 256}};
constexpr int kShapeCount = int(sizeof kShapes / sizeof kShapes[0]);
constexpr int kMaxBlocksPerSm = 32;  // the most blocks per SM of any shape: the sink holds one word per block

}  // namespace

Roofline::Roofline(int reps) : reps_(reps) {
  if (reps < 1) fail("roofline: reps must be >= 1, found ", reps);
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  if (cudaMalloc(&buf_, kBytes) != cudaSuccess) {
    cudaGetLastError();
    buf_ = nullptr;
    cudaStreamDestroy(stream_);
    fail("cannot allocate the 2 GiB buffer of the read-bandwidth measurement (roofline)");
  }
  CUDA_CHECK(cudaMemsetAsync(buf_, 0x5A, kBytes, stream_));
  CUDA_CHECK(cudaMalloc(&sink_, sizeof(uint32_t) * size_t(sm_count_) * kMaxBlocksPerSm));
  CUDA_CHECK(cudaEventCreate(&start_));
  CUDA_CHECK(cudaEventCreate(&stop_));
}

Roofline::~Roofline() {
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
  cudaFree(sink_);
  cudaFree(buf_);
  cudaStreamDestroy(stream_);
}

RooflineResult Roofline::measure() {
  RooflineResult best;
  best.bytes = kBytes;
  for (const auto& sh : kShapes) {
    const int grid = sm_count_ * sh[0], block = sh[1];
    gemv_stream_read(buf_, kBytes, grid, block, sink_, stream_);  // warm-up
    std::vector<double> gbps;
    for (int r = 0; r < reps_; ++r) {
      const double ms =
          time_ms(stream_, start_, stop_, [&] { gemv_stream_read(buf_, kBytes, grid, block, sink_, stream_); });
      gbps.push_back(double(kBytes) / (ms * 1e6));
    }
    const double g = median(gbps);
    ++best.shapes_tried;
    if (g > best.gbps) {
      best.gbps = g;
      best.grid = grid;
      best.block = block;
    }
  }
  return best;
}

std::string Roofline::method() const {
  return "gemv_stream_read of a 2 GiB buffer, 16-byte loads, best of " + std::to_string(kShapeCount) +
         " grid shapes of the median of " + std::to_string(reps_) + " CUDA-event timings";
}

}  // namespace llm
