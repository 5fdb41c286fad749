// The FP8 KV cache store on the device (kv_store_fp8, the oracle of tests/gpu/kv_store_fp8_oracle.h, into
// kernels/attention/kv_fp8.h's layer) against the CPU reference's (engine/kv_cache.h, CpuKvCache in FP8): the same
// rows written the same way must give the same codes and scales, byte for byte, after every write: decode steps
// across blocks, prefill chunks that start and end mid-block, decode after prefill, rewinds within the
// open block and into earlier blocks (rows re-rounded from their codes), jumps forward over unwritten positions, the
// last positions of the context, NaN and infinite elements, other block sizes, and a CUDA graph of one decode store
// replayed at different positions. The whole layer (every position, every scale) is compared, so the device cache is
// poisoned (all-ones bytes) before fp8_kv_layer_init, and the input rows past n_tokens are poisoned too.
// Rows mix magnitude classes per (position, head): ordinary, 1e4, 1e-4, FP32 subnormals, near FLT_MAX / 2, all
// zero (signed zeros), half zeros; so a block's scale is often set by one row and the others sit in the subnormal
// codes or round to zero.
// rope_kv_store_fp8 (RoPE fused into the store) against rope() then kv_store_fp8() on a second device layer, bit for
// bit (q, and the whole layer: codes, scales, open rows, open_blocks), and against CpuKvCache fed the k rows rope()
// rotated on the device (CPU-rotated rows would differ by the sin/cos libraries' last bits): decode steps (its
// register form) and prefill chunks (its general form), rewinds, NaN/Inf, other block sizes (the general form for one
// row too), positions past 105615 (sincosf's slow range reduction), positions outside the cache, and a CUDA graph of
// the one-row launch replayed at other positions.
// Every test that needs a device skips with "no CUDA device" where there is none.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/counter_rng.h"  // rng_mix
#include "core/dtype.h"        // f32_to_bits
#include "core/error.h"        // Error
#include "core/kv_dtype.h"     // kKvFp8Block
#include "engine/kv_cache.h"
#include "kernels/cuda_check.h"
#include "kernels/attention/kv_fp8.h"
#include "kernels/ops/ops.h"  // rope (the reference of rope_kv_store_fp8)
#include "device_test_util.h"  // SKIP_WITHOUT_CUDA, DeviceBuffer, sync_and_check
#include "kv_store_fp8_oracle.h"  // kv_store_fp8: the plain store

namespace llm {
namespace {

using namespace gpu_test;  // DeviceBuffer, sync_and_check

struct Shape {
  int n_kv_heads, head_dim;
};
const Shape kShapes[] = {{1, 64}, {3, 128}, {8, 18}, {8, 128}, {3, 18}, {1, 128}, {8, 64}};

std::string shape_name(const Shape& s) {
  return std::to_string(s.n_kv_heads) + " KV heads x " + std::to_string(s.head_dim);
}

// One write: rows pos0 .. pos0 + n - 1; `version` changes the values (a rewind writes other rows than the first time).
struct Write {
  int pos0, n;
  uint32_t version = 0;
};

// Rows [n, kv_dim] of K (is_v false) or V for positions pos0.., a function of (position, head, plane, version) only.
// special: some rows also hold NaN or +-Inf elements, or are all NaN.
std::vector<float> make_rows(int pos0, int n, const Shape& sh, bool is_v, uint32_t version, bool special) {
  const int kv_dim = sh.n_kv_heads * sh.head_dim;
  std::vector<float> x(size_t(n) * size_t(kv_dim));
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < sh.n_kv_heads; ++h) {
      const uint64_t key = rng_mix(uint64_t(pos0 + t) * 0x10001ull + uint64_t(h) * 0x100000001ull +
                                   (uint64_t(is_v) << 40) + (uint64_t(version) << 44) + (uint64_t(special) << 60));
      std::mt19937 rng(uint32_t(key ^ (key >> 32)));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      const int cls = int((key >> 8) % (special ? 14u : 11u));
      float* row = x.data() + size_t(t) * size_t(kv_dim) + size_t(h) * size_t(sh.head_dim);
      for (int i = 0; i < sh.head_dim; ++i) {
        const float g = nd(rng);
        float val;
        switch (cls) {
          case 4: val = g * 1e4f; break;
          case 5: val = g * 1e-4f; break;
          case 6: val = g * 1e-41f; break;  // FP32 subnormals (scale subnormal too)
          case 7: val = g * 3e37f; break;   // up to ~FLT_MAX / 2
          case 8: val = (rng() & 1u) ? -0.0f : 0.0f; break;
          case 9: val = (rng() & 1u) ? g : ((rng() & 1u) ? -0.0f : 0.0f); break;
          case 11: val = i == int(rng() % unsigned(sh.head_dim)) ? nan : g; break;  // one NaN (maybe none)
          case 12: val = i == 1 % sh.head_dim ? ((rng() & 1u) ? inf : -inf) : g; break;
          case 13: val = nan; break;
          default: val = g; break;  // 0..3, 10
        }
        row[i] = val;
      }
    }
  return x;
}

template <typename T>
std::vector<T> download(const T* p, size_t n) {
  std::vector<T> v(n);
  CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

// A CpuKvCache (FP8, one layer) and the device layer, written with the same rows.
class Fp8Pair {
 public:
  Fp8Pair(int ctx, const Shape& sh, int block = kKvFp8Block, bool special = false)
      : ctx_(ctx),
        sh_(sh),
        block_(block),
        special_(special),
        kv_dim_(sh.n_kv_heads * sh.head_dim),
        cpu_(KvDtype::FP8, 1, ctx, sh.n_kv_heads, sh.head_dim, block),
        mem_(fp8_kv_layer_bytes(ctx, sh.n_kv_heads, sh.head_dim, block)),
        k_in_((size_t(ctx) + size_t(block)) * size_t(kv_dim_)),
        v_in_((size_t(ctx) + size_t(block)) * size_t(kv_dim_)),
        d_pos_(1) {
    mem_.poison();
    L_ = fp8_kv_layer_carve(mem_.get(), ctx, sh.n_kv_heads, sh.head_dim, block);
    fp8_kv_layer_init(L_, ctx, sh.n_kv_heads, sh.head_dim, block, nullptr);
    sync_and_check();
  }

  const Fp8KvLayer& layer() const { return L_; }

  // The rows of w, into both caches (the device one through kv_store_fp8 with *d_pos0 = w.pos0).
  void write(const Write& w) {
    const std::vector<float> k = make_rows(w.pos0, w.n, sh_, false, w.version, special_);
    const std::vector<float> v = make_rows(w.pos0, w.n, sh_, true, w.version, special_);
    cpu_.store(0, w.pos0, w.n, k.data(), v.data());
    k_in_.poison();  // rows past n_tokens: NaN, which would show up as 0x7F codes if read
    v_in_.poison();
    k_in_.upload(k);
    v_in_.upload(v);
    d_pos_.upload({w.pos0});
    kv_store_fp8(k_in_.get(), v_in_.get(), d_pos_.get(), w.n, sh_.n_kv_heads, sh_.head_dim, block_, ctx_, L_,
                 nullptr);
    sync_and_check();
  }

  // The device caches' codes and scales equal the CPU's, byte for byte (all ctx positions, all scales). On a
  // difference: a failure naming the first one, and false.
  bool same_as_cpu() const {
    const int n_blocks = (ctx_ + block_ - 1) / block_;
    for (bool is_v : {false, true}) {
      const char* plane = is_v ? "V" : "K";
      const std::vector<uint8_t> want = cpu_.stored_bytes(0, is_v);
      const std::vector<uint8_t> got = download(is_v ? L_.v : L_.k, size_t(ctx_) * size_t(kv_dim_));
      if (want.size() != got.size()) {
        ADD_FAILURE() << plane << " codes: " << got.size() << " bytes, CPU " << want.size();
        return false;
      }
      for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != want[i]) {
          const size_t pos = i / size_t(kv_dim_), h = i % size_t(kv_dim_) / size_t(sh_.head_dim);
          ADD_FAILURE() << plane << " code at position " << pos << ", KV head " << h << ", element "
                        << i % size_t(sh_.head_dim) << ": device 0x" << std::hex << int(got[i]) << ", CPU 0x"
                        << int(want[i]) << std::dec;
          return false;
        }
      const std::vector<float> want_s = cpu_.scales(0, is_v);
      const std::vector<float> got_s =
          download(is_v ? L_.v_scale : L_.k_scale, size_t(n_blocks) * size_t(sh_.n_kv_heads));
      for (size_t i = 0; i < got_s.size(); ++i)
        if (f32_to_bits(got_s[i]) != f32_to_bits(want_s[i])) {
          ADD_FAILURE() << plane << " scale of block " << i / size_t(sh_.n_kv_heads) << ", KV head "
                        << i % size_t(sh_.n_kv_heads) << ": device " << got_s[i] << " (0x" << std::hex
                        << f32_to_bits(got_s[i]) << "), CPU " << want_s[i] << " (0x" << f32_to_bits(want_s[i])
                        << ")" << std::dec;
          return false;
        }
    }
    return true;
  }

  // Every open_blocks entry (K and V, every head) holds `want`.
  void expect_open_block(int want) const {
    const std::vector<int> got = download(L_.open_blocks, 2 * size_t(sh_.n_kv_heads));
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want) << "open_blocks[" << i << "]";
  }

  std::vector<uint8_t> device_bytes() const { return mem_.download(); }

 private:
  int ctx_;
  Shape sh_;
  int block_;
  bool special_;
  int kv_dim_;
  CpuKvCache cpu_;
  DeviceBuffer<uint8_t> mem_;
  Fp8KvLayer L_;
  DeviceBuffer<float> k_in_, v_in_;
  DeviceBuffer<int> d_pos_;
};

std::string write_name(const Write& w) {
  return "write of rows " + std::to_string(w.pos0) + ".." + std::to_string(w.pos0 + w.n - 1) + " (version " +
         std::to_string(w.version) + ")";
}

// The writes in order, on every shape; codes and scales compared after each.
void run_writes(const std::vector<Write>& writes, int ctx, int block = kKvFp8Block, bool special = false) {
  for (const Shape& sh : kShapes) {
    SCOPED_TRACE(shape_name(sh) + ", ctx " + std::to_string(ctx) + ", block " + std::to_string(block));
    Fp8Pair p(ctx, sh, block, special);
    ASSERT_TRUE(p.same_as_cpu()) << "after fp8_kv_layer_init";
    for (const Write& w : writes) {
      SCOPED_TRACE(write_name(w));
      p.write(w);
      ASSERT_TRUE(p.same_as_cpu());
    }
  }
}

// Single-row writes pos0 .. pos0 + n - 1.
void append_decode(std::vector<Write>* writes, int pos0, int n, uint32_t version = 0) {
  for (int p = pos0; p < pos0 + n; ++p) writes->push_back({p, 1, version});
}

// ---------------------------------------------------------------------------------------------------------------

// Write sequences both store forms run (kv_store_fp8 against the CPU, rope_kv_store_fp8 against rope + that store).
// Decode steps 0..149 over a context of 150: the last block (128..149) is partial, and its last position is written.
std::vector<Write> decode_steps_150() {
  std::vector<Write> w;
  append_decode(&w, 0, 150);
  return w;
}

// Chunks that start and end mid-block (0..4, 5..36, 37..81, 82..181), then decode to 199 (a context of 200).
std::vector<Write> chunks_then_decode_200() {
  std::vector<Write> w = {{0, 5}, {5, 32}, {37, 45}, {82, 100}};
  append_decode(&w, 182, 18);
  return w;
}

// Rows with a NaN element (ignored by amax, code 0x7F), an infinite one (infinite scale: codes of finite elements
// +-0, of the infinity NaN) and all-NaN rows (run with special = true); also re-read from codes (a rewind into an
// earlier block). A context of 120.
std::vector<Write> nan_and_inf_writes_120() {
  std::vector<Write> w;
  append_decode(&w, 0, 40);
  w.push_back({40, 45});
  w.push_back({12, 1, 1});  // block 0 not open: decoded NaNs and 0 * Inf
  w.push_back({13, 80, 2});
  append_decode(&w, 93, 10, 2);
  return w;
}

TEST(KvFp8Layout, CarveFitsInLayerBytes) {  // host code only: runs without a device
  for (const Shape& sh : kShapes)
    for (int ctx : {1, 31, 32, 33, 200, 131072})
      for (int block : {1, 7, 32, 64}) {
        const size_t bytes = fp8_kv_layer_bytes(ctx, sh.n_kv_heads, sh.head_dim, block);
        const size_t kv_dim = size_t(sh.n_kv_heads) * size_t(sh.head_dim);
        const size_t n_blocks = (size_t(ctx) + size_t(block) - 1) / size_t(block);
        const uintptr_t base = uintptr_t(1) << 40;  // carve only computes pointers: any 256-byte aligned address
        const Fp8KvLayer L = fp8_kv_layer_carve(reinterpret_cast<void*>(base), ctx, sh.n_kv_heads, sh.head_dim, block);
        struct Range {
          const void* p;
          size_t n;
        };
        const Range ranges[] = {{L.k, size_t(ctx) * kv_dim},
                                {L.v, size_t(ctx) * kv_dim},
                                {L.k_scale, n_blocks * size_t(sh.n_kv_heads) * 4},
                                {L.v_scale, n_blocks * size_t(sh.n_kv_heads) * 4},
                                {L.k_open, size_t(block) * kv_dim * 4},
                                {L.v_open, size_t(block) * kv_dim * 4},
                                {L.open_blocks, 2 * size_t(sh.n_kv_heads) * 4}};
        size_t prev_end = 0;
        for (const Range& r : ranges) {
          const size_t off = size_t(reinterpret_cast<uintptr_t>(r.p) - base);
          EXPECT_EQ(off % 256, 0u);
          EXPECT_GE(off, prev_end) << "arrays overlap";
          prev_end = off + r.n;
        }
        EXPECT_LE(prev_end, bytes);
        EXPECT_LT(bytes - prev_end, 256u * 7) << "more padding than alignment needs";
      }
}

TEST(KvFp8Store, DecodeStepsAcrossBlocksMatchCpu) {
  SKIP_WITHOUT_CUDA();
  run_writes(decode_steps_150(), 150);
}

TEST(KvFp8Store, PrefillChunksThenDecodeMatchCpu) {
  SKIP_WITHOUT_CUDA();
  run_writes(chunks_then_decode_200(), 200);
  // Prompts of other lengths from position 0, then decode.
  for (int n : {1, 31, 32, 33, 64, 77}) {
    SCOPED_TRACE("prompt of " + std::to_string(n));
    std::vector<Write> w2 = {{0, n}};
    append_decode(&w2, n, 40);
    run_writes(w2, 160);
  }
}

TEST(KvFp8Store, BytesDoNotDependOnChunking) {
  SKIP_WITHOUT_CUDA();
  // The same rows in one prefill, in chunks and one at a time: the same device bytes (codes, scales, and the open
  // rows, which hold the last block's rows either way).
  const int ctx = 200;
  for (const Shape& sh : kShapes) {
    SCOPED_TRACE(shape_name(sh));
    Fp8Pair one(ctx, sh), chunks(ctx, sh), steps(ctx, sh);
    one.write({0, 181});
    for (const Write& w : std::vector<Write>{{0, 5}, {5, 32}, {37, 45}, {82, 99}}) chunks.write(w);
    for (int p = 0; p < 181; ++p) steps.write({p, 1});
    ASSERT_TRUE(one.same_as_cpu());
    const std::vector<uint8_t> a = one.device_bytes(), b = chunks.device_bytes(), c = steps.device_bytes();
    EXPECT_TRUE(a == b) << "one prefill and chunks differ";
    EXPECT_TRUE(a == c) << "one prefill and decode steps differ";
    one.expect_open_block(5);  // rows 160..180
  }
}

TEST(KvFp8Store, RewindWithinOpenBlockMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  std::vector<Write> w = {{0, 76}};  // open block 2 (64..95) holds rows 64..75
  w.push_back({70, 1, 1});           // back to 70: rows 64..69 from the kept rows, 71..75 keep their old codes
  append_decode(&w, 71, 10, 1);      // 71..80
  w.push_back({64, 3, 2});           // back to the block's start
  w.push_back({66, 40, 3});          // back into the open block, on across into the next: 66..105
  w.push_back({105, 1, 4});          // the last row again, alone
  append_decode(&w, 106, 20, 4);
  run_writes(w, 160);
}

TEST(KvFp8Store, RewindIntoEarlierBlockMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  std::vector<Write> w = {{0, 100}};  // open block 3 (96..127)
  w.push_back({40, 1, 1});            // block 1, not open: rows 32..39 decoded from their codes, re-rounded
  append_decode(&w, 41, 10, 1);       // 41..50 within the (now open) block 1
  w.push_back({10, 45, 2});           // block 0, not open: rows 0..9 re-rounded; on to 54
  w.push_back({97, 1, 3});            // block 3 again, not open (its row 96 re-rounded)
  w.push_back({60, 1, 4});            // block 1 again: rows 32..59 re-rounded a second time, rows 61.. keep codes
  w.push_back({33, 70, 5});           // block 1 from row 1, across blocks 2 and 3 to 102
  append_decode(&w, 103, 5, 5);
  run_writes(w, 140);
}

TEST(KvFp8Store, JumpForwardMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  // Writes past unwritten positions: inside the open block the skipped rows are the open buffer's (zero after init,
  // or rows an earlier block left there); in another block, they are decoded from zero codes at scale 0.
  std::vector<Write> w = {{0, 10}};
  w.push_back({20, 1});   // open block 0, rows 10..19 never written
  w.push_back({70, 1});   // block 2, never written
  w.push_back({40, 30});  // 40..69: block 1 from row 8 (not open: re-read from codes), into block 2
  w.push_back({75, 3});   // open block 2 from row 11: rows 6..10 are what block 1's rows left in the open buffer
  w.push_back({140, 30});
  run_writes(w, 180);
}

TEST(KvFp8Store, LastPositionsOfContextMatchCpu) {
  SKIP_WITHOUT_CUDA();
  for (int ctx : {200, 128, 33}) {
    SCOPED_TRACE("ctx " + std::to_string(ctx));
    std::vector<Write> w = {{0, ctx - 3}};
    append_decode(&w, ctx - 3, 3);             // up to ctx - 1
    w.push_back({ctx - 10, 10, 1});            // a chunk ending at the last position, across a block boundary
    w.push_back({ctx - 1, 1, 2});              // the last position alone, after a rewind into its block
    w.push_back({0, ctx, 3});                  // the whole context in one write
    w.push_back({ctx - 1, 1, 4});              // the last position within the open block
    run_writes(w, ctx);
  }
}

TEST(KvFp8Store, NanAndInfinityMatchCpu) {
  SKIP_WITHOUT_CUDA();
  run_writes(nan_and_inf_writes_120(), 120, kKvFp8Block, /*special=*/true);
}

TEST(KvFp8Store, OtherBlockSizesMatchCpu) {
  SKIP_WITHOUT_CUDA();
  for (int block : {1, 7, 64}) {
    SCOPED_TRACE("block " + std::to_string(block));
    std::vector<Write> w = {{0, 5}, {5, 45}};
    append_decode(&w, 50, 20);
    w.push_back({66, 1, 1});   // rewind within or across blocks depending on the size
    w.push_back({20, 30, 2});  // into an earlier block
    w.push_back({50, 100, 3});
    append_decode(&w, 150, 10, 3);
    run_writes(w, 160, block);
  }
}

TEST(KvFp8Store, OutOfRangePositionWritesNothing) {
  SKIP_WITHOUT_CUDA();
  const Shape sh = {3, 18};
  const int ctx = 100;
  Fp8Pair p(ctx, sh);
  p.write({0, 50});
  const std::vector<uint8_t> before = p.device_bytes();
  DeviceBuffer<float> k(size_t(2) * 54), v(size_t(2) * 54);
  k.poison();
  v.poison();
  for (int pos0 : {-1, ctx - 1, ctx, 1 << 30}) {
    SCOPED_TRACE("*d_pos0 = " + std::to_string(pos0));
    DeviceBuffer<int> d_pos(std::vector<int>{pos0});
    kv_store_fp8(k.get(), v.get(), d_pos.get(), 2, sh.n_kv_heads, sh.head_dim, kKvFp8Block, ctx, p.layer(), nullptr);
    sync_and_check();
    EXPECT_TRUE(p.device_bytes() == before);
  }
}

TEST(KvFp8Store, CudaGraphReplayAtOtherPositionsMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  // One kv_store_fp8(n_tokens = 1) captured once, replayed with the row and *d_pos0 changed in device memory: decode
  // across blocks, a rewind within the open block, a rewind into an earlier block, the last position.
  const int ctx = 130;
  std::vector<Write> w;
  append_decode(&w, 0, 40);
  append_decode(&w, 35, 10, 1);
  append_decode(&w, 5, 3, 2);
  w.push_back({ctx - 1, 1, 3});
  append_decode(&w, 8, 30, 4);
  for (const Shape& sh : kShapes) {
    SCOPED_TRACE(shape_name(sh));
    const size_t kv_dim = size_t(sh.n_kv_heads) * size_t(sh.head_dim);
    CpuKvCache cpu(KvDtype::FP8, 1, ctx, sh.n_kv_heads, sh.head_dim);
    DeviceBuffer<uint8_t> mem(fp8_kv_layer_bytes(ctx, sh.n_kv_heads, sh.head_dim, kKvFp8Block));
    mem.poison();
    const Fp8KvLayer L = fp8_kv_layer_carve(mem.get(), ctx, sh.n_kv_heads, sh.head_dim, kKvFp8Block);
    DeviceBuffer<float> k(kv_dim), v(kv_dim);
    DeviceBuffer<int> d_pos(std::vector<int>{0});
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    fp8_kv_layer_init(L, ctx, sh.n_kv_heads, sh.head_dim, kKvFp8Block, s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    kv_store_fp8(k.get(), v.get(), d_pos.get(), 1, sh.n_kv_heads, sh.head_dim, kKvFp8Block, ctx, L, s);
    CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (const Write& wr : w) {
      SCOPED_TRACE(write_name(wr));
      const std::vector<float> kr = make_rows(wr.pos0, 1, sh, false, wr.version, false);
      const std::vector<float> vr = make_rows(wr.pos0, 1, sh, true, wr.version, false);
      cpu.store(0, wr.pos0, 1, kr.data(), vr.data());
      k.upload(kr);
      v.upload(vr);
      d_pos.upload({wr.pos0});
      CUDA_CHECK(cudaGraphLaunch(exec, s));
      CUDA_CHECK(cudaStreamSynchronize(s));
      for (bool is_v : {false, true}) {
        ASSERT_TRUE(download(is_v ? L.v : L.k, size_t(ctx) * kv_dim) == cpu.stored_bytes(0, is_v))
            << (is_v ? "V" : "K") << " codes differ";
        const std::vector<float> got = download(is_v ? L.v_scale : L.k_scale,
                                                size_t((ctx + kKvFp8Block - 1) / kKvFp8Block) * sh.n_kv_heads);
        const std::vector<float> want = cpu.scales(0, is_v);
        ASSERT_EQ(got.size(), want.size());
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << (is_v ? "V" : "K") << " scales differ";
      }
    }
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaStreamDestroy(s));
  }
}

// ---- rope_kv_store_fp8 ------------------------------------------------------------------------------------------

struct RopeShape {
  int n_heads, n_kv_heads, head_dim;
};
// head_dim 64, 128, 256 (the register form with 4, 8 and 16 pairs a thread at block 32) and 18 (9 pairs a row);
// 1, 2, 3 and 8 KV heads with 1 to 4 query heads each.
const RopeShape kRopeShapes[] = {{4, 1, 64}, {6, 3, 128}, {32, 8, 128}, {16, 8, 18},
                                 {3, 3, 18}, {1, 1, 128}, {16, 8, 64}, {8, 2, 256}};

std::string rope_shape_name(const RopeShape& s) {
  return std::to_string(s.n_heads) + " heads over " + std::to_string(s.n_kv_heads) + " KV heads x " +
         std::to_string(s.head_dim);
}

// theta 10000: inv_freq[0] = 1, so the angle of pair 0 is the position itself.
std::vector<float> rope_inv_freq_for(int head_dim) {
  std::vector<float> inv(size_t(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) inv[size_t(i)] = float(1.0 / std::pow(10000.0, 2.0 * i / head_dim));
  return inv;
}

// q rows [n, n_heads * head_dim] for positions pos0.., a function of (position, version) only.
std::vector<float> make_q(int pos0, int n, const RopeShape& sh, uint32_t version) {
  const size_t q_dim = size_t(sh.n_heads) * size_t(sh.head_dim);
  std::vector<float> q(size_t(n) * q_dim);
  for (int t = 0; t < n; ++t) {
    const uint64_t key = rng_mix(uint64_t(pos0 + t) * 0x9E3779B97F4A7C15ull + (uint64_t(version) << 48) + 7u);
    std::mt19937 rng(uint32_t(key ^ (key >> 32)));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (size_t i = 0; i < q_dim; ++i) q[size_t(t) * q_dim + i] = nd(rng);
  }
  return q;
}

bool same_float_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Two device layers written with the same rows: `ref` by rope() then kv_store_fp8(), `fused` by rope_kv_store_fp8();
// and a CpuKvCache fed the k rows rope() rotated.
class RopeFp8Pair {
 public:
  RopeFp8Pair(int ctx, const RopeShape& sh, int block = kKvFp8Block, bool special = false)
      : ctx_(ctx),
        sh_(sh),
        block_(block),
        special_(special),
        kv_dim_(sh.n_kv_heads * sh.head_dim),
        q_dim_(sh.n_heads * sh.head_dim),
        rows_(size_t(ctx) + size_t(block)),
        cpu_(KvDtype::FP8, 1, ctx, sh.n_kv_heads, sh.head_dim, block),
        ref_mem_(fp8_kv_layer_bytes(ctx, sh.n_kv_heads, sh.head_dim, block)),
        fused_mem_(fp8_kv_layer_bytes(ctx, sh.n_kv_heads, sh.head_dim, block)),
        q_ref_(rows_ * size_t(q_dim_)),
        q_fused_(rows_ * size_t(q_dim_)),
        k_ref_(rows_ * size_t(kv_dim_)),
        k_fused_(rows_ * size_t(kv_dim_)),
        v_(rows_ * size_t(kv_dim_)),
        inv_(rope_inv_freq_for(sh.head_dim)),
        d_pos_(1) {
    ref_mem_.poison();  // padding too: the whole allocations are compared
    fused_mem_.poison();
    ref_ = fp8_kv_layer_carve(ref_mem_.get(), ctx, sh.n_kv_heads, sh.head_dim, block);
    fused_ = fp8_kv_layer_carve(fused_mem_.get(), ctx, sh.n_kv_heads, sh.head_dim, block);
    fp8_kv_layer_init(ref_, ctx, sh.n_kv_heads, sh.head_dim, block, nullptr);
    fp8_kv_layer_init(fused_, ctx, sh.n_kv_heads, sh.head_dim, block, nullptr);
    sync_and_check();
  }

  // Both device layers written with the rows of w at *d_pos0 = w.pos0 (the CPU cache too when `cpu`); q compared
  // (every element of the buffers, the poisoned rows past w.n included), and the fused op's k left as it was given.
  void write(const Write& w, bool cpu = true) {
    const std::vector<float> q = make_q(w.pos0, w.n, sh_, w.version);
    const std::vector<float> k = make_rows(w.pos0, w.n, sh_kv(), false, w.version, special_);
    const std::vector<float> v = make_rows(w.pos0, w.n, sh_kv(), true, w.version, special_);
    for (DeviceBuffer<float>* b : {&q_ref_, &q_fused_, &k_ref_, &k_fused_, &v_}) b->poison();
    q_ref_.upload(q);
    q_fused_.upload(q);
    k_ref_.upload(k);
    k_fused_.upload(k);
    v_.upload(v);
    d_pos_.upload({w.pos0});
    rope(q_ref_.get(), k_ref_.get(), inv_.get(), d_pos_.get(), w.n, sh_.n_heads, sh_.n_kv_heads, sh_.head_dim,
         nullptr);
    kv_store_fp8(k_ref_.get(), v_.get(), d_pos_.get(), w.n, sh_.n_kv_heads, sh_.head_dim, block_, ctx_, ref_,
                 nullptr);
    rope_kv_store_fp8(q_fused_.get(), k_fused_.get(), v_.get(), inv_.get(), d_pos_.get(), w.n, sh_.n_heads,
                      sh_.n_kv_heads, sh_.head_dim, block_, ctx_, fused_, nullptr);
    sync_and_check();
    const std::vector<float> q_ref = q_ref_.download(), q_fused = q_fused_.download();
    EXPECT_TRUE(same_float_bits(q_ref, q_fused)) << "q differs from rope()'s";
    if (w.pos0 != 0 || w.n > 1)  // (position 0 rotates by angle 0: q stays as it was)
      EXPECT_FALSE(same_float_bits(std::vector<float>(q_fused.begin(), q_fused.begin() + ptrdiff_t(q.size())), q))
          << "q was not rotated";
    const std::vector<float> k_after = k_fused_.download();
    EXPECT_TRUE(same_float_bits(std::vector<float>(k_after.begin(), k_after.begin() + ptrdiff_t(k.size())), k))
        << "the fused op wrote k";
    if (cpu) {
      const std::vector<float> k_rot = download(k_ref_.get(), k.size());
      cpu_.store(0, w.pos0, w.n, k_rot.data(), v.data());
    }
  }

  // The fused layer's bytes equal the reference layer's (every array and the padding), and its codes and scales
  // the CPU's. On a difference: a failure naming the first one, and false.
  bool same(bool cpu = true) const {
    const std::vector<uint8_t> want = ref_mem_.download(), got = fused_mem_.download();
    if (want != got) {
      size_t i = 0;
      while (want[i] == got[i]) ++i;
      ADD_FAILURE() << "layer byte " << i << " (" << array_of(i) << "): fused 0x" << std::hex << int(got[i])
                    << ", rope + kv_store_fp8 0x" << int(want[i]) << std::dec;
      return false;
    }
    if (!cpu) return true;
    const int n_blocks = (ctx_ + block_ - 1) / block_;
    for (bool is_v : {false, true}) {
      const char* plane = is_v ? "V" : "K";
      if (download(is_v ? fused_.v : fused_.k, size_t(ctx_) * size_t(kv_dim_)) != cpu_.stored_bytes(0, is_v)) {
        ADD_FAILURE() << plane << " codes differ from the CPU's";
        return false;
      }
      const std::vector<float> got_s =
          download(is_v ? fused_.v_scale : fused_.k_scale, size_t(n_blocks) * size_t(sh_.n_kv_heads));
      if (!same_float_bits(got_s, cpu_.scales(0, is_v))) {
        ADD_FAILURE() << plane << " scales differ from the CPU's";
        return false;
      }
    }
    return true;
  }

  std::vector<uint8_t> fused_bytes() const { return fused_mem_.download(); }

 private:
  Shape sh_kv() const { return {sh_.n_kv_heads, sh_.head_dim}; }

  // The array of the layer that byte i of the allocation belongs to (or the padding after it).
  std::string array_of(size_t i) const {
    const uintptr_t base = reinterpret_cast<uintptr_t>(fused_mem_.get());
    const std::pair<const void*, const char*> arrays[] = {
        {fused_.k, "K codes"},         {fused_.v, "V codes"},       {fused_.k_scale, "K scales"},
        {fused_.v_scale, "V scales"},  {fused_.k_open, "K open rows"}, {fused_.v_open, "V open rows"},
        {fused_.open_blocks, "open_blocks"}};
    std::string name = "?";
    for (const auto& a : arrays)
      if (reinterpret_cast<uintptr_t>(a.first) - base <= i) name = a.second;
    return name;
  }

  int ctx_;
  RopeShape sh_;
  int block_;
  bool special_;
  int kv_dim_, q_dim_;
  size_t rows_;
  CpuKvCache cpu_;
  DeviceBuffer<uint8_t> ref_mem_, fused_mem_;
  Fp8KvLayer ref_, fused_;
  DeviceBuffer<float> q_ref_, q_fused_, k_ref_, k_fused_, v_;
  DeviceBuffer<float> inv_;
  DeviceBuffer<int> d_pos_;
};

// The writes in order on every shape (or the given ones); layers compared after each.
void run_rope_writes(const std::vector<Write>& writes, int ctx, int block = kKvFp8Block, bool special = false,
                     const std::vector<RopeShape>& shapes = {std::begin(kRopeShapes), std::end(kRopeShapes)}) {
  for (const RopeShape& sh : shapes) {
    SCOPED_TRACE(rope_shape_name(sh) + ", ctx " + std::to_string(ctx) + ", block " + std::to_string(block));
    RopeFp8Pair p(ctx, sh, block, special);
    ASSERT_TRUE(p.same()) << "after fp8_kv_layer_init";
    for (const Write& w : writes) {
      SCOPED_TRACE(write_name(w));
      p.write(w);
      ASSERT_TRUE(p.same());
    }
  }
}

TEST(KvFp8RopeStore, BadShapesFailByName) {  // host checks only: runs without a device
  Fp8KvLayer L;
  const uintptr_t base = uintptr_t(1) << 40;
  L = fp8_kv_layer_carve(reinterpret_cast<void*>(base), 64, 2, 18, kKvFp8Block);
  float* q = reinterpret_cast<float*>(base);
  const int* pos = reinterpret_cast<const int*>(base);
  EXPECT_THROW(rope_kv_store_fp8(q, q, q, q, pos, 1, 4, 2, 17, kKvFp8Block, 64, L, nullptr), Error);  // odd head_dim
  EXPECT_THROW(rope_kv_store_fp8(q, q, q, q, pos, 0, 4, 2, 18, kKvFp8Block, 64, L, nullptr), Error);  // no rows
  EXPECT_THROW(rope_kv_store_fp8(q, q, q, q, pos, 65, 4, 2, 18, kKvFp8Block, 64, L, nullptr), Error);  // > ctx
  EXPECT_THROW(rope_kv_store_fp8(q, q, q, q, pos, 1, 0, 2, 18, kKvFp8Block, 64, L, nullptr), Error);  // no heads
  EXPECT_THROW(rope_kv_store_fp8(nullptr, q, q, q, pos, 1, 4, 2, 18, kKvFp8Block, 64, L, nullptr), Error);
  EXPECT_THROW(rope_kv_store_fp8(q, q, q, nullptr, pos, 1, 4, 2, 18, kKvFp8Block, 64, L, nullptr), Error);
  EXPECT_THROW(rope_kv_store_fp8(q, q, q, q, pos, 1, 4, 2, 18, 0, 64, L, nullptr), Error);  // block 0
}

TEST(KvFp8RopeStore, DecodeStepsAcrossBlocksMatchRopeThenStore) {
  SKIP_WITHOUT_CUDA();
  run_rope_writes(decode_steps_150(), 150);
}

TEST(KvFp8RopeStore, PrefillChunksThenDecodeMatchRopeThenStore) {
  SKIP_WITHOUT_CUDA();
  run_rope_writes(chunks_then_decode_200(), 200);
  for (int n : {1, 31, 32, 33, 77}) {
    SCOPED_TRACE("prompt of " + std::to_string(n));
    std::vector<Write> w2 = {{0, n}};
    append_decode(&w2, n, 36);
    run_rope_writes(w2, 128);
  }
}

TEST(KvFp8RopeStore, RewindsMatchRopeThenStore) {
  SKIP_WITHOUT_CUDA();
  // Within the open block (rows from the open rows), into earlier blocks (rows re-rounded from their codes: the
  // decode form's reload too), jumps forward over unwritten rows.
  std::vector<Write> w = {{0, 76}};
  w.push_back({70, 1, 1});       // within open block 2
  append_decode(&w, 71, 10, 1);
  w.push_back({64, 3, 2});       // back to the block's start
  w.push_back({66, 40, 3});      // into the next block
  w.push_back({40, 1, 4});       // block 1, not open: one row, rows 32..39 from codes
  append_decode(&w, 41, 5, 4);
  w.push_back({10, 45, 5});      // block 0, not open, a chunk: rows 0..9 from codes
  w.push_back({97, 1, 6});       // block 3, not open, one row
  w.push_back({33, 70, 7});      // block 1 from row 1 across blocks 2 and 3
  w.push_back({120, 1, 8});      // jump forward within the open block
  w.push_back({150, 1, 8});      // jump forward into an unwritten block
  w.push_back({130, 20, 9});     // block 4 (not open) from row 2, to 149
  append_decode(&w, 150, 10, 9);
  run_rope_writes(w, 160);
}

TEST(KvFp8RopeStore, NanAndInfinityMatchRopeThenStore) {
  SKIP_WITHOUT_CUDA();
  run_rope_writes(nan_and_inf_writes_120(), 120, kKvFp8Block, /*special=*/true);
}

TEST(KvFp8RopeStore, OtherBlockSizesMatchRopeThenStore) {
  SKIP_WITHOUT_CUDA();
  // Block 1 and 7 (the register form with one slot), 64, and 128 (head_dim 128 and 256: one row's block no longer
  // fits the registers, so one row takes the general form; 128 x 256 needs the dynamic shared memory opt-in).
  for (int block : {1, 7, 64, 128}) {
    SCOPED_TRACE("block " + std::to_string(block));
    std::vector<Write> w = {{0, 5}, {5, 45}};
    append_decode(&w, 50, 20);
    w.push_back({66, 1, 1});
    w.push_back({20, 30, 2});
    w.push_back({50, 100, 3});
    append_decode(&w, 150, 10, 3);
    w.push_back({3, 1, 4});  // one row, back into the first block
    run_rope_writes(w, 300, block);
  }
}

TEST(KvFp8RopeStore, LargePositionsMatchRopeThenStore) {
  SKIP_WITHOUT_CUDA();
  // Angles past 105615 (sincosf's slow range reduction, pair 0 rotates by the position itself), up to the last
  // position of the context.
  const int ctx = 140000;
  std::vector<Write> w = {{ctx - 200, 70}};
  append_decode(&w, ctx - 130, 6);
  w.push_back({ctx - 40, 40});
  w.push_back({ctx - 150, 1, 1});
  w.push_back({ctx - 1, 1, 2});
  run_rope_writes(w, ctx, kKvFp8Block, false, {{4, 1, 64}, {6, 3, 18}, {2, 1, 128}});
}

TEST(KvFp8RopeStore, OutOfRangePositionStoresNothingAndRotatesQ) {
  SKIP_WITHOUT_CUDA();
  // The cache keeps every byte; q is rotated all the same, as rope() rotates it.
  const int ctx = 100;
  for (const RopeShape& sh : {RopeShape{6, 3, 18}, RopeShape{32, 8, 128}}) {
    SCOPED_TRACE(rope_shape_name(sh));
    RopeFp8Pair p(ctx, sh);
    p.write({0, 50});
    const std::vector<uint8_t> before = p.fused_bytes();
    for (const Write& w : std::vector<Write>{{-1, 1}, {ctx, 1}, {1 << 30, 1}, {-1, 2}, {ctx - 1, 2}, {ctx, 2}}) {
      SCOPED_TRACE(write_name(w));
      p.write(w, /*cpu=*/false);  // q compared with rope()'s in here
      EXPECT_TRUE(p.fused_bytes() == before);
      EXPECT_TRUE(p.same(/*cpu=*/false));
    }
  }
}

TEST(KvFp8RopeStore, CudaGraphReplayAtOtherPositionsMatchesRopeThenStore) {
  SKIP_WITHOUT_CUDA();
  // One rope_kv_store_fp8(n_tokens = 1) captured once, replayed with q, k, v and *d_pos0 changed in device memory:
  // decode across blocks, a rewind within the open block, into an earlier block, the last position. The reference
  // layer is written by rope() + kv_store_fp8() launched directly; the CPU cache gets rope()'s k rows.
  const int ctx = 130;
  std::vector<Write> w;
  append_decode(&w, 0, 40);
  append_decode(&w, 35, 10, 1);
  append_decode(&w, 5, 3, 2);
  w.push_back({ctx - 1, 1, 3});
  append_decode(&w, 8, 30, 4);
  for (const RopeShape& sh : kRopeShapes) {
    SCOPED_TRACE(rope_shape_name(sh));
    const size_t kv_dim = size_t(sh.n_kv_heads) * size_t(sh.head_dim), q_dim = size_t(sh.n_heads) * sh.head_dim;
    const Shape kv_sh = {sh.n_kv_heads, sh.head_dim};
    const size_t bytes = fp8_kv_layer_bytes(ctx, sh.n_kv_heads, sh.head_dim, kKvFp8Block);
    CpuKvCache cpu(KvDtype::FP8, 1, ctx, sh.n_kv_heads, sh.head_dim);
    DeviceBuffer<uint8_t> ref_mem(bytes), mem(bytes);
    ref_mem.poison();
    mem.poison();
    const Fp8KvLayer ref = fp8_kv_layer_carve(ref_mem.get(), ctx, sh.n_kv_heads, sh.head_dim, kKvFp8Block);
    const Fp8KvLayer L = fp8_kv_layer_carve(mem.get(), ctx, sh.n_kv_heads, sh.head_dim, kKvFp8Block);
    DeviceBuffer<float> q(q_dim), k(kv_dim), v(kv_dim), q_ref(q_dim), k_ref(kv_dim);
    DeviceBuffer<float> inv(rope_inv_freq_for(sh.head_dim));
    DeviceBuffer<int> d_pos(std::vector<int>{0}), d_pos_ref(std::vector<int>{0});
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    fp8_kv_layer_init(ref, ctx, sh.n_kv_heads, sh.head_dim, kKvFp8Block, s);
    fp8_kv_layer_init(L, ctx, sh.n_kv_heads, sh.head_dim, kKvFp8Block, s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    rope_kv_store_fp8(q.get(), k.get(), v.get(), inv.get(), d_pos.get(), 1, sh.n_heads, sh.n_kv_heads, sh.head_dim,
                      kKvFp8Block, ctx, L, s);
    CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (const Write& wr : w) {
      SCOPED_TRACE(write_name(wr));
      const std::vector<float> qr = make_q(wr.pos0, 1, sh, wr.version);
      const std::vector<float> kr = make_rows(wr.pos0, 1, kv_sh, false, wr.version, false);
      const std::vector<float> vr = make_rows(wr.pos0, 1, kv_sh, true, wr.version, false);
      q.upload(qr);
      k.upload(kr);
      v.upload(vr);
      q_ref.upload(qr);
      k_ref.upload(kr);
      d_pos.upload({wr.pos0});
      d_pos_ref.upload({wr.pos0});
      CUDA_CHECK(cudaGraphLaunch(exec, s));
      rope(q_ref.get(), k_ref.get(), inv.get(), d_pos_ref.get(), 1, sh.n_heads, sh.n_kv_heads, sh.head_dim, s);
      kv_store_fp8(k_ref.get(), v.get(), d_pos_ref.get(), 1, sh.n_kv_heads, sh.head_dim, kKvFp8Block, ctx, ref, s);
      CUDA_CHECK(cudaStreamSynchronize(s));
      const std::vector<float> k_rot = k_ref.download();
      cpu.store(0, wr.pos0, 1, k_rot.data(), vr.data());
      ASSERT_TRUE(same_float_bits(q.download(), q_ref.download())) << "q differs from rope()'s";
      ASSERT_TRUE(mem.download() == ref_mem.download()) << "the layer differs from rope + kv_store_fp8's";
      for (bool is_v : {false, true}) {
        ASSERT_TRUE(download(is_v ? L.v : L.k, size_t(ctx) * kv_dim) == cpu.stored_bytes(0, is_v))
            << (is_v ? "V" : "K") << " codes differ from the CPU's";
        const std::vector<float> got = download(is_v ? L.v_scale : L.k_scale,
                                                size_t((ctx + kKvFp8Block - 1) / kKvFp8Block) * sh.n_kv_heads);
        ASSERT_TRUE(same_float_bits(got, cpu.scales(0, is_v))) << (is_v ? "V" : "K") << " scales differ";
      }
    }
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaStreamDestroy(s));
  }
}

}  // namespace
}  // namespace llm
