// Quantized GEMV, the host-side half that needs no CUDA: the device-side description of a quantized matrix
// (QuantGemvWeight: core/quant_planes.h's QuantPlanes, the type's fields, GGUF's blocks as stored), the
// per-type traits, layout checks, plane sizes, bytes read per call and the launch plan of every mapping. Included by
// kernels/quant/gemv_quant.h (which adds upload, launch) and by tests/cpu/quant_gemv_plan_test.cpp (CPU only).
// kernels/ knows nothing of files or models/: GGML type ids are repeated here as plain ints (same values as
// models/quant.h's GgmlQuantType, which the CPU test checks).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/gemv_table.h"    // QuantGemvKind, the forms' rows
#include "core/quant_planes.h"  // QuantPlanes, QuantCodeFamily: the one description of the prepacked planes

namespace llm {

// GGML type ids (GGUF tensor info `type`).
namespace quant_type_id {
constexpr int kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14;
}

// The quantized forms (QuantGemvKind), their names and one-line descriptions: rows of core/gemv_table.h.

// What a GGML type is, in the prepacked layout's terms (the same values pack_quant sets in PackedQuant).
struct QuantTypeTraits {
  int type_id = 0;
  const char* name = "?";
  QuantCodeFamily family = QuantCodeFamily::Int8;
  int group = 32;              // weights per scale (16 for Q6_K)
  int code_offset = 0;         // -8 for Q4_0, -32 for Q6_K
  bool has_min = false;        // Q4_1, Q5_1, Q4_K, Q5_K
  bool two_level = false;      // Q4_K, Q5_K, Q6_K
  int groups_per_super = 0;    // 8 (Q4_K, Q5_K), 16 (Q6_K), 0 otherwise
  int block_weights = 32;      // GGUF block: 32, or 256 for the K-quants
  int block_bytes = 0;         // 18, 20, 22, 24, 34, 144, 176, 210
};

// Traits of a supported type id; fails naming the id otherwise.
inline QuantTypeTraits quant_type_traits(int type_id) {
  using namespace quant_type_id;
  QuantTypeTraits t;
  t.type_id = type_id;
  switch (type_id) {
    case kQ4_0: t.name = "Q4_0"; t.family = QuantCodeFamily::Int4; t.code_offset = -8; t.block_bytes = 18; break;
    case kQ4_1: t.name = "Q4_1"; t.family = QuantCodeFamily::Int4; t.has_min = true; t.block_bytes = 20; break;
    case kQ5_0: t.name = "Q5_0"; t.block_bytes = 22; break;
    case kQ5_1: t.name = "Q5_1"; t.has_min = true; t.block_bytes = 24; break;
    case kQ8_0: t.name = "Q8_0"; t.block_bytes = 34; break;
    case kQ4_K:
      t.name = "Q4_K"; t.family = QuantCodeFamily::Int4; t.has_min = true; t.two_level = true;
      t.groups_per_super = 8; t.block_weights = 256; t.block_bytes = 144;
      break;
    case kQ5_K:
      t.name = "Q5_K"; t.has_min = true; t.two_level = true; t.groups_per_super = 8; t.block_weights = 256;
      t.block_bytes = 176;
      break;
    case kQ6_K:
      t.name = "Q6_K"; t.group = 16; t.code_offset = -32; t.two_level = true; t.groups_per_super = 16; t.block_weights = 256;
      t.block_bytes = 210;
      break;
    default: fail("quantized gemv: GGML type id ", type_id, " has no quantized kernel");
  }
  return t;
}

// A quantized [n, k] matrix as the kernels read it: the prepacked planes (QuantPlanes, core/quant_planes.h: pointers,
// pitches and shapes), the type's fields, and GGUF's blocks as stored. Pointers are device pointers once uploaded
// (quant_gemv_upload takes the same struct with host pointers). Planes a mapping does not read may be null: "warp",
// "thread" and "warp-dp4a" read the prepacked planes, "as-stored" reads `blocks`.
struct QuantGemvWeight : QuantPlanes {
  QuantGemvWeight() : QuantPlanes{} {}  // planes null, pitches 0 (QuantPlanes has no initializers of its own)

  int type_id = 0;                                  // GGML type id (quant_type_id::k*)
  QuantCodeFamily family = QuantCodeFamily::Int8;   // Int4: Q4_0, Q4_1, Q4_K; Int8: Q8_0, Q5_0, Q5_1, Q5_K, Q6_K
  int64_t n = 0;                                    // rows (output features), < 2^31
  int64_t k = 0;                                    // weights per row; multiple of 32 (of 256 for the K-quants)

  int group = 32;          // weights per scale: 32, or 16 for Q6_K
  int code_offset = 0;     // -8 for Q4_0, -32 for Q6_K, else 0: w = float(code + code_offset) * s (+ m)
  bool has_min = false;    // Q4_1, Q5_1, Q4_K
  bool two_level = false;  // Q4_K, Q6_K
  int64_t n_groups = 0;    // k / group
  int groups_per_super = 0;  // two-level: 8 (Q4_K, Q5_K) or 16 (Q6_K)

  // As stored (the "as-stored" mapping): GGUF's blocks unchanged, rows contiguous, row r at blocks + r * row_bytes.
  const uint8_t* blocks = nullptr;  // uint8 [n, row_bytes]
  int block_bytes = 0;              // 18, 20, 22, 24, 34, 144, 176, 210
  int block_weights = 0;            // 32 or 256
  int64_t row_bytes = 0;            // k / block_weights * block_bytes

  // Ownership (set by quant_gemv_upload): one device allocation holding every plane.
  void* allocation = nullptr;
  size_t allocated_bytes = 0;

  QuantPlanes& planes() { return *this; }
  const QuantPlanes& planes() const { return *this; }
};

// "warp-dp4a": each block quantizes x into its shared memory: int8 q [k] at 0, float d [k / 32] at
// quant_x_smem_offset_d, int sums [k / 16] at quant_x_smem_offset_s16; quant_x_smem_bytes in all (1.375 bytes per x).
constexpr int64_t quant_x_smem_offset_d(int64_t k) { return (k + 15) / 16 * 16; }
constexpr int64_t quant_x_smem_offset_s16(int64_t k) { return quant_x_smem_offset_d(k) + (k / 32) * 4; }
constexpr int64_t quant_x_smem_bytes(int64_t k) { return quant_x_smem_offset_s16(k) + (k / 16) * 4; }
// "warp": x staged in shared memory as FP32, transposed (4 bytes per x).
constexpr int64_t quant_x_smem_bytes_f32(int64_t k) { return k * 4; }
// The most shared memory one block may ask for on sm_90 (227 KiB): k up to 169,000 for "warp-dp4a".
constexpr int64_t kQuantMaxSmemBytes = 227 * 1024;
// "warp" with GemvEpilogue::merge (x = decode attention's splits merged as the block stages it): each head's max over
// its splits is kept in shared memory, for at most this many heads.
constexpr int kQuantMergeMaxHeads = 128;

// The batch-k GEMV (kernels/quant/gemv_quant_batch.h): vectors per launch, rows per block, and the int8 form of its
// vectors (each as warp-dp4a's shared-memory form, 16-byte aligned).
constexpr int kQuantBatchMax = 16;  // vectors per kernel launch (each launch reads the weights once)
constexpr int kQuantBatchRows = 4;  // 4 measured faster than 8 at every shape, type and k (H100, bench probes qbatch)
// QuantBatchKernel::kAuto runs the tensor-core kernel from this many vectors on (the dp4a kernel below), and that
// kernel takes up to kQuantBatchMmaMax vectors per launch (tiles of 8; a prompt's pass of kQuantBatchPassMax reads
// each weight once).
constexpr int kQuantBatchMmaMinVectors = 65;  // off until run on a GPU (see issue 36 notes)
constexpr int kQuantBatchMmaMax = 64;
constexpr int64_t quant_batch_x_stride(int64_t k) { return (quant_x_smem_bytes(k) + 15) / 16 * 16; }
constexpr int64_t quant_batch_x_bytes(int nb, int64_t k) { return int64_t(nb) * quant_batch_x_stride(k); }

// Fills the type-derived fields and the packed planes' leading dimensions exactly as pack_quant does (minimum padded
// strides), pointers left null. A convenience for callers that build a QuantGemvWeight from host arrays.
inline QuantGemvWeight quant_gemv_describe(int type_id, int64_t n, int64_t k) {
  const QuantTypeTraits t = quant_type_traits(type_id);
  if (n < 0 || k <= 0 || k % t.block_weights != 0)
    fail("quantized gemv: ", t.name, " needs n >= 0 and k a positive multiple of ", t.block_weights, ", found [", n,
         ", ", k, "]");
  auto round_up = [](int64_t v, int64_t m) { return (v + m - 1) / m * m; };
  QuantGemvWeight w;
  w.type_id = type_id;
  w.family = t.family;
  w.n = n;
  w.k = k;
  const int hi_bits = quant_split_hi_bits(t.family == QuantCodeFamily::Int4, t.two_level, t.has_min);
  w.ld_codes = t.family == QuantCodeFamily::Int4 || hi_bits > 0 ? round_up(k / 2, 16) : round_up(k, 16);
  w.ld_hi = hi_bits > 0 ? round_up(k * hi_bits / 8, 16) : 0;
  w.group = t.group;
  w.code_offset = t.code_offset;
  w.has_min = t.has_min;
  w.two_level = t.two_level;
  w.n_groups = k / t.group;
  if (t.two_level) {
    w.groups_per_super = t.groups_per_super;
    if (t.has_min) {
      w.ld_heads = round_up(16 * (k / 256), 16);
    } else {
      w.ld_sub = round_up(w.n_groups, 16);
      w.ld_super = round_up(k / 256, 8);
    }
  } else {
    w.ld_groups = round_up(w.n_groups, 8);
  }
  w.block_bytes = t.block_bytes;
  w.block_weights = t.block_weights;
  w.row_bytes = k / t.block_weights * t.block_bytes;
  return w;
}

// High bits per weight of w's split code plane (core/quant_planes.h): 1 (Q5_K), 2 (Q6_K), else 0.
inline int quant_gemv_hi_bits(const QuantGemvWeight& w) {
  return quant_split_hi_bits(w.family == QuantCodeFamily::Int4, w.two_level, w.has_min);
}

// Code bytes of one chunk of w's prepacked planes: 16, or 8 of nibbles + 2 or 4 of high bits (Q5_K, Q6_K).
inline int quant_chunk_code_bytes(const QuantGemvWeight& w) {
  const int hi_bits = quant_gemv_hi_bits(w);
  return hi_bits > 0 ? 8 + 2 * hi_bits : 16;
}

// Checks that w's fields agree with its type and with each other (not the pointers); fails naming `what`.
inline void quant_gemv_check_layout(const QuantGemvWeight& w, const char* what = "quantized gemv") {
  const QuantTypeTraits t = quant_type_traits(w.type_id);
  auto bad = [&](const char* field, int64_t found) {
    fail(what, ": ", t.name, " [", w.n, ", ", w.k, "]: bad layout field ", field, " = ", found);
  };
  if (w.n < 0 || w.n >= (int64_t(1) << 31)) bad("n", w.n);
  if (w.k <= 0 || w.k % t.block_weights != 0 || w.k >= (int64_t(1) << 31)) bad("k", w.k);
  if (w.family != t.family) bad("family", int(w.family));
  if (w.group != t.group) bad("group", w.group);
  if (w.code_offset != t.code_offset) bad("code_offset", w.code_offset);
  if (w.has_min != t.has_min) bad("has_min", w.has_min);
  if (w.two_level != t.two_level) bad("two_level", w.two_level);
  if (w.n_groups != w.k / t.group) bad("n_groups", w.n_groups);
  const int hi_bits = quant_gemv_hi_bits(w);
  const int64_t code_bytes = t.family == QuantCodeFamily::Int4 || hi_bits > 0 ? w.k / 2 : w.k;
  if (w.ld_codes < code_bytes || w.ld_codes % 16 != 0) bad("ld_codes", w.ld_codes);
  if (hi_bits > 0 && (w.ld_hi < w.k * hi_bits / 8 || w.ld_hi % 16 != 0)) bad("ld_hi", w.ld_hi);
  if (t.two_level) {
    if (w.groups_per_super != t.groups_per_super) bad("groups_per_super", w.groups_per_super);
    if (t.has_min) {
      if (w.ld_heads < 16 * (w.k / 256) || w.ld_heads % 16 != 0) bad("ld_heads", w.ld_heads);
    } else {
      if (w.ld_sub < w.n_groups || w.ld_sub % 16 != 0) bad("ld_sub", w.ld_sub);
      if (w.ld_super < w.k / 256 || w.ld_super % 8 != 0) bad("ld_super", w.ld_super);
    }
  } else {
    if (w.ld_groups < w.n_groups || w.ld_groups % 8 != 0) bad("ld_groups", w.ld_groups);
  }
  if (w.block_bytes != t.block_bytes) bad("block_bytes", w.block_bytes);
  if (w.block_weights != t.block_weights) bad("block_weights", w.block_weights);
  if (w.row_bytes != w.k / t.block_weights * t.block_bytes) bad("row_bytes", w.row_bytes);
}

// Bytes of each plane (padding included, as allocated); 0 for the planes the type does not have.
struct QuantGemvPlaneBytes {
  size_t codes = 0, code_hi = 0, scales = 0, mins = 0, sub_scales = 0, super_d = 0, k_heads = 0, blocks = 0;
};
inline QuantGemvPlaneBytes quant_gemv_plane_bytes(const QuantGemvWeight& w) {
  QuantGemvPlaneBytes b;
  const size_t n = size_t(w.n);
  b.codes = n * size_t(w.ld_codes);
  b.code_hi = n * size_t(w.ld_hi);
  if (w.two_level && w.has_min) {
    b.k_heads = n * size_t(w.ld_heads);
  } else if (w.two_level) {
    b.sub_scales = n * size_t(w.ld_sub);
    b.super_d = n * size_t(w.ld_super) * 2;
  } else {
    b.scales = n * size_t(w.ld_groups) * 2;
    if (w.has_min) b.mins = b.scales;
  }
  b.blocks = n * size_t(w.row_bytes);
  return b;
}

// Weight bytes one call of mapping `kind` reads (row padding excluded, x and y not counted): codes (with Q5_K's and
// Q6_K's high bits) + scales + mins
// (2 bytes each, one-level), the 16-byte heads (Q4_K, Q5_K) or sub-scales (1 byte) + super d (2 bytes) (Q6_K) for the
// prepacked mappings, equal to models/quant.h's packed_bytes_read; the blocks (n * row_bytes) for "as-stored". "warp-dp4a" also
// reads and writes its k-byte int8 copy of x (not counted, like x itself).
inline int64_t quant_gemv_bytes_read(QuantGemvKind kind, const QuantGemvWeight& w) {
  if (kind == QuantGemvKind::AsStored) return w.n * w.row_bytes;
  const int hi_bits = quant_gemv_hi_bits(w);
  int64_t per_row = w.family == QuantCodeFamily::Int4 ? w.k / 2 : hi_bits > 0 ? w.k / 2 + w.k * hi_bits / 8 : w.k;
  const int planes = w.has_min ? 2 : 1;
  if (w.two_level)
    per_row += w.has_min ? (w.k / 256) * 16 : w.n_groups + (w.k / 256) * 2;
  else
    per_row += w.n_groups * 2 * planes;
  return per_row * w.n;
}

// ---------------------------------------------------------------------------------------------------------------------
// Launch plans. All mappings use blocks of kQuantGemvThreads threads.

constexpr int kQuantGemvThreads = 256;
constexpr int kQuantWarpsPerBlock = kQuantGemvThreads / 32;
// "warp": rows per warp (they share each x load) and ring slots per row: slot u of the next batch (or of the warp's
// next row group) is reloaded as soon as slot u of this one is used, so R * U = 8 loads of 16 bytes = 128 bytes per
// lane stay in flight across batches and row groups, as in BF16 warp-r2.
constexpr int kQuantWarpRows = 4;
constexpr int kQuantWarpUnroll = 2;
// Ring slots per row of a form with hi_bits high code bits (core/quant_planes.h quant_split_hi_bits): 3 for Q6_K,
// whose chunk is 8 + 4 bytes instead of 16, so a lane keeps about as many bytes in flight (H100, 8B Q4_K_M: with 2
// slots its Q6_K matrices read 12 bytes where they had read 16, in the same time); 4 spilled registers. Q5_K keeps 2
// (its slot holds the 16-byte head: 3 spilled).
constexpr int quant_warp_unroll(int hi_bits) { return hi_bits == 2 ? kQuantWarpUnroll + 1 : kQuantWarpUnroll; }
// Blocks per SM the "warp" kernel is compiled for (__launch_bounds__ minimum), used to count resident warps.
constexpr int kQuantWarpMinBlocks = 2;
constexpr int kQuantAsStoredMinBlocks = 2;
// Whether a form's launch can make its x from an input form (GemvEpilogue::glu, ::merge) for a matrix of k columns:
// "warp" where it stages x in shared memory (two blocks' worth per SM: k up to ~29,000).
constexpr bool quant_stages_x_forms(QuantGemvKind kind, int64_t k) {
  return kind == QuantGemvKind::Warp && quant_x_smem_bytes_f32(k) <= kQuantMaxSmemBytes / kQuantWarpMinBlocks;
}
// "thread": 16-byte loads per thread in flight.
constexpr int kQuantThreadUnroll = 4;

struct QuantGemvPlan {
  int grid = 0;                  // blocks of kQuantGemvThreads
  int block = kQuantGemvThreads;
  int rows_per_warp = 1;         // warp, warp-dp4a: kQuantWarpRows; as-stored: 1; thread: 0 (a thread per row)
  int splits = 1;                // warps per row group, each over one K slice (1, 2, 4 or 8); thread: 1
  int units = 0;                 // per row: 16-byte code chunks (warp, thread) or GGUF blocks (as-stored)
  int slice_units = 0;           // units per K slice (the last slice may be shorter)
  int64_t row_groups = 0;        // ceil(n / rows_per_warp) (thread: n)
  int64_t lanes = 0;             // warp, warp-dp4a: warp lanes (splits warps each); lane j owns row groups
                                 // [j * row_groups / lanes, (j + 1) * row_groups / lanes); as-stored: row_groups
  int bytes_per_load = 0;        // code bytes one lane loads per chunk: 16 (Q5_K, Q6_K: 10 and 12, an 8-byte load of
                                 // nibbles and a 2- or 4-byte load of high bits), or 2/4 as-stored
  int loads_in_flight = 0;       // weight-load instructions per lane issued before the first use
};

// Units (16-byte code chunks) of one row of the prepacked codes: 32 weights per chunk (Int4) or 16 (Int8).
inline int quant_gemv_chunks(const QuantGemvWeight& w) {
  return int(w.family == QuantCodeFamily::Int4 ? w.k / 32 : w.k / 16);
}

// The plan of `kind` for w on a GPU of sm_count SMs (132 on the H200) holding blocks_per_sm blocks of the kernel at
// once. Split-K as "warp" does: double the warps per row group while the grid stays within one wave of resident warps
// and each slice keeps >= 32 units (one per lane). "warp"/"warp-dp4a" with more row groups than resident warps: one
// wave of warp lanes, each walking a contiguous run of row groups with its ring of loads kept full (no second wave, no
// drain and refill between row groups).
inline QuantGemvPlan quant_gemv_plan(QuantGemvKind kind, const QuantGemvWeight& w, int sm_count,
                                     int blocks_per_sm = 0) {
  QuantGemvPlan p;
  sm_count = std::max(1, sm_count);
  if (kind == QuantGemvKind::Thread) {
    p.rows_per_warp = 0;
    p.units = quant_gemv_chunks(w);
    p.slice_units = p.units;
    p.row_groups = w.n;
    p.lanes = w.n;
    p.grid = int(std::max<int64_t>(1, (w.n + kQuantGemvThreads - 1) / kQuantGemvThreads));
    p.bytes_per_load = quant_chunk_code_bytes(w);
    p.loads_in_flight = std::min(kQuantThreadUnroll, p.units);
    return p;
  }
  const bool warp = kind == QuantGemvKind::Warp || kind == QuantGemvKind::WarpDp4a;
  p.rows_per_warp = warp ? kQuantWarpRows : 1;
  p.units = warp ? quant_gemv_chunks(w) : int(w.k / w.block_weights);
  p.row_groups = (w.n + p.rows_per_warp - 1) / p.rows_per_warp;
  if (blocks_per_sm <= 0) blocks_per_sm = warp ? kQuantWarpMinBlocks : kQuantAsStoredMinBlocks;
  const int64_t resident = int64_t(sm_count) * blocks_per_sm * kQuantWarpsPerBlock;
  while (p.splits < kQuantWarpsPerBlock && p.row_groups * p.splits * 2 <= resident && p.units / (p.splits * 2) >= 32)
    p.splits *= 2;
  p.slice_units = (p.units + p.splits - 1) / p.splits;
  const int64_t groups_per_block = kQuantWarpsPerBlock / p.splits;
  // A split lane owns exactly one row group (the splits loop stops before the groups fill the GPU).
  p.lanes = warp && p.splits == 1 ? std::max<int64_t>(1, std::min(p.row_groups, resident)) : p.row_groups;
  p.grid = int(std::max<int64_t>(1, (p.lanes + groups_per_block - 1) / groups_per_block));
  if (warp) {
    p.bytes_per_load = quant_chunk_code_bytes(w);
    const int per_lane = (p.slice_units + 31) / 32;
    p.loads_in_flight = std::min(quant_warp_unroll(quant_gemv_hi_bits(w)), std::max(1, per_lane)) * p.rows_per_warp;
  } else {
    p.bytes_per_load = w.block_bytes % 4 == 0 ? 4 : 2;
    p.loads_in_flight = 1;  // one block's loads, issued together (their count: block_bytes / bytes_per_load)
  }
  return p;
}

}  // namespace llm
