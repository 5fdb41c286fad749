// GGML quantized formats (models/quant.h, models/dequant.h): hand-computed blocks, equality with the gguf Python
// package (tests/data/quant_refs.json, written by tools/quant_refs.py), the prepacked layout's round trip, the
// reference GEMV, the quantizers, and negative controls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/counter_rng.h"
#include "core/dtype.h"
#include "core/error.h"
#include "models/dequant.h"
#include "models/quant.h"
#if LLM_HAVE_CUDA
#include "engine/cuda_quant.h"          // quant_matrix_device_bytes, quant_host_view
#include "kernels/quant/gemv_quant.h"  // quant_gemv_device_span
#endif

namespace llm {
namespace {

using Q = GgmlQuantType;
const Q kAllTypes[] = {Q::Q4_0, Q::Q4_1, Q::Q5_0, Q::Q5_1, Q::Q8_0, Q::Q4_K, Q::Q5_K, Q::Q6_K};

std::vector<uint8_t> from_hex(const std::string& s) {
  std::vector<uint8_t> out(s.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(std::stoul(s.substr(2 * i, 2), nullptr, 16));
  return out;
}
std::vector<float> floats_from_hex(const std::string& s) {
  const std::vector<uint8_t> b = from_hex(s);
  std::vector<float> out(b.size() / 4);
  std::memcpy(out.data(), b.data(), b.size());
  return out;
}
const nlohmann::json& refs() {
  static const nlohmann::json j = [] {
    std::ifstream f(std::string(LLM_SOURCE_DIR) + "/tests/data/quant_refs.json");
    if (!f) throw std::runtime_error("tests/data/quant_refs.json missing (tools/quant_refs.py writes it)");
    return nlohmann::json::parse(f);
  }();
  return j;
}
Q type_by_name(const std::string& name) {
  for (Q t : kAllTypes)
    if (name == ggml_quant_name(t)) return t;
  throw std::runtime_error("unknown type " + name);
}
// Number of floats whose bits differ (so +0 vs -0 and NaN payloads count).
size_t bit_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += f32_to_bits(a[i]) != f32_to_bits(b[i]);
  return bad;
}
std::vector<float> deq(Q t, const std::vector<uint8_t>& blocks) {
  const int64_t n_blocks = int64_t(blocks.size() / ggml_quant_block_bytes(t));
  std::vector<float> out(size_t(n_blocks) * size_t(ggml_quant_block_weights(t)));
  dequantize_blocks(t, blocks.data(), n_blocks, out.data());
  return out;
}
void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  p[0] = uint8_t(h & 0xff);
  p[1] = uint8_t(h >> 8);
}

// Random valid blocks: random code bytes, finite fp16 scales of both signs (mins too), now and then zero.
std::vector<uint8_t> random_blocks(Q t, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t bb = ggml_quant_block_bytes(t);
  const int64_t blocks = n * k / ggml_quant_block_weights(t);
  std::vector<uint8_t> out(size_t(blocks) * bb);
  for (auto& b : out) b = uint8_t(byte(gen));
  for (int64_t i = 0; i < blocks; ++i) {
    uint8_t* b = out.data() + size_t(i) * bb;
    const float d = (i % 17 == 3) ? 0.0f : normal(gen) * 0.02f, m = normal(gen) * 0.05f;
    switch (t) {
      case Q::Q4_0: case Q::Q5_0: case Q::Q8_0: put_f16(b, d); break;
      case Q::Q4_1: case Q::Q5_1: put_f16(b, d); put_f16(b + 2, m); break;
      case Q::Q4_K: case Q::Q5_K: put_f16(b, std::fabs(d)); put_f16(b + 2, std::fabs(m)); break;
      case Q::Q6_K: put_f16(b + 208, d); break;
    }
  }
  return out;
}

// ---- hand-computed blocks ------------------------------------------------------------------------------------------

TEST(Quant, HandComputedQ5Blocks) {
  uint8_t q50[kQ5_0Bytes] = {};
  put_f16(q50, 0.25f);
  q50[2 + 2] = 0x02;      // qh bit 17: weight 17's fifth bit
  q50[6 + 1] = 0x42;      // qs[1]: weight 1 = 2, weight 17 = 4 (+16)
  float y[32];
  dequant_q5_0(q50, 1, y);
  EXPECT_EQ(y[1], (2 - 16) * 0.25f);
  EXPECT_EQ(y[17], (4 + 16 - 16) * 0.25f);
  EXPECT_EQ(y[0], -16 * 0.25f);

  uint8_t q51[kQ5_1Bytes] = {};
  put_f16(q51, 0.5f);
  put_f16(q51 + 2, -1.0f);
  q51[4 + 2] = 0x02;
  q51[8 + 1] = 0x42;
  dequant_q5_1(q51, 1, y);
  EXPECT_EQ(y[1], 2 * 0.5f - 1.0f);
  EXPECT_EQ(y[17], 20 * 0.5f - 1.0f);
  EXPECT_EQ(y[0], -1.0f);

  const PackedQuant p0 = pack_quant(q50, Q::Q5_0, 1, 32);
  EXPECT_EQ(int8_t(p0.codes[17]), 4);  // q - 16
  EXPECT_EQ(int8_t(p0.codes[1]), -14);
  const PackedQuant p1 = pack_quant(q51, Q::Q5_1, 1, 32);
  EXPECT_EQ(p1.codes[17], 20);
  EXPECT_EQ(f16_to_f32(p1.mins[0]), -1.0f);
}

TEST(Quant, HandComputedQ4KBlock) {
  uint8_t b[kQ4_KBytes] = {};
  put_f16(b, 1.0f);       // d
  put_f16(b + 2, 0.5f);   // dmin
  uint8_t* sc = b + 4;
  sc[0] = 1;              // sub-block 0: sc = 1
  sc[4] = 2;              // sub-block 0: m = 2
  // sub-block 5: sc = 33 = 0b10'0001, m = 40 = 0b10'1000 (the 6-bit split of get_scale_min_k4)
  sc[9] = uint8_t((33 & 0xF) | ((40 & 0xF) << 4));
  sc[1] |= uint8_t((33 >> 4) << 6);
  sc[5] |= uint8_t((40 >> 4) << 6);
  uint8_t* qs = b + 16;
  qs[0] = 0x3A;           // weight 0 (sub-block 0, low nibble) = 10; weight 32 (sub-block 1, high nibble) = 3
  qs[64 + 3] = 0x70;      // weight 163 (sub-block 5 = high nibbles of qs[64..95]) = 7; weight 131 = 0
  std::vector<float> y(256);
  dequant_q4_k(b, 1, y.data());
  EXPECT_EQ(y[0], 1.0f * 10 - 0.5f * 2);
  EXPECT_EQ(y[1], -1.0f);                 // code 0 of sub-block 0
  EXPECT_EQ(y[32], 0.0f);                 // sub-block 1: sc = 0, m = 0 (only the top bits of sc[1], sc[5] are set)
  EXPECT_EQ(y[163], 33.0f * 7 - 0.5f * 40);
  EXPECT_EQ(y[160], -20.0f);

  const PackedQuant p = pack_quant(b, Q::Q4_K, 1, 256);
  ASSERT_EQ(p.family, QuantFamily::Int4);
  EXPECT_EQ(p.codes[0], 0x0A);            // group 0, byte 0: weight 0 low, weight 16 high
  EXPECT_EQ(p.codes[16 * 1 + 0], 0x03);   // group 1, byte 0: weight 32 low
  EXPECT_EQ(p.codes[16 * 5 + 3], 0x07);   // group 5, byte 3: weight 163 low, weight 179 high
  ASSERT_EQ(p.k_heads.size(), 16u);  // the block's head as stored: d, dmin, scales[12]
  EXPECT_TRUE(std::equal(p.k_heads.begin(), p.k_heads.end(), b));
  EXPECT_TRUE(p.sub_scales.empty());
  EXPECT_EQ(group_scale(p, 0, 5), 33.0f);
  EXPECT_EQ(group_min(p, 0, 5), -20.0f);
  EXPECT_EQ(packed_weight(p, 0, 163), y[163]);
}

TEST(Quant, HandComputedQ6KBlock) {
  uint8_t b[kQ6_KBytes] = {};
  put_f16(b + 208, 0.5f);
  int8_t* sc = reinterpret_cast<int8_t*>(b + 192);
  sc[0] = 2;
  sc[5] = -3;
  b[0] = 0x05;            // ql[0] low nibble: weight 0
  b[128 + 0] = 0x02;      // qh[0] bits 0-1: weight 0's high bits = 2 -> q = 37
  b[16] = 0xF0;           // ql[16] high nibble: weight 80 (l = 16, third quarter), sub-block 5; qh bits 4-5 zero
  std::vector<float> y(256);
  dequant_q6_k(b, 1, y.data());
  EXPECT_EQ(y[0], 0.5f * 2 * (37 - 32));
  EXPECT_EQ(y[80], 0.5f * -3 * (15 - 32));
  EXPECT_EQ(y[1], 0.5f * 2 * -32);
  const PackedQuant p = pack_quant(b, Q::Q6_K, 1, 256);
  EXPECT_EQ(p.group, 16);
  EXPECT_EQ(packed_code(p, 0, 0), 37);  // q, with code_offset -32
  EXPECT_EQ(packed_code(p, 0, 80), 15);
  EXPECT_EQ(packed_code(p, 0, 1), 0);
  EXPECT_EQ(p.code_offset, -32);
  EXPECT_EQ(group_scale(p, 0, 5), -1.5f);
  EXPECT_EQ(packed_weight(p, 0, 0), y[0]);
  EXPECT_EQ(packed_weight(p, 0, 80), y[80]);
  // The split planes by hand (core/quant_planes.h): weight 0 (chunk 0, i = 0), q = 37 = 0b100101: nibble 5 in byte 0's
  // low half, high bits 0b10 in code_hi byte 0 bits 0-1; weight 80 (chunk 5, i = 0), q = 15: nibble 15 in byte 40's low
  // half, high bits 0 in code_hi byte 20; weight 4 (chunk 0, i = 4), q = 0: byte 0's high half and code_hi byte 0 bits
  // 2-3 zero.
  ASSERT_EQ(p.hi_bits, 2);
  ASSERT_EQ(p.ld_codes, 128);
  ASSERT_EQ(p.ld_hi, 64);
  EXPECT_EQ(p.codes[0], 5);
  EXPECT_EQ(p.code_hi[0], 2);
  EXPECT_EQ(p.codes[40] & 0xF, 15);
  EXPECT_EQ(p.code_hi[20] & 3, 0);
  // and the kernels' decode of chunk 5 gives the same codes
  uint32_t lo[2], hi;
  std::memcpy(lo, p.codes.data() + 40, 8);
  std::memcpy(&hi, p.code_hi.data() + 20, 4);
  EXPECT_EQ(quant_split_word<2>(lo[0], lo[1], hi, 0) & 0xFF, 15u);
}

// ---- against the gguf Python package ---------------------------------------------------------------------------------

TEST(Quant, LegacyDequantEqualsGguf) {
  for (const auto& [name, r] : refs().at("legacy").items()) {
    SCOPED_TRACE(name);
    const Q t = type_by_name(name);
    const std::vector<uint8_t> blocks = from_hex(r.at("blocks"));
    const std::vector<float> want = floats_from_hex(r.at("dequant"));
    ASSERT_EQ(want.size(), 256u);
    EXPECT_EQ(bit_mismatches(deq(t, blocks), want), 0u);
    // the prepacked form unpacks to the same bits (8 blocks as one row of 256, and as 8 rows of 32)
    EXPECT_EQ(bit_mismatches(unpack_quant(pack_quant(blocks.data(), t, 1, 256)), want), 0u);
    EXPECT_EQ(bit_mismatches(unpack_quant(pack_quant(blocks.data(), t, 8, 32)), want), 0u);
  }
}

TEST(Quant, KQuantDequantEqualsGguf) {
  for (const auto& [name, r] : refs().at("kquant").items()) {
    SCOPED_TRACE(name);
    const Q t = type_by_name(name);
    const std::vector<uint8_t> blocks = from_hex(r.at("blocks"));
    const std::vector<float> want = floats_from_hex(r.at("dequant"));
    ASSERT_EQ(want.size(), blocks.size() / ggml_quant_block_bytes(t) * 256);
    EXPECT_EQ(bit_mismatches(deq(t, blocks), want), 0u);
    const int64_t nb = int64_t(want.size() / 256);
    EXPECT_EQ(bit_mismatches(unpack_quant(pack_quant(blocks.data(), t, 1, nb * 256)), want), 0u);
    EXPECT_EQ(bit_mismatches(unpack_quant(pack_quant(blocks.data(), t, nb, 256)), want), 0u);
  }
}

TEST(Quant, QuantizersEqualGgufByteForByte) {
  for (const char* name : {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"}) {
    SCOPED_TRACE(name);
    const auto& r = refs().at("legacy").at(name);
    const Q t = type_by_name(name);
    const std::vector<float> x = floats_from_hex(r.at("input"));
    const std::vector<uint8_t> want = from_hex(r.at("blocks"));
    EXPECT_EQ(quantize_matrix(t, x.data(), 1, int64_t(x.size())), want);
    EXPECT_EQ(quantize_matrix(t, x.data(), 8, 32), want);
  }
}

// ---- the prepacked layout ----------------------------------------------------------------------------------------------

TEST(Quant, PackRoundTripEveryTypeAndShape) {
  for (Q t : kAllTypes) {
    const bool kq = t == Q::Q4_K || t == Q::Q5_K || t == Q::Q6_K;
    const std::vector<int64_t> ks = kq ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 96, 576, 256, 768};
    for (int64_t n : {1, 7, 33}) {
      for (int64_t k : ks) {
        SCOPED_TRACE(std::string(ggml_quant_name(t)) + " n=" + std::to_string(n) + " k=" + std::to_string(k));
        const std::vector<uint8_t> blocks = random_blocks(t, n, k, uint32_t(n * 1000 + k + int(t)));
        ASSERT_EQ(blocks.size(), ggml_quant_row_bytes(t, k) * size_t(n));
        const std::vector<float> want = deq(t, blocks);
        const PackedQuant p = pack_quant(blocks.data(), t, n, k);
        // shapes and alignment
        EXPECT_EQ(p.ld_codes % 16, 0);
        EXPECT_EQ(p.codes.size(), size_t(n * p.ld_codes));
        EXPECT_EQ(p.ld_codes, p.family == QuantFamily::Int4 || p.hi_bits > 0 ? k / 2 : k);
        EXPECT_EQ(p.ld_hi, k * p.hi_bits / 8);
        EXPECT_EQ(p.code_hi.size(), size_t(n * p.ld_hi));
        EXPECT_EQ(p.n_groups * p.group, k);
        if (p.two_level) {
          EXPECT_EQ(p.ld_sub % 16, 0);
          EXPECT_EQ(p.ld_super % 8, 0);
          EXPECT_TRUE(p.scales.empty());
        } else {
          EXPECT_EQ(p.ld_groups % 8, 0);
          EXPECT_EQ(p.scales.size(), size_t(n * p.ld_groups));
          EXPECT_EQ(p.mins.empty(), !p.has_min);
          for (int64_t r = 0; r < n; ++r)  // padding zero
            for (int64_t g = p.n_groups; g < p.ld_groups; ++g) EXPECT_EQ(p.scales[r * p.ld_groups + g], 0);
        }
        // bit for bit
        EXPECT_EQ(bit_mismatches(unpack_quant(p), want), 0u);
        for (int64_t j : {int64_t(0), k / 2 + 1, k - 1})
          EXPECT_EQ(f32_to_bits(packed_weight(p, n - 1, j)), f32_to_bits(want[size_t((n - 1) * k + j)]));
      }
    }
  }
}

// packed_quant_bytes (what the memory plan counts) is the byte size of every plane pack_quant makes, without packing,
// for every type and awkward row counts; Q6_K's int8 codes make it larger than the stored blocks, Q4_0's the same.
TEST(Quant, PackedBytesArePackQuantsPlanes) {
  for (Q t : kAllTypes) {
    const bool kq = t == Q::Q4_K || t == Q::Q5_K || t == Q::Q6_K;
    for (int64_t n : {1, 7, 33})
      for (int64_t k : kq ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 96, 576}) {
        SCOPED_TRACE(std::string(ggml_quant_name(t)) + " n=" + std::to_string(n) + " k=" + std::to_string(k));
        const std::vector<uint8_t> blocks = random_blocks(t, n, k, uint32_t(n * 77 + k));
        const PackedQuant p = pack_quant(blocks.data(), t, n, k);
        const PackedQuantBytes b = packed_quant_bytes(t, n, k);
        EXPECT_EQ(b.codes, int64_t(p.codes.size()));
        EXPECT_EQ(b.code_hi, int64_t(p.code_hi.size()));
        EXPECT_EQ(b.scales, int64_t(p.scales.size() * 2));
        EXPECT_EQ(b.mins, int64_t(p.mins.size() * 2));
        EXPECT_EQ(b.k_heads, int64_t(p.k_heads.size()));
        EXPECT_EQ(b.sub_scales, int64_t(p.sub_scales.size()));
        EXPECT_EQ(b.super_d, int64_t(p.super_d.size() * 2));
      }
  }
  const int64_t n = 4096, k = 4096, stored6 = n * int64_t(ggml_quant_row_bytes(Q::Q6_K, k));
  // Q5_K and Q6_K at their own widths: what the GPU holds is what the file stores
  EXPECT_EQ(packed_quant_bytes(Q::Q6_K, n, k).total(), stored6);
  EXPECT_EQ(packed_quant_bytes(Q::Q5_K, n, k).total(), n * int64_t(ggml_quant_row_bytes(Q::Q5_K, k)));
  EXPECT_EQ(packed_quant_bytes(Q::Q4_K, n, k).total(), n * int64_t(ggml_quant_row_bytes(Q::Q4_K, k)));
  EXPECT_EQ(packed_quant_bytes(Q::Q4_0, n, k).total(), n * int64_t(ggml_quant_row_bytes(Q::Q4_0, k)));
  EXPECT_THROW(packed_quant_bytes(Q::Q4_K, 1, 100), llm::Error);  // a row the type cannot hold
}

// pack_quant leaves its planes uninitialised until the packing threads zero and write their rows (PackedPlane): on
// memory that held other bytes (the heap dirtied first: glibc reuses freed chunks of this size once its mmap threshold
// has risen), every byte is still written, padding zero, on the threaded path (>= 2^22 weights) and on the one-thread
// path.
TEST(Quant, PackWritesEveryByteOnDirtyMemory) {
  for (int pass = 0; pass < 2; ++pass) {  // freeing a large block raises glibc's mmap threshold; the second one is heap
    std::vector<uint8_t> dirt(size_t(48) << 20, 0xA5);
    EXPECT_EQ(dirt[12345], 0xA5);
  }
  struct Case { Q t; int64_t n, k; };
  for (const Case c : {Case{Q::Q4_1, 44000, 96}, Case{Q::Q6_K, 5500, 768}, Case{Q::Q4_1, 5, 96}, Case{Q::Q6_K, 3, 768}}) {
    SCOPED_TRACE(std::string(ggml_quant_name(c.t)) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k));
    {
      std::vector<uint8_t> dirt(size_t(c.n) * size_t(c.k) * 2, 0xA5);  // freed just before the planes are allocated
      EXPECT_EQ(dirt.back(), 0xA5);
    }
    const std::vector<uint8_t> blocks = random_blocks(c.t, c.n, c.k, uint32_t(c.n + c.k));
    const PackedQuant p = pack_quant(blocks.data(), c.t, c.n, c.k);
    EXPECT_EQ(bit_mismatches(unpack_quant(p), deq(c.t, blocks)), 0u);
    size_t dirty_padding = 0;
    for (int64_t r = 0; r < c.n; ++r) {
      for (int64_t g = p.n_groups; g < p.ld_groups; ++g)
        dirty_padding += p.scales[r * p.ld_groups + g] != 0 || (p.has_min && p.mins[r * p.ld_groups + g] != 0);
      for (int64_t b = c.k / 256; p.two_level && !p.has_min && b < p.ld_super; ++b)
        dirty_padding += p.super_d[r * p.ld_super + b] != 0;
    }
    EXPECT_EQ(dirty_padding, 0u);
  }
}

// A fused matrix packed from its parts where they are (q | k | v: three parts of one type, a part of no rows too) is
// bit for bit the packing of the concatenated blocks, on both the threaded and the one-thread path; bad parts fail
// by name.
TEST(Quant, PackPartsEqualsPackOfTheConcatenation) {
  struct Case { Q t; int64_t k; std::vector<int64_t> rows; };
  for (const Case& c : {Case{Q::Q4_0, 96, {7, 0, 5, 3}}, Case{Q::Q6_K, 768, {3000, 1500, 1500}},
                        Case{Q::Q4_K, 256, {9, 2}}, Case{Q::Q5_1, 4096, {1024, 512}}}) {
    SCOPED_TRACE(std::string(ggml_quant_name(c.t)) + " k=" + std::to_string(c.k));
    std::vector<std::vector<uint8_t>> blocks;
    std::vector<uint8_t> all;
    std::vector<QuantRowsPart> parts;
    int64_t n = 0;
    for (size_t i = 0; i < c.rows.size(); ++i) {
      blocks.push_back(random_blocks(c.t, c.rows[i], c.k, uint32_t(77 + i)));
      all.insert(all.end(), blocks.back().begin(), blocks.back().end());
      n += c.rows[i];
    }
    for (size_t i = 0; i < c.rows.size(); ++i) parts.push_back({blocks[i].empty() ? nullptr : blocks[i].data(), c.rows[i]});
    const PackedQuant one = pack_quant(all.data(), c.t, n, c.k);
    const PackedQuant split = pack_quant_parts(parts, c.t, c.k);
    EXPECT_EQ(split.n, n);
    EXPECT_TRUE(std::equal(one.codes.begin(), one.codes.end(), split.codes.begin(), split.codes.end()));
    EXPECT_TRUE(std::equal(one.code_hi.begin(), one.code_hi.end(), split.code_hi.begin(), split.code_hi.end()));
    EXPECT_TRUE(std::equal(one.scales.begin(), one.scales.end(), split.scales.begin(), split.scales.end()));
    EXPECT_TRUE(std::equal(one.mins.begin(), one.mins.end(), split.mins.begin(), split.mins.end()));
    EXPECT_TRUE(std::equal(one.k_heads.begin(), one.k_heads.end(), split.k_heads.begin(), split.k_heads.end()));
    EXPECT_TRUE(std::equal(one.sub_scales.begin(), one.sub_scales.end(), split.sub_scales.begin(),
                           split.sub_scales.end()));
    EXPECT_TRUE(std::equal(one.super_d.begin(), one.super_d.end(), split.super_d.begin(), split.super_d.end()));
    EXPECT_EQ(bit_mismatches(unpack_quant(split), deq(c.t, all)), 0u);
  }
  const std::vector<uint8_t> b = random_blocks(Q::Q8_0, 2, 64, 5);
  auto message = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { pack_quant_parts({{b.data(), 2}, {nullptr, 3}}, Q::Q8_0, 64, "blk.0.attn_q.weight"); })
                .find("blk.0.attn_q.weight: a part of 3 rows without data"),
            std::string::npos);
  EXPECT_NE(message([&] { pack_quant_parts({{b.data(), -1}}, Q::Q8_0, 64, "w"); }).find("w: negative row count -1"),
            std::string::npos);
}

TEST(Quant, FlagsAndBytesPerWeight) {
  struct Want { Q t; QuantFamily f; int group; int offset; bool min; bool two; double bpw; };
  const Want wants[] = {
      {Q::Q4_0, QuantFamily::Int4, 32, -8, false, false, 18.0 / 32},
      {Q::Q4_1, QuantFamily::Int4, 32, 0, true, false, 20.0 / 32},
      {Q::Q4_K, QuantFamily::Int4, 32, 0, true, true, 0.5 + 16.0 / 256},  // the 16-byte heads as stored
      {Q::Q8_0, QuantFamily::Int8, 32, 0, false, false, 34.0 / 32},
      {Q::Q5_0, QuantFamily::Int8, 32, 0, false, false, 34.0 / 32},
      {Q::Q5_1, QuantFamily::Int8, 32, 0, true, false, 36.0 / 32},
      {Q::Q5_K, QuantFamily::Int8, 32, 0, true, true, 0.5 + 1.0 / 8 + 16.0 / 256},  // split: nibbles + 1 high bit
      {Q::Q6_K, QuantFamily::Int8, 16, -32, false, true, 0.5 + 2.0 / 8 + 1.0 / 16 + 2.0 / 256},  // + 2 high bits
  };
  for (const Want& w : wants) {
    SCOPED_TRACE(ggml_quant_name(w.t));
    const std::vector<uint8_t> blocks = random_blocks(w.t, 3, 768, 5);
    const PackedQuant p = pack_quant(blocks.data(), w.t, 3, 768);
    EXPECT_EQ(p.family, w.f);
    EXPECT_EQ(p.group, w.group);
    EXPECT_EQ(p.code_offset, w.offset);
    EXPECT_EQ(p.has_min, w.min);
    EXPECT_EQ(p.two_level, w.two);
    EXPECT_DOUBLE_EQ(packed_bytes_per_weight(p), w.bpw);
    EXPECT_GE(packed_bytes_allocated(p), packed_bytes_read(p));
  }
}

TEST(Quant, RowLengthRefusedByName) {
  const auto message = [](Q t, int64_t k) {
    try {
      check_quant_row_length(t, k, "blk.3.ffn_down.weight");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message(Q::Q4_K, 576),
            "blk.3.ffn_down.weight: Q4_K needs a row length that is a positive multiple of 256, found 576");
  EXPECT_EQ(message(Q::Q6_K, 96),
            "blk.3.ffn_down.weight: Q6_K needs a row length that is a positive multiple of 256, found 96");
  EXPECT_EQ(message(Q::Q4_0, 48),
            "blk.3.ffn_down.weight: Q4_0 needs a row length that is a positive multiple of 32, found 48");
  EXPECT_EQ(message(Q::Q8_0, 0),
            "blk.3.ffn_down.weight: Q8_0 needs a row length that is a positive multiple of 32, found 0");
  EXPECT_EQ(message(Q::Q5_1, 576), "accepted");
  EXPECT_EQ(message(Q(9), 32), "blk.3.ffn_down.weight: GGML type id 9 is not a supported quantized type");
  std::vector<uint8_t> blocks(kQ4_KBytes * 3);
  EXPECT_THROW(pack_quant(blocks.data(), Q::Q4_K, 1, 576, "w"), Error);
  const std::vector<float> x(576, 1.0f);
  EXPECT_THROW(quantize_matrix(Q::Q4_K, x.data(), 1, 576), Error);
  EXPECT_THROW(quantize_matrix(Q(9), x.data(), 1, 576), Error);  // not a supported type
}

// ---- reference GEMV --------------------------------------------------------------------------------------------------

TEST(Quant, ReferenceGemvEqualsFp64DotOfDequantized) {
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (Q t : kAllTypes) {
    const int64_t n = 33, k = 768;
    SCOPED_TRACE(ggml_quant_name(t));
    const std::vector<uint8_t> blocks = random_blocks(t, n, k, 77 + int(t));
    const std::vector<float> w = deq(t, blocks);
    std::vector<float> x(static_cast<size_t>(k));
    for (float& v : x) v = normal(gen);
    PackedQuant p = pack_quant(blocks.data(), t, n, k);
    const std::vector<double> y = packed_gemv_ref(p, x.data());
    double worst = 0.0;
    for (int64_t r = 0; r < n; ++r) {
      double ref = 0.0, mag = 0.0;
      for (int64_t j = 0; j < k; ++j) {
        ref += double(w[size_t(r * k + j)]) * double(x[size_t(j)]);
        mag += std::fabs(double(w[size_t(r * k + j)]) * double(x[size_t(j)]));
      }
      worst = std::max(worst, std::fabs(y[size_t(r)] - ref) / std::max(mag, 1e-300));
    }
    EXPECT_LE(worst, 1e-13);

    // negative control: one corrupted scale moves its row's output
    const uint16_t three = f32_to_f16(3.0f);
    if (!p.k_heads.empty()) {  // Q4_K, Q5_K: the head's d
      p.k_heads[size_t(5 * p.ld_heads)] = uint8_t(three & 0xff);
      p.k_heads[size_t(5 * p.ld_heads + 1)] = uint8_t(three >> 8);
    } else if (p.two_level) {
      p.super_d[5 * p.ld_super] = three;
    } else {
      p.scales[5 * p.ld_groups + 1] = three;
    }
    const std::vector<double> y_bad = packed_gemv_ref(p, x.data());
    EXPECT_NE(y_bad[5], y[5]);
    EXPECT_EQ(y_bad[4], y[4]);
    EXPECT_GT(bit_mismatches(unpack_quant(p), w), 0u);
  }
}

// ---- negative controls on the comparisons themselves -----------------------------------------------------------------

TEST(Quant, CorruptedScaleOrCodeFailsTheGgufComparison) {
  for (const auto& [name, r] : refs().at("legacy").items()) {
    SCOPED_TRACE(name);
    const Q t = type_by_name(name);
    std::vector<uint8_t> blocks = from_hex(r.at("blocks"));
    const std::vector<float> want = floats_from_hex(r.at("dequant"));
    std::vector<uint8_t> bad = blocks;
    bad[0] ^= 0x04;  // block 0's fp16 d, one mantissa bit (block 0 is the typical one: d != 0)
    EXPECT_GT(bit_mismatches(deq(t, bad), want), 0u);
    bad = blocks;
    bad[ggml_quant_block_bytes(t) - 1] ^= 0x10;  // a code bit of block 0
    EXPECT_GT(bit_mismatches(deq(t, bad), want), 0u);
  }
  const auto& r = refs().at("kquant").at("Q4_K");
  std::vector<uint8_t> bad = from_hex(r.at("blocks"));
  bad[4] ^= 0x01;  // a 6-bit sub-block scale of block 0
  EXPECT_GT(bit_mismatches(deq(Q::Q4_K, bad), floats_from_hex(r.at("dequant"))), 0u);
  const auto& r6 = refs().at("kquant").at("Q6_K");
  bad = from_hex(r6.at("blocks"));
  bad[192] ^= 0x01;  // an int8 sub-block scale of block 0
  EXPECT_GT(bit_mismatches(deq(Q::Q6_K, bad), floats_from_hex(r6.at("dequant"))), 0u);
}

// ---- the Q4_K quantizer --------------------------------------------------------------------------------------------

// The approximately normal tensor of tools/quant_refs.py: float32 sum of 12 counter-based uniforms, minus 6.
std::vector<float> irwin_hall(uint64_t seed, uint64_t tensor_id, int64_t count) {
  std::vector<float> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    float acc = 0.0f;
    for (int t = 0; t < 12; ++t) acc += rng_unit(seed, tensor_id, uint64_t(12 * i + t));
    out[size_t(i)] = acc - 6.0f;
  }
  return out;
}

double rms_error(Q t, const std::vector<float>& x, int64_t n, int64_t k) {
  const std::vector<float> y = deq(t, quantize_matrix(t, x.data(), n, k));
  double s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) s += (double(y[i]) - double(x[i])) * (double(y[i]) - double(x[i]));
  return std::sqrt(s / double(x.size()));
}

TEST(Quant, Q4KQuantizerRmsWithinFivePercentOfGgmlReference) {
  const auto& r = refs().at("q4_k_rms");
  const int64_t rows = r.at("rows"), k = r.at("k");
  const std::vector<float> x = irwin_hall(r.at("seed"), r.at("tensor_id"), rows * k);
  double in_rms = 0.0;
  for (float v : x) in_rms += double(v) * double(v);
  EXPECT_NEAR(std::sqrt(in_rms / double(x.size())), double(r.at("input_rms")), 1e-9);  // the same tensor
  const double ours = rms_error(Q::Q4_K, x, rows, k), ref = r.at("ref_rms_error");
  std::printf("Q4_K RMS error: ours %.6f, ggml's algorithm (Python port) %.6f, ratio %.4f; Q4_0 %.6f\n", ours, ref,
              ours / ref, rms_error(Q::Q4_0, x, rows, k));
  EXPECT_LE(ours, 1.05 * ref);
  EXPECT_GE(ours, 0.95 * ref);  // a much lower figure would mean the test measures something else
  EXPECT_LT(ours, rms_error(Q::Q4_0, x, rows, k));
  // negative control: the 5% check catches a quantizer whose codes are off (one code per super-block moved)
  std::vector<uint8_t> blocks = quantize_matrix(Q::Q4_K, x.data(), rows, k);
  for (size_t b = 0; b < blocks.size(); b += kQ4_KBytes) blocks[b + 16] ^= 0x0F;  // perturb one code per block
  const std::vector<float> y = deq(Q::Q4_K, blocks);
  double s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) s += (double(y[i]) - double(x[i])) * (double(y[i]) - double(x[i]));
  EXPECT_GT(std::sqrt(s / double(x.size())), 1.05 * ref);
}

// Q5_K (quantize_row_q5_K_ref: the Q4_K search over 32 levels): within 5% of the RMS error of ggml's algorithm ported
// to Python in double precision (tools/quant_refs.py) on the same tensor, about half of Q4_K's (one more bit), and
// every code uses its fifth bit somewhere (a packer that dropped qh would land near Q4_K's error and fail the bound).
TEST(Quant, Q5KQuantizerRmsWithinFivePercentOfGgmlReference) {
  const auto& r = refs().at("q4_k_rms");
  const int64_t rows = r.at("rows"), k = r.at("k");
  const std::vector<float> x = irwin_hall(r.at("seed"), r.at("tensor_id"), rows * k);
  const double ours = rms_error(Q::Q5_K, x, rows, k), ref = r.at("ref_rms_error_q5_k");
  const double q4k = rms_error(Q::Q4_K, x, rows, k);
  std::printf("Q5_K RMS error: ours %.6f, ggml's algorithm (Python port) %.6f, ratio %.4f; Q4_K %.6f\n", ours, ref,
              ours / ref, q4k);
  EXPECT_LE(ours, 1.05 * ref);
  EXPECT_GE(ours, 0.95 * ref);
  EXPECT_LT(ours, 0.6 * q4k);
  std::vector<uint8_t> blocks = quantize_matrix(Q::Q5_K, x.data(), rows, k);
  ASSERT_EQ(blocks.size(), size_t(rows * k / 256) * kQ5_KBytes);
  int64_t high = 0;
  for (size_t b = 0; b < blocks.size(); b += kQ5_KBytes)
    for (int i = 0; i < 32; ++i) high += blocks[b + 16 + size_t(i)] != 0;
  EXPECT_GT(high, int64_t(blocks.size() / kQ5_KBytes) * 16);
  // The prepacked form reads the same bits, and rows of 256 pack like one long row.
  const std::vector<float> want = deq(Q::Q5_K, blocks);
  EXPECT_EQ(bit_mismatches(unpack_quant(pack_quant(blocks.data(), Q::Q5_K, rows, k)), want), 0u);
  // Negative control: the fifth bits cleared move the error far past the bound.
  for (size_t b = 0; b < blocks.size(); b += kQ5_KBytes) std::memset(blocks.data() + b + 16, 0, 32);
  const std::vector<float> y = deq(Q::Q5_K, blocks);
  double s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) s += (double(y[i]) - double(x[i])) * (double(y[i]) - double(x[i]));
  EXPECT_GT(std::sqrt(s / double(x.size())), 2.0 * ref);
}

// QuantSearch::kQuick (write-gguf --quick-quant): the K-quants without ggml's scale search. Same bytes per block, a
// larger but bounded error (measured on this tensor: Q4_K 1.10x, Q5_K 1.06x, Q6_K 1.06x the search's; bounds 1.0 to
// 1.5x), still far below the next coarser type's, other bytes than the search's; the other types have no search (the
// same bytes); a negative control (every code moved) breaks the bound.
TEST(Quant, QuickKQuantsKeepTheFormatWithABoundedError) {
  const auto& r = refs().at("q4_k_rms");
  const int64_t rows = r.at("rows"), k = r.at("k");
  const std::vector<float> x = irwin_hall(r.at("seed"), r.at("tensor_id"), rows * k);
  auto rms = [&](Q t, const std::vector<uint8_t>& blocks) {
    const std::vector<float> y = deq(t, blocks);
    double s = 0.0;
    for (size_t i = 0; i < x.size(); ++i) s += (double(y[i]) - double(x[i])) * (double(y[i]) - double(x[i]));
    return std::sqrt(s / double(x.size()));
  };
  for (Q t : {Q::Q4_K, Q::Q5_K, Q::Q6_K}) {
    SCOPED_TRACE(ggml_quant_name(t));
    const std::vector<uint8_t> ref = quantize_matrix(t, x.data(), rows, k);
    std::vector<uint8_t> quick = quantize_matrix(t, x.data(), rows, k, QuantSearch::kQuick);
    ASSERT_EQ(quick.size(), ref.size());
    EXPECT_NE(quick, ref);
    const double e_ref = rms(t, ref), e_quick = rms(t, quick);
    std::printf("%s RMS error: search %.6f, quick %.6f (%.3fx)\n", ggml_quant_name(t), e_ref, e_quick,
                e_quick / e_ref);
    EXPECT_GE(e_quick, e_ref);  // the search minimises the error: quick is never better here
    EXPECT_LE(e_quick, 1.5 * e_ref);
    // The prepacked form reads the same bits as the reference dequantizer.
    EXPECT_EQ(bit_mismatches(unpack_quant(pack_quant(quick.data(), t, rows, k)), deq(t, quick)), 0u);
    // Negative control: every code of the first sub-block's first byte flipped moves the error past the bound.
    const size_t code0 = t == Q::Q6_K ? 0 : t == Q::Q5_K ? 48 : 16;
    for (size_t b = 0; b < quick.size(); b += ggml_quant_row_bytes(t, 256)) quick[b + code0] ^= 0xFF;
    EXPECT_GT(rms(t, quick), 1.5 * e_ref);
  }
  // Types without a search: the same bytes.
  for (Q t : {Q::Q4_0, Q::Q8_0, Q::Q5_0})
    EXPECT_EQ(quantize_matrix(t, x.data(), 4, k, QuantSearch::kQuick), quantize_matrix(t, x.data(), 4, k));
}

// A hand-built Q5_K block: one sub-block's scale and min, a code with its fifth bit, as dequantize_row_q5_K reads it.
TEST(Quant, HandComputedQ5KBlock) {
  uint8_t b[kQ5_KBytes] = {};
  put_f16(b, 0.5f);      // d
  put_f16(b + 2, 0.25f); // dmin
  b[4 + 1] = 3;          // sub-block 1: sc = 3
  b[4 + 5] = 2;          //              m = 2
  b[48 + 7] = 0x90;      // qs[7]: sub-block 0 code low nibble 0, sub-block 1 low nibble 9
  b[16 + 7] = 0x02;      // qh[7] bit 1: sub-block 1's weight 7 (weight 39) gets +16
  float y[256];
  dequant_q5_k(b, 1, y);
  EXPECT_EQ(y[39], 0.5f * 3.0f * float(9 + 16) - 0.25f * 2.0f);
  EXPECT_EQ(y[7], 0.0f);  // sub-block 0: sc = m = 0
  const PackedQuant p = pack_quant(b, Q::Q5_K, 1, 256);
  EXPECT_EQ(packed_code(p, 0, 39), 25);
  EXPECT_EQ(f32_to_bits(packed_weight(p, 0, 39)), f32_to_bits(y[39]));
}

TEST(Quant, Q6KQuantizerBeatsQ4KAndDequantizesExactly) {
  // The same approximately normal tensor as the Q4_K test; errors measured through our exact dequantizer.
  const auto& r = refs().at("q4_k_rms");
  const int64_t rows = r.at("rows"), k = r.at("k");
  const std::vector<float> x = irwin_hall(r.at("seed"), r.at("tensor_id"), rows * k);
  const double q6 = rms_error(Q::Q6_K, x, rows, k), q4k = rms_error(Q::Q4_K, x, rows, k);
  const double q8 = rms_error(Q::Q8_0, x, rows, k), q5 = rms_error(Q::Q5_0, x, rows, k);
  std::printf("RMS error on a unit normal tensor: Q8_0 %.6f, Q6_K %.6f, Q5_0 %.6f, Q4_K %.6f\n", q8, q6, q5, q4k);
  EXPECT_LT(q6, 0.35 * q4k);  // two more bits: about a quarter of the step
  EXPECT_LT(q6, q5);
  EXPECT_GT(q6, q8);          // and not better than 8 bits: the measurement measures quantization
  // Every weight is its sub-block's step times a code, within half a step of the input unless the code is clamped,
  // and the prepacked form reads the same bits.
  std::vector<uint8_t> blocks = quantize_matrix(Q::Q6_K, x.data(), rows, k);
  auto violations = [&](const std::vector<uint8_t>& b) {
    const std::vector<float> y = deq(Q::Q6_K, b);
    int64_t bad = 0;
    for (int64_t i = 0; i < rows * k; ++i) {
      const uint8_t* blk = b.data() + size_t(i / 256) * kQ6_KBytes;
      const float s = read_f16_le(blk + 208) * float(int8_t(blk[192 + (i % 256) / 16]));  // signed step
      const int code = s != 0 ? int(std::lround(y[size_t(i)] / s)) : 0;                   // q - 32
      if (s == 0 || code == -32 || code == 31) continue;  // clamped codes may sit further out
      bad += std::fabs(double(y[size_t(i)]) - double(x[size_t(i)])) > 0.5 * std::fabs(s) * (1 + 1e-5);
    }
    return bad;
  };
  EXPECT_EQ(violations(blocks), 0);
  EXPECT_EQ(bit_mismatches(unpack_quant(pack_quant(blocks.data(), Q::Q6_K, rows, k)), deq(Q::Q6_K, blocks)), 0u);
  // Negative control: one sub-block scale per super-block moved by one breaks the half-step bound.
  for (size_t b = 0; b < blocks.size(); b += kQ6_KBytes) blocks[b + 192] = uint8_t(int8_t(blocks[b + 192]) + 1);
  EXPECT_GT(violations(blocks), 0);
  // An all-zero super-block is all zero bytes (d = +0), as ggml writes it.
  const std::vector<float> zeros(256, 0.0f);
  EXPECT_EQ(quantize_matrix(Q::Q6_K, zeros.data(), 1, 256), std::vector<uint8_t>(kQ6_KBytes, 0));
}

#if LLM_HAVE_CUDA
// A mapping's quantized matrices share one device region (QuantRegion, engine/cuda_quant.h), sized by
// quant_matrix_device_bytes before anything is packed; each upload then takes quant_gemv_device_span of the planes it
// copies. The two agree for every type, awkward shape and form, or a load would fail half way (quant_gemv_upload_into
// refuses a matrix that does not fit what is left) or hold bytes the plan did not count. No GPU: both are host sums.
TEST(Quant, RegionSizeIsWhatEachUploadTakes) {
  for (Q t : kAllTypes) {
    const bool kq = t == Q::Q4_K || t == Q::Q5_K || t == Q::Q6_K;
    for (int64_t n : {1, 7, 33, 1031})
      for (int64_t k : kq ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 96, 576}) {
        SCOPED_TRACE(std::string(ggml_quant_name(t)) + " n=" + std::to_string(n) + " k=" + std::to_string(k));
        const std::vector<uint8_t> blocks = random_blocks(t, n, k, uint32_t(n * 31 + k));
        const PackedQuant p = pack_quant(blocks.data(), t, n, k);
        const size_t packed = quant_gemv_device_span(quant_host_view(p));
        for (QuantGemvKind kind : {QuantGemvKind::Warp, QuantGemvKind::Thread, QuantGemvKind::WarpDp4a})
          EXPECT_EQ(size_t(quant_matrix_device_bytes(t, n, k, kind)), packed);
        QuantGemvWeight stored = quant_gemv_describe(int(t), n, k);
        stored.blocks = blocks.data();
        EXPECT_EQ(size_t(quant_matrix_device_bytes(t, n, k, QuantGemvKind::AsStored)), quant_gemv_device_span(stored));
        EXPECT_EQ(packed % kQuantPlaneAlign, 0u);  // the next matrix in the region starts aligned
        EXPECT_GE(packed, size_t(packed_quant_bytes(t, n, k).total()));
      }
  }
  // What is left of a region too small, or a misaligned start, is refused by name before any copy (no device touched).
  const std::vector<uint8_t> blocks = random_blocks(Q::Q6_K, 5, 256, 3);
  const PackedQuant p = pack_quant(blocks.data(), Q::Q6_K, 5, 256);
  const QuantGemvWeight host = quant_host_view(p);
  const size_t need = quant_gemv_device_span(host);
  void* fake = reinterpret_cast<void*>(uintptr_t(1) << 30);  // aligned, never dereferenced: the checks come first
  try {
    quant_gemv_upload_into(host, fake, need - 1, nullptr);
    ADD_FAILURE() << "a region one byte short was accepted";
  } catch (const llm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q6_K [5, 256] needs " + std::to_string(need)), std::string::npos) << e.what();
  }
  EXPECT_THROW(quant_gemv_upload_into(host, static_cast<char*>(fake) + 16, need, nullptr), llm::Error);
  EXPECT_THROW(quant_gemv_upload_into(host, nullptr, need, nullptr), llm::Error);
}
#endif

}  // namespace
}  // namespace llm
