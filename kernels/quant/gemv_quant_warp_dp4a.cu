// "warp-dp4a" (quantized): "warp"'s coalesced 16-byte code loads, ring and plan, with x quantized to int8 per 32 (as
// llama.cpp's q8_1) and dp4a dot products: about 0.6 integer instructions per INT4 weight instead of 3 FP32 ones.
//
// One launch per call (PDL): each block first issues its ring of weight loads, waits for the predecessor, then
// quantizes x into its shared memory (quant_x_q8_block: d = amax / 127, q = round(x / d), sums of q per 16; one thread
// per block of 32; 1.375 bytes per x value) while those loads are in flight. Then per chunk and row 8 (Int4) or 4
// (Int8) dp4a on the codes and the int8 x (two or one 16-byte shared loads per chunk, shared by the R rows), then
// (s * d_x) * float(dot + offset * sum q) (+ (m * d_x) * float(sum q)). The integer dot is exact; the result differs
// from "warp" by the rounding of x. (A separate quantizing kernel, measured before on the H200, left a bubble of a few
// microseconds between every two GEMVs: the quantizer waits for the previous GEMV's last block, the GEMV for it.)
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_internal.h"  // gemv_check_epilogue
#include "kernels/quant/gemv_quant_device.cuh"
#include "kernels/quant/gemv_quant_internal.h"
#include "kernels/ops/pdl.cuh"

namespace llm {
namespace {

using Kernel = void (*)(QuantPackedArgs);

// The kernel for a type (quant_kernel_for). kVecX (true) is unused by the dp4a chunk: x is read once, by
// quant_x_q8_block_warps.
template <bool kTokens>
struct Pick {
  template <int kType>
  static Kernel get() {
    using F = QuantPackedForm<kType>;
    return quant_gemv_warp_kernel<F::kInt4, F::kTwoLevel, F::kHasMin, true, true, false, kTokens>;
  }
};

}  // namespace

void quant_gemv_warp_dp4a_launch(const QuantGemvWeight& w, const QuantGemvPlan& plan, const float* x, float* y,
                                 bool accumulate, const GemvEpilogue& ep, cudaStream_t stream) {
  quant_gemv_check_warp_plan("warp-dp4a", plan);
  const int64_t smem = quant_x_smem_bytes(w.k);
  if (smem > kQuantMaxSmemBytes)
    fail("quantized gemv 'warp-dp4a': k = ", w.k, " needs ", smem, " bytes of shared memory for the int8 x, more than ",
         kQuantMaxSmemBytes, " (use --gemv warp)");
  const Kernel kernel = ep.tokens.many() ? quant_kernel_for<Pick<true>>(w.type_id, "warp-dp4a")
                                         : quant_kernel_for<Pick<false>>(w.type_id, "warp-dp4a");
  if (smem > 48 * 1024)  // beyond the default limit: opt in (not a stream operation; allowed while capturing)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  gemv_check_epilogue("warp-dp4a", ep, plan.grid, quant_kind_reads_norm_sums(QuantGemvKind::WarpDp4a), false,
                      true);
  if (ep.x_q8 && ((reinterpret_cast<uintptr_t>(ep.x_q8) & 15) != 0 || w.k % 32 != 0))
    fail("quantized gemv 'warp-dp4a': x's int8 form must be 16-byte aligned and k (", w.k, ") a multiple of 32");
  const QuantPackedArgs args = quant_packed_args(w, plan, x, y, accumulate, ep);
  cudaLaunchAttribute attr;
  cudaLaunchConfig_t config = pdl_launch_config(unsigned(plan.grid), kQuantGemvThreads, stream, true, &attr);
  config.gridDim.x *= unsigned(ep.tokens.n);  // the token axis (GemvEpilogue::tokens), token fastest
  config.dynamicSmemBytes = size_t(smem);
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args));
}

}  // namespace llm
