// The kernels only measurement runs, outside the engine's kernels/: the streaming read behind the bandwidth roofline
// (measure/roofline.h) and the on-device random fills that give the benchmark sections (measure/bench/) their weights,
// caches and vectors. Host launchers; the device code is in bench_kernels.cu. CUDA builds only.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace llm {

// Reads `bytes` (a multiple of 16) of `buf` with 16-byte loads in a grid-stride loop of grid x block threads and
// writes one word per block into sink[grid] so the reads cannot be optimised away.
void gemv_stream_read(const void* buf, size_t bytes, int grid, int block, uint32_t* sink, cudaStream_t stream);
// Fills n BF16 values with rng_value(seed, 0, i, 0, 1) (uniform in [-1, 1)), on the device.
void gemv_fill_random_bf16(uint16_t* out, size_t n, uint64_t seed, cudaStream_t stream);
void gemv_fill_random_f32(float* out, size_t n, uint64_t seed, cudaStream_t stream);

}  // namespace llm
