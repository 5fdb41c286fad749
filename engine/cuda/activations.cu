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
  return attention_prefill_scratch_bytes(c.n_heads, c.n_kv_heads, c.head_dim, ctx);
}

namespace {

// The decode buffers' offsets in a token slab, each 256-byte aligned (so every slab's buffers keep their alignment).
struct SlabLayout {
  size_t step, x, xb, qkv, att, gate_up, hb, hb_q8, logits, norm_partials, norm_arrivals, norm_inv, norm_count,
      attn_scratch, bytes;
  SlabLayout(const ModelConfig& c, int ctx) {
    const size_t dim = size_t(c.dim), qd = size_t(c.q_dim()), kvd = size_t(c.kv_dim()), hid = size_t(c.hidden_dim);
    size_t at = 0;
    auto take = [&](size_t n) {
      const size_t o = at;
      at += (std::max<size_t>(n, 1) + 255) / 256 * 256;
      return o;
    };
    step = take(2 * sizeof(int));
    x = take(dim * 4);
    xb = take(dim * 4);
    qkv = take((qd + 2 * kvd) * 4);
    att = take(qd * 4);
    gate_up = take(2 * hid * 4);
    hb = take(hid * 4);
    hb_q8 = take(size_t(quant_batch_x_bytes(1, int64_t(hid))));
    logits = take(size_t(c.vocab_size) * 4);
    norm_partials = take(2 * size_t(kGemvEpiloguePartials) * 4);
    norm_arrivals = take(4);
    norm_inv = take(2 * 4);
    norm_count = take(2 * 4);
    attn_scratch = take(attention_decode_scratch_bytes(c.n_heads, c.head_dim, ctx));
    bytes = at;
  }
};

}  // namespace

size_t decode_slab_bytes(const ModelConfig& c, int ctx) { return SlabLayout(c, ctx).bytes; }

void Activations::allocate(const ModelConfig& c, int ctx, int max_chunk, int batch_rows_cap, int slabs,
                           DeviceArena& arena, cudaStream_t s) {
  const size_t dim = size_t(c.dim), qd = size_t(c.q_dim()), kvd = size_t(c.kv_dim()), hid = size_t(c.hidden_dim);
  const size_t ch = size_t(max_chunk), wide = std::max({dim, qd, hid});

  prefill_ids = arena.alloc<int>(1 + ch);

  const SlabLayout L(c, ctx);
  token_slabs = std::max(slabs, 1);
  token_stride = int64_t(L.bytes);
  uint8_t* slab = arena.alloc<uint8_t>(L.bytes * size_t(token_slabs));
  // Zeroes: every step word, logits and fold counter (the arrival counters are 0 between launches).
  CUDA_CHECK(cudaMemsetAsync(slab, 0, L.bytes * size_t(token_slabs), s));
  step = reinterpret_cast<int*>(slab + L.step);
  x = reinterpret_cast<float*>(slab + L.x);
  xb = reinterpret_cast<float*>(slab + L.xb);
  qkv = reinterpret_cast<float*>(slab + L.qkv);
  q = qkv;
  k = qkv + qd;
  v = qkv + qd + kvd;
  att = reinterpret_cast<float*>(slab + L.att);
  gate_up = reinterpret_cast<float*>(slab + L.gate_up);
  hb = reinterpret_cast<float*>(slab + L.hb);
  hb_q8 = slab + L.hb_q8;
  logits = reinterpret_cast<float*>(slab + L.logits);
  norm_partials = reinterpret_cast<float*>(slab + L.norm_partials);
  norm_arrivals = reinterpret_cast<unsigned*>(slab + L.norm_arrivals);
  norm_inv = reinterpret_cast<float*>(slab + L.norm_inv);
  norm_count = reinterpret_cast<unsigned*>(slab + L.norm_count);
  attn_scratch = slab + L.attn_scratch;

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

  pass_scratch = arena.alloc<uint8_t>(attention_scratch_bytes(c, ctx));
  sample_scratch = arena.alloc<uint8_t>(sample_scratch_bytes(c.vocab_size));
  blas_workspace = arena.alloc<uint8_t>(kCublasWorkspaceBytes);
}

}  // namespace llm
