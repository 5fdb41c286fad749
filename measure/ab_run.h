// The A/B run: one model, one prompt, exactly N greedy decode steps under each entry (a GEMV mapping on a decode
// path), entries alternating round by round (A B C A B C ...) so drift on a shared machine hits all of them; per entry
// the wall time of its decode path (graph-replayed, or one persistent kernel per token), a profiling pass split per
// part, and the launch shapes; the read roofline measured in the same run (measure/roofline.h). Fills
// measure/ab_data.h's plain data; measure/ab_stats.h summarises it and measure/ab_render.h renders it. run_ab needs
// the CUDA engine; a build without one keeps the CPU-only parts.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "measure/ab_data.h"     // AbReportData: what the run measures
#include "engine/backend.h"      // Backend
#include "engine/gemv_choice.h"  // DecodePath, GemvPlan
#include "engine/speculative.h"  // Drafter, SpecOptions, SpecStats
#include "models/model.h"        // Model

namespace llm {

struct AbOptions {
  // A/B entries in run order: GEMV registry names, each optionally with its decode path (parse_ab_entry)
  std::vector<std::string> mappings{"warp", "thread", "colmajor", "cublas"};
  std::vector<int> prompt;   // token ids, BOS first; prefilled at position 0 before every pass (depth 0)
  int n_decode = 128;        // decode steps per pass, EOS ignored
  // > 0: the context depth, as llama-bench -d: `prompt`'s ids repeated and cut to `depth` tokens (ab_depth_tokens)
  // are prefilled once, timed (AbReportData::depth_prefill_ms); every pass then re-prefills only the last of them
  // (position depth - 1) and runs its n_decode steps from position depth. 0: every pass prefills `prompt` itself.
  int depth = 0;
  int repeats = 5;           // timed rounds
  int warmup = 1;            // untimed rounds first (prepack, graph capture, clocks)
  uint64_t seed = 42;        // sampler seed (greedy: recorded, no effect on the tokens)
  int ctx_size = 0;          // 0 = prompt (or depth) + n_decode (a small KV cache leaves memory for every mapping)
  bool dequantize = false;   // GGUF quantized weights as BF16 (BackendOptions::dequantize)
  KvDtype kv_dtype = KvDtype::Default;  // BackendOptions::kv_dtype (the CUDA engine runs BF16 only for now)
  EngineTuning tuning;       // BackendOptions::tuning (--run-ahead, --grid-cap, ...)
  // Speculative decoding's verify step (Backend::verify) of each k here, timed after the passes on the first entry's
  // mapping against one decode step (decode + greedy sample) in the same loop: AbReportData::verify. Each k <= n_decode.
  std::vector<int> verify_k;
  // --spec: given, after the passes, speculative passes with this drafter (owned by the caller; a draft model's
  // backend made at ab_ctx_size) alternate with plain passes on the first entry's mapping (graph path), warmup then
  // repeats each, same prompt, depth and -n: AbReportData::spec. Greedy, EOS ignored, as every pass.
  Drafter* drafter = nullptr;
  SpecOptions spec;
  std::FILE* progress = stderr;  // one line per pass; nullptr = quiet
};

using AbResult = AbReportData;

// Runs the protocol above. Throws llm::Error for bad options, an unknown mapping or decode path, an entry its path
// cannot run (decode_path_refusal), no CUDA device, or (in a build without CUDA) "the A/B run needs the CUDA engine;
// this build has none".
AbResult run_ab(const Model& model, const AbOptions& opt);

// One pass of the protocol through the one decode loop (engine/decode_loop.h), on any backend: prefill `prompt` at
// position 0, then exactly n_decode greedy decode steps, EOS ignored. tokens = the n_decode + 1 tokens sampled.
struct AbPass {
  double prefill_ms = 0;    // the prompt's prefill plus its sample (wall clock; the sample syncs)
  double ms_per_token = 0;  // decode + sample, per step
  std::vector<int> tokens;
};
// start_pos: position of prompt[0], the cache before it already filled (a run at depth: ab_prefill_context first).
AbPass ab_decode_pass(Backend& backend, const std::vector<int>& prompt, int n_decode, uint64_t seed,
                      int start_pos = 0);

// One pass as ab_decode_pass runs it (prefill `prompt` at start_pos, n_decode + 1 greedy tokens, EOS ignored), through
// speculative_loop with `drafter`: the prompt's last token goes into the first verify pass, so ms_per_token is the
// loop's time after the prefill over all n_decode + 1 tokens. `history`: the ids already in the cache before start_pos
// (a run at depth), shown to the drafter. Greedy output equals ab_decode_pass's but where the target's top two logits
// nearly tie (a verify pass sums in another order than a decode step).
struct AbSpecPass {
  double prefill_ms = 0;
  double ms_per_token = 0;
  std::vector<int> tokens;
  SpecStats stats;
};
AbSpecPass ab_spec_pass(Backend& backend, Drafter& drafter, const SpecOptions& spec, const std::vector<int>& prompt,
                        int n_decode, uint64_t seed, int start_pos = 0, const std::vector<int>* history = nullptr);

// The KV cache positions run_ab gives the engine (and a draft model's backend must have): --ctx-size, else the prompt
// (or the depth) + n_decode.
int ab_ctx_size(const AbOptions& opt);

// The tokens a run at `depth` fills its cache with: `prompt` repeated and cut to `depth` tokens (depth 0: the prompt
// itself). Throws llm::Error for an empty prompt or a negative depth.
std::vector<int> ab_depth_tokens(const std::vector<int>& prompt, int depth);

// Prefills `context` at position 0 through the one decode loop and samples once (so an asynchronous backend has
// finished); returns the milliseconds that took. A run at depth N then runs
// ab_decode_pass(b, {context[N - 1]}, n, seed, N - 1) per pass: its steps run at positions N .. N + n - 1.
double ab_prefill_context(Backend& backend, const std::vector<int>& context, uint64_t seed);

// "" when a pass fits in `limit` positions, else the one-line refusal naming the values: "--depth 300 and -n 64 need
// 364 positions, more than --ctx-size 256" (limit_is_ctx_size) or "... more than the model's maximum of 256".
// prompt_tokens counts only when depth is 0.
std::string ab_context_refusal(int prompt_tokens, int depth, int n_decode, int64_t limit, bool limit_is_ctx_size);

// One A/B entry: a GEMV mapping and the decode path it runs on. "warp-r2@persistent" -> {"warp-r2", Persistent};
// "warp-r2@graph" and plain "warp-r2" -> {"warp-r2", Graph}. The one place an entry's name is split: whatever needs
// the GEMV (set_gemv, bytes, launch shapes, the sector model) takes `gemv`. Throws llm::Error naming an unknown path
// ("graph or persistent"); the mapping name is not checked here (parse_ab_mappings does).
struct AbEntry {
  std::string gemv;
  DecodePath path = DecodePath::Graph;
};
AbEntry parse_ab_entry(const std::string& entry);
// How a run names an entry in its report and JSON: the mapping, "@persistent" appended on the persistent path
// ("warp-r2", "warp-r2@persistent").
std::string ab_entry_name(const AbEntry& entry);

// "warp, thread@persistent,cublas" -> {"warp", "thread@persistent", "cublas"}; throws llm::Error on an empty list,
// item or repeat, a name core/gemv_table.h does not list, or an unknown decode path.
std::vector<std::string> parse_ab_mappings(const std::string& list);

// llama-ab --decode: "graph,persistent" -> {Graph, Persistent}; throws llm::Error on an empty list, item or repeat,
// or a name parse_decode_path does not take.
std::vector<DecodePath> parse_ab_decode(const std::string& list);

// Every entry of `mappings` (parse_ab_mappings) on every path of `paths`, mapping-major: {warp-r2, warp} x {graph,
// persistent} -> warp-r2, warp-r2@persistent, warp, warp@persistent (ab_entry_name). An entry that names its path
// runs on that path alone. Throws llm::Error when two give the same entry.
std::vector<std::string> ab_decode_entries(const std::vector<std::string>& mappings,
                                           const std::vector<DecodePath>& paths);

// The entries llama-ab runs: ab_decode_entries(mappings, paths), each checked before any GPU work against what its
// decode path runs (engine/gemv_choice.h decode_path_refusal, with run_ab's fused projections; the GEMV mapping
// against the weight types is gemv_refusal's, checked by run_ab). `listed` (--ab given): an entry its path cannot run
// throws llm::Error with decode_path_refusal's line. The default list (every mapping) leaves such entries out, so
// each path runs the mappings it can, and throws only for a path that runs none of them.
std::vector<std::string> ab_runnable_entries(const std::vector<std::string>& mappings,
                                             const std::vector<DecodePath>& paths, bool listed, const Model& model,
                                             bool dequantize, KvDtype kv_dtype);

// Weight bytes one decode step reads through projection kind `projection` (a ProfileParts GEMV part name: every
// layer's matrices, or the head; fused kinds their members') under GEMV plan `plan`, as the CUDA engine counts
// them for CudaBackend::gemv_bytes_per_token: a weight decode keeps quantized (quantized in the file, `dequantize`
// off) is read by the mapping's quantized form (kernels/quant/gemv_quant_plan.h quant_gemv_bytes_read: codes + scales, or
// GGUF's blocks for as-stored), any other as BF16 (N x K x 2). Layers may differ in type (Q4_K_M). Throws llm::Error
// for an unknown mapping or projection, or a quantized weight the mapping has no form for. The name overload takes a
// GEMV name (an entry's AbEntry::gemv), not an A/B entry.
int64_t ab_projection_bytes(const Model& model, const GemvPlan& plan, bool dequantize, const std::string& projection);
// The same for a mapping name (ab_projection_bytes(model, gemv_plan(mapping), ...)).
int64_t ab_projection_bytes(const Model& model, const std::string& mapping, bool dequantize,
                            const std::string& projection);

// What decode attention reads from the KV cache at n_decode steps at positions first_pos .. first_pos + n_decode - 1
// (the step at position p reads cache rows 0 .. p), as means over the steps: rows, and K and V bytes of every layer
// in the cache's type `kv` (engine/kv_cache.h CpuKvCache::bytes: FP8 scales included; Default reads as BF16, the CUDA
// engine's type).
struct AbKvRead {
  double rows = 0;
  int64_t bytes_per_token = 0;
};
AbKvRead ab_kv_read(const ModelConfig& c, KvDtype kv, int first_pos, int n_decode);

}  // namespace llm
