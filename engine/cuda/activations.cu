// The CUDA engine's activations and scratch (engine/cuda/activations.h), in the order the memory plan counts them.
#include "engine/cuda/activations.h"

#include <algorithm>

#include "engine/memory_plan.h"  // kCublasWorkspaceBytes, kExactPassMax, quant_batch_rows_held
#include "kernels/quant/gemv_quant_plan.h"  // quant_batch_x_bytes
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_epilogue.h"  // kGemvEpiloguePartials
#include "kernels/ops/ops.h"  // attention_decode_scratch_bytes, attention_prefill_scratch_bytes, sample_scratch_bytes

namespace llm {

size_t attention_scratch_bytes(const ModelConfig& c, int ctx) {
  return std::max(attention_decode_scratch_bytes(c.n_heads, c.head_dim, ctx),
                  attention_prefill_scratch_bytes(c.n_heads, c.n_kv_heads, c.head_dim, ctx));
}

void Activations::allocate(const ModelConfig& c, int ctx, int max_chunk, int batch_rows_cap, DeviceArena& arena,
                           cudaStream_t s) {
  const size_t dim = size_t(c.dim), qd = size_t(c.q_dim()), kvd = size_t(c.kv_dim()), hid = size_t(c.hidden_dim);
  const size_t ch = size_t(max_chunk), wide = std::max({dim, qd, hid});

  step = arena.alloc<int>(2);
  prefill_ids = arena.alloc<int>(1 + ch);
  CUDA_CHECK(cudaMemsetAsync(step, 0, 2 * sizeof(int), s));

  x = arena.alloc<float>(dim);
  xb = arena.alloc<float>(dim);
  qkv = arena.alloc<float>(qd + 2 * kvd);
  q = qkv;
  k = qkv + qd;
  v = qkv + qd + kvd;
  att = arena.alloc<float>(qd);
  gate_up = arena.alloc<float>(2 * hid);
  hb = arena.alloc<float>(hid);
  hb_q8 = arena.alloc<uint8_t>(size_t(quant_batch_x_bytes(1, int64_t(hid))));
  logits = arena.alloc<float>(size_t(c.vocab_size));
  CUDA_CHECK(cudaMemsetAsync(logits, 0, size_t(c.vocab_size) * sizeof(float), s));
  norm_partials = arena.alloc<float>(2 * size_t(kGemvEpiloguePartials));
  norm_arrivals = arena.alloc<unsigned>(1);
  norm_inv = arena.alloc<float>(2);
  norm_count = arena.alloc<unsigned>(2);
  CUDA_CHECK(cudaMemsetAsync(norm_count, 0, 2 * sizeof(unsigned), s));
  CUDA_CHECK(cudaMemsetAsync(norm_arrivals, 0, sizeof(unsigned), s));

  px = arena.alloc<float>(ch * dim);
  pq = arena.alloc<float>(ch * qd);
  pk = arena.alloc<float>(ch * kvd);
  pv = arena.alloc<float>(ch * kvd);
  patt = arena.alloc<float>(ch * qd);
  pgate_up = arena.alloc<float>(ch * 2 * hid);
  pbf = arena.alloc<uint16_t>(ch * wide);
  batch_rows = quant_batch_rows_held(max_chunk, batch_rows_cap);
  exact_rows = std::min(max_chunk, kExactPassMax);
  pf32 = arena.alloc<float>(size_t(exact_rows) * wide);
  batch_xq = arena.alloc<uint8_t>(size_t(quant_batch_x_bytes(batch_rows, int64_t(wide))));

  attn_scratch = arena.alloc<uint8_t>(attention_scratch_bytes(c, ctx));
  sample_scratch = arena.alloc<uint8_t>(sample_scratch_bytes(c.vocab_size));
  blas_workspace = arena.alloc<uint8_t>(kCublasWorkspaceBytes);
}

}  // namespace llm
