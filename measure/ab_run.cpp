// The A/B run of GEMV mappings (see measure/ab_run.h): the measurement protocol; numbers go to measure/ab_stats.h.
#include "measure/ab_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "core/gemv_table.h"  // check_gemv_mapping
#include "engine/decode_loop.h"  // the one decode loop
#include "engine/gemv_choice.h"  // gemv_plan, gemv_refusal: which form runs which weight type
#include "engine/kv_cache.h"     // CpuKvCache::bytes: the KV cache's bytes in each element type
#include "measure/ab_stats.h"     // median: the A/B report's one definition
#include "kernels/quant/gemv_quant_plan.h"  // quant_gemv_bytes_read, quant_gemv_describe (CUDA-free)

#ifdef LLM_HAVE_CUDA
#include <cuda_runtime.h>
#include <cxxabi.h>

#include <cstdlib>
#include <functional>
#include <map>

#include "engine/cuda_backend.h"  // CudaBackend: set_gemv, set_persistent, set_profiling, gemv_bytes_per_token
#include "kernels/cuda_check.h"   // CUDA_CHECK
#include "kernels/gemv/gemv.h"         // gemv_mapping(form).shape
#include "kernels/persistent/persistent_decode.h"  // persistent_decode_waits_per_step
#include "kernels/quant/gemv_quant.h"   // quant_gemv_shape: launch shapes of the quantized forms
#include "measure/roofline.h"     // Roofline: the one streaming-read measurement
#include "measure/kernel_trace.h"   // KernelTrace: verify_costs' kernel timeline
#include "measure/step_profiler.h"  // install_step_profiler: the profiling passes' hook
#endif

namespace llm {

AbEntry parse_ab_entry(const std::string& entry) {
  const size_t at = entry.find('@');
  if (at == std::string::npos) return {entry, DecodePath::Graph};
  const std::string path = entry.substr(at + 1);
  for (DecodePath p : {DecodePath::Graph, DecodePath::Persistent})
    if (path == decode_path_name(p)) return {entry.substr(0, at), p};
  fail("A/B entry '", entry, "': unknown decode path '", path, "' (graph or persistent)");
}

std::string ab_entry_name(const AbEntry& entry) {
  // The graph path is the default: its entries keep the plain mapping name, as every report before the paths did.
  return entry.path == DecodePath::Graph ? entry.gemv : entry.gemv + "@" + decode_path_name(entry.path);
}

namespace {

// The trimmed items of a comma-separated option value; fails on an empty list or item. `what` names the option,
// `item_what` an item and `items_what` the list ("--ab", "mapping name", "mappings").
std::vector<std::string> list_items(const char* what, const std::string& list, const char* item_what,
                                    const char* items_what) {
  std::vector<std::string> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b == std::string::npos) fail(what, " '", list, "': empty ", item_what, " in the list");
    out.push_back(item.substr(b, e - b + 1));
  }
  if (out.empty() || list.back() == ',') fail(what, " '", list, "': expected a comma-separated list of ", items_what);
  return out;
}

}  // namespace

std::vector<std::string> parse_ab_mappings(const std::string& list) {
  std::vector<std::string> out;
  for (const std::string& item : list_items("--ab", list, "mapping name", "mappings")) {
    const AbEntry entry = parse_ab_entry(item);
    if (entry.gemv.empty()) fail("--ab '", list, "': empty mapping name in the list");
    check_gemv_mapping("--ab", entry.gemv, /*on_cpu=*/false);
    if (std::find(out.begin(), out.end(), item) != out.end())
      fail("--ab '", list, "': mapping '", item, "' is listed twice");
    out.push_back(item);
  }
  return out;
}

std::vector<DecodePath> parse_ab_decode(const std::string& list) {
  std::vector<DecodePath> out;
  for (const std::string& item : list_items("--decode", list, "decode path", "decode paths")) {
    const DecodePath p = parse_decode_path(item);
    if (std::find(out.begin(), out.end(), p) != out.end())
      fail("--decode '", list, "': '", item, "' is listed twice");
    out.push_back(p);
  }
  return out;
}

std::vector<std::string> ab_decode_entries(const std::vector<std::string>& mappings,
                                           const std::vector<DecodePath>& paths) {
  std::vector<std::string> out;
  const auto add = [&](const AbEntry& e) {
    const std::string name = ab_entry_name(e);
    if (std::find(out.begin(), out.end(), name) != out.end())
      fail("A/B entry '", name, "' is listed twice (a plain mapping runs on every --decode path, MAPPING@PATH on "
           "PATH alone)");
    out.push_back(name);
  };
  for (const std::string& m : mappings) {
    const AbEntry entry = parse_ab_entry(m);
    if (m.find('@') != std::string::npos)
      add(entry);
    else
      for (DecodePath p : paths) add({entry.gemv, p});
  }
  return out;
}

namespace {

// Why run_ab's engine cannot run `entry` on its decode path, or "" (the CUDA engine always fuses projections).
std::string entry_refusal(const std::string& entry, const Model& model, bool dequantize, KvDtype kv_dtype) {
  const AbEntry e = parse_ab_entry(entry);
  return decode_path_refusal(e.path, gemv_plan(e.gemv), model, dequantize, kv_dtype == KvDtype::FP8, true);
}

}  // namespace

std::vector<std::string> ab_runnable_entries(const std::vector<std::string>& mappings,
                                             const std::vector<DecodePath>& paths, bool listed, const Model& model,
                                             bool dequantize, KvDtype kv_dtype) {
  std::vector<std::string> out;
  std::vector<std::string> refused(paths.size());  // per path: the first refusal of the default list
  for (const std::string& entry : ab_decode_entries(mappings, paths)) {
    const std::string why = entry_refusal(entry, model, dequantize, kv_dtype);
    if (why.empty()) {
      out.push_back(entry);
      continue;
    }
    if (listed) fail(why);
    const size_t p = size_t(std::find(paths.begin(), paths.end(), parse_ab_entry(entry).path) - paths.begin());
    if (p < refused.size() && refused[p].empty()) refused[p] = why;
  }
  if (listed) return out;
  for (size_t p = 0; p < paths.size(); ++p) {
    const bool runs = std::any_of(out.begin(), out.end(),
                                  [&](const std::string& e) { return parse_ab_entry(e).path == paths[p]; });
    if (!runs) fail(refused[p]);
  }
  return out;
}

// The one decode loop (engine/decode_loop.h) from position 0 (overwriting the previous pass's cache): exactly n greedy
// decode steps, EOS ignored. eval time runs from after the prefill's sample (a stream sync) to after the last sample.
namespace {

// A pass's loop options: greedy, max_new tokens from start_pos; then waits for whatever the device still runs (one
// sample), so the prefill clock starts on an idle stream.
DecodeLoopOptions greedy_pass(Backend& b, int start_pos, int max_new, uint64_t seed) {
  DecodeLoopOptions lo;
  lo.start_pos = start_pos;
  lo.sampler.temperature = 0.0f;
  lo.sampler.top_k = 0;
  lo.sampler.top_p = 1.0f;
  lo.sampler.seed = seed;
  lo.max_new = max_new;
  b.sample(lo.sampler, 0);
  return lo;
}

}  // namespace

AbPass ab_decode_pass(Backend& b, const std::vector<int>& prompt, int n_decode, uint64_t seed, int start_pos) {
  if (n_decode < 1) fail("A/B run: n_decode must be >= 1, found ", n_decode);
  const DecodeLoopOptions lo = greedy_pass(b, start_pos, n_decode + 1, seed);  // the prefill's token, then n_decode
  DecodeLoopResult d = decode_loop(b, prompt, lo);
  if (d.eval_tokens != n_decode)
    fail("A/B run: the decode loop ran ", d.eval_tokens, " steps, expected ", n_decode, " (stopped: ",
         stop_reason_name(d.stop), ")");
  AbPass p;
  p.prefill_ms = d.prompt_ms;
  p.ms_per_token = d.eval_ms / n_decode;
  p.tokens = std::move(d.tokens);
  return p;
}

AbSpecPass ab_spec_pass(Backend& b, Drafter& drafter, const SpecOptions& spec, const std::vector<int>& prompt,
                        int n_decode, uint64_t seed, int start_pos, const std::vector<int>* history) {
  if (n_decode < 1) fail("A/B run: n_decode must be >= 1, found ", n_decode);
  if (history && int(history->size()) != start_pos)
    fail("A/B run: the speculative pass's history holds ", history->size(), " ids, its start position is ", start_pos);
  const DecodeLoopOptions lo = greedy_pass(b, start_pos, n_decode + 1, seed);  // as ab_decode_pass
  SpecOptions so = spec;
  so.history = history;
  AbSpecPass p;
  DecodeLoopResult d = speculative_loop(b, drafter, prompt, lo, so, &p.stats);
  if (int(d.tokens.size()) != n_decode + 1)
    fail("A/B run: the speculative loop produced ", d.tokens.size(), " tokens, expected ", n_decode + 1,
         " (stopped: ", stop_reason_name(d.stop), ")");
  p.prefill_ms = d.prompt_ms;
  p.ms_per_token = d.eval_ms / double(d.tokens.size());
  p.tokens = std::move(d.tokens);
  return p;
}

int ab_ctx_size(const AbOptions& opt) {
  return opt.ctx_size > 0 ? opt.ctx_size : (opt.depth > 0 ? opt.depth : int(opt.prompt.size())) + opt.n_decode;
}

std::vector<int> ab_depth_tokens(const std::vector<int>& prompt, int depth) {
  if (prompt.empty()) fail("A/B run: the prompt is empty (it needs at least the BOS token)");
  if (depth < 0) fail("--depth: invalid value ", depth, " (allowed: 0 or more)");
  if (depth == 0) return prompt;
  std::vector<int> ids;
  ids.reserve(size_t(depth));
  while (int(ids.size()) < depth) ids.push_back(prompt[ids.size() % prompt.size()]);
  return ids;
}

double ab_prefill_context(Backend& b, const std::vector<int>& context, uint64_t seed) {
  const DecodeLoopOptions lo = greedy_pass(b, 0, 1, seed);  // prefill, one sample, no decode step
  return decode_loop(b, context, lo).prompt_ms;
}

std::string ab_context_refusal(int prompt_tokens, int depth, int n_decode, int64_t limit, bool limit_is_ctx_size) {
  const int64_t need = int64_t(depth > 0 ? depth : prompt_tokens) + n_decode;
  if (need <= limit) return "";
  std::ostringstream os;
  if (depth > 0)
    os << "--depth " << depth;
  else
    os << "the prompt (" << prompt_tokens << (prompt_tokens == 1 ? " token)" : " tokens)");
  os << " and -n " << n_decode << " need " << need << " positions, more than "
     << (limit_is_ctx_size ? "--ctx-size " : "the model's maximum of ") << limit;
  return os.str();
}

namespace {

// The host tensors decode reads through projection kind `name` in layer `l` (fused kinds: their members; the head: the
// embedding when tied, as the CUDA engine decides).
std::vector<const HostTensor*> weights_of(const Model& model, const std::string& name, size_t l) {
  const ModelWeights& w = model.weights;
  if (name == "head") return {model.config.tied_embeddings || w.head.empty() ? &w.embedding : &w.head};
  if (l >= w.layers.size()) fail("A/B run: layer ", l, " of a model with ", w.layers.size());
  const LayerWeights& lw = w.layers[l];
  if (name == "q") return {&lw.wq};
  if (name == "k") return {&lw.wk};
  if (name == "v") return {&lw.wv};
  if (name == "qkv") return {&lw.wq, &lw.wk, &lw.wv};
  if (name == "o") return {&lw.wo};
  if (name == "gate") return {&lw.w_gate};
  if (name == "up") return {&lw.w_up};
  if (name == "gate_up") return {&lw.w_gate, &lw.w_up};
  if (name == "down") return {&lw.w_down};
  fail("A/B run: '", name, "' is not a projection of a decode step");
}

}  // namespace

int64_t ab_projection_bytes(const Model& model, const GemvPlan& plan, bool dequantize, const std::string& projection) {
  const size_t layers = projection == "head" ? 1 : model.weights.layers.size();
  int64_t bytes = 0;
  for (size_t l = 0; l < layers; ++l)
    for (const HostTensor* t : weights_of(model, projection, l)) {
      if (t->quant == 0 || dequantize) {
        bytes += t->rows * t->cols * 2;
        continue;
      }
      if (!plan.runs_quant_type(t->quant))
        fail("A/B run: GEMV mapping '", plan.name, "' has no form for the quantized weights of ", printable(t->name));
      bytes += quant_gemv_bytes_read(plan.quant, quant_gemv_describe(int(t->quant), t->rows, t->cols));
    }
  return bytes;
}

int64_t ab_projection_bytes(const Model& model, const std::string& mapping, bool dequantize,
                            const std::string& projection) {
  return ab_projection_bytes(model, gemv_plan(mapping), dequantize, projection);
}

AbKvRead ab_kv_read(const ModelConfig& c, KvDtype kv, int first_pos, int n_decode) {
  if (first_pos < 0 || n_decode < 1)
    fail("A/B run: KV read of ", n_decode, " steps from position ", first_pos, " (need position >= 0, steps >= 1)");
  const KvDtype stored = kv == KvDtype::Default ? KvDtype::BF16 : kv;
  double rows = 0, bytes = 0;
  for (int i = 0; i < n_decode; ++i) {
    const int read = first_pos + i + 1;  // rows 0 .. position
    rows += read;
    bytes += double(CpuKvCache::bytes(stored, c.n_layers, c.kv_dim(), c.n_kv_heads, read));
  }
  return {rows / n_decode, int64_t(std::llround(bytes / n_decode))};
}

#ifdef LLM_HAVE_CUDA

namespace {

// The projection kinds of one decode step, in ProfileParts order (measure/profile_parts.h).
std::vector<AbProjection> projections_of(const ModelConfig& c) {
  using P = ProfileParts;
  const int L = c.n_layers;
  return {{P::part_name(P::kQ), c.q_dim(), c.dim, L},           {P::part_name(P::kK), c.kv_dim(), c.dim, L},
          {P::part_name(P::kV), c.kv_dim(), c.dim, L},          {P::part_name(P::kO), c.dim, c.q_dim(), L},
          {P::part_name(P::kGate), c.hidden_dim, c.dim, L},     {P::part_name(P::kUp), c.hidden_dim, c.dim, L},
          {P::part_name(P::kDown), c.dim, c.hidden_dim, L},     {P::part_name(P::kHead), c.vocab_size, c.dim, 1}};
}

int leading_equal(const std::vector<int>& a, const std::vector<int>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return int(n);
}

void check_options(const Model& model, const AbOptions& opt) {
  const ModelConfig& c = model.config;
  if (opt.mappings.empty()) fail("A/B run: no mapping to run");
  // An unknown name, one without a form for this model's weight types, or one its decode path cannot run fails
  // before the model is uploaded.
  std::vector<std::string> names;
  for (const auto& m : opt.mappings) {
    const AbEntry e = parse_ab_entry(m);
    if (const std::string why = gemv_refusal(gemv_plan(e.gemv), model, opt.dequantize); !why.empty())
      fail("A/B run: ", why);
    if (const std::string why = entry_refusal(m, model, opt.dequantize, opt.kv_dtype); !why.empty())
      fail("A/B run: ", why);
    if (std::find(names.begin(), names.end(), ab_entry_name(e)) != names.end())
      fail("A/B run: entry '", ab_entry_name(e), "' is listed twice");
    names.push_back(ab_entry_name(e));
  }
  if (opt.prompt.empty()) fail("A/B run: the prompt is empty (it needs at least the BOS token)");
  for (int id : opt.prompt)
    if (id < 0 || id >= c.vocab_size)
      fail("A/B run: prompt token ", id, " outside the vocabulary of ", c.vocab_size);
  if (opt.n_decode < 1) fail("A/B run: n_decode must be >= 1, found ", opt.n_decode);
  if (opt.repeats < 1) fail("A/B run: repeats must be >= 1, found ", opt.repeats);
  if (opt.warmup < 0) fail("A/B run: warm-up rounds must be >= 0, found ", opt.warmup);
  if (opt.depth < 0) fail("A/B run: depth must be >= 0, found ", opt.depth);
  for (int k : opt.verify_k)
    if (k < 1 || k > opt.n_decode)
      fail("A/B run: --verify-k ", k, " outside 1..n_decode (", opt.n_decode, "): the verified tokens take the "
           "positions the decode steps take");
  const int prompt_tokens = int(opt.prompt.size());
  if (opt.ctx_size != 0)
    if (const std::string why = ab_context_refusal(prompt_tokens, opt.depth, opt.n_decode, opt.ctx_size, true);
        !why.empty())
      fail(why);
  if (const std::string why = ab_context_refusal(prompt_tokens, opt.depth, opt.n_decode, c.max_seq_len, false);
      !why.empty())
    fail(why);
}

// The per-projection bytes recorded for a run (AbLaunch::bytes_read) must add up to what the engine's prepared
// mapping reads, or the per-projection GB/s would not be of the bytes read.
void check_projection_bytes(const AbMappingRun& run, const std::vector<AbProjection>& projections,
                            size_t engine_bytes) {
  int64_t sum = 0;
  for (const AbProjection& p : projections)
    for (const AbLaunch& l : run.launches)
      if (l.projection == p.name) sum += l.bytes_read;
  if (sum != int64_t(engine_bytes))
    fail("A/B run: the projections of '", run.mapping, "' read ", sum, " bytes per token by ab_projection_bytes, the "
         "engine's prepared weights ", engine_bytes, " (measure/ab_run.cpp no longer counts as the engine does)");
}

void progress(const AbOptions& opt, const char* fmt_line, ...) __attribute__((format(printf, 2, 3)));
void progress(const AbOptions& opt, const char* fmt_line, ...) {
  if (!opt.progress) return;
  va_list ap;
  va_start(ap, fmt_line);
  std::vfprintf(opt.progress, fmt_line, ap);
  va_end(ap);
  std::fflush(opt.progress);
}

// What every pass of a run shares: the engine, the entries and their plans (each --ab name resolved once), where a
// pass starts.
struct AbSession {
  const AbOptions& opt;
  CudaBackend& cb;
  std::vector<AbEntry> entries;
  std::vector<GemvPlan> plans;   // entries[i]'s GEMV, resolved
  std::vector<int> pass_prompt;  // what every pass prefills: the prompt, or at depth the context's last token
  int pass_pos = 0;              // where: 0, or depth - 1
  bool deep = false;
  int n_layers = 0;              // the model's (a persistent step's waits: persistent_decode_waits_per_step)

  // Switches the engine to entry i. set_gemv refuses, while the persistent path is on, a mapping that path cannot
  // run: the path goes off first.
  void select(size_t i) {
    cb.set_persistent(false);
    cb.set_gemv(entries[i].gemv);  // first time: prepacks; its first graphed decode captures the graph
    if (entries[i].path == DecodePath::Persistent) cb.set_persistent(true);
  }
  std::string round_name(int r) const {
    char round[64];
    if (r >= opt.warmup)
      std::snprintf(round, sizeof round, "repeat %d/%d", r - opt.warmup + 1, opt.repeats);
    else
      std::snprintf(round, sizeof round, "warm-up %d/%d", r + 1, opt.warmup);
    return std::string(round);
  }
};

// The run's header: device, options, and the projection kinds with the type decode keeps each in (layer 0's first
// member stands for every layer; 0 = BF16).
AbResult result_header(const Model& model, const AbOptions& opt, const cudaDeviceProp& prop) {
  AbResult res;
  res.model = model.source;
  res.device = prop.name;
  res.sm_count = prop.multiProcessorCount;
  res.max_warps_per_sm = prop.maxThreadsPerMultiProcessor / 32;
  res.prompt_tokens = int(opt.prompt.size());
  res.depth = opt.depth;
  res.n_decode = opt.n_decode;
  res.repeats = opt.repeats;
  res.warmup = opt.warmup;
  res.seed = opt.seed;
  res.projections = projections_of(model.config);
  for (AbProjection& p : res.projections) p.quant = opt.dequantize ? 0u : weights_of(model, p.name, 0)[0]->quant;
  return res;
}

// Entry i's launch shape and bytes read per projection kind: a projection decode keeps quantized runs the plan's
// quantized form, any other its BF16 form. The persistent path launches no GEMV kernel (its resident blocks walk
// every projection): no shape to record (grid 0), the bytes its GEMVs read still.
AbMappingRun entry_launches(const Model& model, const AbSession& ab, size_t i,
                            const std::vector<AbProjection>& projections) {
  const ModelConfig& c = model.config;
  const GemvPlan& plan = ab.plans[i];
  AbMappingRun run;
  run.mapping = ab_entry_name(ab.entries[i]);
  std::vector<AbProjection> launched = projections;
  {  // decode launches these instead of q, k, v and gate, up (engine/cuda/cuda_engine.cu forward_token)
    using P = ProfileParts;
    auto type_of = [&](int part) {  // a fused kind's type: its first member's (q, gate)
      for (const AbProjection& p : projections)
        if (p.name == P::part_name(part)) return p.quant;
      return 0u;
    };
    const uint32_t qkv = type_of(P::kQ), gate_up = type_of(P::kGate);
    launched.push_back({P::part_name(P::kQKV), c.q_dim() + 2 * c.kv_dim(), c.dim, c.n_layers, qkv});
    launched.push_back({P::part_name(P::kGateUp), 2 * int64_t(c.hidden_dim), c.dim, c.n_layers, gate_up});
  }
  const GemvBf16Form bf16 = plan.bf16 == GemvBf16Form::None ? gemv_default_bf16_row().bf16 : plan.bf16;
  for (const AbProjection& p : launched) {
    GemvLaunchShape s;
    if (ab.entries[i].path == DecodePath::Graph)
      s = p.quant && plan.has_quant ? quant_gemv_shape(plan.quant, quant_gemv_describe(int(p.quant), p.N, p.K))
                                    : gemv_mapping(bf16).shape(int(p.N), int(p.K));
    run.launches.push_back({p.name, p.N, p.K, s.grid, s.block, s.bytes_in_flight_per_thread,
                            ab_projection_bytes(model, plan, ab.opt.dequantize, p.name)});
  }
  return run;
}

// Every timed pass, entries alternating round by round; the tokens of each entry's last pass into last_tokens.
void timed_rounds(AbSession& ab, Roofline& roofline, AbResult& res, std::vector<std::vector<int>>& last_tokens) {
  const AbOptions& opt = ab.opt;
  for (int r = 0; r < opt.warmup + opt.repeats; ++r) {
    const bool timed = r >= opt.warmup;
    const std::string round = ab.round_name(r);
    const double roof = roofline.measure().gbps;
    progress(opt, "ab: %s read roofline: %.0f GB/s\n", round.c_str(), roof);
    if (timed) res.roofline_gbps.push_back(roof);
    for (size_t i = 0; i < ab.entries.size(); ++i) {
      ab.select(i);
      if (r == 0) check_projection_bytes(res.runs[i], res.projections, ab.cb.gemv_bytes_per_token());
      const AbPass measured = ab_decode_pass(ab.cb, ab.pass_prompt, opt.n_decode, opt.seed, ab.pass_pos);
      char prefill[96];
      if (ab.deep)
        std::snprintf(prefill, sizeof prefill, "at depth %d", opt.depth);
      else
        std::snprintf(prefill, sizeof prefill, "prefill %zu tokens %.2f ms (%.0f tok/s)", opt.prompt.size(),
                      measured.prefill_ms, 1e3 * double(opt.prompt.size()) / measured.prefill_ms);
      progress(opt, "ab: %s %s: %.1f tok/s (%.3f ms/token); %s\n", round.c_str(), res.runs[i].mapping.c_str(),
               1e3 / measured.ms_per_token, measured.ms_per_token, prefill);
      last_tokens[i] = measured.tokens;
      if (timed) res.runs[i].ms_per_token.push_back(measured.ms_per_token);
      res.runs[i].kernels_per_token = ab.cb.kernels_per_step();
      res.runs[i].waits_per_token = ab.entries[i].path == DecodePath::Persistent
                                        ? persistent_decode_waits_per_step(ab.n_layers)
                                        : 0;
    }
  }
}

// The profiling passes: one per entry and round, warm-up included (a first profiled pass captures its graph). Sets
// whether a graph entry was profiled (by CUPTI's kernel timeline: the only way the graph path is profiled).
void profiling_rounds(AbSession& ab, AbResult& res, bool* graph_timeline) {
  const AbOptions& opt = ab.opt;
  for (int r = 0; r < opt.warmup + opt.repeats; ++r) {
    const bool timed = r >= opt.warmup;
    const std::string round = ab.round_name(r);
    for (size_t i = 0; i < ab.entries.size(); ++i) {
      const std::string& name = res.runs[i].mapping;
      ab.select(i);
      ab.cb.reset_profile();
      ab.cb.set_profiling(true);
      const AbPass profiled = ab_decode_pass(ab.cb, ab.pass_prompt, opt.n_decode, opt.seed, ab.pass_pos);
      ab.cb.set_profiling(false);
      const DecodeProfile prof = ab.cb.profile();
      if (ab.entries[i].path == DecodePath::Graph) *graph_timeline = true;
      if (prof.steps != opt.n_decode)
        fail("A/B run: the profile of '", name, "' counted ", prof.steps, " steps, expected ", opt.n_decode);
      PartMs parts{};
      for (int p = 0; p < ProfileParts::kParts; ++p) parts[p] = prof.ms[p] / double(prof.steps);
      const double gemv_ms = prof.gemv_ms() / double(prof.steps);
      progress(opt, "ab: profiling %s %s: %.3f ms/token wall, device %.3f ms/token, GEMV %.3f ms/token\n",
               round.c_str(), name.c_str(), profiled.ms_per_token, prof.total_ms / double(prof.steps), gemv_ms);
      if (!timed) continue;
      AbMappingRun& run = res.runs[i];
      run.profiled_ms_per_token.push_back(profiled.ms_per_token);
      run.part_ms.push_back(parts);
      run.attention_ms_per_token.push_back(prof.ms[ProfileParts::kAttention] / double(prof.steps));
    }
  }
}

// One line: how the profiles were measured.
std::string profiling_method(bool graph_timeline, bool any_persistent) {
  std::vector<std::string> how;
  if (graph_timeline)
    how.push_back("a separate pass of the same steps per mapping and repeat replaying the step's CUDA graph under "
                  "CUPTI's kernel timeline: each kernel's time from the end of the one before (PDL overlap stays "
                  "with the earlier kernel), the holes between kernels as 'wait'; the parts sum to the replay's "
                  "first-start-to-last-end span");
  if (any_persistent)
    how.push_back("@persistent: the same pass of the persistent kernel, its event-timed time split by its blocks' "
                  "clock cycles per part (waiting for a stage's producers: 'wait')");
  std::string s;
  for (size_t i = 0; i < how.size(); ++i) s += (i ? "; " : "") + how[i];
  return s;
}

}  // namespace

// The kernels of one traced call of fn (measure/kernel_trace.h), summed by kernel family (the demangled name without
// namespaces, template arguments or parameters): how many, how long in kernels, how long between them. "" when the
// tracer is not there (a build without CUPTI, another tool holding it) or dropped records.
static std::string trace_summary(const std::function<void()>& fn) {
  KernelTrace& trace = KernelTrace::instance();
  std::string why;
  if (!trace.start(&why)) return "";
  trace.take(nullptr);
  fn();
  CUDA_CHECK(cudaDeviceSynchronize());
  uint64_t dropped = 0;
  const std::vector<TraceKernel> ks = trace.take(&dropped);
  trace.stop();
  if (ks.empty() || dropped) return "";
  std::map<std::string, std::pair<double, int>> fam;
  uint64_t first = ks.front().start_ns, last = 0, busy = 0;
  for (const TraceKernel& k : ks) {
    int status = 0;
    char* d = abi::__cxa_demangle(k.name.c_str(), nullptr, nullptr, &status);
    std::string n = status == 0 && d ? d : k.name;
    std::free(d);
    for (size_t at; (at = n.find("(anonymous namespace)::")) != std::string::npos;) n.erase(at, 23);
    n = n.substr(0, n.find_first_of("<("));
    if (n.rfind("void ", 0) == 0) n = n.substr(5);
    if (const size_t c = n.rfind("::"); c != std::string::npos) n = n.substr(c + 2);
    auto& [ms, count] = fam[n];
    ms += double(k.end_ns - k.start_ns) * 1e-6;
    ++count;
    busy += k.end_ns - k.start_ns;
    last = std::max(last, k.end_ns);
  }
  std::vector<std::pair<std::string, std::pair<double, int>>> v(fam.begin(), fam.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  char buf[256];
  std::snprintf(buf, sizeof buf, "%zu kernels, %.3f ms from the first start to the last end, %.3f ms in kernels, "
                "%.3f ms between them; by kernel:", ks.size(), double(last - first) * 1e-6, double(busy) * 1e-6,
                double(last - first - std::min(busy, last - first)) * 1e-6);
  std::string out = buf;
  for (size_t i = 0; i < v.size() && i < 10; ++i) {
    std::snprintf(buf, sizeof buf, " %s %.3f (%d)%s", v[i].first.c_str(), v[i].second.first, v[i].second.second,
                  i + 1 < v.size() && i + 1 < 10 ? "," : "");
    out += buf;
  }
  return out;
}

// --verify-k: each k's verify as a greedy speculative loop runs it (Backend::verify_argmax, synchronous: the ids of its
// rows come back to the host) against one decode step
// with a greedy sample, both at the first timed step's position, medians of 15 after 3 untimed, on the first entry.
void verify_costs(AbSession& ab, int pos, AbResult& res) {
  if (ab.opt.verify_k.empty()) return;
  ab.select(0);
  ab.cb.set_persistent(false);  // verify runs the prefill path; the step beside it on the graph path
  const int tok = ab.pass_prompt.back();
  SamplerParams greedy;
  greedy.temperature = 0.0f;
  auto median_ms = [](auto fn) {
    std::vector<double> t;
    for (int r = 0; r < 18; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (r >= 3) t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  const double step_ms = median_ms([&] {
    ab.cb.decode(tok, pos);
    ab.cb.sample(greedy, 0);
  });
  for (int k : ab.opt.verify_k) {
    std::vector<int> toks(size_t(k), tok);
    const double ms = median_ms([&] { ab.cb.verify_argmax(toks.data(), k, pos, 0); });
    res.verify.push_back({k, ms, step_ms});
    progress(ab.opt, "ab: verify of %d tokens at position %d: %.3f ms = %.2f x one decode step (%.3f ms, decode + "
             "greedy sample, same loop)\n", k, pos, ms, ms / step_ms, step_ms);
    if (const std::string t = trace_summary([&] { ab.cb.verify_argmax(toks.data(), k, pos, 0); }); !t.empty())
      progress(ab.opt, "ab: verify of %d tokens traced: %s\n", k, t.c_str());
  }
  if (const std::string t = trace_summary([&] {
        ab.cb.decode(tok, pos);
        ab.cb.sample(greedy, 0);
      });
      !t.empty())
    progress(ab.opt, "ab: decode step traced: %s\n", t.c_str());
}

// --spec: speculative passes alternating with plain ones on the first entry's mapping, graph path (the verify pass
// runs the prefill path; its plain steps the graph), warmup rounds then repeats; medians of ms per token.
void spec_passes(AbSession& ab, const std::vector<int>& context, AbResult& res) {
  const AbOptions& opt = ab.opt;
  if (!opt.drafter) return;
  ab.select(0);
  ab.cb.set_persistent(false);
  const std::vector<int> history(context.begin(), context.begin() + ab.pass_pos);  // depth 0: none
  std::vector<double> spec_ms, plain_ms;
  AbSpecPass last;
  std::vector<int> plain_tokens;
  for (int r = 0; r < opt.warmup + opt.repeats; ++r) {
    const AbPass plain = ab_decode_pass(ab.cb, ab.pass_prompt, opt.n_decode, opt.seed, ab.pass_pos);
    last = ab_spec_pass(ab.cb, *opt.drafter, opt.spec, ab.pass_prompt, opt.n_decode, opt.seed, ab.pass_pos,
                        ab.deep ? &history : nullptr);
    progress(opt, "ab: %s %s --spec %s: %.3f ms/token (plain %.3f); drafted %lld, accepted %lld\n",
             ab.round_name(r).c_str(), ab.entries[0].gemv.c_str(), opt.drafter->name().c_str(), last.ms_per_token,
             plain.ms_per_token, (long long)last.stats.drafted, (long long)last.stats.accepted);
    if (r < opt.warmup) continue;
    spec_ms.push_back(last.ms_per_token);
    plain_ms.push_back(plain.ms_per_token);
    plain_tokens = plain.tokens;
  }
  AbResult::SpecRun s;
  s.drafter = opt.drafter->name();
  s.mapping = ab.entries[0].gemv;
  s.ms_per_token = median(spec_ms);
  s.plain_ms_per_token = median(plain_ms);
  s.drafted = last.stats.drafted;
  s.accepted = last.stats.accepted;
  s.steps = last.stats.steps;
  s.tokens = int(last.tokens.size());
  s.tokens_matching_plain = leading_equal(plain_tokens, last.tokens);
  res.spec.push_back(s);
  progress(opt, "ab: --spec %s on %s (graph path): %.1f tokens/s against %.1f plain, %.2fx; drafted %lld, accepted "
           "%lld (%.1f%%), %lld steps for %d tokens; %s\n", s.drafter.c_str(), s.mapping.c_str(),
           1e3 / s.ms_per_token, 1e3 / s.plain_ms_per_token, s.plain_ms_per_token / s.ms_per_token,
           (long long)s.drafted, (long long)s.accepted, last.stats.accept_rate() * 100.0, (long long)s.steps,
           s.tokens, s.tokens_matching_plain == s.tokens
               ? "the same tokens as the plain pass"
               : ("the tokens differ from the plain pass's from token " + std::to_string(s.tokens_matching_plain) +
                  " (where the target's top two logits nearly tie a verify pass, summing in another order, may pick "
                  "the other)").c_str());
}

AbResult run_ab(const Model& model, const AbOptions& opt) {
  check_options(model, opt);
  const ModelConfig& c = model.config;

  int dev = 0;
  cudaDeviceProp prop{};
  require_cuda_device();
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));

  std::vector<AbEntry> entries;
  std::vector<GemvPlan> plans;
  for (const auto& m : opt.mappings) {
    entries.push_back(parse_ab_entry(m));
    plans.push_back(gemv_plan(entries.back().gemv));
  }
  AbResult res = result_header(model, opt, prop);
  const bool any_persistent =
      std::any_of(entries.begin(), entries.end(), [](const AbEntry& e) { return e.path == DecodePath::Persistent; });

  // The roofline buffer first, so the backend's memory check sees what is left.
  Roofline roofline;
  res.roofline_method = roofline.method() + ", once per round";
  BackendOptions bo;
  bo.device = "cuda";
  // At depth N the cache holds N tokens, then every pass re-prefills the last of them (position N - 1) and decodes
  // from position N; at depth 0 every pass prefills the prompt from position 0.
  const bool deep = opt.depth > 0;
  const std::vector<int> context = deep ? ab_depth_tokens(opt.prompt, opt.depth) : std::vector<int>{};
  const int first_step_pos = deep ? opt.depth : int(opt.prompt.size());  // the first timed decode step's position
  bo.ctx_size = ab_ctx_size(opt);
  bo.gemv = entries[0].gemv;  // on the graph path: the pass loop below sets each entry's path
  bo.dequantize = opt.dequantize;
  bo.kv_dtype = opt.kv_dtype;
  bo.tuning = opt.tuning;
  progress(opt, "ab: uploading %s to %s\n", model.source.c_str(), prop.name);
  std::unique_ptr<CudaBackend> engine = make_cuda_engine(model, bo);
  AbSession ab{opt, *engine, entries, plans, deep ? std::vector<int>{context.back()} : opt.prompt,
               deep ? opt.depth - 1 : 0, deep, c.n_layers};
  install_step_profiler(ab.cb);
  res.gemv_bytes_per_token = int64_t(ab.cb.gemv_bytes_per_token());
  const AbKvRead kv = ab_kv_read(c, opt.kv_dtype, first_step_pos, opt.n_decode);
  res.kv_dtype = kv_dtype_name(opt.kv_dtype == KvDtype::Default ? KvDtype::BF16 : opt.kv_dtype);
  res.attention_rows = kv.rows;
  res.kv_bytes_per_token = kv.bytes_per_token;
  for (size_t i = 0; i < entries.size(); ++i) res.runs.push_back(entry_launches(model, ab, i, res.projections));

  if (deep) {
    progress(opt, "ab: prefilling a context of %d tokens (the prompt's %zu ids repeated)\n", opt.depth,
             opt.prompt.size());
    res.depth_prefill_ms = ab_prefill_context(ab.cb, context, opt.seed);
    progress(opt, "ab: context of %d tokens prefilled in %.1f ms (%.0f tokens/s)\n", opt.depth,
             res.depth_prefill_ms, 1e3 * opt.depth / res.depth_prefill_ms);
  }

  // Every timed pass runs before any profiling pass: the graph path's profile turns CUPTI's kernel timeline on, and
  // graph launches after that ran ~7% slower on the H200 (SmolLM2 shape: 1,330 -> 1,226-1,263 t/s), so a timed pass
  // after a profiling pass would measure the profiler.
  std::vector<std::vector<int>> last_tokens(entries.size());
  timed_rounds(ab, roofline, res, last_tokens);
  bool graph_timeline = false;  // some graph entry was profiled (by the kernel timeline)
  profiling_rounds(ab, res, &graph_timeline);
  verify_costs(ab, first_step_pos, res);
  spec_passes(ab, context, res);
  for (size_t i = 0; i < res.runs.size(); ++i)
    res.runs[i].tokens_matching_first = leading_equal(last_tokens[0], last_tokens[i]);
  res.profiling_method = profiling_method(graph_timeline, any_persistent);
  return res;
}

#else  // no CUDA engine in this build

AbResult run_ab(const Model&, const AbOptions&) { fail("the A/B run needs the CUDA engine; this build has none"); }

#endif

}  // namespace llm
