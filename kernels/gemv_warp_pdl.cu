// "warp-pdl": the "warp" kernel and plan, launched with programmatic dependent launch, so a GEMV that follows another
// starts streaming its (constant) weights while its predecessor drains, and waits only before reading x and y.
// Gains appear only between consecutive PDL launches (q/k/v, gate/up in the engine); kept separate from "warp" so the
// overlap is measured on its own.
#include "kernels/gemv_internal.h"

namespace llm {
namespace {

WarpGemvPlan plan_pdl(int N, int K) {
  WarpGemvPlan plan = warp_gemv_plan_fill(N, K);
  plan.pdl = true;
  return plan;
}

void prepack(const uint16_t* w_rowmajor, int N, int K, GemvWeight* out, cudaStream_t stream) {
  warp_gemv_prepack(w_rowmajor, N, K, out, stream);
}

GemvLaunchShape shape(int N, int K) { return warp_gemv_shape(N, K, plan_pdl(N, K)); }

void launch(const GemvWeight& w, const float* x, float* y, bool accumulate, GemvContext* ctx) {
  warp_gemv_launch("warp-pdl", w, x, y, accumulate, plan_pdl(w.N, w.K), gemv_stream(ctx));
}

}  // namespace

extern const GemvMapping gemv_mapping_warp_pdl = {
    "warp-pdl", "'warp' launched with programmatic dependent launch: weight loads overlap the previous kernel's tail",
    prepack, launch, shape};

}  // namespace llm
