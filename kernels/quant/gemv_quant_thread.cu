// "thread" (quantized): one thread per output row walking its own row of the prepacked codes with 16-byte loads, so
// the 32 lanes of a warp are ld_codes bytes apart: the background's uncoalesced case, now with 4-bit codes.
//
// Per lane and chunk: one LDG.128 of its own row's codes, so a warp request covers 32 rows: 32 sectors (32 lines)
// fetched for 512 useful bytes, the other 16 bytes of each sector being the lane's next chunk, which must survive in
// L2 until its own request (2x the L2 -> SM traffic of "warp"); one scale load per plane (32 rows: 32 sectors for 64
// useful bytes); x as float4 loads at one address across the warp (broadcast). kQuantThreadUnroll = 4 chunks in
// flight per thread. Same per-weight arithmetic as "warp".
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_internal.h"  // gemv_check_epilogue
#include "kernels/quant/gemv_quant_device.cuh"
#include "kernels/quant/gemv_quant_internal.h"
#include "kernels/ops/pdl.cuh"

namespace llm {
namespace {

template <bool kInt4, bool kTwoLevel, bool kHasMin, bool kVecX>
__global__ void __launch_bounds__(kQuantGemvThreads) quant_gemv_thread_kernel(QuantPackedArgs a) {
  const int64_t row = int64_t(blockIdx.x) * kQuantGemvThreads + threadIdx.x;
  pdl_launch_dependents();
  pdl_wait();  // launched without the PDL attribute: a no-op, kept so a PDL launch would stay correct
  float ss = 0.0f;
  if (row < a.n) {  // no early return: every thread reaches the epilogue's block sum
    const float acc = quant_thread_row<kInt4, kTwoLevel, kHasMin, kVecX>(a, row);
    gemv_store_row(a.ep, a.y, row, acc, a.accumulate, &ss);
  }
  gemv_epilogue_finish(a.ep, ss, a.n);
}

using Kernel = void (*)(QuantPackedArgs);

// The kernel for a type (quant_kernel_for): kVecX = x 16-byte aligned.
template <bool kVecX>
struct Pick {
  template <int kType>
  static Kernel get() {
    using F = QuantPackedForm<kType>;
    return quant_gemv_thread_kernel<F::kInt4, F::kTwoLevel, F::kHasMin, kVecX>;
  }
};

}  // namespace

void quant_gemv_thread_launch(const QuantGemvWeight& w, const QuantGemvPlan& plan, const float* x, float* y,
                              bool accumulate, const GemvEpilogue& ep, cudaStream_t stream) {
  if (plan.grid <= 0 || int64_t(plan.grid) * kQuantGemvThreads < w.n)
    fail("quantized gemv 'thread': bad plan (grid ", plan.grid, " for ", w.n, " rows)");
  gemv_check_epilogue("thread", ep, plan.grid);
  const QuantPackedArgs args = quant_packed_args(w, plan, x, y, accumulate, ep);
  const bool vec_x = (reinterpret_cast<uintptr_t>(x) & 15) == 0;
  const Kernel kernel = vec_x ? quant_kernel_for<Pick<true>>(w.type_id, "thread")
                              : quant_kernel_for<Pick<false>>(w.type_id, "thread");
  kernel<<<plan.grid, kQuantGemvThreads, 0, stream>>>(args);
  CUDA_CHECK_LAUNCH("quant_gemv_thread_kernel");
}

}  // namespace llm
