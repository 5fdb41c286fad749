// "warp-dp4a" (quantized): "warp"'s coalesced 16-byte code loads and plan, with x quantized to int8 per 32 once per
// call (as llama.cpp's q8_1) and dp4a dot products: about 0.6 integer instructions per INT4 weight instead of 3 FP32 ones.
//
// Two launches per call, both PDL: quant_x_q8_kernel (one thread per block of 32 x values: d = amax / 127, q = round(x
// / d), sums of q per 16) into the caller's QuantGemvScratch, then the warp kernel (kernels/gemv_quant_device.cuh) with
// kDp4a: per chunk and row 8 (Int4) or 4 (Int8) dp4a on the codes and the int8 x (two or one 16-byte xq loads per
// chunk, shared by the R rows: a quarter of "warp"'s x traffic), then (s * d_x) * float(dot + offset * sum q)
// (+ (m * d_x) * float(sum q)). The integer dot is exact; the result differs from "warp" by the rounding of x.
#include "kernels/cuda_check.h"
#include "kernels/gemv_quant_device.cuh"
#include "kernels/gemv_quant_internal.h"
#include "kernels/pdl.cuh"

namespace llm {
namespace {

constexpr int kWarps = kQuantWarpsPerBlock;
constexpr int kXThreads = 128;

__global__ void __launch_bounds__(kXThreads) quant_x_q8_kernel(const float* __restrict__ x, int blocks,
                                                               int8_t* __restrict__ xq, float* __restrict__ xd,
                                                               int* __restrict__ xs16) {
  pdl_wait();                // x belongs to the predecessor
  pdl_launch_dependents();   // the GEMV may start streaming weights; it waits for this grid before reading xq
  const int b = int(blockIdx.x) * kXThreads + int(threadIdx.x);
  if (b < blocks) quant_x_q8_block(x, b, xq, xd, xs16);
}

using Kernel = void (*)(QuantPackedArgs);

Kernel pick(int type_id) {
  using namespace quant_type_id;
  switch (type_id) {  // kVecX is unused by the dp4a chunk (xq is always 16-byte aligned)
    case kQ4_0: return quant_gemv_warp_kernel<true, false, false, true, true>;
    case kQ4_1: return quant_gemv_warp_kernel<true, false, true, true, true>;
    case kQ4_K: return quant_gemv_warp_kernel<true, true, true, true, true>;
    case kQ8_0:
    case kQ5_0: return quant_gemv_warp_kernel<false, false, false, true, true>;
    case kQ5_1: return quant_gemv_warp_kernel<false, false, true, true, true>;
    case kQ6_K: return quant_gemv_warp_kernel<false, true, false, true, true>;
  }
  fail("quantized gemv 'warp-dp4a': no kernel for GGML type id ", type_id);
}

}  // namespace

void quant_gemv_warp_dp4a_launch(const QuantGemvWeight& w, const QuantGemvPlan& plan, const float* x, float* y,
                                 bool accumulate, const QuantGemvScratch& scratch, cudaStream_t stream) {
  if (plan.grid <= 0 || plan.splits < 1 || plan.splits > kWarps || kWarps % plan.splits != 0 ||
      int64_t(plan.grid) * (kWarps / plan.splits) < plan.row_groups ||
      int64_t(plan.slice_units) * plan.splits < plan.units)
    fail("quantized gemv 'warp-dp4a': bad plan (grid ", plan.grid, ", splits ", plan.splits, ", row groups ",
         plan.row_groups, ")");
  if ((reinterpret_cast<uintptr_t>(scratch.xq) & 15) != 0 || scratch.max_k < w.k)
    fail("quantized gemv 'warp-dp4a': scratch too small or misaligned");
  const int blocks = int(w.k / 32);
  cudaLaunchAttribute attr_x;
  const cudaLaunchConfig_t config_x =
      pdl_launch_config(unsigned((blocks + kXThreads - 1) / kXThreads), kXThreads, stream, true, &attr_x);
  CUDA_CHECK(cudaLaunchKernelEx(&config_x, quant_x_q8_kernel, x, blocks, scratch.xq, scratch.xd, scratch.xs16));

  QuantPackedArgs args = quant_packed_args(w, plan, x, y, accumulate);
  args.xq = scratch.xq;
  args.xd = scratch.xd;
  args.xs16 = scratch.xs16;
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t config = pdl_launch_config(unsigned(plan.grid), kQuantGemvThreads, stream, true, &attr);
  CUDA_CHECK(cudaLaunchKernelEx(&config, pick(w.type_id), args));
}

}  // namespace llm
