// "warp-few" (control): the warp kernel's coalesced 16-byte loads, but only as many warps as "thread" has (N / 32),
// each walking 32 rows: separates the cost of uncoalesced loads from the cost of a starved GPU.
#include "kernels/gemv/gemv_internal.h"

namespace llm {
namespace {

// The same grid and block as "thread" (ceil(N / 256) blocks of 256 threads), one warp per row, no split-K: each of
// the N / 32 warps walks rows grid-stride.
WarpGemvPlan plan_few(int N) {
  WarpGemvPlan plan;
  plan.splits = 1;
  plan.grid = (N + kWarpGemvThreads - 1) / kWarpGemvThreads;
  plan.pdl = true;  // as "warp": the control differs in warp count only
  return plan;
}

void prepack(const uint16_t* w_rowmajor, int N, int K, GemvWeight* out, cudaStream_t stream) {
  warp_gemv_prepack(w_rowmajor, N, K, out, stream);
}

GemvLaunchShape shape(int N, int K) { return warp_gemv_shape(N, K, plan_few(N)); }

void launch(const GemvWeight& w, const float* x, float* y, bool accumulate, const GemvEpilogue& ep,
            GemvContext* ctx) {
  warp_gemv_launch("warp-few", w, x, y, accumulate, ep, plan_few(w.N), gemv_stream(ctx));
}

}  // namespace

extern const GemvMapping gemv_mapping_warp_few = gemv_mapping_of(GemvBf16Form::WarpFew, prepack, launch, shape, 8);

}  // namespace llm
