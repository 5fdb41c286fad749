// core/fp8.h, the E4M3 codec of the FP8 KV cache: every one of the 256 codes against a reference decode written from
// the format's definition (double arithmetic, std::ldexp), every code back through the encoder, rounding ties to
// even at every midpoint, saturation, NaN and infinities, signed zeros and underflow, and random floats against a
// brute-force nearest-code search. (Once, by hand: the encoder equals CUDA 13.0's __nv_cvt_float_to_fp8(x,
// __NV_SATFINITE, __NV_E4M3) on all 2^32 FP32 inputs, and the decoder its __nv_cvt_fp8_to_halfraw on all 256 codes.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "core/fp8.h"

namespace {

using llm::f32_to_fp8_e4m3;
using llm::fp8_e4m3_to_f32;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The OCP E4M3 definition: S.EEEE.MMM, bias 7; e = 0: (-1)^S * 2^-6 * M/8; else (-1)^S * 2^(E-7) * (1 + M/8);
// S.1111.111 is NaN; no infinities.
double reference_decode(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double v = e == 0 ? std::ldexp(double(m), -9) : std::ldexp(double(8 + m), e - 10);
  return s ? -v : v;
}

// The code a correct round-to-nearest-even, saturating encoder gives for a non-NaN x: the nearest of the 127
// non-negative finite codes to |x| (a tie to the code with an even last bit), +-448 from 448 up; x's sign bit.
int brute_force_encode(float x) {
  const int sign = (bits(x) >> 31) ? 0x80 : 0;
  const double a = std::fabs(double(x));
  if (a >= 448.0) return sign | 0x7E;
  int best = 0;
  double best_d = a;  // distance to code 0
  for (int c = 1; c <= 0x7E; ++c) {
    const double d = std::fabs(reference_decode(c) - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return sign | best;
}

TEST(Fp8E4M3, EveryCodeDecodesAsTheDefinition) {
  for (int c = 0; c < 256; ++c) {
    SCOPED_TRACE(c);
    const float got = fp8_e4m3_to_f32(uint8_t(c));
    const double want = reference_decode(c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got));
      EXPECT_EQ(std::signbit(got), c >= 0x80);
    } else {
      EXPECT_EQ(bits(got), bits(float(want)));  // bit for bit: -0 is -0
    }
  }
}

TEST(Fp8E4M3, KnownCodes) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(bits(fp8_e4m3_to_f32(0x80)), 0x80000000u);  // -0
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 0.001953125f);      // 2^-9, the smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 7 * 0.001953125f);  // the largest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), 0.015625f);         // 2^-6, the smallest normal
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x3C), 1.5f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xC0), -2.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x77), 240.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x7E), 448.0f);  // the largest finite
  EXPECT_EQ(fp8_e4m3_to_f32(0xFE), -448.0f);
  EXPECT_EQ(llm::kFp8E4M3Max, 448.0f);
}

TEST(Fp8E4M3, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) EXPECT_EQ(f32_to_fp8_e4m3(fp8_e4m3_to_f32(uint8_t(c))), c == 0xFF ? 0x7F : c) << c;
}

TEST(Fp8E4M3, MidpointsTieToEvenAndTheirNeighboursGoToTheNearest) {
  for (int c = 0; c < 0x7E; ++c) {
    for (int sign : {0, 0x80}) {
      SCOPED_TRACE(testing::Message() << "codes " << (sign | c) << " and " << (sign | (c + 1)));
      const float lo = fp8_e4m3_to_f32(uint8_t(sign | c)), hi = fp8_e4m3_to_f32(uint8_t(sign | (c + 1)));
      const float mid = (lo + hi) / 2;  // exact: 5 significant bits at most
      ASSERT_EQ(double(mid), (double(lo) + double(hi)) / 2);
      const int even = (c & 1) ? c + 1 : c;
      EXPECT_EQ(f32_to_fp8_e4m3(mid), sign | even);
      EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, hi)), sign | (c + 1));
      EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, lo)), sign | c);
    }
  }
}

TEST(Fp8E4M3, SaturatesAtTheLargestFiniteAndKeepsNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {448.0f, 448.5f, 463.99f, 464.0f, 480.0f, 1e6f, std::numeric_limits<float>::max(), inf}) {
    EXPECT_EQ(f32_to_fp8_e4m3(x), 0x7E) << x;
    EXPECT_EQ(f32_to_fp8_e4m3(-x), 0xFE) << -x;
  }
  EXPECT_EQ(f32_to_fp8_e4m3(447.99f), 0x7E);  // rounds to 448 without saturating
  EXPECT_EQ(f32_to_fp8_e4m3(431.99f), 0x7D);  // below the midpoint 432 of 416 and 448
  // NaN of any sign and payload, quiet or signalling, becomes the canonical NaN code (as CUDA's conversion).
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0x7fa00000u}) {
    EXPECT_EQ(f32_to_fp8_e4m3(from_bits(nan)), 0x7F) << std::hex << nan;
    EXPECT_EQ(f32_to_fp8_e4m3(from_bits(nan | 0x80000000u)), 0x7F) << std::hex << nan;
  }
}

TEST(Fp8E4M3, TinyValuesRoundToSignedZeroOrTheSmallestSubnormal) {
  const float min_sub = 0.001953125f;  // 2^-9
  EXPECT_EQ(f32_to_fp8_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_fp8_e4m3(min_sub / 2), 0x00);  // a tie: to the even code 0
  EXPECT_EQ(f32_to_fp8_e4m3(-min_sub / 2), 0x80);
  EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(min_sub / 2, 1.0f)), 0x01);
  EXPECT_EQ(f32_to_fp8_e4m3(1.5f * min_sub), 0x02);  // tie between 1 and 2: even
  EXPECT_EQ(f32_to_fp8_e4m3(2.5f * min_sub), 0x02);  // tie between 2 and 3: even
  EXPECT_EQ(f32_to_fp8_e4m3(7.5f * min_sub), 0x08);  // tie between the largest subnormal and the smallest normal
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3(-std::numeric_limits<float>::denorm_min()), 0x80);
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::min()), 0x00);  // FP32's smallest normal, 2^-126
}

TEST(Fp8E4M3, RandomFloatsEncodeToTheNearestCode) {
  std::mt19937 rng(14);
  std::uniform_int_distribution<uint32_t> any;
  // Exponents around E4M3's range (2^-12 .. 2^10) and arbitrary bit patterns elsewhere; NaN excluded.
  std::uniform_int_distribution<uint32_t> exponent(127 - 12, 127 + 10);
  int checked = 0;
  for (int i = 0; i < 400000; ++i) {
    uint32_t u = any(rng);
    if (i % 4 != 0) u = (u & 0x807FFFFFu) | (exponent(rng) << 23);
    const float x = from_bits(u);
    if (std::isnan(x)) continue;
    ASSERT_EQ(f32_to_fp8_e4m3(x), brute_force_encode(x)) << "x = " << x << " (bits " << std::hex << u << ")";
    ++checked;
  }
  EXPECT_GT(checked, 390000);
}

}  // namespace
