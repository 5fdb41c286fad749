// "warp" (quantized): lanes along K over the prepacked planes, one 16-byte load = 32 INT4 / 16 INT8 codes, 4 rows per
// warp sharing each x load, a ring of 8 loads in flight per lane across batches and row groups, split-K for small n,
// x staged in shared memory (transposed so lanes read it conflict-free), PDL: the coalesced mapping for INT4/INT8.
//
// Per lane and chunk (16 bytes of one row's codes): one LDG.128 of codes (a warp request = 512 contiguous bytes =
// 16 sectors, all useful), one LDG.16 (or .8 + .16 for two-level) per scale plane (a warp request = 64 contiguous
// bytes = 2 sectors for fp16 scales), then x: 8 float4 (Int4) or 4 float4 (Int8), shared by the R = 4 rows of the
// warp (from shared memory, staged once per block; from L1/L2 for k past ~29,000). Per weight: 1 PRMT + 1 FADD (code -> float, exact) + 1 FFMA;
// per group and row one FFMA with the scale (and one with the min times the group's x sum). FP32 accumulation,
// shuffle reduction, split-K partials summed in slice order through shared memory (deterministic, no atomics).
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_internal.h"  // gemv_sm_count
#include "kernels/quant/gemv_quant_device.cuh"
#include "kernels/quant/gemv_quant_internal.h"
#include "kernels/ops/pdl.cuh"

namespace llm {
namespace {

using Kernel = void (*)(QuantPackedArgs);

// The kernel for a type (quant_kernel_for): kVecX = x 16-byte aligned, kSmemX = x staged in shared memory.
template <bool kVecX, bool kSmemX, bool kTokens = false>
struct Pick {
  template <int kType>
  static Kernel get() {
    using F = QuantPackedForm<kType>;
    return quant_gemv_warp_kernel<F::kInt4, F::kTwoLevel, F::kHasMin, kVecX, false, kSmemX, kTokens>;
  }
};

}  // namespace

void quant_gemv_warp_launch(const QuantGemvWeight& w, const QuantGemvPlan& plan, const float* x, float* y,
                            bool accumulate, const GemvEpilogue& ep, cudaStream_t stream) {
  quant_gemv_check_warp_plan("warp", plan);
  gemv_check_epilogue("warp", ep, plan.grid, quant_kind_reads_norm_sums(QuantGemvKind::Warp), true, true);
  const QuantPackedArgs args = quant_packed_args(w, plan, x, y, accumulate, ep);
  const bool vec_x = (reinterpret_cast<uintptr_t>(x) & 15) == 0;
  // x staged in shared memory (4 bytes per x) while two blocks per SM still fit; past that (k > ~29,000) x is read
  // from global memory through L1 as before.
  const int64_t smem = quant_x_smem_bytes_f32(w.k);
  const bool smem_x = quant_stages_x_forms(QuantGemvKind::Warp, w.k);
  if (ep.x_form()) {  // x made as the blocks stage it (GemvEpilogue::glu / merge)
    const AttnSplitParts& m = ep.merge;
    if (!smem_x)
      fail("quantized gemv 'warp': an input form (SwiGLU or split merge) needs x in shared memory; k = ", w.k,
           " is past it");
    if (ep.glu && m.any()) fail("quantized gemv 'warp': two input forms in one launch");
    if (ep.glu && (reinterpret_cast<uintptr_t>(ep.glu) & 15) != 0)
      fail("quantized gemv 'warp': the SwiGLU input form needs a 16-byte aligned [gate | up] row");
    if (m.any() && (!m.part_ml || !m.d_pos || m.head_dim <= 0 || m.head_dim % 4 != 0 || m.n_heads <= 0 ||
                    m.n_heads > kQuantMergeMaxHeads || int64_t(m.n_heads) * m.head_dim != w.k || m.n_kv_heads <= 0 ||
                    m.max_ctx <= 0 || m.sms <= 0))
      fail("quantized gemv 'warp': a split-merge input form of ", m.n_heads, " heads of ", m.head_dim,
           " (need head_dim % 4 == 0, at most ", kQuantMergeMaxHeads, " heads, heads * head_dim == k = ", w.k,
           ", its partials and position)");
  }
  const int t = w.type_id;
  // The token axis (a decode-order verify) has its own instantiation, on 16-byte aligned x only (the slabs keep it).
  if (ep.tokens.many() && !vec_x) fail("quantized gemv 'warp': a token axis needs x 16-byte aligned");
  const Kernel kernel = ep.tokens.many()
                            ? (smem_x ? quant_kernel_for<Pick<true, true, true>>(t, "warp")
                                      : quant_kernel_for<Pick<true, false, true>>(t, "warp"))
                        : smem_x ? (vec_x ? quant_kernel_for<Pick<true, true>>(t, "warp")
                                          : quant_kernel_for<Pick<false, true>>(t, "warp"))
                                 : (vec_x ? quant_kernel_for<Pick<true, false>>(t, "warp")
                                          : quant_kernel_for<Pick<false, false>>(t, "warp"));
  if (smem_x && smem > 48 * 1024)  // beyond the default limit: opt in (not a stream operation; allowed while capturing)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  cudaLaunchAttribute attr;
  cudaLaunchConfig_t config = pdl_launch_config(unsigned(plan.grid), kQuantGemvThreads, stream, true, &attr);
  config.gridDim.x *= unsigned(ep.tokens.n);  // the token axis (GemvEpilogue::tokens), token fastest
  config.dynamicSmemBytes = smem_x ? size_t(smem) : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args));
}

}  // namespace llm
