// The one list of GEMV mappings (one line each), lookup by name, and the per-stream context they share.
#include <string>
#include <vector>

#include "core/gemv_names.h"
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_internal.h"

// Each mapping in kernels/gemv_<name>.cu is listed once, in core/gemv_names.h (LLM_GEMV_MAPPINGS: identifier, name,
// one line), which the CPU build reads too; the first is the default (fastest correct).
namespace llm {

#define LLM_DECLARE_MAPPING(id, name, what) extern const GemvMapping gemv_mapping_##id;
LLM_GEMV_MAPPINGS(LLM_DECLARE_MAPPING)
#undef LLM_DECLARE_MAPPING

namespace {

// The registry in the order of core/gemv_names.h; a kernel file whose GemvMapping::name differs from the list's name
// is a programming error, reported on first use (and by tests/cpu/gemv_names_test.cpp, which needs no GPU).
std::vector<const GemvMapping*> build_registry() {
#define LLM_LIST_MAPPING(id, name, what) &gemv_mapping_##id,
  std::vector<const GemvMapping*> list = {LLM_GEMV_MAPPINGS(LLM_LIST_MAPPING)};
#undef LLM_LIST_MAPPING
  static_assert(sizeof(kGemvMappingNames) / sizeof(kGemvMappingNames[0]) == size_t(kGemvMappingCount), "");
  for (int i = 0; i < kGemvMappingCount; ++i)
    if (std::string(list[size_t(i)]->name) != kGemvMappingNames[i].name)
      fail("GEMV registry: core/gemv_names.h lists '", kGemvMappingNames[i].name, "' at position ", i,
           " but its kernel calls itself '", list[size_t(i)]->name, "'");
  return list;
}

}  // namespace

const std::vector<const GemvMapping*>& gemv_mappings() {
  static const std::vector<const GemvMapping*> list = build_registry();
  return list;
}

const char* gemv_default_name() { return gemv_mappings().front()->name; }

const GemvMapping& gemv_find(const std::string& name) {
  const std::string wanted = name.empty() ? gemv_default_name() : name;
  for (const GemvMapping* m : gemv_mappings())
    if (wanted == m->name) return *m;
  fail("unknown GEMV mapping '", name, "' (known: ", gemv_mapping_names(), ")");
}

void gemv_free(GemvWeight* w) {
  if (w == nullptr) return;
  if (w->data) cudaFree(w->data);  // called from destructors: never throws
  *w = GemvWeight{};
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
