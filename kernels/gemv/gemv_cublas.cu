// "cublas": cublasGemmEx on the row-major weight (seen by cuBLAS as column-major [K, N], so CUBLAS_OP_T), BF16 A and
// B, FP32 C, FP32 compute: the vendor library as the yardstick. x is rounded to BF16 first (that kernel is part of
// cuBLAS's time): cublasGemmEx has no BF16 x FP32 -> FP32 combination.
#include "core/dtype.h"
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_internal.h"

namespace llm {
namespace {

// 32 MiB: what NVIDIA suggests for Hopper. Set explicitly so a graph capture never makes cuBLAS allocate.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

__global__ void f32_to_bf16_kernel(const float* __restrict__ x, int n, uint16_t* __restrict__ out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = f32_to_bf16(x[i]);
}

// The handle is created on first use, not in gemv_context_init: only this mapping pays cuBLAS's start-up. Make one
// ordinary launch before capturing a graph (creating a handle allocates).
cublasHandle_t handle_of(GemvContext* ctx) {
  if (ctx->cublas) return static_cast<cublasHandle_t>(ctx->cublas);
  cublasHandle_t h = nullptr;
  CUBLAS_CHECK(cublasCreate(&h));
  try {
    CUBLAS_CHECK(cublasSetStream(h, ctx->stream));  // resets the workspace, so set that after
    if (ctx->cublas_workspace == nullptr) {
      CUDA_CHECK(cudaMalloc(&ctx->cublas_workspace, kWorkspaceBytes));
      ctx->cublas_workspace_bytes = kWorkspaceBytes;
    }
    CUBLAS_CHECK(cublasSetWorkspace(h, ctx->cublas_workspace, ctx->cublas_workspace_bytes));
  } catch (...) {
    cublasDestroy(h);
    throw;
  }
  ctx->cublas = h;
  return h;
}

// Rows padded to 8 elements like "warp" (lda = ld): 16-byte aligned columns for cuBLAS's vector loads.
void prepack(const uint16_t* w_rowmajor, int N, int K, GemvWeight* out, cudaStream_t stream) {
  gemv_prepack_rowmajor(w_rowmajor, N, K, 8, out, stream);
}

// cuBLAS picks its own kernels; report the conversion kernel's shape as unknown.
GemvLaunchShape shape(int, int) { return GemvLaunchShape{}; }

void launch(const GemvWeight& w, const float* x, float* y, bool accumulate, const GemvEpilogue& ep,
            GemvContext* ctx) {
  gemv_check_launch("cublas", w, x, y);
  if (ep.any()) fail("gemv 'cublas': cuBLAS has no RMSNorm-fold epilogue (the engine runs the norm kernel for it)");
  if (ctx == nullptr || ctx->x_bf16 == nullptr || ctx->x_bf16_capacity < size_t(w.K))
    fail("gemv 'cublas': context BF16 x buffer holds ", ctx ? ctx->x_bf16_capacity : 0, " elements, need K = ", w.K,
         " (gemv_context_init max_k)");
  cublasHandle_t h = handle_of(ctx);
  f32_to_bf16_kernel<<<(w.K + 255) / 256, 256, 0, ctx->stream>>>(x, w.K, ctx->x_bf16);
  CUDA_CHECK_LAUNCH("f32_to_bf16_kernel");
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  // Column-major view: A = W^T [K, N] with lda = ld; op(A) = W [N, K]; B = x [K, 1]; C = y [N, 1].
  CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, w.N, 1, w.K, &alpha, w.data, CUDA_R_16BF, int(w.ld),
                            ctx->x_bf16, CUDA_R_16BF, w.K, &beta, y, CUDA_R_32F, w.N, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

}  // namespace

extern const GemvMapping gemv_mapping_cublas = gemv_mapping_of(GemvBf16Form::Cublas, prepack, launch, shape, 8);

}  // namespace llm
