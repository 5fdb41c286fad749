// The persistent decode step: ONE kernel per token whose resident blocks walk the whole forward pass (per layer: RMSNorm
// and the q|k|v GEMV with RoPE and the KV store in its epilogue; split-KV attention with its merge; the o GEMV with the
// residual; RMSNorm and the gate|up GEMV with SwiGLU in its epilogue; the down GEMV with the residual; then the final
// norm and the head), synchronised by counters in global memory instead of kernel boundaries. Device code and its
// launcher only: nothing here knows of files, models or text; the engine fills PersistentDecodeArgs from its buffers.
//
// How it works
// - Every block is resident (cooperative launch; the grid comes from the occupancy calculator: one 512-thread block
//   per SM, rounded down to a multiple of 16 blocks), so a block may wait for another. Each stage's producers arrive on
//   a per-layer counter (a block barrier, then one red.release.gpu); a stage's consumers wait (one thread spins with
//   ld.acquire.gpu, then a block barrier) for the count they need. A block waits only when it needs data.
// - A wait that does not end within the timeout sets an error code and every block leaves: the step fails with an
//   error (persistent_decode_error_text), never a hang. The last block out resets the counters for the next step;
//   after an error (blocks left early) the caller zeroes them.
// - GEMV: the weights are the padded row-major BF16 layout of the lanes-along-K mappings ("warp", "warp-r2": ld % 8 ==
//   0, 16-byte aligned rows, zero padding). A task is two rows (r, r + 1; gate|up: i, hidden + i) and one K slice; a
//   warp's lanes walk the slice with 16-byte loads, 8 in flight per lane, and reduce with shuffles. pair_rows = true
//   (the "warp-r2" mapping) walks both rows at once sharing each x chunk; false (the "warp" mapping) one row after the
//   other. Blocks own contiguous row ranges; small ranges split K so every warp has work; the slices' partial sums meet
//   in shared memory and are added in slice order (deterministic: no atomics on data). Quantized matrices (the
//   prepacked planes of the quantized "warp" mapping: Q4_0, Q4_1, Q4_K, Q8_0, Q5_0, Q5_1, Q6_K) walk both rows of a
//   task at once through that mapping's per-chunk lane code (quant_chunk_fma), 16-byte code loads, 2 per row in
//   flight, x staged transposed per chunk in shared memory; each matrix has its own form, so a model may mix types,
//   and q|k|v may be in up to three parts of different forms (Q4_K_M's Q4_K q, k and Q6_K v), one GEMV each.
//   With dp4a (the "warp-dp4a" mapping) each quantized stage then quantizes its staged x per block of 32 (llama.cpp's
//   q8_1, bit for bit that mapping's) and the lanes take quant_chunk_dp4a's integer dots instead, their loads through
//   a ring per warp (2 chunks per row in flight, kept across task boundaries).
// - Attention: blocks take (kv head, pass of two query heads, key range) items; a block's warps take keys (head_dim / 8
//   lanes per key, one 16-byte load each, the next key's rows loading while this one's are used), keep an online
//   softmax per query head, and combine in shared memory; with one range per kv head the result is written directly,
//   otherwise the block that finishes the last range merges them.
// - Greedy sampling (sample_vocab > 0): each block folds the head rows it finished into one key, one atomicMax per
//   block, and the last block out emits the id (see PersistentDecodeArgs::sample_vocab).
// - Profiling (prof != null): block by block, SM clock cycles spent in each PersistentPart (waiting included), so the
//   parts of a step add up to the time the block ran. It runs a second build of each kernel: the one launched without
//   prof has no cycle accounting at all (no registers held for it: the BF16 warp-r2 kernel then spills nothing).
// - Residuals: the block that owns rows of x (the o/down partition) keeps them in shared memory too, so the residual
//   epilogues add to them there instead of re-reading x from L2.
// - Measured and dropped (docs/results/persistent-decode.md): weight loads issued before the wait (a register ring,
//   cp.async into shared memory, or a whole layer's share of the weights loaded into shared memory a layer ahead), L2
//   prefetch before or after the wait, a dynamically handed-out tail of rows, a cp.async ring for attention, and the
//   residual stream as tagged words polled by its readers instead of counters: none was faster.

#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime.h>

#include "kernels/quant/gemv_quant_plan.h"  // QuantGemvWeight (CUDA-free)

namespace llm {

// One GEMV matrix of the persistent path, in the layout its graph-path mapping reads: BF16 in the padded row-major
// layout of the lanes-along-K mappings (ld % 8 == 0, 16-byte aligned rows, zero padding), or quantized in the
// prepacked planes of the quantized "warp" mapping (kernels/quant/gemv_quant_plan.h QuantGemvWeight; built by
// persistent_matrix()). A quantized stage stages its input vector transposed per code chunk, as that mapping does.
enum PersistentForm : int {
  kPFBf16,    // BF16
  kPFQ4_0,    // Int4, one scale per 32 (code offset -8)
  kPFQ4_1,    // Int4, scale and min per 32
  kPFQ4_K,    // Int4, two-level scales and mins
  kPFInt8,    // Int8 codes, one scale per 32 (Q8_0, Q5_0)
  kPFInt8Min, // Int8 codes, scale and min per 32 (Q5_1)
  kPFQ6_K,    // Int8 codes (split: nibbles + 2 high bits), two-level scales
  kPFQ5_K,    // Int8 codes (split: nibbles + 1 high bit), two-level scales and mins
};
struct PersistentMatrix {
  int form = kPFBf16;
  const void* data = nullptr;  // BF16 [N, ld] or codes uint8 [N, ld] (bytes)
  int64_t ld = 0;              // elements (BF16) or bytes (codes) per row
  // Quantized: the scale planes (QuantGemvWeight's), their row pitches, chunk -> group / super-block shifts, and the
  // code -> value bias (kernels/quant/gemv_quant_device.cuh).
  const uint16_t* scales = nullptr;
  const uint16_t* mins = nullptr;
  const int8_t* sub_scales = nullptr;
  const uint16_t* super_d = nullptr;
  const uint8_t* k_heads = nullptr;
  const uint8_t* code_hi = nullptr;  // Q5_K's and Q6_K's high code bits (core/quant_planes.h), ld_hi bytes per row
  int64_t ld_groups = 0, ld_sub = 0, ld_super = 0, ld_heads = 0, ld_hi = 0;
  int group_shift = 0, super_shift = 0;
  float bias = 0.0f;
  int code_offset = 0;  // -8 for Q4_0, else 0 (the dp4a lane code)
};

// q|k|v in at most this many parts: one matrix, or one per member where the members differ in type.
constexpr int kQkvParts = 3;

struct PersistentLayer {
  const float* attn_norm = nullptr;  // [dim]
  const float* ffn_norm = nullptr;   // [dim]
  // q|k|v [q_dim + 2 kv_dim, dim] in qkv_parts parts, each in one form: part i is rows qkv_row0[i] .. qkv_row0[i + 1]
  // - 1 (even counts; a Q4_K_M layer keeps q and k in Q4_K and v in Q6_K: three parts). Each part is its own GEMV
  // stage over the same norm, staged in its form's order.
  PersistentMatrix wqkv[kQkvParts];
  int qkv_parts = 1;
  int qkv_row0[kQkvParts + 1] = {};
  PersistentMatrix wo;               // [dim, q_dim]
  PersistentMatrix wgu;              // [2 hidden, dim]: gate rows, then up rows
  PersistentMatrix wdown;            // [dim, hidden]
  uint16_t* k_cache = nullptr;       // [ctx, kv_dim] BF16
  uint16_t* v_cache = nullptr;       // [ctx, kv_dim] BF16
};

// Where the cycles of a persistent step go (per block, summed; PersistentProfile in the engine divides by the grid).
enum PersistentPart {
  kPWait,       // waiting for a stage's producers (dependencies)
  kPNorm,       // RMSNorm / staging the GEMV's input vector in shared memory
  kPQkv,        // q|k|v GEMV, RoPE and KV store
  kPAttention,  // split-KV attention and its merge
  kPO,          // o GEMV + residual
  kPGateUp,     // gate|up GEMV + SwiGLU
  kPDown,       // down GEMV + residual
  kPHead,       // head GEMV
  kPOther,      // embedding, counter upkeep
  kPersistentParts
};
const char* persistent_part_name(int part);

struct PersistentDecodeArgs {
  int n_layers = 0, dim = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, hidden = 0, vocab = 0, ctx = 0;
  float norm_eps = 0.0f;
  bool pair_rows = true;                   // "warp-r2" (true) or "warp" (false): see above
  unsigned quant_forms = 0;                // bit f: some matrix has quantized form f (a kernel with code for those
                                           // forms runs, its BF16 matrices walking two rows at once); 0: all BF16
  bool dp4a = false;                       // quantized matrices: the "warp-dp4a" lane code (x as int8 per 32, dp4a
                                           // dots) instead of "warp"'s FP32 one
  const PersistentLayer* layers = nullptr;  // device array [n_layers]
  const uint16_t* embedding = nullptr;     // [vocab, dim] BF16
  const float* final_norm = nullptr;       // [dim]
  PersistentMatrix head;                   // [vocab, dim]
  const float* inv_freq = nullptr;         // [head_dim / 2]
  const int* step = nullptr;               // [2]: pos, token
  float* x = nullptr;                      // [dim] residual stream
  float* q = nullptr;                      // [q_dim] rotated queries
  float* att = nullptr;                    // [q_dim] attention output
  float* hb = nullptr;                     // [hidden] SwiGLU output
  float* logits = nullptr;                 // [vocab]
  float* attn_partial = nullptr;           // persistent_decode_scratch_floats(...)
  unsigned* sync = nullptr;                // persistent_decode_sync_words(n_layers, n_heads), zeroed once
  unsigned* err_host = nullptr;            // optional, mapped host memory: the block that sets the error word
                                           // (sync[0]) writes the code here too, so the host needs no copy
  // Greedy sampling in the kernel (sample_vocab > 0): the argmax of logits[0, sample_vocab) (lowest index on ties,
  // kernels/ops/sampling.cu's rule), or kSampleNonFinite when any of them is NaN or Inf, goes to *argmax_out (e.g. a mapped
  // host word), and {pos + 1, id} (id 0 when non-finite) to next_step, the next step's {pos, token}. Each block folds
  // its head rows into one key, the blocks meet in an atomicMax on the sync area's last line, the last block out emits.
  int sample_vocab = 0;
  int* argmax_out = nullptr;
  int* next_step = nullptr;                // [2]; may be `step` (written after every block has read it)
  unsigned long long* prof = nullptr;      // optional: [grid][kPersistentParts] cycles, accumulated
  unsigned long long timeout_ns = 2000000000ull;
  // cluster > 0: the grid is ONE thread-block cluster of `cluster` blocks (persistent_decode_plan's cluster), and the
  // stages meet at the cluster's hardware barrier (barrier.cluster arrive.release / wait.acquire: every block arrives
  // after each stage and waits before the next) instead of counters in global memory: a small model is bound by its
  // dependencies, not its bytes (SmolLM2: 151 per token at ~2.7 us each over 128 blocks), and a cluster barrier costs a
  // fraction of a global counter's round trip. Fewer blocks stream each matrix, so prefetch (below) keeps them fed.
  // Same partition of the work for the same grid: bit for bit the counter kernel capped at that many blocks.
  int cluster = 0;
  // prefetch > 0: at the start of layer l each block asks L2 for its share of layer l + prefetch's weights (the head
  // after the last layer), so the stages' loads hit L2 instead of HBM (prefetch.global.L2; weights never change).
  int prefetch = 0;
  // head_x != null: the step ends at the final RMSNorm, written here ([dim]; each block its share of the rows), and
  // the head GEMV and the sample are the caller's (a launch over every SM: one cluster streams a 30 MB head at a
  // fraction of the bandwidth). sample_vocab must be 0 then.
  float* head_x = nullptr;
  int fault = 0;                           // tests: 1 = one block never arrives (the others must time out)
  int all_forms = 0;                       // tests: the quantized kernel with every form, whatever quant_forms says
};

// The persistent form of a BF16 matrix (padded row-major, `ld` elements per row) and of a quantized one (its
// prepacked planes, as uploaded for the quantized "warp" mapping). Fails naming the type for a GGML type the kernel
// has no form for.
PersistentMatrix persistent_matrix_bf16(const uint16_t* data, int64_t ld);
PersistentMatrix persistent_matrix(const QuantGemvWeight& w);

size_t persistent_decode_sync_words(int n_layers, int n_heads);
// Grid-wide waits of one step: each layer's five stage counters (q|k|v, attention, o, gate|up, down) are each waited
// on once by the stage that reads them (the last down by the head): the persistent path's counterpart of the graph
// path's kernel boundaries, for the A/B report.
constexpr int kPersistentStageCounters = 5;
inline int persistent_decode_waits_per_step(int n_layers) { return kPersistentStageCounters * n_layers; }
// Attention partials: n_heads * max_splits * (head_dim + 2) floats, max_splits = persistent_decode_max_splits().
size_t persistent_decode_scratch_floats(int n_heads, int head_dim, int grid);
int persistent_decode_max_splits(int grid);

struct PersistentPlan {
  int grid = 0, block = 0;
  size_t smem = 0;
  int cluster = 0;  // > 0: the grid is one cluster of this many blocks (PersistentDecodeArgs::cluster)
};
// The grid: every block resident (occupancy calculator x SMs), no more blocks than the widest stage can use;
// `max_blocks` > 0 caps it (tuning). Fails when the kernel cannot have one block per SM, or for a shape it does not
// take (head_dim not 8 * 2^i up to 256, n_heads not a multiple of n_kv_heads, rows wider than shared memory holds;
// engine/gemv_choice.h decode_path_refusal says the same before any GPU work, from the same shared-memory sum).
PersistentPlan persistent_decode_plan(const PersistentDecodeArgs& a, int max_blocks);
// The cluster form's plan (PersistentDecodeArgs::cluster): one cluster of `cluster` blocks (8, or 16 where the GPU
// schedules a non-portable cluster that large: asked of the occupancy calculator). Fails naming the size when no
// cluster of it can be resident, or for the shapes persistent_decode_plan refuses.
PersistentPlan persistent_decode_cluster_plan(const PersistentDecodeArgs& a, int cluster);
// One decode step (cooperative launch). No allocation, no sync.
void persistent_decode_launch(const PersistentDecodeArgs& a, const PersistentPlan& plan, cudaStream_t stream);
// The error word (args.sync[0]) after a step: 0 = fine; otherwise what went wrong, in one line.
std::string persistent_decode_error_text(unsigned code);

}  // namespace llm
