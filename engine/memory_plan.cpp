// The CUDA engine's memory plan (engine/memory_plan.h). The sums mirror what the engine allocates: the row-major BF16
// weights (engine/cuda/device_model.h), one prepacked copy (engine/cuda/gemv_mappings.h), the KV cache, the decode and
// prefill activations (engine/cuda/activations.h) and the scratch of attention, sampling, cuBLAS and the GEMV context.
#include "engine/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/error.h"
#include "kernels/gemv/gemv_epilogue.h"  // kGemvEpiloguePartials (plain C++)
#include "kernels/quant/gemv_quant_plan.h"  // quant_batch_x_bytes (plain C++)
#include "models/quant.h"

namespace llm {

namespace {

double gib(double bytes) { return bytes / double(size_t(1) << 30); }

// The matrices a decode step reads, per layer and the head, in the order the engine uploads them.
std::vector<const HostTensor*> decode_matrices(const Model& m, bool tied) {
  std::vector<const HostTensor*> out;
  for (const LayerWeights& lw : m.weights.layers)
    for (const HostTensor* t : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down}) out.push_back(t);
  out.push_back(tied ? &m.weights.embedding : &m.weights.head);
  return out;
}

}  // namespace

bool kept_quantized(const HostTensor& t, bool dequantize) { return t.quant != 0 && !dequantize; }

bool needs_bf16_copy(const std::vector<const HostTensor*>& members, bool dequantize) {
  for (const HostTensor* t : members)
    if (!kept_quantized(*t, dequantize)) return true;
  return false;
}

bool embedding_on_host(const Model& m, bool tied, bool dequantize) {
  if (tied || dequantize) return false;
  for (const HostTensor* t : decode_matrices(m, tied))
    if (kept_quantized(*t, dequantize)) return true;
  return false;
}

std::string gib_str(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", gib(bytes));
  return buf;
}

MemoryPlanner::MemoryPlanner(const Model& model, bool tied, bool keep_quant, KvDtype kv, DeviceSizes sizes)
    : c_(model.config), source_(model.source), tied_(tied), kv_(kv), sizes_(std::move(sizes)) {
  const double voc = c_.vocab_size, dim = c_.dim;
  const double layer_mats = double(c_.q_dim()) * dim * 2 + 2.0 * c_.kv_dim() * dim + 3.0 * c_.hidden_dim * dim;
  bf16_weights_ = 2.0 * (c_.n_layers * layer_mats + voc * dim + (tied_ ? 0.0 : voc * dim));
  std::map<std::string, double> by_type;
  const std::vector<const HostTensor*> mats = decode_matrices(model, tied_);
  if (mats.size() != size_t(c_.n_layers) * 7 + 1 || model.weights.layers.empty()) {
    const int a = sizes_.bf16_rowmajor_align;  // shapes from the config alone
    const bool in_place = a > 0 && c_.dim % a == 0 && c_.q_dim() % a == 0 && c_.hidden_dim % a == 0;
    if (!in_place) by_type["BF16"] = 2.0 * (c_.n_layers * layer_mats + voc * dim);
  } else {
    const int align = sizes_.bf16_rowmajor_align;
    for (const HostTensor* t : mats) {
      const bool quant = kept_quantized(*t, !keep_quant);
      const GgmlQuantType q = GgmlQuantType(t->quant);
      if (!quant && align > 0 && t->cols % align == 0) continue;  // read in place from the BF16 copy
      if (!quant) {
        by_type["BF16"] += 2.0 * double(t->numel());
        continue;
      }
      const double stored = double(ggml_quant_row_bytes(q, t->cols)) * double(t->rows);
      stored_by_type_[ggml_quant_name(q)] += stored;
      by_type[ggml_quant_name(q)] += sizes_.quant_matrix_bytes ? sizes_.quant_matrix_bytes(q, t->rows, t->cols) : stored;
    }
    // The BF16 copy: the embedding, and each decode matrix with a member not kept quantized (needs_bf16_copy).
    const bool dequantize = !keep_quant;
    bf16_weights_ = 2.0 * double(model.weights.embedding.numel());
    if (embedding_on_host(model, tied_, dequantize)) {
      host_embedding_ = bf16_weights_;
      bf16_weights_ = 0;
    }
    // prefill: the matrix goes through a prefill GEMM (the head does not: prefill and verify run it as a GEMV).
    auto group = [&](const std::vector<const HostTensor*>& members, bool prefill = true) {
      double elems = 0;
      for (const HostTensor* t : members) elems += double(t->numel());
      if (needs_bf16_copy(members, dequantize))
        bf16_weights_ += 2.0 * elems;
      else if (prefill)
        prefill_dequant_ = std::max(prefill_dequant_, 2.0 * elems);
    };
    for (const LayerWeights& lw : model.weights.layers) {
      group({&lw.wq, &lw.wk, &lw.wv});
      group({&lw.wo});
      group({&lw.w_gate, &lw.w_up});
      group({&lw.w_down});
    }
    if (!tied_) group({&model.weights.head}, /*prefill=*/false);
  }
  prepacked_by_type_.assign(by_type.begin(), by_type.end());
  std::stable_sort(prepacked_by_type_.begin(), prepacked_by_type_.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
}

MemoryPlan MemoryPlanner::plan(int ctx, int chunk) const {
  const auto& c = c_;
  const double dim = c.dim, qd = c.q_dim(), kvd = c.kv_dim(), hid = c.hidden_dim, voc = c.vocab_size;
  MemoryPlan p;
  p.weights = bf16_weights_;
  p.prepacked_by_type = prepacked_by_type_;
  p.stored_by_type = stored_by_type_;
  for (const auto& t : prepacked_by_type_) p.prepacked += t.second;
  p.norms = 4.0 * ((2.0 * c.n_layers + 1) * dim + c.head_dim / 2);
  p.kv = sizes_.kv_bytes ? sizes_.kv_bytes(ctx) : 0.0;
  const double wide = std::max({dim, qd, hid});
  // The decode buffers: kTokenSlabs slabs (with the fold's sums and decode attention's scratch), or one set of them.
  const double slabs = (sizes_.decode_slab && p.kv < 1e12)
                           ? kTokenSlabs * sizes_.decode_slab(ctx)
                           : 4.0 * (2 * dim + 3 * qd + 2 * kvd + 3 * hid + voc) +
                                 4.0 * (2 * kGemvEpiloguePartials + 5) +  // the RMSNorm fold's sums and counters
                                 double(quant_batch_x_bytes(1, int64_t(hid)));  // SwiGLU's output in int8 (down's x)
  p.activations = slabs +
                  4.0 * chunk * (dim + 2 * qd + 2 * kvd + 2 * hid) + 2.0 * chunk * wide + 4.0 * (4 + chunk) +
                  double(quant_batch_x_bytes(quant_batch_rows_held(chunk, sizes_.quant_batch_rows), int64_t(wide))) +
                  4.0 * std::min(chunk, kExactPassMax) * wide;  // an exact verify's FP32 rows (Activations::pf32)
  // The scratch query runs only for plausible contexts (an absurd ctx fails on the KV cache alone).
  const double attn = (p.kv < 1e12 && sizes_.attention_scratch) ? sizes_.attention_scratch(ctx) : 0.0;
  p.prefill_dequant = prefill_dequant_;
  p.host_embedding = host_embedding_;
  p.scratch = attn + sizes_.sample_scratch + double(kCublasWorkspaceBytes) + sizes_.gemv_context + 2.0 * wide +
              prefill_dequant_;
  return p;
}

int MemoryPlanner::choose_ctx(int requested, int want, int chunk, size_t free_bytes) const {
  if (requested < 0) fail("cuda backend: ctx_size must be >= 0, found ", requested);
  if (requested > 0) return requested;  // checked against the model maximum after the memory check
  // want: default_ctx_size(), the model maximum up to kDefaultCtxCap
  const MemoryPlan full = plan(want, std::min(chunk, want));
  if (full.total() <= double(free_bytes)) return want;
  // Whatever is left after everything but the KV cache (scratch bounded by its size at the maximum context).
  const double kv_per_pos = full.kv / double(want);
  const double left = double(free_bytes) - (full.total() - full.kv);
  int ctx = (left > 0 && kv_per_pos > 0) ? int(std::min(double(want), std::floor(left / kv_per_pos))) : 0;
  if (ctx >= 256) ctx -= ctx % 256;
  if (ctx < 1) return want;  // nothing fits: the memory check reports it with the full numbers
  std::fprintf(stderr, "cuda: ctx_size capped to %d (the default %d needs %s GiB of KV cache; %s GiB free)\n",
               ctx, want, gib_str(full.kv).c_str(), gib_str(double(free_bytes)).c_str());
  return ctx;
}

std::string MemoryPlanner::breakdown(const MemoryPlan& p, const std::string& gemv_name, int ctx) const {
  std::ostringstream o;
  o << "weights " << gib_str(p.weights) << " GiB (BF16 row-major copy"
    << (p.prefill_dequant > 0 ? " of what is not kept quantized" : "")
    << (p.host_embedding > 0 ? "; the embedding's " + gib_str(p.host_embedding) + " GiB in pinned host memory" : "")
    << ") + prepacked '" << gemv_name << "' "
    << gib_str(p.prepacked) << " GiB (";
  for (size_t i = 0; i < p.prepacked_by_type.size(); ++i) {
    const auto& [type, bytes] = p.prepacked_by_type[i];
    o << (i ? ", " : "") << type << ' ' << gib_str(bytes);
    // Where the decode form holds a type in other bytes than the file (plane alignment, allocation rounding).
    const auto stored = p.stored_by_type.find(type);
    if (stored != p.stored_by_type.end() && gib_str(stored->second) != gib_str(bytes))
      o << " (stored " << gib_str(stored->second) << ")";
  }
  if (p.prepacked_by_type.empty()) o << "none: it reads the BF16 copy in place";
  o << ") + KV cache " << gib_str(p.kv) << " GiB (" << ctx << " positions, " << kv_dtype_name(kv_)
    << ") + activations " << gib_str(p.activations) << " + scratch " << gib_str(p.scratch + p.norms);
  if (p.prefill_dequant > 0) o << " (prefill's dequantized matrix " << gib_str(p.prefill_dequant) << ")";
  o << " + reserve " << gib_str(double(kReserveBytes));
  return o.str();
}

void MemoryPlanner::require_fit(const MemoryPlan& plan, size_t free_b, const std::string& gemv_name, int ctx,
                                bool ctx_given) const {
  if (plan.total() <= double(free_b)) return;
  // Where everything but the KV cache is already over, no context helps: say so rather than suggest a smaller one.
  const double without_kv = plan.total() - plan.kv;
  std::string hint = ctx_given ? "; a smaller --ctx-size needs less" : "";
  if (without_kv > double(free_b))
    hint = "; without any KV cache it still needs " + gib_str(without_kv) + " GiB: no context fits";
  fail(source_, " needs ", gib_str(plan.total()), " GiB of GPU memory, ", gib_str(double(free_b)), " GiB free (",
       breakdown(plan, gemv_name, ctx), ")", hint);
}

std::string MemoryPlanner::describe(const MemoryPlan& plan, const std::string& gemv_name, int ctx,
                                    size_t free_b) const {
  return "memory plan: " + breakdown(plan, gemv_name, ctx) + " = " + gib_str(plan.total()) + " GiB of " +
         gib_str(double(free_b)) + " GiB free";
}

}  // namespace llm
