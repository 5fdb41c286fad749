// The persistent path's host side (engine/cuda/persistent_path.h).
#include "engine/cuda/persistent_path.h"

#include <vector>

#include "core/error.h"
#include "engine/gemv_choice.h"  // persistent_refusal, persistent_pair_rows: from the mapping's plan
#include "kernels/cuda_check.h"

namespace llm {

namespace {

// Profiled steps' cycles: which DecodeProfile part each PersistentPart joins.
constexpr int kToPart[kPersistentParts] = {DecodeProfile::kWait,   DecodeProfile::kNorm, DecodeProfile::kQKV,
                                           DecodeProfile::kAttention, DecodeProfile::kO,
                                           DecodeProfile::kGateUp, DecodeProfile::kDown, DecodeProfile::kHead,
                                           DecodeProfile::kOther};

// What the path keeps per mapping: the layers' persistent forms on the device and the kernel arguments naming them.
struct PersistentCache : PathCache {
  PersistentLayer* layers = nullptr;  // device [n_layers]
  PersistentDecodeArgs args;
  ~PersistentCache() override {
    if (layers) cudaFree(layers);
  }
};

}  // namespace

std::string PersistentPath::refusal(const MappingState& ms) const {
  // The state the kernel reads: q|k|v in one piece or one per member (PersistentLayer::wqkv), every other matrix in one
  // piece (gate|up in one type: its units pair row i of gate with row i of up), BF16 or kept quantized.
  std::string mixed;
  for (size_t i = 0; i < ms.weights.size() && mixed.empty(); ++i) {
    const bool qkv = i < ms.weights.size() - 1 && i % kFusedPerLayer == kFQkv;
    if (ms.weights[i].size() > size_t(qkv ? kQkvParts : 1))
      mixed = "the gate|up group of layer " + std::to_string(i / kFusedPerLayer);
  }
  return persistent_refusal(e_.cfg, e_.source, ms.plan, e_.mappings->any_quant() ? "quantized projections" : "",
                            mixed, e_.kv->fp8(), true);
}

void PersistentPath::set_tuning(const EngineTuning& t) {
  fault_ = t.persistent_fault;
  all_forms_ = t.persistent_all_forms ? 1 : 0;
  timeout_ns_ = 1000000ull * t.persistent_timeout_ms;
  prefetch_ = t.persistent_prefetch;
  split_head_ = t.persistent_cluster > 0 && t.cluster_split_head;
}

void PersistentPath::prepare(const EngineTuning& t) {
  set_tuning(t);
  if (sync_) return;
  if (t.persistent_cluster > 0)
    if (const std::string why = cluster_refusal(e_.cfg, e_.source, t.persistent_cluster); !why.empty()) fail(why);
  const auto& c = e_.cfg;
  cudaStream_t s = e_.stream;
  const size_t words = persistent_decode_sync_words(c.n_layers, c.n_heads);
  sync_ = e_.arena->alloc<unsigned>(words);
  CUDA_CHECK(cudaMemsetAsync(sync_, 0, words * sizeof(unsigned), s));
  // The grid depends on the shape only; the scratch is sized for it.
  plan_ = t.persistent_cluster > 0 ? persistent_decode_cluster_plan(shape(), t.persistent_cluster)
                                   : persistent_decode_plan(shape(), t.persistent_max_blocks);
  attn_partial_ = e_.arena->alloc<float>(persistent_decode_scratch_floats(c.n_heads, c.head_dim, plan_.grid));
  cycles_ = e_.arena->alloc<unsigned long long>(size_t(plan_.grid) * kPersistentParts);
  CUDA_CHECK(cudaMemsetAsync(cycles_, 0, size_t(plan_.grid) * kPersistentParts * 8, s));
  err_.alloc_mapped(sizeof(unsigned));
  *static_cast<unsigned*>(err_.p) = 0;
}

PersistentDecodeArgs PersistentPath::shape() const {
  const auto& c = e_.cfg;
  PersistentDecodeArgs a;
  a.n_layers = c.n_layers;
  a.dim = c.dim;
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.head_dim = c.head_dim;
  a.hidden = c.hidden_dim;
  a.vocab = c.vocab_size;
  a.ctx = e_.ctx;
  a.norm_eps = c.norm_eps;
  return a;
}

const PersistentDecodeArgs& PersistentPath::args_of(MappingState& ms) {
  if (ms.persistent_cache) return static_cast<PersistentCache&>(*ms.persistent_cache).args;
  auto cache = std::make_unique<PersistentCache>();
  const DeviceModel& dm = *e_.model;
  std::vector<PersistentLayer> host(dm.layers.size());
  unsigned forms = 0;
  auto piece = [&](const PieceWeight& w) {
    if (!w.quant) return persistent_matrix_bf16(w.bf16.data, w.bf16.ld);
    const PersistentMatrix m = persistent_matrix(w.q);
    forms |= 1u << m.form;
    return m;
  };
  auto matrix = [&](const DecodeWeight& w) { return piece(w[0]); };  // one piece: refusal() said so
  const int qkv_rows = e_.cfg.q_dim() + 2 * e_.cfg.kv_dim();
  for (size_t l = 0; l < dm.layers.size(); ++l) {
    PersistentLayer& p = host[l];
    p.attn_norm = dm.layers[l].attn_norm;
    p.ffn_norm = dm.layers[l].ffn_norm;
    const DecodeWeight& qkv = ms.layer(l, kFQkv);  // one piece, or one per member (refusal(): at most kQkvParts)
    p.qkv_parts = int(qkv.size());
    for (size_t i = 0; i < qkv.size(); ++i) {
      p.wqkv[i] = piece(qkv[i]);
      p.qkv_row0[i] = qkv[i].row0;
    }
    p.qkv_row0[qkv.size()] = qkv_rows;
    p.wo = matrix(ms.layer(l, kFO));
    p.wgu = matrix(ms.layer(l, kFGateUp));
    p.wdown = matrix(ms.layer(l, kFDown));
    p.k_cache = e_.kv->k_bf16(int(l));
    p.v_cache = e_.kv->v_bf16(int(l));
  }
  CUDA_CHECK(cudaMalloc(&cache->layers, host.size() * sizeof(PersistentLayer)));
  CUDA_CHECK(cudaMemcpy(cache->layers, host.data(), host.size() * sizeof(PersistentLayer), cudaMemcpyHostToDevice));
  const Activations& act = *e_.act;
  PersistentDecodeArgs& a = cache->args;
  a = shape();
  a.pair_rows = persistent_pair_rows(ms.plan.bf16_persistent) == 1;
  a.layers = cache->layers;
  a.embedding = dm.embedding;
  a.final_norm = dm.final_norm;
  a.head = matrix(ms.head());
  a.quant_forms = forms;
  a.dp4a = ms.plan.quant_persistent == PersistentGemv::QuantDp4a;
  a.inv_freq = dm.inv_freq;
  a.step = act.step;
  a.x = act.x;
  a.q = act.q;
  a.att = act.att;
  a.hb = act.hb;
  a.logits = act.logits;
  a.attn_partial = attn_partial_;
  a.sync = sync_;
  a.err_host = static_cast<unsigned*>(err_.dev);
  ms.persistent_cache = std::move(cache);
  return static_cast<PersistentCache&>(*ms.persistent_cache).args;
}

PersistentDecodeArgs PersistentPath::step_args(MappingState& ms, int pos) {
  PersistentDecodeArgs a = args_of(ms);  // a copy: the per-step fields below
  a.fault = fault_;
  a.all_forms = all_forms_;
  a.cluster = plan_.cluster;
  a.prefetch = prefetch_;
  if (timeout_ns_ > 0) a.timeout_ns = timeout_ns_;
  if (split_head_) {  // the kernel ends at the final norm; the head (enqueue_step) and the ring's sample follow
    a.head_x = e_.act->xb;
    return a;
  }
  const int slot = e_.ring->free_slot();
  if (slot >= 0) {  // a free slot: the greedy sample of these logits, in the kernel
    e_.ring->expect_in_kernel(slot, pos);
    a.sample_vocab = e_.sample_vocab;
    a.argmax_out = e_.ring->slot_device(slot);
    a.next_step = e_.act->step;
  }
  return a;
}

void PersistentPath::enqueue_step(MappingState& ms, int pos) {
  const PersistentDecodeArgs a = step_args(ms, pos);
  persistent_decode_launch(a, plan_, e_.stream);
  pending_ = true;
  if (split_head_) e_.mappings->launch(ms, ms.head(), e_.act->xb, e_.act->logits, false);
}

void PersistentPath::profile_step(MappingState& ms, int pos, StepProfiler& prof, DecodeProfile* out) {
  PersistentDecodeArgs a = step_args(ms, pos);
  cudaStream_t s = e_.stream;
  constexpr int kStepSpan = SampleRing::kSlots;  // the sample ring's spans are 0 .. kSlots - 1
  prof.span_begin(kStepSpan, s);
  PersistentDecodeArgs timed = a;
  timed.argmax_out = timed.next_step = nullptr;  // the step runs again below: its input stays
  persistent_decode_launch(timed, plan_, s);
  pending_ = true;
  // The step's time is the timed kernel's above; the split comes from the profiling build of the kernel (its cycle
  // accounting), run on the same step again right after. A step is idempotent (the same KV row, buffers, logits and
  // sampled id written again), and the profiling build runs a few percent slower on the small models, so its own
  // time would overstate the step.
  prof.span_end(kStepSpan, s);
  constexpr int kHeadSpan = kStepSpan + 1;
  static_assert(kHeadSpan < StepProfiler::kSpans, "a span id for the split head");
  if (split_head_) {  // the head's own launch, timed apart
    prof.span_begin(kHeadSpan, s);
    e_.mappings->launch(ms, ms.head(), e_.act->xb, e_.act->logits, false);
    prof.span_end(kHeadSpan, s);
  }
  a.prof = cycles_;
  persistent_decode_launch(a, plan_, s);
  CUDA_CHECK(cudaStreamSynchronize(s));
  check_error();
  const double kernel_ms = prof.span_ms(kStepSpan);
  if (split_head_) {
    const double head_ms = prof.span_ms(kHeadSpan);
    out->ms[DecodeProfile::kHead] += head_ms;
    out->total_ms += head_ms;
  }
  const size_t n = size_t(plan_.grid) * kPersistentParts;
  std::vector<unsigned long long> cycles(n);
  CUDA_CHECK(cudaMemcpy(cycles.data(), cycles_, n * 8, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemset(cycles_, 0, n * 8));
  // The timed kernel's time split by the profiling kernel's cycles per part (every block counts from its start to
  // its end).
  double per_part[kPersistentParts] = {}, total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    per_part[i % kPersistentParts] += double(cycles[i]);
    total += double(cycles[i]);
  }
  for (int q = 0; q < kPersistentParts; ++q)
    out->ms[kToPart[q]] += total > 0 ? kernel_ms * per_part[q] / total : 0.0;
  out->total_ms += kernel_ms;
  out->steps++;
}

void PersistentPath::check_error() {
  if (!pending_) return;
  unsigned* err = static_cast<unsigned*>(err_.p);
  if (*err == 0) return;
  const std::string why = persistent_decode_error_text(*err);
  // Blocks that left early never reset the counters: zero them so the next step starts clean. Samples still in flight
  // belong to the failed run: dropped.
  CUDA_CHECK(cudaMemsetAsync(sync_, 0, persistent_decode_sync_words(e_.cfg.n_layers, e_.cfg.n_heads) * 4, e_.stream));
  CUDA_CHECK(cudaStreamSynchronize(e_.stream));
  *err = 0;  // after the sync: no copy is in flight to set it again
  e_.ring->clear();
  fail(why);
}

}  // namespace llm
