// Quantized GEMV mappings (kernels/quant/gemv_quant.h: warp, thread, as-stored, warp-dp4a) x GGML types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q4_K, Q6_K) against models/quant.h's FP64 reference packed_gemv_ref: fresh random inputs (seed printed), poisoned
// outputs, awkward shapes, accumulate, misaligned x/y, chained launches in a CUDA graph, negative controls.
// warp-dp4a rounds x to int8 per 32 (q8_1): it is judged against the reference on the same rounded activations.
// The QuantGemvEmulation tests need no device: they run the kernels' own per-lane code (kernels/quant/gemv_quant_device.cuh,
// __host__ __device__) on the CPU with the launch plan's block/warp/lane coordinates.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/counter_rng.h"
#include "random_util.h"  // test_seed, parallel_for
#include "rmsnorm_fold_check.h"  // check_rmsnorm_fold
#include "core/dtype.h"
#include "engine/backend.h"  // cuda_device_available
#include "engine/cuda_quant.h"  // quant_host_view
#include "engine/gemv_choice.h"  // gemv_plan: a name's quantized form
#include "kernels/cuda_check.h"
#include "kernels/quant/gemv_quant.h"
#include "kernels/quant/gemv_quant_batch.h"
#include "kernels/ops/ops.h"  // swiglu
#include "kernels/quant/gemv_quant_device.cuh"  // the per-lane code, run on the host by the emulation tests
#include "models/quant.h"

namespace llm {
namespace {

using Q = GgmlQuantType;

// Measured errors are FP32 rounding (about 1e-7 .. 1e-6); the issue's bound is 4e-3. kTol sits far below that bound
// and far above the rounding; the negative controls must exceed kLooseTol (the issue's 4e-3) as well.
constexpr double kTol = 1e-4;
constexpr double kLooseTol = 4e-3;
constexpr size_t kGuard = 64;  // floats of poison on each side of x and y

const QuantGemvKind kAllKinds[] = {QuantGemvKind::Warp, QuantGemvKind::Thread, QuantGemvKind::AsStored,
                                   QuantGemvKind::WarpDp4a};
const Q kAllTypes[] = {Q::Q4_0, Q::Q4_1, Q::Q5_0, Q::Q5_1, Q::Q8_0, Q::Q4_K, Q::Q5_K, Q::Q6_K};

// Fresh each run; LLM_TEST_SEED=<n> reproduces a failing run (tests/gpu/random_util.h).
using llm_test::parallel_for;
using llm_test::test_seed;

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  p[0] = uint8_t(h & 0xff);
  p[1] = uint8_t(h >> 8);
}

// Approximately normal (sum of 4 uniforms), from the counter generator.
float rng_normalish(uint64_t seed, uint64_t id, uint64_t i) {
  float s = 0.0f;
  for (int t = 0; t < 4; ++t) s += rng_value(seed, id, 4 * i + uint64_t(t), 0.0f, 1.0f);
  return s * 0.866f;
}

// GGUF bytes of a random [n, k] tensor of type t. Q8_0/Q4_0/Q4_K/Q5_K: random FP32 rows quantized with quantize_matrix
// (rows in parallel). Q4_1/Q5_0/Q5_1/Q6_K (no quantizer here): random code bytes with sane fp16 scales of both signs
// (mins too; Q4_K-style non-negative d/dmin are not needed there), now and then a zero scale, as quant_test.cpp does.
std::vector<uint8_t> random_blocks(Q t, int64_t n, int64_t k, uint64_t seed) {
  const size_t row_bytes = ggml_quant_row_bytes(t, k);
  std::vector<uint8_t> out(row_bytes * size_t(n));
  if (t == Q::Q8_0 || t == Q::Q4_0 || t == Q::Q4_K || t == Q::Q5_K) {
    parallel_for(size_t(n), [&](size_t b, size_t e) {
      std::vector<float> row(static_cast<size_t>(k));
      for (size_t r = b; r < e; ++r) {
        for (int64_t j = 0; j < k; ++j) row[size_t(j)] = rng_normalish(seed, 10, r * uint64_t(k) + uint64_t(j));
        const std::vector<uint8_t> q = quantize_matrix(t, row.data(), 1, k);
        std::memcpy(out.data() + r * row_bytes, q.data(), row_bytes);
      }
    });
    return out;
  }
  const size_t bb = ggml_quant_block_bytes(t);
  const size_t blocks = out.size() / bb;
  parallel_for(blocks, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      uint8_t* blk = out.data() + i * bb;
      for (size_t j = 0; j < bb; ++j) blk[j] = uint8_t(rng_mix(seed ^ (uint64_t(i) << 20) ^ j) & 0xff);
      const float d = (i % 17 == 3) ? 0.0f : rng_normalish(seed, 11, i) * 0.02f;
      const float m = rng_normalish(seed, 12, i) * 0.05f;
      switch (t) {
        case Q::Q5_0: put_f16(blk, d); break;
        case Q::Q4_1: case Q::Q5_1: put_f16(blk, d); put_f16(blk + 2, m); break;
        case Q::Q6_K: put_f16(blk + 208, d); break;
        default: break;
      }
    }
  });
  return out;
}

// The host description of a PackedQuant plus the raw blocks: the engine's adapter (engine/cuda_quant.h).
QuantGemvWeight describe(const PackedQuant& p, const std::vector<uint8_t>& blocks) {
  return quant_host_view(p, blocks.empty() ? nullptr : blocks.data());
}

// ||got - want|| / ||want||, the denominator at least 1e-4 ||scale||^2 (scale = sum_j |w x| per row), so an output
// that cancels to almost zero (N = 1) does not turn FP32 rounding into a spurious failure. NaN fails any <= check.
double relative_l2_error(const float* got, const std::vector<double>& want, const std::vector<double>& scale) {
  double num = 0.0, den = 0.0, floor = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
    floor += 1e-4 * scale[i] * scale[i];
  }
  den = std::max(den, floor);
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

// x as warp-dp4a sees it: quantized per 32 by the kernel's own code (quant_x_q8_block), then d * q.
struct RoundedX {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int> s16;
  std::vector<float> value;  // d * q
};
RoundedX round_activations(const std::vector<float>& x) {
  RoundedX r;
  const size_t k = x.size();
  r.q.resize(k);
  r.d.resize(k / 32);
  r.s16.resize(k / 16);
  r.value.resize(k);
  for (size_t b = 0; b < k / 32; ++b) quant_x_q8_block(x.data(), int64_t(b), r.q.data(), r.d.data(), r.s16.data());
  for (size_t j = 0; j < k; ++j) r.value[j] = r.d[j / 32] * float(r.q[j]);
  return r;
}

// One problem on the host: blocks, the prepacked form, x, y0 and the FP64 references.
struct HostProblem {
  Q type;
  int64_t n = 0, k = 0;
  std::vector<uint8_t> blocks;
  PackedQuant packed;
  std::vector<float> x, y0;
  std::vector<double> ref, ref_acc, ref_abs;
  RoundedX xr;                            // x rounded as warp-dp4a does
  std::vector<double> ref_r, ref_r_acc;   // W xr and y0 + W xr, FP64

  HostProblem(Q t, int64_t n_, int64_t k_, uint64_t salt = 0) : type(t), n(n_), k(k_) {
    const uint64_t seed = rng_mix(test_seed() ^ (uint64_t(n) << 24) ^ uint64_t(k) ^ (uint64_t(t) << 50) ^ salt);
    blocks = random_blocks(t, n, k, seed);
    packed = pack_quant(blocks.data(), t, n, k, "test");
    x.resize(size_t(k));
    for (int64_t i = 0; i < k; ++i) x[size_t(i)] = rng_value(seed, 1, uint64_t(i), 0.0f, 1.0f);
    y0.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) y0[size_t(i)] = rng_value(seed, 2, uint64_t(i), 0.0f, 4.0f);
    compute_reference();
  }
  void compute_reference() {
    ref = packed_gemv_ref(packed, x.data());
    ref_acc.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) ref_acc[size_t(i)] = double(y0[size_t(i)]) + ref[size_t(i)];
    xr = round_activations(x);
    ref_r = packed_gemv_ref(packed, xr.value.data());
    ref_r_acc.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) ref_r_acc[size_t(i)] = double(y0[size_t(i)]) + ref_r[size_t(i)];
    ref_abs.assign(size_t(n), 0.0);
    parallel_for(size_t(n), [&](size_t b, size_t e) {
      for (size_t r = b; r < e; ++r) {
        double a = 0.0;
        for (int64_t j = 0; j < k; ++j) a += std::fabs(double(packed_weight(packed, int64_t(r), j)) * x[size_t(j)]);
        ref_abs[r] = a + std::fabs(double(y0[r]));
      }
    });
  }
  QuantGemvWeight host_weight() const { return describe(packed, blocks); }
  // What mapping `kind` must produce: warp-dp4a on the rounded activations, the others on x.
  const std::vector<double>& want(QuantGemvKind kind, bool accumulate) const {
    if (kind == QuantGemvKind::WarpDp4a) return accumulate ? ref_r_acc : ref_r;
    return accumulate ? ref_acc : ref;
  }
  std::string name() const {
    return std::string(ggml_quant_name(type)) + " N=" + std::to_string(n) + " K=" + std::to_string(k);
  }
};

// The weight (< 16: a low nibble for Int4, byte j either way) whose x is largest in magnitude, so that perturbing it
// moves the output far beyond rounding whatever the random draw.
int loudest_low_weight(const std::vector<float>& x) {
  int best = 0;
  for (int j = 1; j < 16; ++j)
    if (std::fabs(x[size_t(j)]) > std::fabs(x[size_t(best)])) best = j;
  return best;
}

// ---- host emulation of the kernels (no device) ---------------------------------------------------------------------

// The kernel of `kind` run on the host: the launch plan's grid, the same block/warp/lane coordinates and the same
// per-lane code; lanes summed in lane order (the device's shuffle tree sums in another order), slices in slice order.
std::vector<float> emulate(QuantGemvKind kind, const QuantGemvWeight& w, const float* x, const float* y_in,
                           bool accumulate) {
  quant_gemv_check_layout(w, "emulate");
  const QuantGemvPlan plan = quant_gemv_plan(kind, w, 132);
  std::vector<float> y(size_t(w.n), std::nanf(""));
  if (y_in) std::copy(y_in, y_in + w.n, y.begin());
  const bool vec = (reinterpret_cast<uintptr_t>(x) & 15) == 0;
  auto finish = [&](int64_t row, float s) {
    if (row < w.n) y[size_t(row)] = accumulate ? y[size_t(row)] + s : s;
  };
  if (kind == QuantGemvKind::Thread) {
    const QuantPackedArgs a = quant_packed_args(w, plan, x, nullptr, accumulate);
    parallel_for(size_t(w.n), [&](size_t b, size_t e) {
      for (size_t row = b; row < e; ++row) {
        float acc = 0.0f;
        using namespace quant_type_id;
        switch (w.type_id) {
#define QT(id, i4, tl, mn)                                                                               \
  case id:                                                                                               \
    acc = vec ? quant_thread_row<i4, tl, mn, true>(a, int64_t(row)) : quant_thread_row<i4, tl, mn, false>(a, int64_t(row)); \
    break;
          QT(kQ4_0, true, false, false) QT(kQ4_1, true, false, true) QT(kQ4_K, true, true, true)
          QT(kQ8_0, false, false, false) QT(kQ5_0, false, false, false) QT(kQ5_1, false, false, true)
          QT(kQ5_K, false, true, true) QT(kQ6_K, false, true, false)
#undef QT
        }
        finish(int64_t(row), acc);
      }
    });
    return y;
  }
  // One warp per (row group, K slice), numbered as a grid of one group per warp lane would number them: the device's
  // "warp" kernel may give a lane several groups (plan.lanes < row_groups), but each group's per-lane sums are the
  // same (its ring sums a lane's chunks in quant_warp_lane's order).
  const int warps = int((plan.row_groups * plan.splits + kQuantWarpsPerBlock - 1) / kQuantWarpsPerBlock) *
                    kQuantWarpsPerBlock;
  const int R = plan.rows_per_warp;
  // warp-dp4a: its x pass on the host, into host scratch (16-byte aligned as on the device).
  const bool dp4a = kind == QuantGemvKind::WarpDp4a;
  std::vector<uint4> xq_store(size_t(w.k) / 16);
  std::vector<float> xd(size_t(w.k) / 32);
  std::vector<int> xs16(size_t(w.k) / 16);
  if (dp4a)
    for (int64_t b = 0; b < w.k / 32; ++b)
      quant_x_q8_block(x, b, reinterpret_cast<int8_t*>(xq_store.data()), xd.data(), xs16.data());
  std::vector<float> partial(size_t(warps) * size_t(R), 0.0f);  // per warp and row of its group, lanes summed
  parallel_for(size_t(warps), [&](size_t b, size_t e) {
    for (size_t gw = b; gw < e; ++gw) {
      const int block = int(gw / kQuantWarpsPerBlock), warp = int(gw % kQuantWarpsPerBlock);
      const QuantWarpCoords at = quant_warp_coords(block, warp, plan.splits, plan.slice_units, plan.units, R);
      for (int lane = 0; lane < 32; ++lane) {
        if (kind == QuantGemvKind::Warp || dp4a) {
          QuantPackedArgs a = quant_packed_args(w, plan, x, nullptr, accumulate);
          a.xq = reinterpret_cast<const int8_t*>(xq_store.data());
          a.xd = xd.data();
          a.xs16 = xs16.data();
          float acc[kQuantWarpRows];
          using namespace quant_type_id;
          constexpr int RR = kQuantWarpRows, UU = kQuantWarpUnroll;
          switch (w.type_id) {
#define QW(id, i4, tl, mn)                                                                                        \
  case id:                                                                                                        \
    if (dp4a)                                                                                                     \
      quant_warp_lane<i4, tl, mn, true, RR, UU, true>(a, at.row0, at.begin, at.end, lane, acc);                   \
    else if (vec)                                                                                                 \
      quant_warp_lane<i4, tl, mn, true, RR, UU>(a, at.row0, at.begin, at.end, lane, acc);                         \
    else                                                                                                          \
      quant_warp_lane<i4, tl, mn, false, RR, UU>(a, at.row0, at.begin, at.end, lane, acc);                        \
    break;
            QW(kQ4_0, true, false, false) QW(kQ4_1, true, false, true) QW(kQ4_K, true, true, true)
            QW(kQ8_0, false, false, false) QW(kQ5_0, false, false, false) QW(kQ5_1, false, false, true)
            QW(kQ5_K, false, true, true) QW(kQ6_K, false, true, false)
#undef QW
          }
          for (int i = 0; i < RR; ++i) partial[gw * size_t(R) + size_t(i)] += acc[i];
        } else {
          AsStoredArgs a;
          a.blocks = w.blocks;
          a.row_bytes = w.row_bytes;
          a.n = int(w.n);
          a.units = plan.units;
          a.splits = plan.splits;
          a.slice_units = plan.slice_units;
          a.x = x;
          a.y = nullptr;
          a.accumulate = accumulate;
          if (at.row0 >= w.n) continue;
          float acc = 0.0f;
          using namespace quant_type_id;
          switch (w.type_id) {
#define QA(id)                                                                                                         \
  case id:                                                                                                             \
    acc = vec ? quant_as_stored_lane<id, true>(a, at.row0, at.begin, at.end, lane)                                     \
              : quant_as_stored_lane<id, false>(a, at.row0, at.begin, at.end, lane);                                   \
    break;
            QA(kQ4_0) QA(kQ4_1) QA(kQ5_0) QA(kQ5_1) QA(kQ8_0) QA(kQ4_K) QA(kQ5_K) QA(kQ6_K)
#undef QA
          }
          partial[gw] += acc;
        }
      }
    }
  });
  // Slices of one row group are consecutive warps of one block; slice 0 sums them in order and writes.
  for (int gw = 0; gw < warps; ++gw) {
    const int block = gw / kQuantWarpsPerBlock, warp = gw % kQuantWarpsPerBlock;
    const QuantWarpCoords at = quant_warp_coords(block, warp, plan.splits, plan.slice_units, plan.units, R);
    if (at.slice != 0) continue;
    for (int i = 0; i < R; ++i) {
      float s = 0.0f;
      if (plan.splits == 1)
        s = partial[size_t(gw) * size_t(R) + size_t(i)];
      else
        for (int sl = 0; sl < plan.splits; ++sl) s += partial[size_t(gw + sl) * size_t(R) + size_t(i)];
      finish(at.row0 + i, s);
    }
  }
  return y;
}

struct Shape {
  int64_t n, k;
};
std::vector<Shape> emulation_shapes(Q t) {
  const bool kq = t == Q::Q4_K || t == Q::Q5_K || t == Q::Q6_K;
  if (kq) return {{1, 256}, {7, 768}, {1000, 256}, {7, 4096}, {3, 14336}, {130, 4096}};
  return {{1, 32}, {7, 96}, {1000, 576}, {7, 4096}, {3, 14336}, {130, 4096}};
}

TEST(QuantGemvEmulation, EveryMappingAndTypeMatchesFp64ReferenceOnTheHost) {
  double worst = 0.0, worst_rounding = 0.0;
  for (Q t : kAllTypes) {
    for (const Shape& s : emulation_shapes(t)) {
      const HostProblem p(t, s.n, s.k);
      const QuantGemvWeight w = p.host_weight();
      for (QuantGemvKind kind : kAllKinds) {
        for (int offset : {0, 1}) {  // offset 1: x only 4-byte aligned (the scalar x path)
          std::vector<float> xbuf(p.x.size() + 8, std::nanf(""));
          float* xa = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(xbuf.data()) + 15) & ~uintptr_t(15));
          std::copy(p.x.begin(), p.x.end(), xa + offset);
          for (bool acc : {false, true}) {
            SCOPED_TRACE(p.name() + " mapping " + quant_gemv_kind_name(kind) + (acc ? " y += Wx" : " y = Wx") +
                         (offset ? " misaligned x" : ""));
            const std::vector<float> y = emulate(kind, w, xa + offset, acc ? p.y0.data() : nullptr, acc);
            const double err = relative_l2_error(y.data(), p.want(kind, acc), p.ref_abs);
            EXPECT_LE(err, kTol);
            worst = std::max(worst, err);
            if (kind == QuantGemvKind::WarpDp4a && !acc)  // what rounding x costs, against the exact x
              worst_rounding = std::max(worst_rounding, relative_l2_error(y.data(), p.ref, p.ref_abs));
          }
        }
      }
    }
  }
  std::cout << "[ qgemv   ] host emulation, every mapping x type x shape: worst relative L2 error " << worst << "\n";
  std::cout << "[ qgemv   ] host emulation, warp-dp4a against the unrounded x: worst relative L2 error "
            << worst_rounding << " (the int8 rounding of x)\n";
}

TEST(QuantGemvEmulation, NegativeControlsFailOnTheHost) {
  // One code of one weight changed in the prepacked codes (N = 1, K = 32: the output moves by s * dcode * x_j).
  for (Q t : {Q::Q4_0, Q::Q8_0}) {
    HostProblem p(t, 1, 32);
    PackedQuant bad = p.packed;
    bad.codes[size_t(loudest_low_weight(p.x))] ^= (t == Q::Q4_0 ? 0x0C : 0x70);  // code moves by 4..12 (16..112)
    const QuantGemvWeight w = describe(bad, p.blocks);
    const std::vector<float> y = emulate(QuantGemvKind::Warp, w, p.x.data(), nullptr, false);
    const double err = relative_l2_error(y.data(), p.ref, p.ref_abs);
    EXPECT_GT(err, kLooseTol) << ggml_quant_name(t) << ": a perturbed weight passed";
    std::cout << "[ qgemv   ] host emulation, one " << ggml_quant_name(t) << " code perturbed: relative L2 error " << err
              << "\n";
  }
}

// ---- refusals and plans (no device) ----------------------------------------------------------------------------------

TEST(QuantGemvApi, RefusesUnknownMappingAndTypeByName) {
  EXPECT_FALSE(gemv_plan("colmajor").has_quant);  // a BF16-only mapping has no quantized form
  try {
    gemv_plan("nope");
    FAIL() << "accepted an unknown mapping";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("as-stored"), std::string::npos) << e.what();
  }
  EXPECT_THROW(quant_type_traits(1), Error);  // F16 has no quantized kernel
  for (QuantGemvKind k : kAllKinds) {
    const GemvPlan p = gemv_plan(quant_gemv_kind_name(k));
    EXPECT_TRUE(p.has_quant) << quant_gemv_kind_name(k);
    EXPECT_EQ(p.quant, k);
    EXPECT_GT(std::strlen(quant_gemv_kind_why(k)), 20u);
  }
}

TEST(QuantGemvApi, ShapeReportsTheLoadsInFlight) {
  const QuantGemvWeight w = quant_gemv_describe(quant_type_id::kQ4_0, 4096, 4096);
  const GemvLaunchShape warp = quant_gemv_shape(QuantGemvKind::Warp, w);
  EXPECT_EQ(warp.block, kQuantGemvThreads);
  EXPECT_EQ(warp.bytes_in_flight_per_thread, kQuantWarpRows * kQuantWarpUnroll * 16);
  const GemvLaunchShape thread = quant_gemv_shape(QuantGemvKind::Thread, w);
  EXPECT_EQ(int64_t(thread.grid) * thread.block, 4096);
  EXPECT_EQ(quant_gemv_shape(QuantGemvKind::AsStored, w).bytes_in_flight_per_thread, 18);
}

// ---- on the device ---------------------------------------------------------------------------------------------------

// A HostProblem uploaded (every plane: packed and as stored) with NaN-guarded x and y buffers.
struct DeviceProblem {
  const HostProblem& h;
  QuantGemvWeight w;
  float* d_xbuf = nullptr;  // [kGuard + K + kGuard + 1]
  float* d_ybuf = nullptr;  // [kGuard + N + kGuard + 1]

  DeviceProblem(const HostProblem& hp, cudaStream_t stream) : h(hp) {
    w = quant_gemv_upload(h.host_weight(), stream);
    CUDA_CHECK(cudaMalloc(&d_xbuf, (kGuard + size_t(h.k) + kGuard + 1) * 4));
    CUDA_CHECK(cudaMalloc(&d_ybuf, ybuf_floats() * 4));
  }
  ~DeviceProblem() {
    quant_gemv_free(&w);
    cudaFree(d_xbuf);
    cudaFree(d_ybuf);
  }
  DeviceProblem(const DeviceProblem&) = delete;
  DeviceProblem& operator=(const DeviceProblem&) = delete;

  size_t ybuf_floats() const { return kGuard + size_t(h.n) + kGuard + 1; }
  void upload_x(int offset, cudaStream_t stream) {
    xbuf_host.assign(kGuard + size_t(h.k) + kGuard + 1, std::nanf(""));
    std::copy(h.x.begin(), h.x.end(), xbuf_host.begin() + kGuard + offset);
    CUDA_CHECK(cudaMemcpyAsync(d_xbuf, xbuf_host.data(), xbuf_host.size() * 4, cudaMemcpyHostToDevice, stream));
  }
  std::vector<float> xbuf_host;
  const float* d_x(int offset) const { return d_xbuf + kGuard + offset; }
  float* d_y(int offset) const { return d_ybuf + kGuard + offset; }

  // One launch of `kind` into y poisoned with 0xFF bytes (NaN) or preset to y0; returns the relative L2 error and
  // fails the test if anything outside y[0, N) changed.
  template <typename Launch>
  double run(bool accumulate, int offset, cudaStream_t stream, Launch launch, const std::vector<double>* want = nullptr) {
    upload_x(offset, stream);
    CUDA_CHECK(cudaMemsetAsync(d_ybuf, 0xFF, ybuf_floats() * 4, stream));
    if (accumulate)
      CUDA_CHECK(cudaMemcpyAsync(d_y(offset), h.y0.data(), size_t(h.n) * 4, cudaMemcpyHostToDevice, stream));
    launch(d_x(offset), d_y(offset));
    std::vector<float> ybuf(ybuf_floats());
    CUDA_CHECK(cudaMemcpyAsync(ybuf.data(), d_ybuf, ybuf.size() * 4, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < ybuf.size(); ++i) {
      const bool inside = i >= kGuard + size_t(offset) && i < kGuard + size_t(offset) + size_t(h.n);
      uint32_t bits;
      std::memcpy(&bits, &ybuf[i], 4);
      if (!inside && bits != 0xFFFFFFFFu) {
        ADD_FAILURE() << "write outside y[0, " << h.n << "): element " << int64_t(i) - int64_t(kGuard + offset);
        break;
      }
    }
    return relative_l2_error(ybuf.data() + kGuard + offset, want ? *want : (accumulate ? h.ref_acc : h.ref),
                             h.ref_abs);
  }
  double run_kind(QuantGemvKind kind, bool accumulate, int offset, cudaStream_t stream) {
    return run(accumulate, offset, stream, [&](const float* x, float* y) {
      quant_gemv_launch(kind, w, x, y, accumulate, stream);
    }, &h.want(kind, accumulate));
  }
};

class QuantGemvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!llm::cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    CUDA_CHECK(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  // Every mapping on one problem: y = W x into poisoned y, then y += W x; returns the worst error.
  double check_all(const HostProblem& hp, int offset) {
    DeviceProblem p(hp, stream_);
    double worst = 0.0;
    for (QuantGemvKind kind : kAllKinds) {
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(hp.name() + " mapping " + quant_gemv_kind_name(kind) + (accumulate ? " y += Wx" : " y = Wx") +
                     (offset ? " misaligned x and y" : ""));
        const double err = p.run_kind(kind, accumulate, offset, stream_);
        EXPECT_LE(err, kTol) << "relative L2 error " << err;
        worst = std::max(worst, err);
      }
    }
    return worst;
  }
  cudaStream_t stream_ = nullptr;
};

// ---- every mapping x type x shape ---------------------------------------------------------------------------------

// Row length number kk (0..4) of type t: 32, 96, 576, 4096, 14336; the K-quants 256, 768, 4096, 14336.
int64_t shape_k(Q t, int kk) {
  const int64_t legacy_k[] = {32, 96, 576, 4096, 14336};
  const int64_t kquant_k[] = {256, 768, 4096, 14336, 14336};
  return t == Q::Q4_K || t == Q::Q5_K || t == Q::Q6_K ? kquant_k[kk] : legacy_k[kk];
}

class QuantGemvShapeTest : public QuantGemvTest, public ::testing::WithParamInterface<std::tuple<Q, int, int>> {};

TEST_P(QuantGemvShapeTest, MatchesFp64Reference) {
  const auto [t, n, kk] = GetParam();
  const bool kq = t == Q::Q4_K || t == Q::Q5_K || t == Q::Q6_K;
  // K index kk into the type's row lengths (the K-quants need multiples of 256).
  if (kq && kk == 4) GTEST_SKIP() << "K-quants have four row lengths";
  const HostProblem hp(t, n, shape_k(t, kk));
  const double worst = check_all(hp, 0);
  std::cout << "[ qgemv   ] " << hp.name() << ": worst relative L2 error " << worst << "\n";
}

INSTANTIATE_TEST_SUITE_P(Shapes, QuantGemvShapeTest,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes), ::testing::Values(1, 7, 1000, 4096),
                                            ::testing::Values(0, 1, 2, 3, 4)),
                         [](const ::testing::TestParamInfo<std::tuple<Q, int, int>>& info) {
                           return std::string(ggml_quant_name(std::get<0>(info.param))) + "_N" +
                                  std::to_string(std::get<1>(info.param)) + "_K" +
                                  std::to_string(shape_k(std::get<0>(info.param), std::get<2>(info.param))) +
                                  (std::get<2>(info.param) == 4 ? "_" : "");
                         });

// The RMSNorm fold (kernels/gemv/gemv_epilogue.h) in every quantized form, as producer and consumer: one-level and
// two-level types, one row, rows not a multiple of the row group, split-K plans and more rows than one wave.
TEST_F(QuantGemvTest, RmsNormFoldEpilogue) {
  for (Q t : {Q::Q4_0, Q::Q8_0, Q::Q4_K, Q::Q6_K}) {
    for (int n : {1, 7, 1000, 4099}) {
      const HostProblem hp(t, n, shape_k(t, n == 4099 ? 3 : 1));
      DeviceProblem p(hp, stream_);
      p.upload_x(0, stream_);
      for (QuantGemvKind kind : kAllKinds) {
        SCOPED_TRACE(hp.name() + " mapping " + quant_gemv_kind_name(kind));
        const std::vector<double>& dot = hp.want(kind, false);
        llm_test::check_rmsnorm_fold(int(hp.n), dot, hp.y0, hp.ref_abs, p.d_y(0), stream_, kTol,
                                     test_seed() + uint64_t(n), [&](float* y, bool acc, const GemvEpilogue& ep) {
                                       quant_gemv_launch(kind, p.w, p.d_x(0), y, acc, stream_, ep);
                                     });
      }
    }
  }
}

// The lm_head shape of Llama 3: 128,256 x 4,096 (Q4_0 and Q8_0: quantized here in parallel, ~0.5 GB each on the GPU).
TEST_F(QuantGemvTest, LargeHeadShape) {
  for (Q t : {Q::Q4_0, Q::Q8_0}) {
    const HostProblem hp(t, 128256, 4096);
    const double worst = check_all(hp, 0);
    std::cout << "[ qgemv   ] " << hp.name() << ": worst relative L2 error " << worst << "\n";
  }
}

// Rows longer than "warp" stages in shared memory (k * 4 bytes > half of an SM's 227 KiB): x read from global memory
// instead; and "warp-dp4a" with its int8 x past the default 48 KiB of shared memory (opt-in).
TEST_F(QuantGemvTest, LongRowsBeyondTheSharedMemoryStaging) {
  for (Q t : {Q::Q4_0, Q::Q8_0, Q::Q4_K}) {
    for (int64_t k : {int64_t(30720), int64_t(40960)}) {
      ASSERT_GT(quant_x_smem_bytes_f32(k), kQuantMaxSmemBytes / kQuantWarpMinBlocks);
      const HostProblem hp(t, 7, k);
      for (int offset : {0, 1}) check_all(hp, offset);
    }
  }
  ASSERT_GT(quant_x_smem_bytes(40960), 48 * 1024);
}

// x and y at 4-byte (not 16-byte) alignment, as a slice of a larger activation buffer would be.
TEST_F(QuantGemvTest, MisalignedXAndY) {
  for (Q t : kAllTypes) {
    const bool kq = t == Q::Q4_K || t == Q::Q5_K || t == Q::Q6_K;
    const HostProblem hp(t, 1000, kq ? 768 : 576);
    check_all(hp, 1);
  }
}

// The device agrees with the host emulation of the same lane code (a check of the kernels' launch and reduction).
TEST_F(QuantGemvTest, DeviceMatchesHostEmulation) {
  for (Q t : kAllTypes) {
    const HostProblem hp(t, 130, 4096);
    DeviceProblem p(hp, stream_);
    for (QuantGemvKind kind : kAllKinds) {
      const std::vector<float> emu = emulate(kind, hp.host_weight(), hp.x.data(), nullptr, false);
      std::vector<double> want(emu.begin(), emu.end());
      const double err = p.run(false, 0, stream_, [&](const float* x, float* y) {
        quant_gemv_launch(kind, p.w, x, y, false, stream_);
      }, &want);
      EXPECT_LE(err, 1e-5) << hp.name() << " " << quant_gemv_kind_name(kind);
    }
  }
}

// Same inputs, same bits: split-K partials are combined in a fixed order, never with atomics.
TEST_F(QuantGemvTest, Deterministic) {
  for (Q t : {Q::Q4_0, Q::Q4_K, Q::Q6_K}) {
    const HostProblem hp(t, 7, 14336);  // split-K in warp and as-stored
    DeviceProblem p(hp, stream_);
    p.upload_x(0, stream_);
    for (QuantGemvKind kind : kAllKinds) {
      std::vector<float> first(size_t(hp.n)), again(size_t(hp.n));
      for (std::vector<float>* out : {&first, &again}) {
        CUDA_CHECK(cudaMemsetAsync(p.d_y(0), 0xFF, size_t(hp.n) * 4, stream_));
        quant_gemv_launch(kind, p.w, p.d_x(0), p.d_y(0), false, stream_);
        CUDA_CHECK(cudaMemcpyAsync(out->data(), p.d_y(0), size_t(hp.n) * 4, cudaMemcpyDeviceToHost, stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
      }
      EXPECT_EQ(std::memcmp(first.data(), again.data(), size_t(hp.n) * 4), 0) << quant_gemv_kind_name(kind);
    }
  }
}

// Two GEMVs back to back, the second reading the first's output, on the stream and captured in a CUDA graph: catches
// a mapping that reads x before its predecessor has finished ("warp" starts early by design: PDL).
TEST_F(QuantGemvTest, BackToBackLaunchesSeeThePreviousOutput) {
  const int n = 4096;
  const HostProblem second(Q::Q4_0, n, n);
  // The first GEMV: Q8_0 with one code 1 (scale 1) per row: mid[r] = x[(7r + 3) % n], exact.
  std::vector<uint8_t> blocks(ggml_quant_row_bytes(Q::Q8_0, n) * size_t(n), 0);
  std::vector<float> mid_want(static_cast<size_t>(n));
  const size_t row_bytes = ggml_quant_row_bytes(Q::Q8_0, n);
  for (int r = 0; r < n; ++r) {
    const int src = int((7ll * r + 3) % n);
    uint8_t* blk = blocks.data() + size_t(r) * row_bytes + size_t(src / 32) * ggml_quant_block_bytes(Q::Q8_0);
    put_f16(blk, 1.0f);
    blk[2 + src % 32] = 1;
    mid_want[size_t(r)] = second.x[size_t(src)];
  }
  const PackedQuant first_packed = pack_quant(blocks.data(), Q::Q8_0, n, n, "first");
  const QuantGemvWeight a = quant_gemv_upload(describe(first_packed, blocks), stream_);
  DeviceProblem p(second, stream_);
  const std::vector<double> want = packed_gemv_ref(second.packed, mid_want.data());
  // warp-dp4a: the first GEMV's output is exact (codes 1, scale 1 on rounded x: xr), the second rounds it again.
  const RoundedX first_r = round_activations(second.x);
  std::vector<float> mid_dp4a(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) mid_dp4a[size_t(r)] = first_r.value[size_t((7ll * r + 3) % n)];
  const std::vector<double> want_dp4a = packed_gemv_ref(second.packed, round_activations(mid_dp4a).value.data());
  float* d_mid = nullptr;
  CUDA_CHECK(cudaMalloc(&d_mid, size_t(n) * 4));
  p.upload_x(0, stream_);
  for (QuantGemvKind kind : kAllKinds) {
    auto both = [&] {
      quant_gemv_launch(kind, a, p.d_x(0), d_mid, false, stream_);
      quant_gemv_launch(kind, p.w, d_mid, p.d_y(0), false, stream_);
    };
    for (bool graph : {false, true}) {
      SCOPED_TRACE(std::string("mapping ") + quant_gemv_kind_name(kind) + (graph ? ", CUDA graph" : ", stream"));
      CUDA_CHECK(cudaMemsetAsync(d_mid, 0xFF, size_t(n) * 4, stream_));
      CUDA_CHECK(cudaMemsetAsync(p.d_y(0), 0xFF, size_t(n) * 4, stream_));
      if (graph) {
        cudaGraph_t g = nullptr;
        cudaGraphExec_t exec = nullptr;
        CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        both();
        CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
        CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
        CUDA_CHECK(cudaGraphLaunch(exec, stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        CUDA_CHECK(cudaGraphExecDestroy(exec));
        CUDA_CHECK(cudaGraphDestroy(g));
      } else {
        both();
      }
      std::vector<float> got(static_cast<size_t>(n));
      CUDA_CHECK(cudaMemcpyAsync(got.data(), p.d_y(0), size_t(n) * 4, cudaMemcpyDeviceToHost, stream_));
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      const double err =
          relative_l2_error(got.data(), kind == QuantGemvKind::WarpDp4a ? want_dp4a : want, second.ref_abs);
      EXPECT_LE(err, kTol) << "relative L2 error " << err;
    }
  }
  QuantGemvWeight a_owned = a;
  quant_gemv_free(&a_owned);
  cudaFree(d_mid);
}

// ---- negative controls: the same check must fail on broken weights or layouts ----------------------------------------

// One weight perturbed (one code changed) in what is uploaded: every mapping must fail the check at N = 1, K = 32.
TEST_F(QuantGemvTest, NegativeControlPerturbedWeightFails) {
  for (Q t : {Q::Q4_0, Q::Q8_0}) {
    const HostProblem hp(t, 1, 32);
    HostProblem bad = hp;
    const int j = loudest_low_weight(hp.x);  // code moves by 4..12 (Q4_0 low nibble) or 16..112 (Q8_0)
    bad.packed.codes[size_t(j)] ^= (t == Q::Q4_0 ? 0x0C : 0x70);
    bad.blocks[size_t(2 + j)] ^= (t == Q::Q4_0 ? 0x0C : 0x70);  // the same weight as stored (qs starts at byte 2)
    DeviceProblem p(bad, stream_);  // run against hp's reference
    for (QuantGemvKind kind : kAllKinds) {
      const double err = p.run(false, 0, stream_, [&](const float* x, float* y) {
        quant_gemv_launch(kind, p.w, x, y, false, stream_);
      }, &hp.want(kind, false));
      EXPECT_GT(err, kLooseTol) << ggml_quant_name(t) << " " << quant_gemv_kind_name(kind)
                                << ": a perturbed weight passed the check";
      std::cout << "[ qgemv   ] perturbed " << ggml_quant_name(t) << " weight, " << quant_gemv_kind_name(kind)
                << ": relative L2 error " << err << "\n";
    }
  }
}

// Layout mistakes a kernel could make: nibbles swapped (Int4), a scale of the wrong group, every row's scales taken
// from the next super-block (Q4_K). The reference stays the true one; the check must fail.
TEST_F(QuantGemvTest, NegativeControlLayoutMistakesFail) {
  {
    const HostProblem hp(Q::Q4_0, 1000, 4096);
    HostProblem bad = hp;
    for (auto& b : bad.packed.codes) b = uint8_t((b >> 4) | (b << 4));
    DeviceProblem p(bad, stream_);
    const double err = p.run(false, 0, stream_, [&](const float* x, float* y) {
      quant_gemv_launch(QuantGemvKind::Warp, p.w, x, y, false, stream_);
    }, &hp.ref);
    EXPECT_GT(err, kLooseTol) << "swapped nibbles passed";
    std::cout << "[ qgemv   ] Q4_0 nibbles swapped: relative L2 error " << err << "\n";
  }
  {
    const HostProblem hp(Q::Q8_0, 1000, 4096);
    HostProblem bad = hp;
    for (int64_t r = 0; r < bad.n; ++r)  // group g takes group g+1's scale
      for (int64_t g = 0; g + 1 < bad.packed.n_groups; ++g)
        bad.packed.scales[size_t(r * bad.packed.ld_groups + g)] = hp.packed.scales[size_t(r * hp.packed.ld_groups + g + 1)];
    DeviceProblem p(bad, stream_);
    const double err = p.run(false, 0, stream_, [&](const float* x, float* y) {
      quant_gemv_launch(QuantGemvKind::Warp, p.w, x, y, false, stream_);
    }, &hp.ref);
    EXPECT_GT(err, kLooseTol) << "shifted scales passed";
    std::cout << "[ qgemv   ] Q8_0 scales shifted by one group: relative L2 error " << err << "\n";
  }
  {
    const HostProblem hp(Q::Q4_K, 1000, 4096);
    HostProblem bad = hp;
    for (int64_t r = 0; r < bad.n; ++r)
      for (int64_t s = 0; s + 1 < bad.k / 256; ++s) {  // the head's first two bytes (fp16 d)
        const size_t i = size_t(r * bad.packed.ld_heads + 16 * s);
        bad.packed.k_heads[i] = hp.packed.k_heads[i + 16];
        bad.packed.k_heads[i + 1] = hp.packed.k_heads[i + 17];
      }
    DeviceProblem p(bad, stream_);
    const double err = p.run(false, 0, stream_, [&](const float* x, float* y) {
      quant_gemv_launch(QuantGemvKind::Warp, p.w, x, y, false, stream_);
    }, &hp.ref);
    EXPECT_GT(err, kLooseTol) << "super-block d of the next super-block passed";
    std::cout << "[ qgemv   ] Q4_K d from the next super-block: relative L2 error " << err << "\n";
  }
}

// A mapping whose planes were not uploaded is refused by name, before any launch.
TEST_F(QuantGemvTest, RefusesMissingPlanesByName) {
  const HostProblem hp(Q::Q4_0, 64, 256);
  QuantGemvWeight host = hp.host_weight();
  host.blocks = nullptr;  // prepacked planes only
  QuantGemvWeight w = quant_gemv_upload(host, stream_);
  float* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, 4096 * 4));
  try {
    quant_gemv_launch(QuantGemvKind::AsStored, w, d, d + 1024, false, stream_);
    ADD_FAILURE() << "as-stored ran without its blocks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("as-stored"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(quant_gemv_launch(QuantGemvKind::Warp, w, d, d + 1024, false, stream_));
  EXPECT_NO_THROW(quant_gemv_launch(QuantGemvKind::WarpDp4a, w, d, d + 1024, false, stream_));  // x quantized in-kernel
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  cudaFree(d);
  quant_gemv_free(&w);
  EXPECT_EQ(w.codes, nullptr);
}


// ---- the batch-k GEMV (kernels/quant/gemv_quant_batch.h) -------------------------------------------------------------

// nb activation vectors through quant_batch_quantize_x (FP32 or BF16 rows, pitch k + 8) and quant_batch_gemv_launch
// over rows [row0, row0 + rows) into poisoned y with a pitch wider than the rows, then again with y += W x: every
// vector's rows against the FP64 reference on that vector rounded as warp-dp4a rounds its x (the same int8 form, bit
// for bit: checked), and nothing outside the slice written. A vector's result compared with another vector's
// reference must fail (the vectors are not mixed up). fma: the FP32 rows straight into quant_batch_gemv_f32_launch
// (the "warp" form's arithmetic), against the reference on the unrounded x.
void check_batch(Q t, int64_t n, int64_t k, int nb, bool bf16, int64_t row0, int64_t rows, cudaStream_t stream,
                 int rows_per_block = kQuantBatchRows, bool fma = false,
                 QuantBatchKernel kernel = QuantBatchKernel::kAuto) {
  if (fma) bf16 = false;
  const char* kname = kernel == QuantBatchKernel::kMma ? " mma" : kernel == QuantBatchKernel::kDp4a ? " dp4a" : " auto";
  SCOPED_TRACE(std::string(ggml_quant_name(t)) + " N=" + std::to_string(n) + " K=" + std::to_string(k) + " nb=" +
               std::to_string(nb) + (fma ? " f32 x, FMA kernel" : bf16 ? " bf16 x" : " f32 x") + kname + " rows [" +
               std::to_string(row0) + ", " +
               std::to_string(row0 + rows) + ") " + std::to_string(rows_per_block) + " rows per block");
  const uint64_t seed = rng_mix(test_seed() ^ (uint64_t(n) << 24) ^ uint64_t(k) ^ (uint64_t(t) << 50) ^ 0xba7c);
  const std::vector<uint8_t> blocks = random_blocks(t, n, k, seed);
  const PackedQuant packed = pack_quant(blocks.data(), t, n, k, "test");
  QuantGemvWeight host = describe(packed, blocks);
  host.blocks = nullptr;  // the batch GEMV reads the prepacked planes only
  QuantGemvWeight w = quant_gemv_upload(host, stream);
  const int64_t ldx = k + 8, ldy = rows + 5;
  // x: FP32 values (BF16-representable when bf16, so both forms carry the same numbers).
  std::vector<float> x(size_t(nb) * size_t(ldx), std::nanf(""));
  std::vector<uint16_t> xb(x.size(), 0xFFFFu);
  for (int b = 0; b < nb; ++b)
    for (int64_t j = 0; j < k; ++j) {
      float v = rng_value(seed, 3 + uint64_t(b), uint64_t(j), -1.0f, 1.0f) * (j % 97 == 5 ? 8.0f : 1.0f);
      if (bf16) v = round_bf16(v);
      x[size_t(b) * size_t(ldx) + size_t(j)] = v;
      xb[size_t(b) * size_t(ldx) + size_t(j)] = f32_to_bf16(v);
    }
  std::vector<double> wd(size_t(rows) * size_t(k));
  parallel_for(size_t(rows), [&](size_t b0, size_t e) {
    for (size_t r = b0; r < e; ++r)
      for (int64_t j = 0; j < k; ++j) wd[r * size_t(k) + size_t(j)] = packed_weight(packed, row0 + int64_t(r), j);
  });
  std::vector<RoundedX> xr;
  std::vector<std::vector<double>> ref(static_cast<size_t>(nb)), scale(static_cast<size_t>(nb));
  for (int b = 0; b < nb; ++b) {
    xr.push_back(round_activations(std::vector<float>(x.begin() + b * ldx, x.begin() + b * ldx + k)));
    ref[size_t(b)].resize(size_t(rows));
    scale[size_t(b)].resize(size_t(rows));
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0.0, a = 0.0;
      for (int64_t j = 0; j < k; ++j) {
        s += wd[size_t(r * k + j)] * (fma ? double(x[size_t(b * ldx + j)]) : double(xr.back().value[size_t(j)]));
        a += std::fabs(wd[size_t(r * k + j)] * double(x[size_t(b * ldx + j)]));
      }
      ref[size_t(b)][size_t(r)] = s;
      scale[size_t(b)][size_t(r)] = a;
    }
  }
  void* d_x = nullptr;
  void* d_xq = nullptr;
  float* d_y = nullptr;
  const size_t xbytes = bf16 ? xb.size() * 2 : x.size() * 4;
  const size_t ysize = size_t(nb) * size_t(ldy) + 1;
  CUDA_CHECK(cudaMalloc(&d_x, xbytes));
  CUDA_CHECK(cudaMalloc(&d_xq, size_t(quant_batch_x_bytes(nb, k))));
  CUDA_CHECK(cudaMalloc(&d_y, ysize * 4));
  CUDA_CHECK(cudaMemcpyAsync(d_x, bf16 ? static_cast<const void*>(xb.data()) : static_cast<const void*>(x.data()),
                             xbytes, cudaMemcpyHostToDevice, stream));
  quant_batch_quantize_x(d_x, bf16, ldx, nb, k, d_xq, stream);
  // The int8 form, bit for bit the host's quant_x_q8_block.
  std::vector<unsigned char> xq(size_t(quant_batch_x_bytes(nb, k)));
  CUDA_CHECK(cudaMemcpyAsync(xq.data(), d_xq, xq.size(), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  for (int b = 0; b < nb; ++b) {
    const unsigned char* base = xq.data() + b * quant_batch_x_stride(k);
    EXPECT_EQ(std::memcmp(base, xr[size_t(b)].q.data(), size_t(k)), 0) << "int8 q of vector " << b;
    EXPECT_EQ(std::memcmp(base + quant_x_smem_offset_d(k), xr[size_t(b)].d.data(), size_t(k / 32) * 4), 0)
        << "d of vector " << b;
    EXPECT_EQ(std::memcmp(base + quant_x_smem_offset_s16(k), xr[size_t(b)].s16.data(), size_t(k / 16) * 4), 0)
        << "sums of vector " << b;
  }
  std::vector<float> y0(ysize);
  for (size_t i = 0; i < ysize; ++i) y0[i] = rng_value(seed, 99, i, -2.0f, 2.0f);
  for (bool accumulate : {false, true}) {
    std::vector<float> y(ysize);
    if (accumulate)
      y = y0;
    else
      std::fill(y.begin(), y.end(), std::nanf(""));
    CUDA_CHECK(cudaMemcpyAsync(d_y, y.data(), ysize * 4, cudaMemcpyHostToDevice, stream));
    if (fma)
      quant_batch_gemv_f32_launch(w, row0, rows, static_cast<const float*>(d_x), ldx, nb, d_y, ldy, accumulate, stream,
                                  rows_per_block);
    else
      quant_batch_gemv_launch(w, row0, rows, d_xq, nb, d_y, ldy, accumulate, stream, rows_per_block, kernel);
    std::vector<float> got(ysize);
    CUDA_CHECK(cudaMemcpyAsync(got.data(), d_y, ysize * 4, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    double worst = 0.0;
    for (int b = 0; b < nb; ++b) {
      std::vector<float> mine(static_cast<size_t>(rows));
      std::vector<double> want(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        const size_t i = size_t(b) * size_t(ldy) + size_t(r);
        mine[size_t(r)] = accumulate ? float(double(got[i]) - double(y0[i])) : got[i];
        want[size_t(r)] = ref[size_t(b)][size_t(r)];
      }
      const double err = relative_l2_error(mine.data(), want, scale[size_t(b)]);
      EXPECT_LE(err, accumulate ? 1e-3 : kTol) << "vector " << b << (accumulate ? " y += Wx" : " y = Wx");
      worst = std::max(worst, err);
      if (nb > 1 && rows >= 8) {  // negative control: another vector's reference
        const double wrong = relative_l2_error(mine.data(), ref[size_t((b + 1) % nb)], scale[size_t(b)]);
        EXPECT_GT(wrong, kLooseTol) << "vector " << b << " matched vector " << (b + 1) % nb << "'s reference";
      }
      for (int64_t r = rows; r < ldy && b * ldy + r < int64_t(ysize); ++r) {  // the pitch's gap is untouched
        const size_t i = size_t(b) * size_t(ldy) + size_t(r);
        uint32_t gb, wb;
        std::memcpy(&gb, &got[i], 4);
        std::memcpy(&wb, &y[i], 4);
        if (gb != wb) {
          ADD_FAILURE() << "vector " << b << ": wrote y[" << r << "] past the " << rows << " rows";
          break;
        }
      }
    }
    uint32_t last_g, last_w;
    std::memcpy(&last_g, &got[ysize - 1], 4);
    std::memcpy(&last_w, &y[ysize - 1], 4);
    EXPECT_EQ(last_g, last_w) << "wrote past the last vector";
    if (!accumulate)
      std::cout << "[ qbatch  ] " << (fma ? "FP32 x: " : "") << kname << " worst relative L2 error " << worst << "\n";
  }
  cudaFree(d_x);
  cudaFree(d_xq);
  cudaFree(d_y);
  quant_gemv_free(&w);
}

TEST_F(QuantGemvTest, BatchMatchesFp64ReferenceForEveryVectorCount) {
  using K = QuantBatchKernel;
  for (Q t : kAllTypes) {
    const bool kq = t == Q::Q4_K || t == Q::Q5_K || t == Q::Q6_K;
    const int64_t k_small = kq ? 256 : 96, k_mid = kq ? 768 : 576;
    for (int nb : {1, 2, 3, 8, 16}) {
      check_batch(t, 1, k_small, nb, nb % 2 == 1, 0, 1, stream_, kQuantBatchRows, false, K::kDp4a);
      check_batch(t, 13, k_mid, nb, nb % 2 == 0, 0, 13, stream_, kQuantBatchRows, false, K::kDp4a);
      check_batch(t, 203, 4096, nb, nb >= 8, 5, 190, stream_, kQuantBatchRows, false, K::kDp4a);  // rows [5, 195)
      check_batch(t, 13, k_mid, nb, nb % 2 == 1, 2, 11, stream_, kQuantBatchRows == 4 ? 8 : 4, false, K::kDp4a);
      check_batch(t, 13, k_mid, nb, nb % 2 == 1, 2, 11, stream_);  // whichever kAuto picks
    }
  }
}

// The tensor-core kernel: every type, vector counts across its tiles of 8 (1, 2, 7, 8, 9, 16, 24, 35, 64: one to
// eight tiles in one launch; 70 in two launches), rows not a multiple of its 16 (1, 13, 17, a slice of 203), K slices
// with a partial step of 4 chunks (k = 96: 3 Int4 chunks, one warp) and long rows (14336: 8 warps of 56 Int4 chunks).
TEST_F(QuantGemvTest, BatchMmaMatchesFp64ReferenceForEveryVectorCount) {
  using K = QuantBatchKernel;
  for (Q t : kAllTypes) {
    const bool kq = t == Q::Q4_K || t == Q::Q5_K || t == Q::Q6_K;
    const int64_t k_small = kq ? 256 : 96, k_mid = kq ? 768 : 576;
    for (int nb : {1, 2, 7, 8, 9, 16}) {
      check_batch(t, 1, k_small, nb, nb % 2 == 1, 0, 1, stream_, kQuantBatchRows, false, K::kMma);
      check_batch(t, 17, k_mid, nb, nb % 2 == 0, 0, 17, stream_, kQuantBatchRows, false, K::kMma);
      check_batch(t, 203, 4096, nb, nb >= 8, 5, 190, stream_, kQuantBatchRows, false, K::kMma);
    }
    check_batch(t, 13, 14336, 5, false, 0, 13, stream_, kQuantBatchRows, false, K::kMma);
    check_batch(t, 37, k_mid, 24, false, 0, 37, stream_, kQuantBatchRows, false, K::kMma);
    check_batch(t, 37, k_mid, 35, true, 3, 30, stream_, kQuantBatchRows, false, K::kMma);
    check_batch(t, 70, 4096, 64, true, 0, 70, stream_, kQuantBatchRows, false, K::kMma);
    check_batch(t, 19, k_mid, 70, false, 1, 18, stream_, kQuantBatchRows, false, K::kMma);
  }
}

// The FP32-x kernel ("warp"'s arithmetic, what a verify on that form runs): every type, vector count class and slice.
TEST_F(QuantGemvTest, BatchFp32MatchesFp64ReferenceForEveryVectorCount) {
  for (Q t : kAllTypes) {
    const bool kq = t == Q::Q4_K || t == Q::Q5_K || t == Q::Q6_K;
    const int64_t k_small = kq ? 256 : 96, k_mid = kq ? 768 : 576;
    for (int nb : {1, 3, 8, 9, 16, 20}) {
      check_batch(t, 1, k_small, nb, false, 0, 1, stream_, kQuantBatchRows, true);
      check_batch(t, 203, 4096, nb, false, 5, 190, stream_, kQuantBatchRows, true);
      check_batch(t, 13, k_mid, nb, false, 2, 11, stream_, kQuantBatchRows == 4 ? 8 : 4, true);
    }
  }
  check_batch(Q::Q4_K, 37, 14336, 5, false, 0, 37, stream_, kQuantBatchRows, true);
}

TEST_F(QuantGemvTest, BatchLongRowsAndRefusals) {
  check_batch(Q::Q4_0, 64, 14336, 16, true, 0, 64, stream_);
  check_batch(Q::Q4_K, 37, 14336, 5, false, 0, 37, stream_);
  // More vectors than one launch takes (kQuantBatchMax): the launcher splits them, each launch at its vectors.
  check_batch(Q::Q8_0, 37, 576, 20, true, 3, 30, stream_);
  check_batch(Q::Q4_1, 13, 96, 35, false, 0, 13, stream_);
  const HostProblem hp(Q::Q4_0, 64, 256);
  QuantGemvWeight host = hp.host_weight();
  host.codes = nullptr;  // no prepacked planes
  QuantGemvWeight w = quant_gemv_upload(host, stream_);
  EXPECT_FALSE(quant_batch_supported(w));
  void* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, 1 << 20));
  auto refused = [&](auto fn, const char* needle) {
    try {
      fn();
      ADD_FAILURE() << "not refused: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused([&] { quant_batch_gemv_launch(w, 0, 64, d, 2, static_cast<float*>(d), 64, false, stream_); }, "Q4_0");
  QuantGemvWeight ok = quant_gemv_upload(hp.host_weight(), stream_);
  refused([&] { quant_batch_gemv_launch(ok, 0, 64, d, 0, static_cast<float*>(d), 64, false, stream_); }, "0 vectors");
  refused([&] { quant_batch_gemv_launch(ok, 60, 8, d, 2, static_cast<float*>(d), 64, false, stream_); }, "68");
  const float* xf = static_cast<const float*>(d);
  refused([&] { quant_batch_gemv_f32_launch(ok, 0, 64, xf, 255, 2, static_cast<float*>(d), 64, false, stream_); },
          "pitch >= k");  // ldx < k
  refused([&] { quant_batch_gemv_f32_launch(ok, 0, 64, xf + 1, 256, 2, static_cast<float*>(d), 64, false, stream_); },
          "16-byte aligned");
  refused([&] { quant_batch_gemv_f32_launch(w, 0, 64, xf, 256, 2, static_cast<float*>(d), 64, false, stream_); },
          "Q4_0");
  refused([&] { quant_batch_quantize_x(d, false, 256, 0, 256, d, stream_); }, "0 vectors");
  refused([&] { quant_batch_quantize_x(d, false, 256, 2, 250, d, stream_); }, "250");
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  cudaFree(d);
  quant_gemv_free(&w);
  quant_gemv_free(&ok);
}


// The SwiGLU's int8 form (quant_batch_swiglu_x): bit for bit ops' swiglu followed by the FP32 x pass, for one vector
// and for three rows of a pitched [gate | up]; its FP32 output bit for bit swiglu's; nothing written past either
// output. Then warp-dp4a given that form (GemvEpilogue::x_q8: the decode step's down GEMV) gives bit for bit the y it
// computes quantizing x itself, for every type on awkward and long rows; a form of another x changes y (the
// negative control: the hint is what the kernel reads).
TEST_F(QuantGemvTest, SwigluXFormFeedsWarpDp4aBitForBit) {
  const uint64_t seed = rng_mix(test_seed() ^ 0x5719u);
  for (Q t : kAllTypes) {
    const bool kq = t == Q::Q4_K || t == Q::Q5_K || t == Q::Q6_K;
    for (const auto& shape : {std::pair<int64_t, int64_t>{130, kq ? 256 : 96}, {37, 4096}, {1000, 14336}}) {
      const int64_t n = shape.first, k = shape.second;
      SCOPED_TRACE(std::string(ggml_quant_name(t)) + " N=" + std::to_string(n) + " K=" + std::to_string(k));
      const int nb = 3;
      const int64_t ldgu = 2 * k + 32, form = quant_batch_x_stride(k), guard = 256;
      std::vector<float> gu(size_t(nb * ldgu));
      for (size_t i = 0; i < gu.size(); ++i) gu[i] = rng_value(seed, uint64_t(t), i + uint64_t(k), 0.0f, 6.0f);
      float *d_gu = nullptr, *d_h = nullptr, *d_h2 = nullptr;
      unsigned char *d_xq = nullptr, *d_xq2 = nullptr;
      CUDA_CHECK(cudaMalloc(&d_gu, gu.size() * 4));
      CUDA_CHECK(cudaMalloc(&d_h, size_t(nb * k) * 4));
      CUDA_CHECK(cudaMalloc(&d_h2, size_t(nb * k + guard) * 4));
      CUDA_CHECK(cudaMalloc(&d_xq, size_t(nb * form)));
      CUDA_CHECK(cudaMalloc(&d_xq2, size_t(nb * form + guard)));
      CUDA_CHECK(cudaMemcpyAsync(d_gu, gu.data(), gu.size() * 4, cudaMemcpyHostToDevice, stream_));
      CUDA_CHECK(cudaMemsetAsync(d_h2, 0xFF, size_t(nb * k + guard) * 4, stream_));
      CUDA_CHECK(cudaMemsetAsync(d_xq, 0xFF, size_t(nb * form), stream_));
      CUDA_CHECK(cudaMemsetAsync(d_xq2, 0xFF, size_t(nb * form + guard), stream_));
      for (int b = 0; b < nb; ++b) swiglu(d_gu + b * ldgu, d_gu + b * ldgu + k, d_h + b * k, size_t(k), stream_);
      quant_batch_quantize_x(d_h, false, k, nb, k, d_xq, stream_);
      quant_batch_swiglu_x(d_gu, ldgu, nb, k, d_h2, k, d_xq2, stream_);
      std::vector<float> h(size_t(nb * k)), h2(size_t(nb * k + guard));
      std::vector<unsigned char> xq(size_t(nb * form)), xq2(size_t(nb * form + guard));
      CUDA_CHECK(cudaMemcpyAsync(h.data(), d_h, h.size() * 4, cudaMemcpyDeviceToHost, stream_));
      CUDA_CHECK(cudaMemcpyAsync(h2.data(), d_h2, h2.size() * 4, cudaMemcpyDeviceToHost, stream_));
      CUDA_CHECK(cudaMemcpyAsync(xq.data(), d_xq, xq.size(), cudaMemcpyDeviceToHost, stream_));
      CUDA_CHECK(cudaMemcpyAsync(xq2.data(), d_xq2, xq2.size(), cudaMemcpyDeviceToHost, stream_));
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      EXPECT_EQ(std::memcmp(h.data(), h2.data(), h.size() * 4), 0) << "SwiGLU output differs from swiglu's";
      for (int b = 0; b < nb; ++b)  // each vector's form (the stride's padding is not written by either)
        EXPECT_EQ(std::memcmp(xq.data() + b * form, xq2.data() + b * form, size_t(quant_x_smem_bytes(k))), 0)
            << "int8 form of vector " << b << " differs from the x pass over swiglu's output";
      for (int64_t i = 0; i < guard; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &h2[size_t(nb * k + i)], 4);
        EXPECT_EQ(bits, 0xFFFFFFFFu) << "write past h at " << i;
        EXPECT_EQ(xq2[size_t(nb * form + i)], 0xFFu) << "write past the int8 forms at " << i;
        if (bits != 0xFFFFFFFFu || xq2[size_t(nb * form + i)] != 0xFFu) break;
      }

      // warp-dp4a on vector 1 with and without its form; then with vector 2's form (must differ).
      const HostProblem hp(t, n, k);
      DeviceProblem p(hp, stream_);
      auto gemv = [&](const void* form_ptr) {
        GemvEpilogue ep;
        ep.x_q8 = form_ptr;
        CUDA_CHECK(cudaMemsetAsync(p.d_y(0), 0xFF, size_t(n) * 4, stream_));
        quant_gemv_launch(QuantGemvKind::WarpDp4a, p.w, d_h + k, p.d_y(0), false, stream_, ep);
        std::vector<float> y(static_cast<size_t>(n));
        CUDA_CHECK(cudaMemcpyAsync(y.data(), p.d_y(0), size_t(n) * 4, cudaMemcpyDeviceToHost, stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        return y;
      };
      const std::vector<float> plain = gemv(nullptr), hinted = gemv(d_xq2 + form), other = gemv(d_xq2 + 2 * form);
      EXPECT_EQ(std::memcmp(plain.data(), hinted.data(), size_t(n) * 4), 0) << "y with x's int8 form given";
      EXPECT_NE(std::memcmp(plain.data(), other.data(), size_t(n) * 4), 0) << "negative control: another x's form";
      for (float v : hinted) ASSERT_TRUE(std::isfinite(v));
      cudaFree(d_gu);
      cudaFree(d_h);
      cudaFree(d_h2);
      cudaFree(d_xq);
      cudaFree(d_xq2);
    }
  }
}

// The "warp" form's input forms (GemvEpilogue::glu, ::merge): x made as the blocks stage it gives y bit for bit as the
// kernel it replaces followed by the plain launch: SwiGLU of a [gate | up] row (swiglu_fused), and decode attention's
// key splits merged (attention_decode's merge kernel) at positions that make 1 to 16 splits, head_dim 64 and 128,
// groups 1, 3, 4 and 8. x itself is NaN (what a launch reading it would show); y = and y +=; negative controls (another
// row, another position's partials) differ; the other forms refuse an input form by name.
TEST_F(QuantGemvTest, WarpInputFormsAreBitForBitTheKernelsTheyReplace) {
  const uint64_t seed = rng_mix(test_seed() ^ 0x57a6u);
  float* d_nan = nullptr;  // x as the forms see it: never read
  CUDA_CHECK(cudaMalloc(&d_nan, size_t(16384) * 4));
  CUDA_CHECK(cudaMemsetAsync(d_nan, 0xFF, size_t(16384) * 4, stream_));
  auto fetch = [&](const float* d, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    CUDA_CHECK(cudaMemcpyAsync(v.data(), d, size_t(n) * 4, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return v;
  };
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  };
  // y (poisoned, or preset for y +=) = W x through "warp" with ep.
  auto gemv = [&](DeviceProblem& p, const float* x, bool acc, const GemvEpilogue& ep) {
    const int64_t n = p.h.n;
    CUDA_CHECK(cudaMemsetAsync(p.d_y(0), 0xFF, size_t(n) * 4, stream_));
    if (acc) CUDA_CHECK(cudaMemcpyAsync(p.d_y(0), p.h.y0.data(), size_t(n) * 4, cudaMemcpyHostToDevice, stream_));
    quant_gemv_launch(QuantGemvKind::Warp, p.w, x, p.d_y(0), acc, stream_, ep);
    std::vector<float> y = fetch(p.d_y(0), n);
    for (float v : y) EXPECT_TRUE(std::isfinite(v));
    return y;
  };

  // SwiGLU: down's shapes (K = 1536, 14336) and awkward ones.
  for (Q t : kAllTypes) {
    const bool kq = t == Q::Q4_K || t == Q::Q5_K || t == Q::Q6_K;
    for (const auto& shape : {std::pair<int64_t, int64_t>{130, kq ? 256 : 96}, {577, 1536}, {37, 14336}}) {
      const int64_t n = shape.first, k = shape.second;
      SCOPED_TRACE(std::string("glu ") + ggml_quant_name(t) + " N=" + std::to_string(n) + " K=" + std::to_string(k));
      std::vector<float> gu(size_t(4 * k));  // two [gate | up] rows
      for (size_t i = 0; i < gu.size(); ++i) gu[i] = rng_value(seed, uint64_t(t), i + uint64_t(k), 0.0f, 6.0f);
      float *d_gu = nullptr, *d_h = nullptr;
      CUDA_CHECK(cudaMalloc(&d_gu, gu.size() * 4));
      CUDA_CHECK(cudaMalloc(&d_h, size_t(k) * 4));
      CUDA_CHECK(cudaMemcpyAsync(d_gu, gu.data(), gu.size() * 4, cudaMemcpyHostToDevice, stream_));
      swiglu_fused(d_gu, d_h, size_t(k), stream_);
      const HostProblem hp(t, n, k);
      DeviceProblem p(hp, stream_);
      for (bool acc : {false, true}) {
        GemvEpilogue ep;
        const std::vector<float> want = gemv(p, d_h, acc, ep);
        ep.glu = d_gu;
        EXPECT_TRUE(same(gemv(p, d_nan, acc, ep), want)) << (acc ? "y +=" : "y =") << ": SwiGLU staged";
        ep.glu = d_gu + 2 * k;
        EXPECT_FALSE(same(gemv(p, d_nan, acc, ep), want)) << "negative control: the other row";
      }
      GemvEpilogue ep;
      ep.glu = d_gu;
      for (QuantGemvKind other : {QuantGemvKind::WarpDp4a, QuantGemvKind::Thread, QuantGemvKind::AsStored})
        EXPECT_THROW(quant_gemv_launch(other, p.w, d_h, p.d_y(0), false, stream_, ep), Error)
            << quant_gemv_kind_name(other);
      ep.merge.part_o = d_h;  // two forms at once
      EXPECT_THROW(quant_gemv_launch(QuantGemvKind::Warp, p.w, d_h, p.d_y(0), false, stream_, ep), Error);
      cudaFree(d_gu);
      cudaFree(d_h);
    }
  }

  // The split merge: o's shapes (K = n_heads * head_dim).
  struct Attn {
    int heads, kv_heads, head_dim;
  };
  const int max_ctx = 2048;
  for (const Attn a : {Attn{9, 3, 64}, Attn{32, 8, 128}, Attn{8, 8, 64}, Attn{32, 4, 128}}) {
    const int64_t k = int64_t(a.heads) * a.head_dim, kv_dim = int64_t(a.kv_heads) * a.head_dim;
    std::vector<uint16_t> cache(size_t(max_ctx) * kv_dim * 2);
    for (size_t i = 0; i < cache.size(); ++i) cache[i] = f32_to_bf16(rng_value(seed, 77, i, -1.0f, 2.0f));
    std::vector<float> q(static_cast<size_t>(k));
    for (size_t i = 0; i < q.size(); ++i) q[i] = rng_value(seed, 78, i, -1.0f, 2.0f);
    uint16_t* d_cache = nullptr;
    float *d_q = nullptr, *d_att = nullptr;
    int* d_pos = nullptr;
    void *d_scratch = nullptr, *d_scratch2 = nullptr;
    const size_t scratch = attention_decode_scratch_bytes(a.heads, a.head_dim, max_ctx);
    CUDA_CHECK(cudaMalloc(&d_cache, cache.size() * 2));
    CUDA_CHECK(cudaMalloc(&d_q, q.size() * 4));
    CUDA_CHECK(cudaMalloc(&d_att, q.size() * 4));
    CUDA_CHECK(cudaMalloc(&d_pos, 4));
    CUDA_CHECK(cudaMalloc(&d_scratch, scratch));
    CUDA_CHECK(cudaMalloc(&d_scratch2, scratch));
    CUDA_CHECK(cudaMemcpyAsync(d_cache, cache.data(), cache.size() * 2, cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaMemcpyAsync(d_q, q.data(), q.size() * 4, cudaMemcpyHostToDevice, stream_));
    const uint16_t* kc = d_cache;
    const uint16_t* vc = d_cache + size_t(max_ctx) * kv_dim;
    for (Q t : {Q::Q4_0, Q::Q4_1, Q::Q8_0, Q::Q4_K, Q::Q6_K}) {
      const bool kq = t == Q::Q4_K || t == Q::Q5_K || t == Q::Q6_K;
      if (kq && k % 256 != 0) continue;
      const int64_t n = t == Q::Q4_1 ? k : 130;
      SCOPED_TRACE(std::string("merge ") + ggml_quant_name(t) + " heads " + std::to_string(a.heads) + "/" +
                   std::to_string(a.kv_heads) + " head_dim " + std::to_string(a.head_dim) + " N=" + std::to_string(n));
      const HostProblem hp(t, n, k);
      DeviceProblem p(hp, stream_);
      for (int pos : {0, 63, 64, 300, 1000, 2047}) {
        SCOPED_TRACE("position " + std::to_string(pos));
        CUDA_CHECK(cudaMemcpyAsync(d_pos, &pos, 4, cudaMemcpyHostToDevice, stream_));
        attention_decode(d_q, kc, vc, d_pos, a.heads, a.kv_heads, a.head_dim, max_ctx, d_att, d_scratch, stream_);
        GemvEpilogue ep;
        const std::vector<float> want = gemv(p, d_att, true, ep);
        CUDA_CHECK(cudaMemsetAsync(d_scratch2, 0xFF, scratch, stream_));
        attention_decode(d_q, kc, vc, d_pos, a.heads, a.kv_heads, a.head_dim, max_ctx, d_nan, d_scratch2, stream_,
                         &ep.merge);
        ASSERT_TRUE(ep.merge.any());
        EXPECT_TRUE(same(gemv(p, d_nan, true, ep), want)) << "splits merged as x is staged";
        EXPECT_TRUE(same(gemv(p, d_nan, false, ep), gemv(p, d_att, false, GemvEpilogue{}))) << "y =";
        uint32_t bits;  // out was not written
        CUDA_CHECK(cudaMemcpy(&bits, d_nan, 4, cudaMemcpyDeviceToHost));
        EXPECT_EQ(bits, 0xFFFFFFFFu) << "attention wrote out under defer";
        if (pos == 300) {  // negative control: the partials read at another position's split count (2, not 5)
          const int other = 100;
          CUDA_CHECK(cudaMemcpyAsync(d_pos, &other, 4, cudaMemcpyHostToDevice, stream_));
          EXPECT_FALSE(same(gemv(p, d_nan, true, ep), want)) << "negative control: another position";
        }
      }
    }
    cudaFree(d_cache);
    cudaFree(d_q);
    cudaFree(d_att);
    cudaFree(d_pos);
    cudaFree(d_scratch);
    cudaFree(d_scratch2);
  }
  cudaFree(d_nan);
}

// One launch into three buffers (QuantBatchSplit: q | k | v of a pass), with PDL as the engine launches it, gives bit
// for bit the three launches of the slices, for the dp4a, tensor-core and FP32-x kernels, over more than one launch's
// vectors; each buffer's pitch is its own rows (the engine's), nothing written past any of them; an empty middle or
// last slice; bad splits refused.
TEST_F(QuantGemvTest, BatchSplitIntoThreeOutputsIsBitForBitThreeLaunches) {
  const uint64_t seed = rng_mix(test_seed() ^ 0x5b1170u);
  struct Case {
    Q t;
    int64_t k, r0, r1, r2;
  };
  for (const Case& c : {Case{Q::Q4_0, 576, 576, 192, 192}, Case{Q::Q4_K, 256, 37, 29, 34}, Case{Q::Q8_0, 96, 13, 0, 6},
                        Case{Q::Q6_K, 512, 40, 24, 0}, Case{Q::Q5_K, 256, 17, 9, 9}})
    for (const int nb : {1, 5, 17, 40}) {
      const int64_t n = c.r0 + c.r1 + c.r2 + 7, row0 = 7, k = c.k;  // the slices start 7 rows into the matrix
      SCOPED_TRACE(std::string(ggml_quant_name(c.t)) + " K=" + std::to_string(k) + " nb=" + std::to_string(nb));
      const std::vector<uint8_t> blocks = random_blocks(c.t, n, k, seed ^ uint64_t(k));
      const PackedQuant packed = pack_quant(blocks.data(), c.t, n, k, "test");
      QuantGemvWeight host = describe(packed, blocks);
      host.blocks = nullptr;
      QuantGemvWeight w = quant_gemv_upload(host, stream_);
      std::vector<float> x(size_t(nb) * size_t(k));
      for (size_t i = 0; i < x.size(); ++i) x[i] = rng_value(seed, 7, i, -1.0f, 1.0f);
      const int64_t rows[3] = {c.r0, c.r1, c.r2}, guard = 64;
      float* d_x = nullptr;
      void* d_xq = nullptr;
      float* d_y[2][3] = {};
      CUDA_CHECK(cudaMalloc(&d_x, x.size() * 4));
      CUDA_CHECK(cudaMalloc(&d_xq, size_t(quant_batch_x_bytes(nb, k))));
      for (auto& side : d_y)
        for (int s = 0; s < 3; ++s) CUDA_CHECK(cudaMalloc(&side[s], size_t(nb * rows[s] + guard) * 4));
      CUDA_CHECK(cudaMemcpyAsync(d_x, x.data(), x.size() * 4, cudaMemcpyHostToDevice, stream_));
      quant_batch_quantize_x(d_x, false, k, nb, k, d_xq, stream_);
      for (int kind = 0; kind < 3; ++kind) {  // dp4a, tensor cores, FP32 x
        if (kind == 1 && c.t == Q::Q5_K && nb == 40) continue;  // (covered by the other types)
        for (auto& side : d_y)
          for (int s = 0; s < 3; ++s) CUDA_CHECK(cudaMemsetAsync(side[s], 0xFF, size_t(nb * rows[s] + guard) * 4, stream_));
        const QuantBatchKernel kk = kind == 1 ? QuantBatchKernel::kMma : QuantBatchKernel::kDp4a;
        // The split launch also with PDL (the engine's): right behind the kernel that writes its int8 x, over a
        // poisoned copy, so a read of x before that kernel completes would show.
        auto launch = [&](int64_t r0, int64_t nr, float* y, const QuantBatchSplit* sp) {
          if (sp && kind != 2) {
            CUDA_CHECK(cudaMemsetAsync(d_xq, 0x7F, size_t(quant_batch_x_bytes(nb, k)), stream_));
            quant_batch_quantize_x(d_x, false, k, nb, k, d_xq, stream_);
          }
          if (kind == 2)
            quant_batch_gemv_f32_launch(w, r0, nr, d_x, k, nb, y, sp ? sp->rows0 : nr, false, stream_,
                                        kQuantBatchRows, sp, sp != nullptr);
          else
            quant_batch_gemv_launch(w, r0, nr, d_xq, nb, y, sp ? sp->rows0 : nr, false, stream_, kQuantBatchRows, kk,
                                    0, sp, sp != nullptr);
        };
        int64_t at = row0;
        for (int s = 0; s < 3; ++s) {
          if (rows[s] > 0) launch(at, rows[s], d_y[0][s], nullptr);
          at += rows[s];
        }
        QuantBatchSplit sp;
        sp.rows0 = c.r0;
        sp.rows1 = c.r1;
        sp.y1 = d_y[1][1];
        sp.ldy1 = c.r1;
        sp.y2 = d_y[1][2];
        sp.ldy2 = c.r2;
        launch(row0, c.r0 + c.r1 + c.r2, d_y[1][0], &sp);
        for (int s = 0; s < 3; ++s) {
          std::vector<uint32_t> a(size_t(nb * rows[s] + guard)), b(a.size());
          CUDA_CHECK(cudaMemcpyAsync(a.data(), d_y[0][s], a.size() * 4, cudaMemcpyDeviceToHost, stream_));
          CUDA_CHECK(cudaMemcpyAsync(b.data(), d_y[1][s], b.size() * 4, cudaMemcpyDeviceToHost, stream_));
          CUDA_CHECK(cudaStreamSynchronize(stream_));
          EXPECT_EQ(a, b) << "kernel " << kind << ", output " << s;
          for (int64_t i = 0; i < nb * rows[s]; ++i)
            if (b[size_t(i)] == 0xFFFFFFFFu) {
              ADD_FAILURE() << "kernel " << kind << ", output " << s << ": element " << i << " not written";
              break;
            }
          for (int64_t i = nb * rows[s]; i < nb * rows[s] + guard; ++i)
            if (b[size_t(i)] != 0xFFFFFFFFu) {
              ADD_FAILURE() << "kernel " << kind << ", output " << s << ": write past it at " << i;
              break;
            }
        }
      }
      QuantBatchSplit bad;
      bad.rows0 = c.r0;
      bad.rows1 = c.r1 + c.r2 + 1;  // more rows than the launch has
      bad.y1 = bad.y2 = d_y[1][1];
      bad.ldy1 = bad.ldy2 = bad.rows1;
      EXPECT_THROW(quant_batch_gemv_launch(w, row0, c.r0 + c.r1 + c.r2, d_xq, nb, d_y[1][0], c.r0, false, stream_,
                                           kQuantBatchRows, QuantBatchKernel::kDp4a, 0, &bad),
                   llm::Error);
      cudaFree(d_x);
      cudaFree(d_xq);
      for (auto& side : d_y)
        for (float* p : side) cudaFree(p);
      quant_gemv_free(&w);
    }
}

// A prompt's pass rounds its rows to BF16 before the int8 form; three passes do both in one launch and must leave the
// bits of the two launches they replace: RMSNorm (rmsnorm_bf16, then the BF16 x pass; or rmsnorm, then the FP32 x
// pass), an FP32 row (convert_f32_to_bf16, then the BF16 x pass) and the SwiGLU (swiglu_rows_bf16, then the BF16 x pass). Awkward widths
// (a multiple of 32 below one warp's share, 576 = SmolLM2, one past 4096 / 32 blocks, 14336 and 8192 + 32: more blocks
// of 32 than a row's threads take in one round), 1 to 17 rows, values over a wide range, the guard past the forms
// untouched.
TEST_F(QuantGemvTest, BatchPassesRoundedToBf16InOneLaunchAreBitForBitTheTwoLaunches) {
  const uint64_t seed = rng_mix(test_seed() ^ 0xb16u);
  for (const int k : {32, 96, 576, 4128, 8224, 14336})
    for (const int nb : {1, 3, 17}) {
      SCOPED_TRACE("k " + std::to_string(k) + ", " + std::to_string(nb) + " rows");
      const int64_t form = quant_batch_x_stride(k), guard = 256, bytes = nb * form + guard;
      std::vector<float> x(size_t(nb) * size_t(2 * k)), w(static_cast<size_t>(k));
      for (size_t i = 0; i < x.size(); ++i)
        x[i] = rng_value(seed, uint64_t(k), i, -4.0f, 4.0f) * (i % 97 == 0 ? 50.0f : 1.0f);
      for (size_t i = 0; i < w.size(); ++i) w[i] = rng_value(seed, uint64_t(k) + 1, i, 0.2f, 1.8f);
      float *d_x = nullptr, *d_w = nullptr;
      uint16_t* d_bf = nullptr;
      unsigned char *d_a = nullptr, *d_b = nullptr;
      CUDA_CHECK(cudaMalloc(&d_x, x.size() * 4));
      CUDA_CHECK(cudaMalloc(&d_w, w.size() * 4));
      CUDA_CHECK(cudaMalloc(&d_bf, x.size() * 2));
      CUDA_CHECK(cudaMalloc(&d_a, size_t(bytes)));
      CUDA_CHECK(cudaMalloc(&d_b, size_t(bytes)));
      CUDA_CHECK(cudaMemcpyAsync(d_x, x.data(), x.size() * 4, cudaMemcpyHostToDevice, stream_));
      CUDA_CHECK(cudaMemcpyAsync(d_w, w.data(), w.size() * 4, cudaMemcpyHostToDevice, stream_));
      // Whether both leave the same forms (and neither wrote past them).
      auto same = [&](const char* what, const std::function<void()>& two, const std::function<void()>& one) {
        CUDA_CHECK(cudaMemsetAsync(d_a, 0xFF, size_t(bytes), stream_));
        CUDA_CHECK(cudaMemsetAsync(d_b, 0xFF, size_t(bytes), stream_));
        two();
        one();
        std::vector<unsigned char> a(static_cast<size_t>(bytes)), b(static_cast<size_t>(bytes));
        CUDA_CHECK(cudaMemcpyAsync(a.data(), d_a, a.size(), cudaMemcpyDeviceToHost, stream_));
        CUDA_CHECK(cudaMemcpyAsync(b.data(), d_b, b.size(), cudaMemcpyDeviceToHost, stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        bool eq = true;
        for (int r = 0; r < nb; ++r)
          eq = eq && std::memcmp(a.data() + r * form, b.data() + r * form, size_t(quant_x_smem_bytes(k))) == 0;
        for (int64_t i = nb * form; i < bytes; ++i)
          if (a[size_t(i)] != 0xFFu || b[size_t(i)] != 0xFFu) {
            ADD_FAILURE() << what << ": write past the forms at " << i - nb * form;
            break;
          }
        return eq;
      };
      EXPECT_TRUE(same("RMSNorm", [&] {
        rmsnorm_bf16(d_x, d_w, d_bf, nb, k, 1e-5f, stream_);
        quant_batch_quantize_x(d_bf, true, k, nb, k, d_a, stream_);
      }, [&] { quant_batch_rmsnorm_x(d_x, d_w, nb, k, 1e-5f, d_b, stream_); })) << "RMSNorm";
      EXPECT_TRUE(same("FP32 rows", [&] {
        convert_f32_to_bf16(d_x, d_bf, size_t(nb) * size_t(k), stream_);
        quant_batch_quantize_x(d_bf, true, k, nb, k, d_a, stream_);
      }, [&] { quant_batch_quantize_x_bf16_rounded(d_x, k, nb, k, d_b, stream_); })) << "FP32 rows";
      EXPECT_TRUE(same("SwiGLU", [&] {
        swiglu_rows_bf16(d_x, d_bf, nb, k, stream_);
        quant_batch_quantize_x(d_bf, true, k, nb, k, d_a, stream_);
      }, [&] { quant_batch_swiglu_x(d_x, 2 * k, nb, k, nullptr, 0, d_b, stream_, true); })) << "SwiGLU";
      // Without the rounding (a prompt's or exact verify's rows for warp-dp4a): bit for bit rmsnorm then the FP32 pass.
      EXPECT_TRUE(same("RMSNorm, FP32", [&] {
        rmsnorm(d_x, d_w, reinterpret_cast<float*>(d_bf), nb, k, 1e-5f, stream_);
        quant_batch_quantize_x(d_bf, false, k, nb, k, d_a, stream_);
      }, [&] { quant_batch_rmsnorm_x(d_x, d_w, nb, k, 1e-5f, d_b, stream_, false); })) << "RMSNorm, FP32";
      // Negative control: without the BF16 rounding the RMSNorm's form differs somewhere.
      EXPECT_FALSE(same("(control) RMSNorm", [&] {
        rmsnorm(d_x, d_w, reinterpret_cast<float*>(d_bf), nb, k, 1e-5f, stream_);
        quant_batch_quantize_x(d_bf, false, k, nb, k, d_a, stream_);
      }, [&] { quant_batch_rmsnorm_x(d_x, d_w, nb, k, 1e-5f, d_b, stream_); })) << "control: FP32 norm rows";
      cudaFree(d_x);
      cudaFree(d_w);
      cudaFree(d_bf);
      cudaFree(d_a);
      cudaFree(d_b);
    }
}

// The fold without a last block (GemvEpilogue::scale_sums / count): the quantized warp forms as producers store one sum
// of y^2 per block and their block count (the sums add up to the FP64 sum of squares, nothing written past the count),
// and as consumers scale y by 1 / sqrt(sum / n + eps) of given block sums (1, 256, 300 and 1,000 of them) on awkward
// shapes and split-K plans, the same bits on a second launch; the other forms refuse block sums by name.
TEST_F(QuantGemvTest, NormSumsProducerAndConsumer) {
  const float eps = 1e-5f;
  float* d_buf = nullptr;
  unsigned* d_count = nullptr;
  float* d_xg = nullptr;
  float* d_g = nullptr;
  const size_t cap = size_t(kGemvEpiloguePartials);
  CUDA_CHECK(cudaMalloc(&d_buf, cap * 4));
  CUDA_CHECK(cudaMalloc(&d_count, 4));
  CUDA_CHECK(cudaMalloc(&d_xg, 8192 * 4));
  CUDA_CHECK(cudaMalloc(&d_g, 8192 * 4));
  std::vector<float> gains(8192, 1.0f);
  for (size_t i = 0; i < gains.size(); ++i) gains[i] = rng_value(test_seed(), 91, i, 1.0f, 0.5f);
  CUDA_CHECK(cudaMemcpy(d_g, gains.data(), gains.size() * 4, cudaMemcpyHostToDevice));
  for (Q t : {Q::Q4_0, Q::Q8_0, Q::Q4_K, Q::Q6_K}) {
    const bool kq = t == Q::Q4_K || t == Q::Q5_K || t == Q::Q6_K;
    for (const auto& shape : {std::pair<int64_t, int64_t>{130, kq ? 256 : 96}, {1000, 4096}, {4097, 4096}}) {
      const HostProblem hp(t, shape.first, shape.second);
      DeviceProblem p(hp, stream_);
      p.upload_x(0, stream_);
      const int64_t n = hp.n;
      for (QuantGemvKind kind : {QuantGemvKind::Warp, QuantGemvKind::WarpDp4a}) {
        SCOPED_TRACE(hp.name() + " " + quant_gemv_kind_name(kind));
        // Producer: y += W x, xg = g * y, block sums and count.
        GemvEpilogue prod;
        prod.norm_w = d_g;
        prod.xg = d_xg;
        prod.partials = d_buf;
        prod.count = d_count;
        CUDA_CHECK(cudaMemsetAsync(d_buf, 0xFF, cap * 4, stream_));
        CUDA_CHECK(cudaMemcpyAsync(p.d_y(0), hp.y0.data(), size_t(n) * 4, cudaMemcpyHostToDevice, stream_));
        quant_gemv_launch(kind, p.w, p.d_x(0), p.d_y(0), true, stream_, prod);
        std::vector<float> y(static_cast<size_t>(n)), sums(cap);
        unsigned count = 0;
        CUDA_CHECK(cudaMemcpyAsync(y.data(), p.d_y(0), size_t(n) * 4, cudaMemcpyDeviceToHost, stream_));
        CUDA_CHECK(cudaMemcpyAsync(sums.data(), d_buf, cap * 4, cudaMemcpyDeviceToHost, stream_));
        CUDA_CHECK(cudaMemcpyAsync(&count, d_count, 4, cudaMemcpyDeviceToHost, stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        EXPECT_LE(relative_l2_error(y.data(), hp.want(kind, true), hp.ref_abs), kTol) << "y += W x";
        ASSERT_GE(count, 1u);
        ASSERT_LE(count, unsigned(cap));
        double ss_dev = 0.0, ss_ref = 0.0;
        for (unsigned i = 0; i < count; ++i) ss_dev += double(sums[i]);
        for (float v : y) ss_ref += double(v) * double(v);
        EXPECT_LE(std::fabs(ss_dev - ss_ref) / ss_ref, 1e-5) << "block sums add to sum(y^2)";
        for (size_t i = count; i < cap; ++i) {
          uint32_t bits;
          std::memcpy(&bits, &sums[i], 4);
          if (bits != 0xFFFFFFFFu) {
            ADD_FAILURE() << "block sum written past the count " << count << " at " << i;
            break;
          }
        }
        // Consumer: y = s * W x from given block sums.
        for (unsigned c : {1u, 256u, 300u, 1000u}) {
          std::vector<float> given(c);
          double total = 0.0;
          for (unsigned i = 0; i < c; ++i) {
            given[i] = rng_value(test_seed(), 92, i + c, 2.0f, 1.5f);
            total += double(given[i]);
          }
          CUDA_CHECK(cudaMemcpyAsync(d_buf, given.data(), size_t(c) * 4, cudaMemcpyHostToDevice, stream_));
          CUDA_CHECK(cudaMemcpyAsync(d_count, &c, 4, cudaMemcpyHostToDevice, stream_));
          const int norm_n = 4096;
          const double s = 1.0 / std::sqrt(total / norm_n + double(eps));
          GemvEpilogue cons;
          cons.scale_sums = d_buf;
          cons.scale_count = d_count;
          cons.norm_n = norm_n;
          cons.eps = eps;
          std::vector<float> first;
          for (int run = 0; run < 2; ++run) {
            CUDA_CHECK(cudaMemsetAsync(p.d_y(0), 0xFF, size_t(n) * 4, stream_));
            quant_gemv_launch(kind, p.w, p.d_x(0), p.d_y(0), false, stream_, cons);
            std::vector<float> out(static_cast<size_t>(n));
            CUDA_CHECK(cudaMemcpyAsync(out.data(), p.d_y(0), size_t(n) * 4, cudaMemcpyDeviceToHost, stream_));
            CUDA_CHECK(cudaStreamSynchronize(stream_));
            std::vector<double> want(hp.want(kind, false)), sc(hp.ref_abs);
            for (size_t i = 0; i < want.size(); ++i) {
              want[i] *= s;
              sc[i] *= s;
            }
            EXPECT_LE(relative_l2_error(out.data(), want, sc), kTol) << c << " block sums";
            if (run == 0) first = out;
            else EXPECT_EQ(std::memcmp(first.data(), out.data(), out.size() * 4), 0) << "second launch";
          }
        }
      }
      GemvEpilogue cons;
      cons.scale_sums = d_buf;
      cons.scale_count = d_count;
      cons.norm_n = 4096;
      for (QuantGemvKind kind : {QuantGemvKind::Thread, QuantGemvKind::AsStored}) {
        try {
          quant_gemv_launch(kind, p.w, p.d_x(0), p.d_y(0), false, stream_, cons);
          ADD_FAILURE() << quant_gemv_kind_name(kind) << " accepted block sums";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("block sums"), std::string::npos) << e.what();
        }
      }
    }
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  cudaFree(d_buf);
  cudaFree(d_count);
  cudaFree(d_xg);
  cudaFree(d_g);
}

// Prefill's dequantization on the device (quant_dequantize_bf16): every weight bit for bit packed_weight rounded to
// BF16, every type, rows wider than k (the pitch's columns past k untouched: poison stays).
TEST_F(QuantGemvTest, DequantizeBf16EqualsPackedWeightBitForBit) {
  for (Q t : kAllTypes) {
    const bool kq = t == Q::Q4_K || t == Q::Q5_K || t == Q::Q6_K;
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{7, kq ? 256 : 96}, {203, 4096}}) {
      SCOPED_TRACE(std::string(ggml_quant_name(t)) + " N=" + std::to_string(n) + " K=" + std::to_string(k));
      const uint64_t seed = rng_mix(test_seed() ^ uint64_t(n * k) ^ (uint64_t(t) << 40) ^ 0xdeadull);
      const std::vector<uint8_t> blocks = random_blocks(t, n, k, seed);
      const PackedQuant packed = pack_quant(blocks.data(), t, n, k, "test");
      QuantGemvWeight host = describe(packed, blocks);
      host.blocks = nullptr;
      QuantGemvWeight w = quant_gemv_upload(host, stream_);
      const int64_t ld = k + 8;
      uint16_t* d = nullptr;
      CUDA_CHECK(cudaMalloc(&d, size_t(n * ld) * 2));
      CUDA_CHECK(cudaMemsetAsync(d, 0xFF, size_t(n * ld) * 2, stream_));
      quant_dequantize_bf16(w, d, ld, stream_);
      std::vector<uint16_t> got(size_t(n * ld));
      CUDA_CHECK(cudaMemcpyAsync(got.data(), d, got.size() * 2, cudaMemcpyDeviceToHost, stream_));
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      int64_t bad = 0, pad = 0;
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < ld; ++j) {
          const uint16_t g = got[size_t(r * ld + j)];
          if (j >= k)
            pad += g != 0xFFFFu;
          else
            bad += g != f32_to_bf16(packed_weight(packed, r, j));
        }
      EXPECT_EQ(bad, 0) << "weights differing from packed_weight rounded to BF16";
      EXPECT_EQ(pad, 0) << "columns past k written";
      cudaFree(d);
      quant_gemv_free(&w);
    }
  }
}

}  // namespace
}  // namespace llm
