// GGML quantized weights kept quantized: the block formats by type, reference dequantizers and quantizers, and the
// PREPACKED layout that the GPU GEMV kernels read coalesced, with a CPU reference GEMV over it (the judge of those
// kernels). Host code only; no GPU, no file format knowledge beyond the raw GGUF/GGML block bytes.
//
// Prepacked layout in one paragraph (details beside PackedQuant's fields):
//   * every weight becomes a code: 4-bit (INT4 family: Q4_0, Q4_1, Q4_K) or 8-bit (INT8 family: Q8_0, Q5_0, Q5_1,
//     Q5_K, Q6_K), a row's codes contiguous, each row starting 16-byte aligned, so ONE lane's 16-byte load carries the 32
//     codes of one 32-weight group (INT4) or 16 codes (INT8); Q5_K and Q6_K are INT8 to the kernels but kept at their
//     own widths, a nibble plane and a high-bit plane (5.5 and 6.56 bits per weight, as stored; core/quant_planes.h);
//   * per group of `group` consecutive weights of a row (32, or 16 for Q6_K) a scale s and, for the types with a min,
//     an additive min m, in their own planes: w = float(code + code_offset) * s (+ m);
//   * for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 the scales and mins are GGUF's own fp16 values (exact); for the K-quants the scale
//     is two-level, s = fp32(d) * sub_scale (and m = -(fp32(dmin) * sub_min)), with d/dmin fp16 per 256-weight
//     super-block and sub_scale/sub_min 8-bit per group, kept SEPARATE rather than folded into one fp16 number: the
//     product d * sc has up to 17 (Q4_K) or 18 (Q6_K) significant bits, exact in FP32 but not in fp16, so folding would
//     move weights by up to 2^-11 relative (rounding the scale to fp16), while the two-level form is bit-exact AND smaller
//     (Q4_K: 4.625 bits/weight read vs 5.0 for fp16 scale+min planes; Q6_K: 8.56 vs 9.0). The kernel pays one extra
//     FP32 multiply per group (and per group with a min). See group_scale()/group_min() below: the kernels must compute
//     exactly that (same operand order) to reproduce unpack_quant bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/quant_planes.h"  // QuantPlanes, QuantCodeFamily: the planes below as pointers and pitches

namespace llm {

// The GGML types handled here; the values are ggml's type ids (GGUF tensor info `type`), so a cast converts.
enum class GgmlQuantType : uint32_t { Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14 };

const char* ggml_quant_name(GgmlQuantType t);                 // "Q4_0", ...
bool is_ggml_quant_type(uint32_t ggml_type_id);               // one of the eight above
int ggml_quant_block_weights(GgmlQuantType t);                // 32, or 256 for the K-quants (Q4_K, Q5_K, Q6_K)
size_t ggml_quant_block_bytes(GgmlQuantType t);               // 18, 20, 22, 24, 34, 144, 176, 210
size_t ggml_quant_row_bytes(GgmlQuantType t, int64_t k);      // bytes of one row of k weights (k checked first)

// Refuses by name (llm::fail) a row length that the type cannot hold: k must be a positive multiple of 32, and of 256
// for the K-quants. `what` names the tensor in the message ("blk.0.attn_q.weight").
void check_quant_row_length(GgmlQuantType t, int64_t k, const std::string& what = "tensor");

// Reference dequantizer: n_blocks consecutive blocks of type t -> n_blocks * block_weights floats, bit for bit as
// ggml's dequantize_row_* and gguf.quants.dequantize.
void dequantize_blocks(GgmlQuantType t, const uint8_t* blocks, int64_t n_blocks, float* out);

// Reference quantizers (k weights -> k / block_weights blocks; k must be a multiple of the block):
//   q8_0, q4_0, q4_1, q5_0, q5_1: ggml's quantize_row_*_ref, byte for byte (and gguf.quants.quantize);
//   q4_k: ggml's quantize_row_q4_K_ref (make_qkx2_quants search, what llama-quantize does without an imatrix);
//   q5_k: ggml's quantize_row_q5_K_ref (the same search over 32 levels; llama-quantize's attn_v of a 70B Q4_K_M);
//   q6_k: ggml's quantize_row_q6_K_ref (per 16 weights make_qx_quants: 19 candidate scales, weighted least squares;
//         the 16 scales as int8 against one fp16 d per super-block), what llama-quantize does without an imatrix.
// Q5_0 is here as llama-quantize's stand-in for Q4_K on rows that are not a multiple of 256 (models/quantize_model.h).
void quantize_q8_0(const float* x, int64_t k, uint8_t* out);
void quantize_q4_0(const float* x, int64_t k, uint8_t* out);
void quantize_q5_0(const float* x, int64_t k, uint8_t* out);
void quantize_q4_1(const float* x, int64_t k, uint8_t* out);
void quantize_q5_1(const float* x, int64_t k, uint8_t* out);
// How the K-quants choose their scales: kReference, ggml's search (above); kQuick, ggml's own no-search branches
// (make_qkx2_quants with nstep 0: (max - min) / nmax per sub-block; make_qx_quants with rmse_type 0: -max / 32), the
// same format and bytes per weight, larger errors, about 10x faster: for benchmark files of synthetic weights
// (write-gguf --quick-quant), where the codes' quality does not matter and a 70B file would take minutes.
// The other types have no search: the same bytes either way.
enum class QuantSearch { kReference, kQuick };
void quantize_q4_k(const float* x, int64_t k, uint8_t* out, QuantSearch search = QuantSearch::kReference);
void quantize_q5_k(const float* x, int64_t k, uint8_t* out, QuantSearch search = QuantSearch::kReference);
void quantize_q6_k(const float* x, int64_t k, uint8_t* out, QuantSearch search = QuantSearch::kReference);
// Quantizes an [n, k] FP32 matrix (rows contiguous) to GGUF bytes of type t (any of the eight; any other type refused
// by name).
std::vector<uint8_t> quantize_matrix(GgmlQuantType t, const float* x, int64_t n, int64_t k,
                                     QuantSearch search = QuantSearch::kReference);

// ---------------------------------------------------------------------------------------------------------------------
// The prepacked layout.

using QuantFamily = QuantCodeFamily;  // Int4, Int8: one enum for the packer and the kernels

// A plane of PackedQuant: a vector whose resize leaves the bytes uninitialised, so a large matrix's planes are
// first written (and their pages first touched) by the threads that pack its rows, not zeroed by one thread first.
template <class T>
struct DefaultInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <class U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;  // default-initialised: no zeroing
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
template <class T>
using PackedPlane = std::vector<T, DefaultInitAllocator<T>>;

struct PackedQuant {
  GgmlQuantType type = GgmlQuantType::Q8_0;
  QuantFamily family = QuantFamily::Int8;
  int64_t n = 0;  // rows (output features)
  int64_t k = 0;  // weights per row (input features); multiple of 32 (of 256 for Q4_K/Q6_K)

  // Codes. ld_codes = bytes per row, a multiple of 16 (rows 16-byte aligned, padding bytes zero).
  //   Int4: uint8 [n, ld_codes], ld_codes = round_up(k / 2, 16) (= k / 2, as k % 32 == 0). Group g of a row (weights
  //         32g .. 32g+31) is bytes 16g .. 16g+15 of the row: byte i holds weight 32g+i in its low nibble and weight
  //         32g+i+16 in its high nibble (GGML's Q4_0 order). Codes are unsigned 0..15.
  //   Int8: int8 [n, ld_codes] stored as bytes, ld_codes = round_up(k, 16) (= k): code of weight j at byte j.
  //         Q8_0: q (-127..127); Q5_0: q - 16 (-16..15); Q5_1: q unsigned (0..31).
  //   Split (Q5_K: q 0..31; Q6_K: q 0..63, code_offset -32): the low nibbles, ld_codes = round_up(k / 2, 16), and the
  //         high bits in code_hi, hi_bits (1 or 2) per weight, ld_hi = round_up(k * hi_bits / 8, 16); the order within
  //         each 16-weight chunk is core/quant_planes.h's (QuantPlanes::codes).
  int64_t ld_codes = 0;
  PackedPlane<uint8_t> codes;
  int hi_bits = 0;       // 1 (Q5_K), 2 (Q6_K), else 0 (no code_hi)
  int64_t ld_hi = 0;
  PackedPlane<uint8_t> code_hi;

  int group = 32;         // weights per scale: 32, or 16 for Q6_K
  int code_offset = 0;    // added to the code before scaling: -8 for Q4_0, -32 for Q6_K (their min is implied), else 0
  bool has_min = false;   // Q4_1, Q5_1, Q4_K, Q5_K: w = float(code) * s + m; otherwise w = float(code + code_offset) * s
  bool two_level = false; // Q4_K, Q5_K, Q6_K: scales per super-block and group (below); otherwise from `scales`
  int64_t n_groups = 0;   // k / group, groups per row

  // One-level scales (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1): GGUF's fp16 d and m, copied bit for bit.
  //   scales: fp16 bits [n, ld_groups]: s of group g of row r at scales[r * ld_groups + g]
  //   mins:   fp16 bits [n, ld_groups]: m (additive), only when has_min (Q4_1, Q5_1), else empty
  // ld_groups = round_up(n_groups, 8) halves (16-byte rows), padding zero.
  int64_t ld_groups = 0;
  PackedPlane<uint16_t> scales;
  PackedPlane<uint16_t> mins;

  // Two-level scales (Q4_K, Q5_K, Q6_K): per 256-weight super-block (= 8 groups of Q4_K and Q5_K, 16 groups of Q6_K,
  // `groups_per_super`) an fp16 d (and dmin), per group an integer sub-scale (and sub-min).
  // Q6_K:
  //   sub_scales: int8 [n, ld_sub]: scales[i] (-128..127), ld_sub = round_up(n_groups, 16) bytes
  //   super_d:    fp16 bits [n, ld_super]: d of super-block b of row r at super_d[r * ld_super + b],
  //               ld_super = round_up(k / 256, 8) halves
  //   s = f16_to_f32(super_d[b]) * float(sub_scales[g])        (b = g / 16; exact in FP32)
  // Q4_K, Q5_K: the blocks' 16-byte heads as stored (fp16 d, fp16 dmin, 12 bytes of packed 6-bit sc and m):
  //   k_heads:    uint8 [n, ld_heads]: head of super-block b of row r at bytes r * ld_heads + 16 b,
  //               ld_heads = round_up(16 * k / 256, 16) bytes (= 16 * k / 256)
  //   s = f16(d) * float(sc_j), m = -(f16(dmin) * float(m_j)), j = g % 8 (core/quant_planes.h k_head_scale_min;
  //   exact; w = c * s + m equals ggml's d1 * c - m1)
  // Padding zero.
  int groups_per_super = 0;
  int64_t ld_sub = 0, ld_super = 0, ld_heads = 0;
  PackedPlane<int8_t> sub_scales;
  PackedPlane<uint16_t> super_d;
  PackedPlane<uint8_t> k_heads;

  // The planes above as pointers (null where empty) and pitches: what the kernels' QuantGemvWeight holds. A view: it
  // lives as long as this PackedQuant.
  QuantPlanes planes() const;
};

// The prepacked form's bytes per plane for an [n, k] tensor of type t, without packing anything: the pitches and
// plane sizes pack_quant gives (codes, one-level scales and mins, Q4_K/Q5_K heads, Q6_K sub-scales and super d), so
// the memory plan counts what the GPU will hold.
struct PackedQuantBytes {
  int64_t codes = 0, code_hi = 0, scales = 0, mins = 0, k_heads = 0, sub_scales = 0, super_d = 0;
  int64_t total() const { return codes + code_hi + scales + mins + k_heads + sub_scales + super_d; }
};
PackedQuantBytes packed_quant_bytes(GgmlQuantType t, int64_t n, int64_t k);

// Builds the prepacked form from the raw GGUF bytes of an [n, k] tensor of type t (rows contiguous, each row
// ggml_quant_row_bytes(t, k) bytes). Refuses (llm::fail) a k the type cannot hold, naming `what`.
PackedQuant pack_quant(const uint8_t* blocks, GgmlQuantType t, int64_t n, int64_t k, const std::string& what = "tensor");
// The same for a matrix stored in parts, each `rows` rows of GGUF blocks at `blocks` (a fused q|k|v or gate|up of one
// type): the parts' rows one after the other, read where they are (no gathered copy); bit for bit pack_quant of the
// concatenated blocks.
struct QuantRowsPart {
  const uint8_t* blocks = nullptr;
  int64_t rows = 0;
};
PackedQuant pack_quant_parts(const std::vector<QuantRowsPart>& parts, GgmlQuantType t, int64_t k,
                             const std::string& what = "tensor");

// Code of weight j of row r (as the kernel sees it: 0..15 for Int4, the int8 value for Int8).
int packed_code(const PackedQuant& p, int64_t r, int64_t j);
// Scale s and additive min m of group g of row r, computed exactly as documented on the struct. group_min is 0 when
// !has_min (and then must not be added: x + 0 turns -0 into +0).
float group_scale(const PackedQuant& p, int64_t r, int64_t g);
float group_min(const PackedQuant& p, int64_t r, int64_t g);
// The weight: float(code + code_offset) * s, plus m when has_min. Equals dequantize_blocks bit for bit.
float packed_weight(const PackedQuant& p, int64_t r, int64_t j);
// The whole matrix to FP32 [n, k].
std::vector<float> unpack_quant(const PackedQuant& p);

// Bytes a GEMV kernel reads for the whole matrix: codes (n * k / 2 or n * k; split: n * k / 2 + the high bits), scales and mins of every group (2 bytes
// each for one-level; 1 byte per sub-scale/sub-min plus 2 per super-block d/dmin for two-level); row padding excluded.
int64_t packed_bytes_read(const PackedQuant& p);
inline double packed_bytes_per_weight(const PackedQuant& p) {
  return p.n > 0 && p.k > 0 ? double(packed_bytes_read(p)) / double(p.n * p.k) : 0.0;
}
// Bytes the prepacked buffers occupy (with row padding).
int64_t packed_bytes_allocated(const PackedQuant& p);

// CPU reference GEMV, the judge of the GPU kernels: y[r] = sum_j packed_weight(r, j) * x[j], accumulated in FP64
// over the exact FP32 weights, returned as double. x has k floats.
std::vector<double> packed_gemv_ref(const PackedQuant& p, const float* x);

}  // namespace llm
