// The CUDA engine's FP8 KV cache (--kv-dtype fp8), its layout and its store: the device twin of CpuKvCache's FP8 form
// (engine/kv_cache.h), byte for byte. Per layer, K and V codes [ctx, kv_dim] (E4M3, core/fp8.h), one FP32 scale per
// (K or V, KV head, block of `block` positions) [n_blocks, n_kv_heads], scale = amax / 448 over the block's rows
// written so far, and the open block's rows as computed (FP32 [block, kv_dim] each for K and V), re-encoded at every
// write. Same rows in, same codes and scales out as CpuKvCache, whatever the chunking, rewinds included (the same
// functions of core/fp8.h on both sides; IEEE division, no fast math). Device code and host launchers only.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace llm {

// One layer's FP8 KV cache on the device (all pointers device memory, allocated by the caller, e.g. one allocation
// of fp8_kv_layer_bytes() split by fp8_kv_layer_carve()):
struct Fp8KvLayer {
  uint8_t* k = nullptr;        // codes [ctx, kv_dim] (row = position, KV heads side by side, head_dim each)
  uint8_t* v = nullptr;
  float* k_scale = nullptr;    // [n_blocks = ceil(ctx / block), n_kv_heads]
  float* v_scale = nullptr;
  float* k_open = nullptr;     // the open block's rows as computed [block, kv_dim]
  float* v_open = nullptr;
  // [2, n_kv_heads] ints (K heads, then V heads): the block whose rows k_open / v_open hold for that plane and head,
  // -1 none. All 2 * n_kv_heads entries always hold the same value; one per (plane, head) because each is read and
  // written by the one CUDA block that owns that plane and head's open rows, so one launch needs no grid-wide
  // ordering (a single int read by every block and updated by one would race).
  int* open_blocks = nullptr;
};

// Bytes of everything above for one layer, each array 256-byte aligned (the padding counted).
size_t fp8_kv_layer_bytes(int ctx, int n_kv_heads, int head_dim, int block);

// The arrays of one layer laid out in `base` (device memory of fp8_kv_layer_bytes() bytes, 256-byte aligned).
Fp8KvLayer fp8_kv_layer_carve(void* base, int ctx, int n_kv_heads, int head_dim, int block);

// The state of a fresh CpuKvCache: codes, scales and open rows zero, open_blocks -1. Async on `s`. Zeroing the codes
// and scales (not only open_blocks) is what makes a write that jumps forward over unwritten positions of a block
// (which reads them back, as CpuKvCache does) give CpuKvCache's bytes too; it is one memset of the layer.
void fp8_kv_layer_init(const Fp8KvLayer& L, int ctx, int n_kv_heads, int head_dim, int block, cudaStream_t s);

// RoPE and the FP8 store in one launch (the FP8 twin of rope_kv_store, kernels/ops/ops.h): q [n_tokens, n_heads,
// head_dim] rotated in place as rope() does, and rows *d_pos0 .. *d_pos0 + n_tokens - 1 of the cache written from k
// rotated as rope() would rotate it and v ([n_tokens, kv_dim] FP32, unrotated k in) with CpuKvCache::store's FP8
// semantics: every block touched is re-encoded from its rows so far (rows before *d_pos0 in the first touched block
// come from the open rows when that block is the open one, else from decoding its FP8 codes with its old scale, which
// rounds them once more, as on the CPU); rows of a touched block after the last one written keep their old codes; the
// open rows and open_blocks end as CpuKvCache's do (the last touched block's rows). k itself is left unrotated (only
// the cache is read afterwards). Bit for bit rope(q, k, ...) then the tests' plain store of the rotated rows
// (tests/gpu/kv_store_fp8_oracle.h): the same q bits, the same codes, scales, open rows and open_blocks (the same
// rotation code, kernels/ops/rope_device.cuh). inv_freq [head_dim / 2] as rope's.
// *d_pos0 is read on the device. q is rotated whatever it holds (as rope does); a *d_pos0 with rows outside [0, ctx)
// writes no cache byte (CpuKvCache fails there; the device cannot: the caller checks positions on the host).
// One kernel: CUDA blocks of the store (one per touched block, KV head and plane: ceil((n_tokens - 1) / block) + 1,
// the most blocks n_tokens rows can touch, capped at n_blocks, x n_kv_heads x 2), then
// ceil(n_tokens * n_heads * head_dim / 2 / 256) (at most 65536) more that rotate q; the launch depends only on
// n_tokens and the shapes (CUDA graph replay). For n_tokens = 1 with block * head_dim <= 8192 and head_dim <= 512
// (the decode step) the store runs a form that keeps the block's rows in registers and issues all its
// position-independent loads (*d_pos0, the open_blocks entry, the new row, the whole open block) before waiting on
// any. Shapes are checked here: n_tokens in 1..ctx, block >= 1, head_dim even, n_heads >= 1, ...
void rope_kv_store_fp8(float* q, const float* k, const float* v, const float* inv_freq, const int* d_pos0,
                       int n_tokens, int n_heads, int n_kv_heads, int head_dim, int block, int ctx,
                       const Fp8KvLayer& L, cudaStream_t s);

}  // namespace llm
