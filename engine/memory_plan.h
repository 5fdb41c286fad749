// The CUDA engine's memory plan: what the device will hold for a model, a GEMV mapping and a context, computed from
// the model's shapes and stored types before anything is allocated. A model or a context that does not fit is refused
// with the bytes needed and free (never an out-of-memory half-way through the upload); a default context too large
// for the KV cache is capped, said on stderr; and the plan is said at load in one line a user can read:
//   memory plan: weights 0.98 GiB (BF16 row-major copy of what is not kept quantized) + prepacked 'warp-dp4a'
//   4.22 GiB (Q4_0 3.94, Q6_K 0.28) + KV cache 1.00 GiB (8192 positions, bf16) + activations 0.52 + scratch 0.33
//   (prefill's dequantized matrix 0.22) + reserve 0.50 = 6.55 GiB of 139.33 GiB free
// Plain C++ (no CUDA): the sizes only the kernels know (the KV cache's layout, attention and sampling scratch) come in
// as DeviceSizes, so CI checks the arithmetic, the refusals and the wording on any machine.
#pragma once
#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/kv_dtype.h"
#include "models/model.h"
#include "models/quant.h"  // GgmlQuantType

namespace llm {

constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;  // cuBLAS's recommendation for Hopper
constexpr size_t kReserveBytes = size_t(512) << 20;         // CUDA/cuBLAS internals, kernels, fragmentation
// Tokens per prefill pass: GEMMs of 2048 rows run near cuBLAS's peak (512 left ~40% on the table on the 8B shape);
// the pass's activations, ~0.5 GB for Llama 3.1 8B, are in the memory plan.
constexpr int kMaxPrefillChunk = 2048;
// Tokens a prefill or verify pass may run through the batch-k quantized GEMV (EngineTuning::quant_batch_rows is capped
// here; the tensor-core kernel reads each weight once per 64 of them): the int8 form of that many activation rows is in
// the activations (quant_batch_x_bytes).
constexpr int kQuantBatchPassMax = kMaxPrefillChunk;
// Tokens a prompt or verify pass under EngineTuning::exact_verify may hold in FP32 for the batched GEMVs (Activations::pf32).
constexpr int kExactPassMax = 64;
// Token slabs the CUDA activations hold (engine/cuda/activations.h): a decode-order verify pass runs the decode step's
// kernels for up to this many tokens side by side (a longer verify runs in passes of this many).
constexpr int kTokenSlabs = 16;
// The int8 rows the activations hold for the batch-k GEMV: min(chunk, the tuning's quant_batch_rows, kQuantBatchPassMax),
// at least 1 (a pass longer than that dequantizes instead).
inline int quant_batch_rows_held(int chunk, int quant_batch_rows) {
  const int r = quant_batch_rows < chunk ? quant_batch_rows : chunk;
  return r < 1 ? 1 : r > kQuantBatchPassMax ? kQuantBatchPassMax : r;
}

std::string gib_str(double bytes);  // "12.34" (GiB)

// Which weights the GPU holds in BF16 (issue 35: a quantized model costs its quantized bytes). A tensor is kept
// quantized when it is stored quantized and the run does not --dequantize: the quantized GEMVs read its planes. A
// decode matrix (q|k|v, o, gate|up, down, an untied head) gets a row-major BF16 copy only when some member is not kept
// quantized; otherwise prefill dequantizes it, one matrix at a time, into a scratch of the largest such matrix just
// before its GEMM. The embedding is BF16 (decode's and prefill's lookup reads one row per token). DeviceModel,
// GemvMappings and the memory plan all ask these.
bool kept_quantized(const HostTensor& t, bool dequantize);
bool needs_bf16_copy(const std::vector<const HostTensor*>& members, bool dequantize);
// Where the embedding lives: an untied model with matrices kept quantized keeps its BF16 lookup table in pinned host
// memory mapped into the device (the lookup kernels read one row of dim * 2 bytes per token over PCIe, as llama.cpp
// keeps token_embd on the CPU): 1 GiB of GPU memory on Llama 3 8B, 2 GiB on 70B. A tied embedding is the head's matrix
// and stays on the GPU; so does every embedding of a BF16 run.
bool embedding_on_host(const Model& m, bool tied, bool dequantize);

// What the kernels need beside the weights, as the CUDA engine's rooms compute it (engine/cuda/kv_cache.h,
// kernels/ops/ops.h, kernels/gemv/gemv.h).
struct DeviceSizes {
  std::function<double(int ctx)> kv_bytes;           // the whole KV cache at ctx positions (every layer, K and V)
  std::function<double(int ctx)> attention_scratch;  // a prefill pass's attention split scratch at ctx positions
  // One token slab at ctx positions (the decode buffers and decode attention's scratch; kTokenSlabs of them). Unset:
  // one slab of the decode buffers alone (a plan without the CUDA engine's layout).
  std::function<double(int ctx)> decode_slab;
  double sample_scratch = 0;                         // the device sampler's scratch
  double gemv_context = 0;                           // the GEMV context: its cuBLAS workspace and split-K partials
  // The mapping's BF16 layout is the row-major copy itself where K % align == 0 (GemvMapping::rowmajor_align: no
  // prepacked copy of those matrices); 0: every BF16 matrix is prepacked.
  int bf16_rowmajor_align = 0;
  int quant_batch_rows = 64;  // EngineTuning::quant_batch_rows: the int8 rows of the batch-k GEMV's passes
  // Device bytes of one [n, k] matrix of type t kept quantized, in the decode form's layout (the CUDA engine:
  // quant_matrix_device_bytes: plane alignment, allocation granularity); null: its stored size.
  std::function<double(GgmlQuantType t, int64_t n, int64_t k)> quant_matrix_bytes;
};

// Bytes per item. weights: the row-major BF16 copy of every projection, the embedding and an untied head (prefill's
// cuBLAS GEMMs read it and every mapping prepacks from it); prepacked: one mapping's decode copy (its quantized planes
// for weights kept quantized, BF16 otherwise), split by type in prepacked_by_type (largest first).
struct MemoryPlan {
  double weights = 0, prepacked = 0, norms = 0, kv = 0, activations = 0, scratch = 0;
  double prefill_dequant = 0;  // part of scratch: prefill's BF16 copy of one matrix kept quantized
  double host_embedding = 0;   // not in total(): the embedding in pinned host memory (embedding_on_host)
  std::vector<std::pair<std::string, double>> prepacked_by_type;
  std::map<std::string, double> stored_by_type;  // quantized types: the same matrices' stored (file) bytes
  double total() const { return weights + prepacked + norms + kv + activations + scratch + double(kReserveBytes); }
};

class MemoryPlanner {
 public:
  // keep_quant: GGUF quantized weights run on the quantized GEMVs (not --dequantize); their prepacked copy is counted
  // by sizes.quant_matrix_bytes (at their stored size without it). tied: the head is the embedding.
  MemoryPlanner(const Model& model, bool tied, bool keep_quant, KvDtype kv, DeviceSizes sizes);

  // The plan for a context of ctx positions and prefill passes of `chunk` tokens (one mapping's prepacked copy).
  MemoryPlan plan(int ctx, int chunk) const;
  // The context to allocate: `requested` when > 0; else `want` (default_ctx_size()) when it fits in free_bytes,
  // otherwise what the KV cache can have (a multiple of 256), said on stderr. Fails for requested < 0.
  int choose_ctx(int requested, int want, int chunk, size_t free_bytes) const;
  // Fails with "SOURCE needs X GiB of GPU memory, Y GiB free (weights ... )" when `plan` does not fit.
  void require_fit(const MemoryPlan& plan, size_t free_bytes, const std::string& gemv_name, int ctx,
                   bool ctx_given) const;
  // The one-line plan said at load (above), without a trailing newline.
  std::string describe(const MemoryPlan& plan, const std::string& gemv_name, int ctx, size_t free_bytes) const;

 private:
  std::string breakdown(const MemoryPlan& plan, const std::string& gemv_name, int ctx) const;

  ModelConfig c_;
  std::string source_;
  bool tied_;
  KvDtype kv_;
  DeviceSizes sizes_;
  double bf16_weights_ = 0;     // bytes of the row-major BF16 copy
  double prefill_dequant_ = 0;  // bytes of prefill's scratch for the largest matrix kept quantized (0: none)
  double host_embedding_ = 0;   // the embedding's bytes when it is in pinned host memory (embedding_on_host)
  std::vector<std::pair<std::string, double>> prepacked_by_type_;
  std::map<std::string, double> stored_by_type_;
};

}  // namespace llm
