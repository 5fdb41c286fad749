// CUDA_CHECK / CUBLAS_CHECK: turn a failed runtime or cuBLAS call into llm::Error naming file, line and the call.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/error.h"

#define CUDA_CHECK(call)                                                                                   \
  do {                                                                                                     \
    cudaError_t llm_cuda_err_ = (call);                                                                    \
    if (llm_cuda_err_ != cudaSuccess)                                                                      \
      ::llm::fail(__FILE__, ":", __LINE__, ": ", #call, " failed: ", cudaGetErrorName(llm_cuda_err_), " (", \
                  cudaGetErrorString(llm_cuda_err_), ")");                                                 \
  } while (0)

#define CUBLAS_CHECK(call)                                                                                       \
  do {                                                                                                           \
    cublasStatus_t llm_cublas_st_ = (call);                                                                      \
    if (llm_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                                                 \
      ::llm::fail(__FILE__, ":", __LINE__, ": ", #call, " failed: ", cublasGetStatusName(llm_cublas_st_), " (", \
                  cublasGetStatusString(llm_cublas_st_), ")");                                                  \
  } while (0)

// After a <<<...>>> launch: reports a bad configuration at the launch site (naming the kernel) rather than at the next
// synchronising call. Uses cudaGetLastError so a non-sticky launch error does not resurface in an unrelated check.
#define CUDA_CHECK_LAUNCH(kernel_name)                                                                      \
  do {                                                                                                      \
    cudaError_t llm_cuda_err_ = cudaGetLastError();                                                         \
    if (llm_cuda_err_ != cudaSuccess)                                                                       \
      ::llm::fail(__FILE__, ":", __LINE__, ": launch of ", kernel_name, " failed: ",                        \
                  cudaGetErrorName(llm_cuda_err_), " (", cudaGetErrorString(llm_cuda_err_), ")");          \
  } while (0)
