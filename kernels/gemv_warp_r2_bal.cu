// "warp-r2-bal": candidate combining everything: two rows per warp sharing x, the load ring, the wave-balanced
// persistent plan, PDL, and the .L2::256B prefetch-size hint on weight loads.
#include "kernels/gemv_internal.h"

namespace llm {
namespace {

constexpr WarpTunedConfig kConfig = {2, true, true};

void prepack(const uint16_t* w_rowmajor, int N, int K, GemvWeight* out, cudaStream_t stream) {
  warp_gemv_prepack(w_rowmajor, N, K, out, stream);
}

GemvLaunchShape shape(int N, int K) { return warp_tuned_shape(N, K, kConfig); }

void launch(const GemvWeight& w, const float* x, float* y, bool accumulate, GemvContext* ctx) {
  warp_tuned_launch("warp-r2-bal", w, x, y, accumulate, kConfig, gemv_stream(ctx));
}

}  // namespace

extern const GemvMapping gemv_mapping_warp_r2_bal = {
    "warp-r2-bal", "2 rows per warp sharing x, load ring, balanced persistent plan, L2::256B hint, PDL: all ideas combined",
    prepack, launch, shape};

}  // namespace llm
