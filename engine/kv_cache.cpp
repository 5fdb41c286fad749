// CpuKvCache: the CPU reference's KV cache in F32, BF16 or FP8 (see engine/kv_cache.h for the FP8 block scheme).
#include "engine/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/dtype.h"  // f32_to_bf16, bf16_to_f32
#include "core/error.h"
#include "core/fp8.h"    // fp8_block_amax, fp8_block_scale, fp8_quantize, fp8_dequantize

namespace llm {

CpuKvCache::CpuKvCache(KvDtype dtype, int n_layers, int ctx, int n_kv_heads, int head_dim, int block)
    : dtype_(dtype == KvDtype::Default ? KvDtype::F32 : dtype),
      n_layers_(n_layers),
      ctx_(ctx),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      kv_dim_(n_kv_heads * head_dim),
      block_(block),
      n_blocks_(block > 0 ? (ctx + block - 1) / block : 0) {
  if (n_layers < 1 || ctx < 1 || n_kv_heads < 1 || head_dim < 1)
    fail("kv cache: bad shape: ", n_layers, " layers, ", ctx, " positions, ", n_kv_heads, " KV heads of ", head_dim);
  if (block < 1) fail("kv cache: FP8 block of ", block, " positions (need at least 1)");
  const size_t n = size_t(n_layers) * size_t(ctx) * size_t(kv_dim_);
  for (Plane* p : {&k_, &v_}) {
    switch (dtype_) {
      case KvDtype::F32: p->f32.assign(n, 0.0f); break;
      case KvDtype::BF16: p->bf16.assign(n, 0); break;
      case KvDtype::FP8:
        p->fp8.assign(n, 0);
        p->scale.assign(size_t(n_layers) * size_t(n_blocks_) * size_t(n_kv_heads), 0.0f);
        p->open.assign(size_t(n_layers) * size_t(block) * size_t(kv_dim_), 0.0f);
        break;
      case KvDtype::Default: break;
    }
  }
  if (dtype_ == KvDtype::FP8) open_block_.assign(size_t(n_layers), -1);
}

uint64_t CpuKvCache::bytes(KvDtype dtype, int n_layers, int kv_dim, int n_kv_heads, int ctx, int block) {
  const uint64_t elems = 2ull * uint64_t(n_layers) * uint64_t(ctx) * uint64_t(kv_dim);
  switch (dtype) {
    case KvDtype::Default:
    case KvDtype::F32: return elems * 4;
    case KvDtype::BF16: return elems * 2;
    case KvDtype::FP8: {
      const uint64_t blocks = (uint64_t(ctx) + uint64_t(block) - 1) / uint64_t(block);
      return elems + 2ull * uint64_t(n_layers) * blocks * uint64_t(n_kv_heads) * 4;
    }
  }
  return 0;
}

void CpuKvCache::store(int layer, int pos0, int n, const float* k, const float* v) {
  if (layer < 0 || layer >= n_layers_ || pos0 < 0 || n < 1 || pos0 + n > ctx_)
    fail("kv cache: rows ", pos0, "..", pos0 + n - 1, " of layer ", layer, " outside ", n_layers_, " layers x ", ctx_,
         " positions");
  const size_t off = at(layer, pos0), count = size_t(n) * size_t(kv_dim_);
  switch (dtype_) {
    case KvDtype::Default:
    case KvDtype::F32:
      std::memcpy(k_.f32.data() + off, k, count * sizeof(float));
      std::memcpy(v_.f32.data() + off, v, count * sizeof(float));
      return;
    case KvDtype::BF16:
      for (size_t i = 0; i < count; ++i) {
        k_.bf16[off + i] = f32_to_bf16(k[i]);
        v_.bf16[off + i] = f32_to_bf16(v[i]);
      }
      return;
    case KvDtype::FP8:
      // Block by block, each encoded once from its rows so far: the bytes do not depend on the chunking.
      for (int pos = pos0; pos < pos0 + n;) {
        const int b = pos / block_, end = std::min(pos0 + n, (b + 1) * block_);
        const size_t in = size_t(pos - pos0) * size_t(kv_dim_);
        const int r0 = pos - b * block_;
        if (r0 > 0 && open_block_[size_t(layer)] != b) {
          // Not the open block: its earlier rows come back from their FP8 values (rounded once more below).
          for (Plane* p : {&k_, &v_})
            for (int r = 0; r < r0; ++r)
              for (int h = 0; h < n_kv_heads_; ++h) {
                const float s = p->scale[(size_t(layer) * size_t(n_blocks_) + size_t(b)) * size_t(n_kv_heads_) +
                                         size_t(h)];
                const size_t src = at(layer, b * block_ + r) + size_t(h) * size_t(head_dim_);
                float* dst = p->open.data() + (size_t(layer) * size_t(block_) + size_t(r)) * size_t(kv_dim_) +
                             size_t(h) * size_t(head_dim_);
                for (int i = 0; i < head_dim_; ++i) dst[i] = fp8_dequantize(p->fp8[src + size_t(i)], s);
              }
        }
        open_block_[size_t(layer)] = b;
        store_fp8_block(k_, layer, pos, end - pos, k + in);
        store_fp8_block(v_, layer, pos, end - pos, v + in);
        pos = end;
      }
      return;
  }
}

void CpuKvCache::store_fp8_block(Plane& p, int layer, int pos0, int n, const float* x) {
  const int b = pos0 / block_, r0 = pos0 - b * block_, rows = r0 + n;  // rows [0, rows) of the block are written
  float* open = p.open.data() + size_t(layer) * size_t(block_) * size_t(kv_dim_);
  std::memcpy(open + size_t(r0) * size_t(kv_dim_), x, size_t(n) * size_t(kv_dim_) * sizeof(float));
  for (int h = 0; h < n_kv_heads_; ++h) {
    const float* src = open + size_t(h) * size_t(head_dim_);  // row r of this head: src + r * kv_dim
    float amax = 0.0f;
    for (int r = 0; r < rows; ++r) amax = std::max(amax, fp8_block_amax(src + size_t(r) * size_t(kv_dim_), head_dim_));
    const float s = fp8_block_scale(amax);
    p.scale[(size_t(layer) * size_t(n_blocks_) + size_t(b)) * size_t(n_kv_heads_) + size_t(h)] = s;
    for (int r = 0; r < rows; ++r) {
      uint8_t* dst = p.fp8.data() + at(layer, b * block_ + r) + size_t(h) * size_t(head_dim_);
      const float* row_x = src + size_t(r) * size_t(kv_dim_);
      for (int i = 0; i < head_dim_; ++i) dst[i] = fp8_quantize(row_x[i], s);
    }
  }
}

const float* CpuKvCache::row(const Plane& p, int layer, int pos, int head, float* scratch) const {
  const size_t off = at(layer, pos) + size_t(head) * size_t(head_dim_);
  switch (dtype_) {
    case KvDtype::Default:
    case KvDtype::F32: return p.f32.data() + off;
    case KvDtype::BF16:
      for (int i = 0; i < head_dim_; ++i) scratch[i] = bf16_to_f32(p.bf16[off + size_t(i)]);
      return scratch;
    case KvDtype::FP8: {
      const float s =
          p.scale[(size_t(layer) * size_t(n_blocks_) + size_t(pos / block_)) * size_t(n_kv_heads_) + size_t(head)];
      for (int i = 0; i < head_dim_; ++i) scratch[i] = fp8_dequantize(p.fp8[off + size_t(i)], s);
      return scratch;
    }
  }
  return scratch;
}

std::vector<uint8_t> CpuKvCache::stored_bytes(int layer, bool value) const {
  const Plane& p = value ? v_ : k_;
  const size_t off = at(layer, 0), n = size_t(ctx_) * size_t(kv_dim_);
  const uint8_t* src = dtype_ == KvDtype::FP8    ? p.fp8.data() + off
                       : dtype_ == KvDtype::BF16 ? reinterpret_cast<const uint8_t*>(p.bf16.data() + off)
                                                 : reinterpret_cast<const uint8_t*>(p.f32.data() + off);
  const size_t esize = dtype_ == KvDtype::FP8 ? 1 : dtype_ == KvDtype::BF16 ? 2 : 4;
  return std::vector<uint8_t>(src, src + n * esize);
}

std::vector<float> CpuKvCache::scales(int layer, bool value) const {
  if (dtype_ != KvDtype::FP8) return {};
  const Plane& p = value ? v_ : k_;
  const size_t per = size_t(n_blocks_) * size_t(n_kv_heads_);
  const auto first = p.scale.begin() + long(size_t(layer) * per);
  return std::vector<float>(first, first + long(per));
}

}  // namespace llm
