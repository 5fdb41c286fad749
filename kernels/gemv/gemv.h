// GEMV mappings for batch-1 decode: y[N] (FP32) = W[N, K] (BF16) * x[K] (FP32), FP32 accumulation.
// Each mapping lives in its own kernels/gemv/gemv_<name>.cu and is one row of core/gemv_table.h (its name, its one-line
// "why", its form id); kernels/gemv/gemv_registry.cu indexes the kernels by that form id (GemvBf16Form). The engine
// never branches on a mapping's name: it resolves a plan (engine/gemv_choice.h) and asks the registry for the form.
// Device code only: nothing here knows of files, text or models.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "core/gemv_table.h"  // GemvBf16Form, the rows: name and why of each form
#include "kernels/gemv/gemv_epilogue.h"  // GemvEpilogue: the RMSNorm fold

namespace llm {

// A matrix in the layout one mapping reads (prepacked once at load).
struct GemvWeight {
  int N = 0, K = 0;          // logical shape: y[N] = W[N, K] x[K]
  uint16_t* data = nullptr;  // device BF16 bits, layout chosen by the mapping (owned unless a view; gemv_free)
  int64_t ld = 0;            // leading dimension in elements (row stride for row-major, column stride for [K, N])
  size_t bytes = 0;          // bytes allocated (padding included); 0 for a view
  bool owned = true;         // false: a view of a row-major matrix owned elsewhere (gemv_view_rowmajor)
  size_t useful_bytes() const { return size_t(N) * size_t(K) * 2; }
};

// Per-stream resources some mappings need (cuBLAS handle, a BF16 copy of x). Created once, reused per token.
struct GemvContext {
  void* cublas = nullptr;         // cublasHandle_t, created lazily by mappings that need it
  uint16_t* x_bf16 = nullptr;     // scratch for a BF16 copy of x
  size_t x_bf16_capacity = 0;     // elements
  cudaStream_t stream = nullptr;
  // Added for the split-K mappings (thread-splitk, colmajor): per-slice partial sums [splits, N], summed in a fixed
  // order by a second pass so results are deterministic (no atomics). Allocated by gemv_context_init with
  // kGemvPartialFloats elements; a mapping picks splits <= kGemvPartialFloats / N, so a launch never allocates.
  float* partial = nullptr;
  size_t partial_capacity = 0;     // elements
  void* cublas_workspace = nullptr;  // explicit cuBLAS workspace, so a captured graph never allocates inside cuBLAS
  size_t cublas_workspace_bytes = 0;
};
constexpr size_t kGemvPartialFloats = size_t(1) << 21;  // 8 MiB: 16 slices of a 128,256-row lm_head
void gemv_context_init(GemvContext* ctx, cudaStream_t stream, int max_k);
void gemv_context_destroy(GemvContext* ctx);

// How a launch is shaped (for the A/B report: threads, warps per SM, bytes in flight per SM).
struct GemvLaunchShape {
  int grid = 0, block = 0;
  int bytes_in_flight_per_thread = 0;  // weight bytes each thread has requested before first use
};

struct GemvMapping {
  const char* name;   // the table's name (gemv_mapping_of sets it from the row)
  GemvBf16Form form;  // the registry's index
  const char* why() const { return gemv_row(form)->why; }  // the table's one line
  // Builds this mapping's layout from a row-major BF16 [N, K] matrix already on the device (w_rowmajor may be freed
  // afterwards). Allocates out->data.
  void (*prepack)(const uint16_t* w_rowmajor, int N, int K, GemvWeight* out, cudaStream_t stream);
  // y = W x (accumulate: y += W x). x and y are device FP32. No allocation, no sync. ep: the RMSNorm fold
  // (kernels/gemv/gemv_epilogue.h); ep.any() only where the table row says fuses_norm (cuBLAS has no epilogue).
  void (*launch)(const GemvWeight& w, const float* x, float* y, bool accumulate, const GemvEpilogue& ep,
                 GemvContext* ctx);
  GemvLaunchShape (*shape)(int N, int K);
  // > 0: prepack's layout is the row-major matrix with rows padded to a multiple of this many elements, so where K is
  // a multiple of it the row-major matrix itself serves (gemv_view_rowmajor: no second copy of the weights); 0: some
  // other layout (colmajor).
  int rowmajor_align = 0;
  bool views_rowmajor(int K) const { return rowmajor_align > 0 && K % rowmajor_align == 0; }
};

// How a kernel file defines its mapping: the name comes from the form's row of core/gemv_table.h.
constexpr GemvMapping gemv_mapping_of(GemvBf16Form form,
                                      void (*prepack)(const uint16_t*, int, int, GemvWeight*, cudaStream_t),
                                      void (*launch)(const GemvWeight&, const float*, float*, bool,
                                                     const GemvEpilogue&, GemvContext*),
                                      GemvLaunchShape (*shape)(int, int), int rowmajor_align = 0) {
  return GemvMapping{gemv_row(form)->name, form, prepack, launch, shape, rowmajor_align};
}

// A non-owning GemvWeight over a row-major BF16 [N, K] device matrix (ld = K), for a mapping whose views_rowmajor(K):
// what its prepack would have built, without the copy. gemv_free leaves the matrix alone.
GemvWeight gemv_view_rowmajor(const uint16_t* w_rowmajor, int N, int K);

// Every BF16 form's kernels, in form order (core/gemv_table.h LLM_GEMV_BF16_FORMS).
const std::vector<const GemvMapping*>& gemv_mappings();
// The kernels of one form (a GemvPlan's bf16); throws llm::Error for GemvBf16Form::None.
const GemvMapping& gemv_mapping(GemvBf16Form form);
const char* gemv_default_name();
void gemv_free(GemvWeight* w);  // frees what a prepack allocated; a view is only cleared

}  // namespace llm
