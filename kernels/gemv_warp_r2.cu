// "warp-r2": candidate: two rows per warp share each x chunk (half of warp's x traffic through L1), a ring of 8
// weight loads per lane kept in flight across batches and rows, PDL; one group per lane, blocks scheduled like warp.
#include "kernels/gemv_internal.h"

namespace llm {
namespace {

constexpr WarpTunedConfig kConfig = {2, false, false};

void prepack(const uint16_t* w_rowmajor, int N, int K, GemvWeight* out, cudaStream_t stream) {
  warp_gemv_prepack(w_rowmajor, N, K, out, stream);
}

GemvLaunchShape shape(int N, int K) { return warp_tuned_shape(N, K, kConfig); }

void launch(const GemvWeight& w, const float* x, float* y, bool accumulate, GemvContext* ctx) {
  warp_tuned_launch("warp-r2", w, x, y, accumulate, kConfig, gemv_stream(ctx));
}

}  // namespace

extern const GemvMapping gemv_mapping_warp_r2 = {
    "warp-r2", "2 rows per warp share x loads, ring of 8 loads in flight per lane, PDL: candidate to replace warp",
    prepack, launch, shape};

}  // namespace llm
