// "warp-bal": candidate: warp's one row per warp with a continuous ring of 8 loads per lane, PDL, and a wave-balanced
// persistent plan (each lane an equal run of rows: 14,336 rows = 3,584 lanes x 4 rows, no 0.39-wave tail).
#include "kernels/gemv_internal.h"

namespace llm {
namespace {

constexpr WarpTunedConfig kConfig = {1, true, false};

void prepack(const uint16_t* w_rowmajor, int N, int K, GemvWeight* out, cudaStream_t stream) {
  warp_gemv_prepack(w_rowmajor, N, K, out, stream);
}

GemvLaunchShape shape(int N, int K) { return warp_tuned_shape(N, K, kConfig); }

void launch(const GemvWeight& w, const float* x, float* y, bool accumulate, GemvContext* ctx) {
  warp_tuned_launch("warp-bal", w, x, y, accumulate, kConfig, gemv_stream(ctx));
}

}  // namespace

extern const GemvMapping gemv_mapping_warp_bal = {
    "warp-bal", "1 row per warp, ring of 8 loads in flight, equal runs of rows per persistent warp (no partial wave), PDL",
    prepack, launch, shape};

}  // namespace llm
