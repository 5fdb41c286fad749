// What a decode GEMV does with each finished row besides storing it: the RMSNorm fold (plain C++, shared by the BF16
// mappings, the quantized forms and their host emulation).
//
// RMSNorm(x) = x * g / rms(x), and a GEMV is linear, so W RMSNorm(x) = (W (g * x)) / rms(x). The GEMV that writes the
// residual x (o, down: y += W v) is the producer: for each finished row it also writes xg[n] = g[n] * x[n] and adds
// x[n]^2 to its block's sum; the last block to finish adds the block sums in block order (deterministic) and writes
// 1 / rms(x) = 1 / sqrt(mean(x^2) + eps) to *inv. The GEMV that reads the norm (q|k|v, gate|up, the head) is the
// consumer: it reads xg as its x and multiplies each row by *scale (= the producer's *inv). So no RMSNorm kernel runs
// between them: the norm costs one extra store per residual row and one multiply per output row.
#pragma once
#include <cstddef>

#include "kernels/attention/split_rule.h"  // AttnSplitParts
#include "kernels/ops/token_axis.h"        // TokenAxis

namespace llm {

struct GemvEpilogue {
  // Consumer: y[n] = (*scale) * (W x)[n]. Null: no scale.
  const float* scale = nullptr;
  // Consumer, the other way (EngineTuning::norm_sums; the quantized "warp" and "warp-dp4a" forms only, others refuse
  // it by name): y[n] = s * (W x)[n], s = 1 / sqrt(sum(scale_sums[0, *scale_count)) / norm_n + eps), each warp adding
  // the producer's block sums lane-parallel in one fixed order (every warp of every block gets the same bits) at its
  // first stored row. Its producer then needs no last block (inv null below).
  const float* scale_sums = nullptr;
  const unsigned* scale_count = nullptr;
  int norm_n = 0;
  // Producer (xg null: none): xg[n] = norm_w[n] * y[n] for the final y (after accumulate); partials holds one float
  // per block of the launch (kGemvEpiloguePartials at most), its sum of y^2. Then either inv and arrivals (a counter
  // at 0 before the launch and left at 0 after it): the last block to arrive adds the partials in block order and
  // writes *inv = 1 / sqrt(sum(y^2) / N + eps); or, with inv null, count: block 0 stores the block count and the
  // consumer adds the partials itself (scale_sums above): no fence, counter or last block on the producer's tail.
  const float* norm_w = nullptr;
  float* xg = nullptr;
  float* inv = nullptr;
  float* partials = nullptr;
  unsigned* arrivals = nullptr;
  unsigned* count = nullptr;
  float eps = 0.0f;  // the norm's (the producer's last block, or the consumer's sums)
  // An input hint, not part of the fold: x already in warp-dp4a's int8 form (quant_x_smem layout, quant_x_smem_bytes(K)
  // bytes, 16-byte aligned; written by the kernel before, e.g. quant_batch_swiglu_x) for the same x the launch gets.
  // warp-dp4a copies it into shared memory instead of quantizing x in every block; every other form ignores it (x
  // stays valid), so it never changes which mappings may run a launch (any() leaves it out).
  const void* x_q8 = nullptr;
  // Input forms, not part of the fold either (the quantized "warp" form with x staged in shared memory only,
  // quant_stages_x_forms; every other form refuses them by name, since x is not what they would read): the launch
  // makes x as its blocks stage it, with the arithmetic of the kernel it replaces, so y is bit for bit the same.
  //   glu: x[i] = swiglu_value(glu[i], glu[K + i]) (ops' swiglu_fused of a [gate | up] row): the down projection.
  //   merge: x = the log-sum-exp merge of decode attention's key splits (attention_decode_merge_kernel's
  //          merge_split_max / merge_split_value), n_heads * head_dim == K: the o projection.
  const float* glu = nullptr;
  AttnSplitParts merge;
  // The token axis (kernels/ops/token_axis.h; the quantized "warp" and "warp-dp4a" forms only, others refuse it by
  // name): tokens.n launches of this GEMV side by side (tokens.n times the blocks, the token fastest), token t's x, y
  // and every pointer above but norm_w tokens.stride bytes after token t - 1's (gemv_epilogue_at_token).
  TokenAxis tokens;

  bool producer() const { return xg != nullptr; }
  bool x_form() const { return glu != nullptr || merge.any(); }
  bool any() const { return scale != nullptr || scale_sums != nullptr || xg != nullptr; }
};

// ep as token t of its token axis sees it: every per-token pointer moved to token t's slab (norm_w is a weight).
TOKEN_AXIS_HD GemvEpilogue gemv_epilogue_at_token(GemvEpilogue ep, int t) {
  const int64_t s = ep.tokens.stride;
  ep.scale = token_ptr(ep.scale, s, t);
  ep.scale_sums = token_ptr(ep.scale_sums, s, t);
  ep.scale_count = token_ptr(ep.scale_count, s, t);
  ep.xg = token_ptr(ep.xg, s, t);
  ep.inv = token_ptr(ep.inv, s, t);
  ep.partials = token_ptr(ep.partials, s, t);
  ep.arrivals = token_ptr(ep.arrivals, s, t);
  ep.count = token_ptr(ep.count, s, t);
  ep.x_q8 = token_ptr(ep.x_q8, s, t);
  ep.glu = token_ptr(ep.glu, s, t);
  ep.merge.part_o = token_ptr(ep.merge.part_o, s, t);
  ep.merge.part_ml = token_ptr(ep.merge.part_ml, s, t);
  ep.merge.d_pos = token_ptr(ep.merge.d_pos, s, t);
  return ep;
}

// Blocks one producing launch may have (its partials buffer holds this many floats).
constexpr int kGemvEpiloguePartials = 1 << 16;

}  // namespace llm
