// The dependency probe (measure/probes/dep_probe.h): its kernel and launcher, beside the measurements that run it.
#include "measure/probes/dep_probe.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_device.cuh"  // load_weights_streaming, fma_bf16x2

namespace llm {
namespace {

constexpr int kThreads = kDepProbeThreads;
constexpr int kLine = 32;  // counters 128 bytes apart
constexpr int kBatch = 8;  // weight loads in flight per thread

struct Args {
  unsigned* counters;
  float* vec;
  unsigned* errors;
  const uint4* w;
  int64_t w_chunks;  // 16-byte chunks of the weight buffer
  int wb;            // chunks per block per stage
  int n, stages;
  float* sink;
};

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <bool kCluster>
__device__ __forceinline__ void arrive(const Args& a, int s) {
  if constexpr (kCluster) {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  } else {
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(a.counters + kLine * s) : "memory");
  }
}
template <bool kCluster>
__device__ __forceinline__ void wait(const Args& a, int s) {
  if constexpr (kCluster) {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
  } else {
    if (threadIdx.x == 0)
      while (ld_acquire(a.counters + kLine * s) < gridDim.x) {
      }
    __syncthreads();
  }
}

template <bool kCluster, bool kBefore>
__global__ void __launch_bounds__(kThreads, 1) dep_probe_kernel(Args a) {
  __shared__ float xs[kDepProbeMaxVector];
  __shared__ float red[kThreads / 32];
  const int G = gridDim.x, b = blockIdx.x;
  const int own0 = int(int64_t(b) * a.n / G), own1 = int(int64_t(b + 1) * a.n / G);
  const int64_t step = int64_t(G) * a.wb;
  int64_t off = int64_t(b) * a.wb;  // this block's share of the stage's weights (rotated over the buffer)
  float acc = 0.0f;
  unsigned stale = 0;
  for (int s = 0; s < a.stages; ++s) {
    uint4 w[kBatch];
    if constexpr (kBefore) {
#pragma unroll
      for (int i = 0; i < kBatch; ++i)
        if (i * kThreads + int(threadIdx.x) < a.wb) w[i] = load_weights_streaming(a.w + off + i * kThreads + threadIdx.x);
    }
    if (s > 0) wait<kCluster>(a, s - 1);
    float ss = 0.0f;
    if (a.n > 0) {
      const float* src = a.vec + (s & 1) * kDepProbeMaxVector;
      for (int i = threadIdx.x; i < a.n; i += kThreads) {
        const float v = __ldcg(src + i);
        stale += v != float(s);
        xs[i] = v;
        ss += v * v;
      }
      for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
      __syncthreads();
      ss = 0.0f;
      for (int i = 0; i < kThreads / 32; ++i) ss += red[i];
    }
    for (int k0 = 0; k0 < a.wb; k0 += kBatch * kThreads) {
      if (!kBefore || k0 > 0) {
#pragma unroll
        for (int i = 0; i < kBatch; ++i) {
          const int k = k0 + i * kThreads + threadIdx.x;
          if (k < a.wb) w[i] = load_weights_streaming(a.w + off + k);
        }
      }
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int k = k0 + i * kThreads + threadIdx.x;
        if (k < a.wb) acc = fma_bf16x2(w[i].x, a.n > 0 ? xs[k % a.n] : 1.0f, 1.0f, acc);
      }
    }
    off += step;
    if (off + step > a.w_chunks) off = int64_t(b) * a.wb;
    if (a.n > 0) {  // this block's rows of the next stage's vector: s + 1 (acc and ss keep their loads live)
      float* dst = a.vec + ((s + 1) & 1) * kDepProbeMaxVector;
      for (int i = own0 + threadIdx.x; i < own1; i += kThreads) dst[i] = xs[i] + 1.0f + 0.0f * ss;
    }
    arrive<kCluster>(a, s);
  }
  if constexpr (kCluster) wait<kCluster>(a, a.stages - 1);
  if (stale) atomicAdd(a.errors, stale);
  if (threadIdx.x == 0) a.sink[b] = acc;
}

template <bool kCluster, bool kBefore>
void launch(const DepProbeConfig& c, const Args& a, cudaStream_t stream) {
  auto k = dep_probe_kernel<kCluster, kBefore>;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(c.blocks));
  cfg.blockDim = dim3(kThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  if (kCluster) {
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(c.blocks);
    attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  } else {
    attr[0].id = cudaLaunchAttributeCooperative;  // every block resident, or the launch fails
    attr[0].val.cooperative = 1;
  }
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, k, a));
}

}  // namespace

size_t dep_probe_counter_words(int stages) { return size_t(kLine) * size_t(stages); }

int dep_probe_max_blocks() {
  int dev = 0, sms = 0, per_sm = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, dep_probe_kernel<false, false>, kThreads, 0));
  return std::min(per_sm, 1) * sms;
}

int dep_probe_max_cluster() {
  int dev = 0, supported = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrClusterLaunch, dev));
  if (!supported) return 0;
  auto k = dep_probe_kernel<true, false>;
  CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(16);
  cfg.blockDim = dim3(kThreads);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 16;
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int n = 0;
  CUDA_CHECK(cudaOccupancyMaxPotentialClusterSize(&n, k, &cfg));
  return n;
}

void dep_probe_launch(const DepProbeConfig& c, const DepProbeBuffers& b, cudaStream_t stream) {
  if (c.stages < 1) fail("dep probe: stages ", c.stages, " (at least 1)");
  if (c.vector_floats < 0 || c.vector_floats > kDepProbeMaxVector)
    fail("dep probe: vector of ", c.vector_floats, " floats (0 to ", kDepProbeMaxVector, ")");
  if (c.blocks < 1) fail("dep probe: ", c.blocks, " blocks");
  if (c.sync == DepSync::kCluster) {
    const int most = dep_probe_max_cluster();
    if (c.blocks > most) fail("dep probe: a cluster of ", c.blocks, " blocks (this device schedules at most ", most, ")");
  } else if (c.blocks > dep_probe_max_blocks()) {
    fail("dep probe: ", c.blocks, " blocks cannot all be resident (at most ", dep_probe_max_blocks(), ")");
  }
  const int64_t wb = int64_t(c.weight_kb) * 1024 / 16;
  if (c.weight_kb < 0 || (wb > kBatch * kThreads && wb % (kBatch * kThreads) != 0))
    fail("dep probe: ", c.weight_kb, " KiB of weights per block (a multiple of ", kBatch * kThreads * 16 / 1024,
         " above it)");
  const int64_t chunks = int64_t(b.weight_bytes / 16);
  if (wb > 0 && chunks < 2 * wb * c.blocks)
    fail("dep probe: a weight buffer of ", b.weight_bytes, " bytes for ", c.blocks, " blocks of ", c.weight_kb, " KiB");
  CUDA_CHECK(cudaMemsetAsync(b.counters, 0, dep_probe_counter_words(c.stages) * 4, stream));
  CUDA_CHECK(cudaMemsetAsync(b.vec, 0, 2 * kDepProbeMaxVector * sizeof(float), stream));
  const Args a{b.counters, b.vec, b.errors, static_cast<const uint4*>(b.weights), chunks, int(wb), c.vector_floats,
               c.stages, b.sink};
  const bool cl = c.sync == DepSync::kCluster;
  if (cl && c.weights_before_wait) launch<true, true>(c, a, stream);
  else if (cl) launch<true, false>(c, a, stream);
  else if (c.weights_before_wait) launch<false, true>(c, a, stream);
  else launch<false, false>(c, a, stream);
}

}  // namespace llm
