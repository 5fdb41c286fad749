// The CUDA engine's activations and scratch: every buffer a forward pass writes, allocated once at construction
// (decode never allocates, so a captured step replays as it was captured). FP32 unless noted. The decode step reads
// its {pos, token} from `step` on the device, so one captured graph replays at every position.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/cuda/resources.h"  // DeviceArena
#include "models/config.h"

namespace llm {

// Bytes of pass_scratch: a short prefill pass's split partials (a verify pass: keys split across blocks).
size_t attention_scratch_bytes(const ModelConfig& c, int ctx);
// Bytes of one token slab: every decode buffer below, each 256-byte aligned, decode attention's scratch included.
size_t decode_slab_bytes(const ModelConfig& c, int ctx);

struct Activations {
  int* prefill_ids = nullptr;  // [1 + max_chunk]: pos0, then the pass's tokens

  // Decode, one token: slab 0 of token_slabs token slabs, token_stride bytes apart, each holding every buffer from
  // `step` to attn_scratch at the same offset. A decode-order verify pass runs the decode step's kernels over a token
  // axis (kernels/ops/token_axis.h): token t in slab t, so its values are the decode step's bit for bit.
  int token_slabs = 0;
  int64_t token_stride = 0;
  int* step = nullptr;         // [2]: pos, token of the decode step (written by a copy or by the sample kernel)
  float* x = nullptr;          // [dim] residual stream
  float* xb = nullptr;         // [dim] normed input of a GEMV
  float* qkv = nullptr;        // [q_dim + 2 kv_dim]: q, k, v are its slices (the fused GEMV writes all three)
  float *q = nullptr, *k = nullptr, *v = nullptr;  // [q_dim], [kv_dim], [kv_dim] inside qkv
  float* att = nullptr;        // [q_dim] attention output
  float* gate_up = nullptr;    // [2 hidden]: gate, then up (the fused GEMV writes both)
  float* hb = nullptr;         // [hidden] SwiGLU output
  void* hb_q8 = nullptr;       // quant_batch_x_bytes(1, hidden): hb in warp-dp4a's int8 form (quant_batch_swiglu_x),
                               // read by a down GEMV on warp-dp4a (GemvEpilogue::x_q8)
  float* logits = nullptr;     // [vocab]
  // The RMSNorm fold (kernels/gemv/gemv_epilogue.h): the producing GEMV's block sums, its arrival counter (0 between
  // launches) and 1 / rms of the two norms a layer reads: [0] attention's (and the final norm's), [1] the MLP's.
  // With EngineTuning::norm_sums the consumers add the block sums themselves: one slot per norm, so a producer never
  // overwrites sums its consumer has yet to read, and norm_count[slot] the producer's block count.
  float* norm_partials = nullptr;    // [2][kGemvEpiloguePartials]
  unsigned* norm_arrivals = nullptr; // [1]
  float* norm_inv = nullptr;         // [2]
  unsigned* norm_count = nullptr;    // [2]

  // Prefill, one pass of up to max_chunk tokens.
  float* px = nullptr;         // [chunk, dim] residual stream
  float* pq = nullptr;         // [chunk, q_dim]
  float* pk = nullptr;         // [chunk, kv_dim]
  float* pv = nullptr;         // [chunk, kv_dim]
  float* patt = nullptr;       // [chunk, q_dim]
  float* pgate_up = nullptr;   // [chunk, 2 hidden]: rows [gate_t | up_t]
  uint16_t* pbf = nullptr;     // [chunk, max(dim, q_dim, hidden)] BF16: the input of the next GEMM
  float* pf32 = nullptr;       // [exact_rows, max(dim, q_dim, hidden)]: an exact verify's normed rows or SwiGLU
                               // output in FP32, for the batched GEMVs (as the decode step's x)
  void* batch_xq = nullptr;    // quant_batch_x_bytes(batch_rows, wide): the pass's rows in int8
                               // for the batch-k quantized GEMV (kernels/quant/gemv_quant_batch.h)
  int batch_rows = 0;          // rows batch_xq holds: min(chunk, EngineTuning::quant_batch_rows) (kQuantBatchPassMax
                               // at most), at least 1
  int exact_rows = 0;          // rows pf32 holds: min(chunk, kExactPassMax)

  void* attn_scratch = nullptr;    // attention_decode_scratch_bytes: decode attention's split partials (in the slab)
  void* pass_scratch = nullptr;    // attention_scratch_bytes(c, ctx): a prefill pass's split partials
  void* sample_scratch = nullptr;  // sample_scratch_bytes(vocab)
  void* blas_workspace = nullptr;  // [kCublasWorkspaceBytes]: the prefill cuBLAS handle's

  // Allocates everything above from arena (after the KV cache, as the memory plan counts) and zeroes the token slabs
  // (steps, logits, the fold's counters) on s. batch_rows_cap: EngineTuning::quant_batch_rows (batch_xq holds
  // min(max_chunk, it) rows, at least 1). slabs: token slabs (kTokenSlabs; at least 1).
  void allocate(const ModelConfig& c, int ctx, int max_chunk, int batch_rows_cap, int slabs, DeviceArena& arena,
                cudaStream_t s);
};

}  // namespace llm
