// Device ops of the decode engine other than the GEMV mappings (those are in kernels/gemv/gemv.h).
// Activations are FP32 on the device; weights and the KV cache are BF16 bits (uint16_t).
// Every op takes positions from DEVICE memory (d_pos) where they vary per token, so that a whole decode step can be
// captured once as a CUDA graph and replayed. No op allocates or synchronises.
// RoPE convention: interleaved pairs (2i, 2i+1), pair i rotating by pos * inv_freq[i] (see models/tensor.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/attention/split_rule.h"  // AttnSplitParts
#include "kernels/ops/token_axis.h"        // TokenAxis

namespace llm {

// out[t, :] = FP32(table[d_tokens[t], :]) for t < n_tokens.
// tok (here and below where an op takes one): the decode step's op for tok.n tokens side by side, each on its own
// slab of activations and positions tok.stride bytes apart (kernels/ops/token_axis.h), one token per slab.
void embed_lookup(const uint16_t* table, const int* d_tokens, int n_tokens, int dim, float* out, cudaStream_t s,
                  TokenAxis tok = {});

// out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * w[:]   (w FP32). out may alias x.
// A token axis's step words (kernels/ops/token_axis.h): token t's {pos, token} = {ids[0] + t0 + t, ids[1 + t0 + t]}
// into step + t * stride bytes, t < n (ids: a pass's pos0, then its tokens, on the device).
void spread_token_steps(const int* ids, int t0, int n, int* step, int64_t stride, cudaStream_t s);

void rmsnorm(const float* x, const float* w, float* out, int rows, int dim, float eps, cudaStream_t s,
             TokenAxis tok = {});
// Same, BF16 output (the input of a cuBLAS prefill GEMM).
void rmsnorm_bf16(const float* x, const float* w, uint16_t* out, int rows, int dim, float eps, cudaStream_t s);
// Decode's first kernel under the RMSNorm fold (kernels/gemv/gemv_epilogue.h): x [dim] = the embedding row of
// *d_token (BF16 table [vocab, dim]), xg = w * x and *inv = 1 / sqrt(mean(x^2) + eps), in one block: what the first
// layer's q|k|v GEMV reads (xg as its x, *inv as its output scale). sums and count (both or neither): also
// sums[0] = sum(x^2) and *count = 1, a producer of one block sum for a consumer of GemvEpilogue::scale_sums.
void embed_rmsnorm_fold(const uint16_t* table, const int* d_token, int dim, const float* w, float eps, float* x,
                        float* xg, float* inv, cudaStream_t s, float* sums = nullptr, unsigned* count = nullptr,
                        TokenAxis tok = {});

// In place: q [n_tokens, n_heads, head_dim] and k [n_tokens, n_kv_heads, head_dim] at positions *d_pos0 + t.
void rope(float* q, float* k, const float* inv_freq, const int* d_pos0, int n_tokens, int n_heads, int n_kv_heads,
          int head_dim, cudaStream_t s);

// Writes k, v [n_tokens, kv_dim] (FP32) as BF16 into caches [ctx, kv_dim] at rows *d_pos0 .. *d_pos0 + n_tokens - 1.
void kv_store(const float* k, const float* v, uint16_t* k_cache, uint16_t* v_cache, const int* d_pos0, int n_tokens,
              int kv_dim, cudaStream_t s);

// rope + kv_store in one launch: q rotated in place; k rotated and v copied, as BF16, into the caches at rows
// *d_pos0 + t (k itself is left unrotated: only the cache is read afterwards). Same numerics as the two ops.
void rope_kv_store(float* q, const float* k, const float* v, const float* inv_freq, const int* d_pos0, int n_tokens,
                   int n_heads, int n_kv_heads, int head_dim, uint16_t* k_cache, uint16_t* v_cache, cudaStream_t s,
                   TokenAxis tok = {});

// Decode attention for one token at position *d_pos (attends to cache rows 0..*d_pos), grouped-query heads,
// split over the KV range across blocks and merged (flash-decoding) so long contexts fill the GPU.
// q [n_heads * head_dim], out [n_heads * head_dim]. Scratch sized by attention_decode_scratch_bytes(), allocated once.
// defer (the three decode forms): the split pass only; the partials it leaves are described in *defer for the next
// kernel to merge (the o GEMV as it stages x: GemvEpilogue::merge), the merge kernel is not launched and out is not
// written.
size_t attention_decode_scratch_bytes(int n_heads, int head_dim, int max_ctx);
// Cache rows per KV split (64 * 2^j) at a context of `len` rows, from n_kv_heads and the SM count: at most two split
// blocks per SM (exposed for tests and reports; the kernels apply the same rule to the length they read on the device,
// so one captured graph serves every position). The two-argument form uses the current device's SMs.
int attention_decode_chunk(int n_kv_heads, int len, int sms);
int attention_decode_chunk(int n_kv_heads, int len);
void attention_decode(const float* q, const uint16_t* k_cache, const uint16_t* v_cache, const int* d_pos,
                      int n_heads, int n_kv_heads, int head_dim, int max_ctx, float* out, void* scratch,
                      cudaStream_t s, AttnSplitParts* defer = nullptr, TokenAxis tok = {});

// The decode step's rope_kv_store and attention_decode in one launch: q [n_heads * head_dim] and k [kv_dim] as the
// q|k|v GEMV wrote them (unrotated), v [kv_dim]; k rotated and v go into the caches' row *d_pos (as rope_kv_store
// writes it, which the call replaces), q is rotated as the kernel loads it (q itself is left unrotated). Bit for bit
// the two launches: the same rotation (rotate_pair), the same split pass and merge. Only where
// attention_decode_rope_supported (the tensor-core decode kernel: head_dim 64 or 128, group 1..8, q/out 8-byte and
// caches 16-byte aligned); elsewhere it fails by name: call the two ops.
bool attention_decode_rope_supported(int head_dim, int n_heads, int n_kv_heads, const float* q, const uint16_t* k_cache,
                                     const uint16_t* v_cache, const float* out);
void attention_decode_rope(const float* q, const float* k, const float* v, const float* inv_freq, uint16_t* k_cache,
                           uint16_t* v_cache, const int* d_pos, int n_heads, int n_kv_heads, int head_dim,
                           int max_ctx, float* out, void* scratch, cudaStream_t s, AttnSplitParts* defer = nullptr);

// Causal prefill attention: queries q [n_tokens, n_heads * head_dim] at positions pos0 .. pos0 + n_tokens - 1 over
// cache rows 0 .. pos0 + n_tokens - 1 (already stored). out [n_tokens, n_heads * head_dim]. d_pos0 (optional): the
// kernel reads pos0 there instead (a captured pass replayed at other positions; the grid depends on n_tokens and
// max_ctx only). scratch (optional, attention_prefill_scratch_bytes(n_heads, n_kv_heads, head_dim, max_ctx) bytes,
// 16-byte aligned, for a cache of max_ctx rows): a short pass (a verify pass of drafted tokens: at most 32 tokens in
// one 64-row block of (token, head) rows) splits its keys across blocks as decode does and merges them, instead of
// one block per KV head walking every key (where the position is on the host and the keys make one split anyway, the
// plain kernel runs).
void attention_prefill(const float* q, const uint16_t* k_cache, const uint16_t* v_cache, int pos0, int n_tokens,
                       int n_heads, int n_kv_heads, int head_dim, float* out, cudaStream_t s,
                       const int* d_pos0 = nullptr, void* scratch = nullptr, int max_ctx = 0);
size_t attention_prefill_scratch_bytes(int n_heads, int n_kv_heads, int head_dim, int max_ctx);

// The same two ops over the FP8 KV cache (--kv-dtype fp8): E4M3 codes [ctx, kv_dim] for K and for V, and one FP32
// scale per block of kKvFp8Block (core/kv_dtype.h, 32) positions and KV head, scales [n_blocks, n_kv_heads] (the
// layout and rule of engine/kv_cache.h; kernels/attention/kv_fp8.h writes them). Tensor-core kernels only: head_dim 64 or 128
// (attention_fp8_supported); any other shape fails by name.
bool attention_fp8_supported(int head_dim, int n_heads, int n_kv_heads);
void attention_decode_fp8(const float* q, const uint8_t* k_codes, const uint8_t* v_codes, const float* k_scale,
                          const float* v_scale, const int* d_pos, int n_heads, int n_kv_heads, int head_dim,
                          int max_ctx, float* out, void* scratch, cudaStream_t s, AttnSplitParts* defer = nullptr);
void attention_prefill_fp8(const float* q, const uint8_t* k_codes, const uint8_t* v_codes, const float* k_scale,
                           const float* v_scale, int pos0, int n_tokens, int n_heads, int n_kv_heads, int head_dim,
                           float* out, cudaStream_t s, void* scratch = nullptr, int max_ctx = 0);

// out[i] = silu(gate[i]) * up[i]
void swiglu(const float* gate, const float* up, float* out, size_t n, cudaStream_t s);
// out[i] = silu(gate_up[i]) * gate_up[n + i]: the two halves of one fused gate|up GEMV output [2n].
void swiglu_fused(const float* gate_up, float* out, size_t n, cudaStream_t s, TokenAxis tok = {});
// Per row t of gate_up [rows, 2 hidden] (the fused gate|up GEMM's output): out[t, i] = BF16(silu(gate_up[t, i]) *
// gate_up[t, hidden + i]), out [rows, hidden]. The same numbers as swiglu then convert_f32_to_bf16.
void swiglu_rows_bf16(const float* gate_up, uint16_t* out, int rows, int hidden, cudaStream_t s);
// The same rows in FP32: out[t, i] = silu(gate_up[t, i]) * gate_up[t, hidden + i], out [rows, hidden].
void swiglu_rows(const float* gate_up, float* out, int rows, int hidden, cudaStream_t s);
// y[i] += x[i]
void add_inplace(float* y, const float* x, size_t n, cudaStream_t s);
void convert_f32_to_bf16(const float* x, uint16_t* out, size_t n, cudaStream_t s);
void convert_bf16_to_f32(const uint16_t* x, float* out, size_t n, cudaStream_t s);
// One thread that spins for `ns` nanoseconds of the device's global timer. Queued ahead of events that time a short
// kernel, it keeps the stream busy while the host records the first event and launches the kernel, so the host's
// launch latency falls inside the spin instead of between the events.
void spin_device(unsigned long long ns, cudaStream_t s);

// Sampling on the device, the rule of engine/sampler.h: temperature 0 -> argmax (lowest index on ties); otherwise
// softmax(logits / T), top-k (0 = off), top-p, and one uniform number u in [0, 1). Writes the id to *d_out, or
// kSampleNonFinite when any of logits[0, vocab) is NaN or Inf. Only ids below `vocab` are candidates: a caller
// whose tokenizer is smaller than the head passes the tokenizer's size (the padding logits are never looked at).
// With d_step (the decode step's device {pos, token}), the kernel also writes {next_pos, id} there (id 0 when
// non-finite), so the next decode step can be queued before the host has seen the id.
constexpr int kSampleNonFinite = -2;
size_t sample_scratch_bytes(int vocab);
void sample_device(const float* logits, int vocab, float temperature, int top_k, float top_p, float u, int* d_out,
                   void* scratch, cudaStream_t s, int* d_step = nullptr, int next_pos = 0);

// Synthetic weights generated in place (core/counter_rng.h), rounded to BF16, rows in engine order: engine row r
// reads generator row file_row(r) (rope_head_dim != 0: rotate-half -> interleaved permutation, models/tensor.h).
void fill_synthetic_bf16(uint16_t* out, int64_t rows, int64_t cols, uint64_t seed, uint64_t tensor_id, float offset,
                         float scale, int rope_head_dim, cudaStream_t s);

}  // namespace llm
