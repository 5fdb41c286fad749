// Token sampling on the device (engine/sampler.h's rule) in one block of 1024 threads: greedy argmax, or
// softmax(logits / T) -> top-k -> top-p -> one draw with a uniform u, leaving the id in device memory.
//
// Probabilities are kept unnormalised, e_i = exp((l_i - max) / T) in (0, 1], and summed in 2^-39 fixed point
// (integer adds: the result does not depend on the order threads add in, so a draw is reproducible run to run).
// top-k and top-p thresholds are exact radix selects over the FP32 bit patterns of e (positive floats order like
// their bits): four passes of 8-bit digits, counting elements (top-k) or their mass (top-p). Ties at a threshold
// are kept by lowest index, exactly as the CPU's stable sort does, so the kept set is the CPU's (up to FP32 vs FP64
// rounding of probabilities that sit exactly on the top-p boundary). With top-k at most 1024 (and no more ties at the
// k-th value than that), the top-k set is gathered into shared memory after its select and top-p and the draw run over
// it (draw_candidates: the same integer sums, so the same token for the same u); otherwise over the whole vocabulary.
// Logits holding NaN or Inf anywhere in [0, vocab) give no token: *d_out = kSampleNonFinite (kernels/ops/ops.h), in the
// same 4-byte value the host copies back anyway, so detecting them costs no extra transfer.
// The draw walks the kept tokens in INDEX order, not in descending probability as engine/sampler.cpp does: each
// token is still chosen with probability p_i / sum(kept), i.e. the same distribution, but the same u generally
// picks a different token than the CPU sampler.
#include <climits>

#include "core/error.h"
#include "kernels/ops/argmax_rows.h"
#include "kernels/ops/block_reduce.cuh"
#include "kernels/cuda_check.h"
#include "kernels/ops/ops.h"

namespace llm {
namespace {

constexpr int kThreads = 1024;
constexpr int kMaxVocab = 1 << 24;               // keeps vocab * 2^39 below 2^63
constexpr float kMassScale = 549755813888.0f;  // 2^39

using u64 = unsigned long long;

struct SampleShared {
  u64 hist[256];  // radix histogram of one digit: counts or masses
  u64 scan[32];   // block scan scratch
  float red_v[32];
  int red_i[32];
  u64 above;      // weight strictly above the digits chosen so far
  uint32_t digit;
  int index;
};

__device__ __forceinline__ u64 mass_of(float e) { return u64(e * kMassScale); }
__device__ __forceinline__ uint32_t bits_of(float e) { return __float_as_uint(e); }

// Larger value wins; equal values: lower index (NaN never wins).
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

// Argmax of x[0..n), lowest index on ties; INT_MAX if every value is NaN. Every thread gets the result, and the
// return value: whether any of x[0..n) is NaN or Inf.
__device__ bool block_argmax(const float* __restrict__ x, int n, SampleShared& sh, float* out_v, int* out_i) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float bv = -INFINITY;
  int bi = INT_MAX;
  int bad = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float v = x[i];
    bad |= !isfinite(v);
    if (better(v, i, bv, bi)) bv = v, bi = i;
  }
  const bool any_bad = __syncthreads_or(bad) != 0;
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullWarp, bv, o);
    const int oi = __shfl_xor_sync(kFullWarp, bi, o);
    if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
  if (lane == 0) sh.red_v[warp] = bv, sh.red_i[warp] = bi;
  __syncthreads();
  bv = sh.red_v[lane];
  bi = sh.red_i[lane];
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullWarp, bv, o);
    const int oi = __shfl_xor_sync(kFullWarp, bi, o);
    if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
  *out_v = bv;
  *out_i = bi;
  return any_bad;
}

// Warp 0: the digit d (bins 255 -> 0) where the weight at or above it first reaches target.
__device__ void find_digit(SampleShared& sh, u64 above, u64 target) {
  const int lane = threadIdx.x & 31;
  const int hi = 255 - 8 * lane;  // lane 0 holds the highest bins
  u64 s = 0;
  for (int j = 0; j < 8; ++j) s += sh.hist[hi - j];
  u64 incl = s;
  for (int o = 1; o < 32; o <<= 1) {
    const u64 n = __shfl_up_sync(kFullWarp, incl, o);
    if (lane >= o) incl += n;
  }
  const unsigned ball = __ballot_sync(kFullWarp, above + incl >= target);
  const int first = ball ? __ffs(ball) - 1 : 31;  // none: the caller broke its promise; take the lowest bin
  if (lane == first) {
    u64 run = above + incl - s;
    for (int j = 0; j < 8; ++j) {
      const int b = hi - j;
      if (run + sh.hist[b] >= target || j == 7) {
        sh.digit = uint32_t(b);
        sh.above = run;
        break;
      }
      run += sh.hist[b];
    }
  }
}

// The largest bit pattern b such that the weight (count, or mass if kMass) of elements with pred and bits >= b is
// >= target (0 < target <= total weight). *above gets the weight of elements with bits > b.
template <bool kMass, typename Pred>
__device__ uint32_t radix_select(const float* e, int n, Pred pred, u64 target, u64* above_out, SampleShared& sh) {
  uint32_t prefix = 0, mask = 0;
  u64 above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    __syncthreads();  // previous readers of hist / digit are done
    if (threadIdx.x < 256) sh.hist[threadIdx.x] = 0;
    __syncthreads();
    // One shared atomic per warp and bin, not per element: e's high digits fall in a few bins (its exponents), and
    // 1024 threads adding into them one element at a time serialised on those few addresses (a 128K vocabulary
    // took ~1.8 ms per draw on an H100). The warp's lanes of one bin are summed first (integer adds: the same total).
    for (int base = 0; base < n; base += kThreads) {  // a block-uniform bound: every lane runs every round
      const int i = base + int(threadIdx.x);
      int bin = -1;
      u64 w = 0;
      if (i < n) {
        const float v = e[i];
        const uint32_t b = bits_of(v);
        if ((b & mask) == prefix && pred(i, b)) {
          bin = int((b >> shift) & 255u);
          w = kMass ? mass_of(v) : 1ull;
        }
      }
      const unsigned valid = __ballot_sync(kFullWarp, bin >= 0);
      if (valid == 0) continue;  // warp-uniform
      const unsigned peers = __match_any_sync(kFullWarp, bin);
      u64 sum = 0;
      if (kMass) {
        for (unsigned m = valid; m; m &= m - 1) {  // the same rounds in every lane (valid is warp-uniform)
          const int j = __ffs(m) - 1;
          const u64 wj = __shfl_sync(kFullWarp, w, j);
          if ((peers >> j) & 1u) sum += wj;
        }
      } else {
        sum = u64(__popc(peers));
      }
      if (bin >= 0 && int(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&sh.hist[bin], sum);
    }
    __syncthreads();
    if (threadIdx.x < 32) find_digit(sh, above, target);
    __syncthreads();
    prefix |= sh.digit << shift;
    mask |= 255u << shift;
    above = sh.above;
  }
  *above_out = above;
  return prefix;
}

// Contiguous index range of this thread (index-order walks need contiguous ranges per thread).
struct Range {
  int lo, hi;
};
__device__ __forceinline__ Range my_range(int n) {
  const int per = (n + kThreads - 1) / kThreads;
  const int lo = min(n, int(threadIdx.x) * per);
  return Range{lo, min(n, lo + per)};
}

// Index of the need-th (1-based, index order) element with pred; n - 1 (keep all) if there are at most need.
template <typename Pred>
__device__ int nth_index(const float* e, int n, Pred pred, u64 need, SampleShared& sh) {
  const Range r = my_range(n);
  u64 own = 0;
  for (int i = r.lo; i < r.hi; ++i) own += pred(i, bits_of(e[i])) ? 1 : 0;
  u64 total;
  const u64 pre = block_exclusive_scan(own, sh.scan, &total);
  if (threadIdx.x == 0) sh.index = n - 1;
  __syncthreads();
  if (total > need && pre < need && need <= pre + own) {
    u64 c = pre;
    for (int i = r.lo; i < r.hi; ++i)
      if (pred(i, bits_of(e[i])) && ++c == need) {
        sh.index = i;
        break;
      }
  }
  __syncthreads();
  return sh.index;
}

// Token whose interval of the kept mass, laid out in index order, contains u * total; -1 if nothing is kept.
template <typename Pred>
__device__ int draw(const float* e, int n, Pred kept, float u, SampleShared& sh) {
  const Range r = my_range(n);
  u64 own = 0;
  for (int i = r.lo; i < r.hi; ++i) {
    const float v = e[i];
    if (kept(i, bits_of(v))) own += mass_of(v);
  }
  u64 total;
  const u64 pre = block_exclusive_scan(own, sh.scan, &total);
  if (threadIdx.x == 0) sh.index = -1;
  __syncthreads();
  if (total > 0) {
    const double uu = u > 0.0f ? double(u) : 0.0;  // NaN and negatives -> 0
    u64 target = u64(uu * double(total));
    if (target >= total) target = total - 1;
    if (pre <= target && target < pre + own) {
      u64 c = pre;
      for (int i = r.lo; i < r.hi; ++i) {
        const float v = e[i];
        if (!kept(i, bits_of(v))) continue;
        c += mass_of(v);
        if (target < c) {
          sh.index = i;
          break;
        }
      }
    }
  }
  __syncthreads();
  return sh.index;
}

// The top-k set gathered into shared memory (any order) when it is small: top-p and the draw then run over at most
// kCand candidates instead of over the vocabulary (four radix passes, two index walks and a draw pass saved).
constexpr int kCand = kThreads;  // one candidate per thread
struct Candidates {
  float v[kCand];
  int idx[kCand];
  unsigned char keep[kCand];
  int count;
};

// Candidate t of c (thread t owns it; t < n) -> the token drawn, exactly as the full-vocabulary path draws: the kept
// set is the top-k (bits > kbits, and the first ties_kept of bits == kbits by index), then the top-p prefix in
// (value desc, index asc) order whose mass first reaches p_target (0: no top-p), then the draw in index order. Every
// figure is an integer sum over candidates, so the candidates' order in c does not change the result; -1 if nothing
// kept has mass.
__device__ int draw_candidates(Candidates& c, int n, uint32_t kbits, u64 ties_kept, u64 p_target, float u,
                               SampleShared& sh) {
  const int t = threadIdx.x;
  const bool mine = t < n;
  const float v = mine ? c.v[t] : 0.0f;
  const int idx = mine ? c.idx[t] : INT_MAX;
  const uint32_t b = bits_of(v);
  const u64 m = mass_of(v);
  bool in = mine && b > kbits;
  if (mine && b == kbits) {
    u64 rank = 0;  // ties at the k-th value kept by lowest index
    for (int j = 0; j < n; ++j) rank += (bits_of(c.v[j]) == kbits && c.idx[j] < idx) ? 1 : 0;
    in = rank < ties_kept;
  }
  if (mine) c.keep[t] = in;
  __syncthreads();
  if (p_target > 0) {
    if (in) {
      u64 before = 0;  // mass ranked before this one: larger, or equal with a lower index
      for (int j = 0; j < n; ++j)
        if (c.keep[j] && better(c.v[j], c.idx[j], v, idx)) before += mass_of(c.v[j]);
      in = before < p_target;
    }
    __syncthreads();  // every reader of keep is done
    if (mine) c.keep[t] = in;
    __syncthreads();
  }
  if (t == 0) sh.index = -1;
  __syncthreads();
  if (in) {
    u64 pre = 0, total = 0;  // kept mass before this one in index order, and all of it
    for (int j = 0; j < n; ++j) {
      if (!c.keep[j]) continue;
      const u64 mj = mass_of(c.v[j]);
      total += mj;
      if (c.idx[j] < idx) pre += mj;
    }
    if (total > 0) {
      const double uu = u > 0.0f ? double(u) : 0.0;  // NaN and negatives -> 0
      u64 target = u64(uu * double(total));
      if (target >= total) target = total - 1;
      if (pre <= target && target < pre + m) sh.index = idx;
    }
  }
  __syncthreads();
  return sh.index;
}

// logits [vocab]; e [vocab] scratch for the unnormalised probabilities.
__global__ __launch_bounds__(kThreads) void sample_kernel(const float* __restrict__ logits, int vocab,
                                                          float temperature, int top_k, float top_p, float u,
                                                          int* __restrict__ d_out, float* __restrict__ e,
                                                          int* __restrict__ d_step, int next_pos) {
  __shared__ SampleShared sh;
  __shared__ Candidates cand;
  // The id for the host (*d_out) and, with d_step, the next decode step's {pos, token} (a non-finite draw leaves
  // token 0 there: the step that may already be queued behind this one reads a valid row, and the host stops the run).
  auto emit = [&](int id) {
    if (threadIdx.x != 0) return;
    *d_out = id;
    if (d_step) {
      d_step[0] = next_pos;
      d_step[1] = id >= 0 ? id : 0;
    }
  };
  float mx;
  int im;
  if (block_argmax(logits, vocab, sh, &mx, &im)) {  // NaN or Inf: no token, the host stops the run
    emit(kSampleNonFinite);
    return;
  }
  if (im == INT_MAX) im = 0;  // unreachable now (NaN is flagged above); kept as the CPU argmax's rule
  // Greedy as the CPU sampler (T <= 0 or top_k == 1); a +inf maximum has no softmax either.
  if (!(temperature > 0.0f) || top_k == 1 || !isfinite(mx)) {
    emit(im);
    return;
  }

  u64 z_part = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = expf((logits[i] - mx) / temperature);
    e[i] = v;
    z_part += mass_of(v);
  }
  u64 z;
  block_exclusive_scan(z_part, sh.scan, &z);  // its barriers also publish e[] to the whole block

  // top-p's target: the mass of the full softmax the most likely prefix must reach (at least the most likely token).
  const double pt = double(top_p) * double(z);
  const u64 p_target = pt > 1.0 ? u64(ceil(pt)) : 1ull;

  // top-k: the k-th largest value, ties at it kept by lowest index so exactly k survive.
  uint32_t kbits = 0;  // 0 with kcut = vocab - 1 keeps everything
  int kcut = vocab - 1;
  if (top_k > 0 && top_k < vocab) {
    u64 above;
    kbits = radix_select<false>(e, vocab, [](int, uint32_t) { return true; }, u64(top_k), &above, sh);
    if (top_k <= kCand) {  // gather every value at or above the k-th; few enough (ties) and the rest runs on them
      if (threadIdx.x == 0) cand.count = 0;
      __syncthreads();
      for (int i = threadIdx.x; i < vocab; i += kThreads) {
        const float v = e[i];
        if (bits_of(v) >= kbits) {
          const int slot = atomicAdd(&cand.count, 1);
          if (slot < kCand) cand.v[slot] = v, cand.idx[slot] = i;
        }
      }
      __syncthreads();
      const int n = cand.count;
      if (n <= kCand) {
        const int tok = draw_candidates(cand, n, kbits, u64(top_k) - above, top_p < 1.0f ? p_target : 0, u, sh);
        emit(tok >= 0 ? tok : im);
        return;
      }
      // more ties at the k-th value than candidates hold: the whole-vocabulary path below
    }
    const uint32_t kb = kbits;
    kcut = nth_index(e, vocab, [kb](int, uint32_t b) { return b == kb; }, u64(top_k) - above, sh);
  }
  auto in_k = [kbits, kcut](int i, uint32_t b) { return b > kbits || (b == kbits && i <= kcut); };

  // top-p over the top-k set: the smallest most-likely prefix whose mass reaches top_p of the full softmax.
  uint32_t pbits = 0;
  int pcut = vocab - 1;
  if (top_p < 1.0f) {
    const u64 target = p_target;
    u64 part = 0;
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const float v = e[i];
      if (in_k(i, bits_of(v))) part += mass_of(v);
    }
    u64 mass_k;
    block_exclusive_scan(part, sh.scan, &mass_k);
    if (mass_k >= target) {  // otherwise the whole top-k set is kept
      u64 above;
      pbits = radix_select<true>(e, vocab, in_k, target, &above, sh);
      const u64 fv = mass_of(__uint_as_float(pbits));
      u64 need = (fv > 0 && above < target) ? (target - above + fv - 1) / fv : 1;
      if (need < 1) need = 1;
      const uint32_t pb = pbits;
      pcut = nth_index(e, vocab, [pb, in_k](int i, uint32_t b) { return b == pb && in_k(i, b); }, need,
                       sh);
    }
  }
  auto kept = [in_k, pbits, pcut](int i, uint32_t b) {
    return in_k(i, b) && (b > pbits || (b == pbits && i <= pcut));
  };
  const int tok = draw(e, vocab, kept, u, sh);
  emit(tok >= 0 ? tok : im);
}

// One block per row: argmax_rows_device.
__global__ __launch_bounds__(kThreads) void argmax_rows_kernel(const float* __restrict__ logits, size_t ld, int vocab,
                                                               int* __restrict__ d_out, float* __restrict__ d_margin) {
  __shared__ SampleShared sh;
  float mx;
  int im;
  const float* row = logits + size_t(blockIdx.x) * ld;
  const bool bad = block_argmax(row, vocab, sh, &mx, &im);
  if (threadIdx.x == 0) d_out[blockIdx.x] = bad ? kSampleNonFinite : (im == INT_MAX ? 0 : im);
  if (!d_margin) return;  // uniform
  // The second: the largest value at another index (a tie with the first gives margin 0).
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float second = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += kThreads)
    if (i != im) second = fmaxf(second, row[i]);
  for (int o = 16; o > 0; o >>= 1) second = fmaxf(second, __shfl_xor_sync(kFullWarp, second, o));
  __syncthreads();  // block_argmax's last reads of red_v are done
  if (lane == 0) sh.red_v[warp] = second;
  __syncthreads();
  if (warp == 0) {
    second = sh.red_v[lane];
    for (int o = 16; o > 0; o >>= 1) second = fmaxf(second, __shfl_xor_sync(kFullWarp, second, o));
    if (lane == 0) d_margin[blockIdx.x] = bad || vocab < 2 ? INFINITY : mx - second;
  }
}

}  // namespace

size_t sample_scratch_bytes(int vocab) { return (size_t(vocab > 0 ? vocab : 0) * sizeof(float) + 255) / 256 * 256; }

void sample_device(const float* logits, int vocab, float temperature, int top_k, float top_p, float u, int* d_out,
                   void* scratch, cudaStream_t s, int* d_step, int next_pos) {
  if (vocab <= 0 || vocab > kMaxVocab) fail("sample_device: vocab ", vocab, " outside 1..", kMaxVocab);
  if (scratch == nullptr) fail("sample_device: scratch is null (size it with sample_scratch_bytes)");
  sample_kernel<<<1, kThreads, 0, s>>>(logits, vocab, temperature, top_k, top_p, u, d_out,
                                       static_cast<float*>(scratch), d_step, next_pos);
  CUDA_CHECK_LAUNCH("sample_kernel");
}

void argmax_rows_device(const float* logits, int rows, size_t ld, int vocab, int* d_out, cudaStream_t s,
                        float* d_margin) {
  if (rows < 1 || vocab < 1 || size_t(vocab) > ld || !logits || !d_out)
    fail("argmax_rows_device: ", rows, " rows of ", vocab, " logits at pitch ", ld, " (or a null pointer)");
  argmax_rows_kernel<<<unsigned(rows), kThreads, 0, s>>>(logits, ld, vocab, d_out, d_margin);
  CUDA_CHECK_LAUNCH("argmax_rows_kernel");
}

}  // namespace llm
