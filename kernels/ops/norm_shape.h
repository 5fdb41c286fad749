// The launch shape of the RMSNorm kernels (kernels/ops/norm.cu), shared with the kernels that must reduce a row's sum
// of squares in exactly the same order (kernels/quant/gemv_quant_batch.cu: RMSNorm fused with the int8 rounding).
#pragma once

namespace llm {

// One row is latency-bound on one SM: about four elements per thread, a multiple of 32, from 32 up to 1024 threads.
inline int rmsnorm_threads(int dim) {
  const int t = ((dim + 3) / 4 + 31) / 32 * 32;
  return t < 32 ? 32 : (t > 1024 ? 1024 : t);
}

}  // namespace llm
