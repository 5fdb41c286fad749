// The CUDA engine's resource holders: one RAII owner per kind of CUDA resource it allocates (device memory, pinned
// host memory, a stream, an event, a CUDA graph and its instance, a cuBLAS handle, the GEMV context of
// kernels/gemv/gemv.h), so that a constructor that throws half-way frees what it had allocated. CUDA code only
// (engine/cuda/, and measure/'s profiler hook); apps and the chat see the engine through engine/cuda_backend.h, which
// includes no CUDA header.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv.h"

namespace llm {

// Device allocations freed together when the arena goes; `bytes` counts what was asked for (at least 1 per call).
struct DeviceArena {
  std::vector<void*> ptrs;
  size_t bytes = 0;
  template <typename T>
  T* alloc(size_t count) {
    void* p = nullptr;
    size_t n = std::max<size_t>(count * sizeof(T), 1);
    CUDA_CHECK(cudaMalloc(&p, n));
    ptrs.push_back(p);
    bytes += n;
    return static_cast<T*>(p);
  }
  ~DeviceArena() {
    for (void* p : ptrs) cudaFree(p);
  }
};

// Page-locked host memory (cudaHostAlloc), for asynchronous copies.
struct PinnedBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  void* dev = nullptr;  // alloc_mapped: where kernels write it
  void alloc(size_t n) {
    CUDA_CHECK(cudaHostAlloc(&p, n, cudaHostAllocDefault));
    bytes = n;
  }
  // Mapped into the device's address space: kernels write it directly (no copy in the stream); the host reads it
  // after an event recorded behind the kernel.
  void alloc_mapped(size_t n) {
    CUDA_CHECK(cudaHostAlloc(&p, n, cudaHostAllocMapped));
    CUDA_CHECK(cudaHostGetDevicePointer(&dev, p, 0));
    bytes = n;
  }
  ~PinnedBuffer() {
    if (p) cudaFreeHost(p);
  }
};

// A stream, drained before it is destroyed.
struct StreamHolder {
  cudaStream_t s = nullptr;
  ~StreamHolder() {
    if (s) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
  }
};

struct EventHolder {
  cudaEvent_t e = nullptr;
  void create(unsigned flags) { CUDA_CHECK(cudaEventCreateWithFlags(&e, flags)); }
  ~EventHolder() {
    if (e) cudaEventDestroy(e);
  }
};

struct CublasHolder {
  cublasHandle_t h = nullptr;
  ~CublasHolder() {
    if (h) cublasDestroy(h);
  }
};

// An instantiated CUDA graph (a decode step replayed per token). reset() destroys it early, for owners that must
// destroy it before other members.
struct GraphExecHolder {
  cudaGraphExec_t g = nullptr;
  void reset() {
    if (g) cudaGraphExecDestroy(g);
    g = nullptr;
  }
  ~GraphExecHolder() { reset(); }
};

// A captured CUDA graph, only needed until it is instantiated.
struct GraphHolder {
  cudaGraph_t g = nullptr;
  ~GraphHolder() {
    if (g) cudaGraphDestroy(g);
  }
};

// What record() enqueues on s, captured into graph (thread-local capture mode). When record throws, the capture is
// ended (the stream stays usable), the sticky error cleared, and the exception rethrown.
template <typename Record>
void capture_stream(cudaStream_t s, GraphHolder& graph, Record&& record) {
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    record();
  } catch (...) {
    cudaStreamEndCapture(s, &graph.g);
    cudaGetLastError();
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(s, &graph.g));
}

// A GemvContext (kernels/gemv/gemv.h) once `live` (set after gemv_context_init succeeded); destroying it never throws.
struct GemvContextHolder {
  GemvContext c;
  bool live = false;
  ~GemvContextHolder() {
    if (!live) return;
    try {
      gemv_context_destroy(&c);
    } catch (...) {
    }
  }
};

}  // namespace llm
