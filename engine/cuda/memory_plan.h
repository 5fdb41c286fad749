// The CUDA engine's memory plan: what the device must hold for a model and a context, computed from the config alone
// before anything is allocated, so a model that does not fit is refused with the numbers (never an out-of-memory
// half-way through the upload) and a default context too large for the KV cache is capped, said on stderr.
#pragma once
#include <cstddef>
#include <string>

#include "core/kv_dtype.h"
#include "models/config.h"

namespace llm {

constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;  // cuBLAS's recommendation for Hopper
constexpr size_t kReserveBytes = size_t(512) << 20;         // CUDA/cuBLAS internals, kernels, fragmentation
// Tokens per prefill pass: GEMMs of 2048 rows run near cuBLAS's peak (512 left ~40% on the table on the 8B shape);
// the pass's activations, ~0.5 GB for Llama 3.1 8B, are in the memory plan.
constexpr int kMaxPrefillChunk = 2048;

std::string gib_str(double bytes);  // "12.34" (GiB)

// Bytes per item, from the config alone.
struct MemoryPlan {
  double weights = 0, prepacked = 0, norms = 0, kv = 0, activations = 0, scratch = 0;
  double total() const { return weights + prepacked + norms + kv + activations + scratch + double(kReserveBytes); }
};

class MemoryPlanner {
 public:
  MemoryPlanner(const ModelConfig& c, bool tied, KvDtype kv) : c_(c), tied_(tied), kv_(kv) {}
  // The plan for a context of ctx positions and prefill passes of `chunk` tokens (one mapping's prepacked copy).
  MemoryPlan plan(int ctx, int chunk) const;
  // The context to allocate: `requested` when > 0; else `want` (default_ctx_size()) when it fits in free_bytes,
  // otherwise what the KV cache can have (a multiple of 256), said on stderr. Fails for requested < 0.
  int choose_ctx(int requested, int want, int chunk, size_t free_bytes) const;
  // Fails with "model needs X GiB of GPU memory, Y GiB free (SOURCE: weights ... )" when `plan` does not fit.
  static void require_fit(const MemoryPlan& plan, size_t free_bytes, const std::string& source,
                          const std::string& gemv_name, int ctx, bool ctx_given);

 private:
  ModelConfig c_;
  bool tied_;
  KvDtype kv_;
};

}  // namespace llm
