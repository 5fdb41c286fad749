// The decode loop and its timing report.
#include "engine/generate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "engine/decode_loop.h"

namespace llm {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

GenerateResult generate(Backend& backend, const ModelConfig& config, const std::vector<int>& prompt,
                        const GenerateOptions& opt, const std::function<void(int)>& on_token, double load_ms) {
  DecodeLoopOptions lo;
  lo.max_new = opt.n_predict;
  lo.sampler = opt.sampler;
  if (!opt.ignore_eos) lo.stop_ids = config.eos_ids;
  if (opt.stop_on_bos) lo.stop_bos_id = config.bos_id;
  lo.interrupt = opt.interrupt;
  const auto start = Clock::now();
  const auto emit = [&](int id) {
    if (on_token) on_token(id);
    return true;
  };
  GenerateResult r;
  DecodeLoopResult d = opt.drafter ? speculative_loop(backend, *opt.drafter, prompt, lo, opt.spec, &r.spec, emit)
                                   : decode_loop(backend, prompt, lo, emit);
  r.tokens = std::move(d.tokens);
  r.stop_reason = stop_reason_name(d.stop);
  Timings& t = r.timings;
  t.load_ms = load_ms;
  t.prompt_ms = d.prompt_ms;
  if (!opt.drafter) t.first_token_ms = d.prompt_ms;
  t.prompt_tokens = d.prefilled;
  t.eval_ms = d.eval_ms;
  t.eval_tokens = d.eval_tokens;
  t.total_ms = load_ms + ms_since(start);
  return r;
}

void print_timings(const Timings& t, std::FILE* out) {
  auto per_token = [](double ms, int n) { return n > 0 ? ms / n : 0.0; };
  auto per_second = [](double ms, int n) { return ms > 0.0 ? 1e3 * n / ms : 0.0; };
  std::fprintf(out, "llama_perf_context_print:        load time = %10.2f ms\n", t.load_ms);
  std::fprintf(out,
               "llama_perf_context_print: prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f "
               "tokens per second)\n",
               t.prompt_ms, t.prompt_tokens, per_token(t.prompt_ms, t.prompt_tokens),
               per_second(t.prompt_ms, t.prompt_tokens));
  if (t.first_token_ms >= 0.0)  // the prefill, the head and the first sample (one-time work at load is not in it)
    std::fprintf(out, "llama_perf_context_print:  first token time = %10.2f ms (time to first token)\n",
                 t.first_token_ms);
  std::fprintf(out,
               "llama_perf_context_print:        eval time = %10.2f ms / %5d runs   (%8.2f ms per token, %8.2f "
               "tokens per second)\n",
               t.eval_ms, t.eval_tokens, per_token(t.eval_ms, t.eval_tokens), per_second(t.eval_ms, t.eval_tokens));
  std::fprintf(out, "llama_perf_context_print:       total time = %10.2f ms / %5d tokens\n", t.total_ms,
               t.prompt_tokens + t.eval_tokens);
}

std::vector<float> teacher_forced_logits(Backend& backend, const std::vector<int>& ids, int prefill_n) {
  if (int(ids.size()) > backend.ctx_size())
    fail("the prompt has ", ids.size(), " tokens but the context holds ", backend.ctx_size());
  if (prefill_n < 0 || size_t(prefill_n) > ids.size())
    fail("teacher-forced logits: a prefill of ", prefill_n, " ids out of ", ids.size());
  std::vector<float> out;
  if (prefill_n > 0) {
    backend.prefill(ids.data(), prefill_n, 0);
    out = backend.logits();
  }
  for (size_t t = size_t(prefill_n); t < ids.size(); ++t) {
    backend.decode(ids[t], int(t));
    std::vector<float> l = backend.logits();
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

}  // namespace llm
