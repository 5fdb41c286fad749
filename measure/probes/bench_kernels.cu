// The measurement kernels of measure/probes/bench_kernels.h: a streaming read (the bandwidth roofline) and on-device
// random fills (the benchmark sections' inputs).
#include "measure/probes/bench_kernels.h"

#include "core/counter_rng.h"  // rng_value
#include "core/dtype.h"        // f32_to_bf16
#include "core/error.h"        // llm::fail
#include "kernels/cuda_check.h"

namespace llm {
namespace {

// Grid-stride 16-byte reads, 4 independent loads per trip, XOR-folded into one word per block so no load is dead.
__global__ void stream_read_kernel(const uint4* __restrict__ buf, size_t n16, uint32_t* __restrict__ sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t acc = 0;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = __ldcs(buf + i + u * stride);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = __ldcs(buf + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, off);
  __shared__ uint32_t warp_acc[32];
  if ((threadIdx.x & 31) == 0) warp_acc[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t s = 0;
    for (int w = 0; w < int(blockDim.x >> 5); ++w) s ^= warp_acc[w];
    sink[blockIdx.x] = s;
  }
}

__global__ void fill_bf16_kernel(uint16_t* out, size_t n, uint64_t seed) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = f32_to_bf16(rng_value(seed, 0, i, 0.0f, 1.0f));
}

__global__ void fill_f32_kernel(float* out, size_t n, uint64_t seed) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = rng_value(seed, 1, i, 0.0f, 1.0f);
}

}  // namespace

void gemv_stream_read(const void* buf, size_t bytes, int grid, int block, uint32_t* sink, cudaStream_t stream) {
  if (bytes % 16 != 0 || (reinterpret_cast<uintptr_t>(buf) & 15) != 0 || block % 32 != 0 || block > 1024)
    fail("gemv_stream_read: need 16-byte aligned buffer and size, block a multiple of 32 (bytes ", bytes,
         ", block ", block, ")");
  stream_read_kernel<<<grid, block, 0, stream>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
  CUDA_CHECK_LAUNCH("stream_read_kernel");
}

void gemv_fill_random_bf16(uint16_t* out, size_t n, uint64_t seed, cudaStream_t stream) {
  fill_bf16_kernel<<<1024, 256, 0, stream>>>(out, n, seed);
  CUDA_CHECK_LAUNCH("fill_bf16_kernel");
}

void gemv_fill_random_f32(float* out, size_t n, uint64_t seed, cudaStream_t stream) {
  fill_f32_kernel<<<256, 256, 0, stream>>>(out, n, seed);
  CUDA_CHECK_LAUNCH("fill_f32_kernel");
}

}  // namespace llm
