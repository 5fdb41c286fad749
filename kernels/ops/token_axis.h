// The token axis of the decode kernels: one launch runs the decode step's work for n tokens side by side (an extra
// grid dimension, one index per token), token t reading and writing the activations `stride` bytes after token
// t - 1's (the engine's token slabs, engine/cuda/activations.h). Each token runs the one-token code on its own
// pointers, so its every value is bit for bit what a decode step computes; the weights, the KV cache and the norm
// weights are shared (read once from DRAM for the n tokens while they stay in L2). A verify pass built of these
// launches is therefore n decode steps' arithmetic, which is what makes greedy speculation plain greedy.
// Plain C++ (the host emulation and the engine read it).
#pragma once
#include <cstdint>
#include <type_traits>

namespace llm {

struct TokenAxis {
  int n = 1;           // tokens side by side (1: the decode step)
  int64_t stride = 0;  // bytes from one token's activations to the next's
  bool many() const { return n > 1; }
};

#if defined(__CUDACC__)
#define TOKEN_AXIS_HD __host__ __device__ __forceinline__
#else
#define TOKEN_AXIS_HD inline
#endif

// p moved to token t's slab (null stays null: an optional buffer stays absent).
template <typename T>
TOKEN_AXIS_HD T* token_ptr(T* p, int64_t stride, int t) {
  using Byte = typename std::conditional<std::is_const<T>::value, const char, char>::type;
  return p == nullptr ? p : reinterpret_cast<T*>(reinterpret_cast<Byte*>(p) + stride * int64_t(t));
}

}  // namespace llm
