// The CUDA engine's memory plan (engine/cuda/memory_plan.h). The sums mirror what the engine allocates: the
// row-major weights, one prepacked copy, the KV cache (engine/cuda/kv_cache.h), the decode and prefill activations
// (engine/cuda/activations.h) and the scratch of attention, sampling, cuBLAS and the GEMV context.
#include "engine/cuda/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "engine/cuda/kv_cache.h"  // DeviceKvCache::bytes
#include "kernels/gemv/gemv.h"     // kGemvPartialFloats
#include "kernels/ops/ops.h"       // attention_decode_scratch_bytes, sample_scratch_bytes

namespace llm {

namespace {
double gib(double bytes) { return bytes / double(size_t(1) << 30); }
}  // namespace

std::string gib_str(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", gib(bytes));
  return buf;
}

MemoryPlan MemoryPlanner::plan(int ctx, int chunk) const {
  const auto& c = c_;
  const double dim = c.dim, qd = c.q_dim(), kvd = c.kv_dim(), hid = c.hidden_dim, voc = c.vocab_size;
  const double layer_mats = qd * dim + 2 * kvd * dim + dim * qd + 3 * hid * dim;  // elements per layer
  MemoryPlan p;
  p.weights = 2.0 * (c.n_layers * layer_mats + voc * dim + (tied_ ? 0.0 : voc * dim));
  p.prepacked = 2.0 * (c.n_layers * layer_mats + voc * dim);  // padding of a mapping is not known in advance
  p.norms = 4.0 * ((2.0 * c.n_layers + 1) * dim + c.head_dim / 2);
  p.kv = DeviceKvCache::bytes(c, kv_, ctx);
  const double wide = std::max({dim, qd, hid});
  p.activations = 4.0 * (2 * dim + 3 * qd + 2 * kvd + 3 * hid + voc) +
                  4.0 * chunk * (dim + 2 * qd + 2 * kvd + 2 * hid) + 2.0 * chunk * wide + 4.0 * (4 + chunk);
  // The scratch query runs only for plausible contexts (an absurd ctx fails on the KV cache alone).
  const double attn = (p.kv < 1e12) ? double(attention_decode_scratch_bytes(c.n_heads, c.head_dim, ctx)) : 0.0;
  // The GEMV context (kernels/gemv/gemv.h) holds its own cuBLAS workspace and split-K partial sums; counted as ours.
  p.scratch = attn + double(sample_scratch_bytes(c.vocab_size)) + 2.0 * kCublasWorkspaceBytes +
              4.0 * kGemvPartialFloats + 2.0 * wide;
  return p;
}

int MemoryPlanner::choose_ctx(int requested, int want, int chunk, size_t free_bytes) const {
  if (requested < 0) fail("cuda backend: ctx_size must be >= 0, found ", requested);
  if (requested > 0) return requested;  // checked against the model maximum after the memory check
  // want: default_ctx_size(), the model maximum up to kDefaultCtxCap
  const MemoryPlan full = plan(want, std::min(chunk, want));
  if (full.total() <= double(free_bytes)) return want;
  // Whatever is left after everything but the KV cache (scratch bounded by its size at the maximum context).
  const double kv_per_pos = DeviceKvCache::bytes(c_, kv_, want) / double(want);
  const double left = double(free_bytes) - (full.total() - full.kv);
  int ctx = left > 0 ? int(std::min(double(want), std::floor(left / kv_per_pos))) : 0;
  if (ctx >= 256) ctx -= ctx % 256;
  if (ctx < 1) return want;  // nothing fits: the memory check reports it with the full numbers
  std::fprintf(stderr, "cuda: ctx_size capped to %d (the default %d needs %s GiB of KV cache; %s GiB free)\n",
               ctx, want, gib_str(full.kv).c_str(), gib_str(double(free_bytes)).c_str());
  return ctx;
}

void MemoryPlanner::require_fit(const MemoryPlan& plan, size_t free_b, const std::string& source,
                                const std::string& gemv_name, int ctx, bool ctx_given) {
  if (plan.total() > double(free_b))
    fail("model needs ", gib_str(plan.total()), " GiB of GPU memory, ", gib_str(double(free_b)), " GiB free (",
         source, ": weights ", gib_str(plan.weights), " GiB + prepacked for GEMV '", gemv_name, "' ",
         gib_str(plan.prepacked), " GiB + KV cache for ", ctx, " positions ", gib_str(plan.kv),
         " GiB + activations, scratch and reserve ",
         gib_str(plan.activations + plan.scratch + plan.norms + double(kReserveBytes)), " GiB)",
         ctx_given ? "; a smaller ctx_size needs less" : "");
}

}  // namespace llm
