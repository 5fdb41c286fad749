// Programmatic dependent launch (sm_90): lets the next kernel in the stream start while this one drains.
// A kernel that precedes a GEMV calls pdl_launch_dependents() early; the GEMV (launched with the PDL attribute) streams
// its constant weights at once and calls pdl_wait() before reading x or writing y, which waits for this grid to
// complete and its writes to be visible. Without a PDL launch both are no-ops.
#pragma once
#include <cuda_runtime.h>

namespace llm {

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Launch configuration of a GEMV for cudaLaunchKernelEx: `grid` blocks of `block` threads on `stream`, with the PDL
// attribute when `pdl`. *attr is where the attribute lives: it must outlive the launch.
inline cudaLaunchConfig_t pdl_launch_config(unsigned grid, unsigned block, cudaStream_t stream, bool pdl,
                                            cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(block);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr->val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = pdl ? 1 : 0;
  return config;
}

}  // namespace llm
