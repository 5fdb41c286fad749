// The BF16 GEMV registry: the kernels of each form of core/gemv_table.h, indexed by GemvBf16Form, and the per-stream
// context they share.
#include <string>
#include <vector>

#include "core/gemv_table.h"
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_internal.h"

// Each BF16 form is one kernel file (kernels/gemv/gemv_<ident>.cu defines gemv_mapping_<ident>) and one row of
// core/gemv_table.h; LLM_GEMV_BF16_FORMS lists the forms in the order of GemvBf16Form, which indexes this registry.
namespace llm {

#define LLM_DECLARE_MAPPING(id, ident) extern const GemvMapping gemv_mapping_##ident;
LLM_GEMV_BF16_FORMS(LLM_DECLARE_MAPPING)
#undef LLM_DECLARE_MAPPING

namespace {

// The registry in form order; a kernel file defining its object with another form than LLM_GEMV_BF16_FORMS gives it is
// a programming error, reported on first use (and by tests/cpu/gemv_table_test.cpp, which needs no GPU).
std::vector<const GemvMapping*> build_registry() {
#define LLM_LIST_MAPPING(id, ident) &gemv_mapping_##ident,
  std::vector<const GemvMapping*> list = {LLM_GEMV_BF16_FORMS(LLM_LIST_MAPPING)};
#undef LLM_LIST_MAPPING
  for (int i = 0; i < kGemvBf16Forms; ++i)
    if (list[size_t(i)]->form != GemvBf16Form(i))
      fail("GEMV registry: form ", i, " (", gemv_form_name(GemvBf16Form(i)), ") is defined by the kernel of '",
           list[size_t(i)]->name, "'");
  return list;
}

}  // namespace

const std::vector<const GemvMapping*>& gemv_mappings() {
  static const std::vector<const GemvMapping*> list = build_registry();
  return list;
}

const char* gemv_default_name() { return kGemvDefaultMapping; }

const GemvMapping& gemv_mapping(GemvBf16Form form) {
  const int i = int(form);
  if (i < 0 || i >= kGemvBf16Forms) fail("GEMV registry: no BF16 form ", i);
  return *gemv_mappings()[size_t(i)];
}

void gemv_free(GemvWeight* w) {
  if (w == nullptr) return;
  if (w->data && w->owned) cudaFree(w->data);  // called from destructors: never throws
  *w = GemvWeight{};
}

GemvWeight gemv_view_rowmajor(const uint16_t* w_rowmajor, int N, int K) {
  if (N <= 0 || K <= 0 || w_rowmajor == nullptr || (reinterpret_cast<uintptr_t>(w_rowmajor) & 15) != 0)
    fail("gemv view: bad row-major [N, K] = [", N, ", ", K, "] (data must be non-null and 16-byte aligned)");
  GemvWeight w;
  w.N = N;
  w.K = K;
  w.data = const_cast<uint16_t*>(w_rowmajor);  // the kernels only read it
  w.ld = K;
  w.bytes = 0;
  w.owned = false;
  return w;
}

void gemv_context_init(GemvContext* ctx, cudaStream_t stream, int max_k) {
  if (max_k <= 0) fail("gemv_context_init: max_k must be positive, found ", max_k);
  *ctx = GemvContext{};
  ctx->stream = stream;
  CUDA_CHECK(cudaMalloc(&ctx->x_bf16, size_t(max_k) * sizeof(uint16_t)));
  ctx->x_bf16_capacity = size_t(max_k);
  CUDA_CHECK(cudaMalloc(&ctx->partial, kGemvPartialFloats * sizeof(float)));
  ctx->partial_capacity = kGemvPartialFloats;
}

void gemv_context_destroy(GemvContext* ctx) {
  if (ctx == nullptr) return;
  // Teardown must not throw: report nothing, free what can be freed.
  if (ctx->cublas) cublasDestroy(static_cast<cublasHandle_t>(ctx->cublas));
  cudaFree(ctx->x_bf16);
  cudaFree(ctx->partial);
  cudaFree(ctx->cublas_workspace);
  *ctx = GemvContext{};
}

}  // namespace llm
