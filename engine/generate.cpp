// The decode loop and its timing report.
#include "engine/generate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace llm {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

bool is_eos(const ModelConfig& c, int id) {
  return std::find(c.eos_ids.begin(), c.eos_ids.end(), id) != c.eos_ids.end();
}

}  // namespace

GenerateResult generate(Backend& backend, const ModelConfig& config, const std::vector<int>& prompt,
                        const GenerateOptions& opt, const std::function<void(int)>& on_token, double load_ms) {
  const int n_prompt = int(prompt.size());
  if (n_prompt == 0) fail("the prompt is empty (it needs at least the BOS token)");
  if (n_prompt > backend.ctx_size())
    fail("the prompt has ", n_prompt, " tokens, longer than the context of ", backend.ctx_size(), " positions");
  if (opt.n_predict < 1) fail("n_predict must be >= 1, found ", opt.n_predict);

  GenerateResult r;
  Timings& t = r.timings;
  t.load_ms = load_ms;
  const auto start = Clock::now();
  auto interrupted = [&] { return opt.interrupt && *opt.interrupt; };

  auto t0 = Clock::now();
  const int piece = std::max(1, backend.prefill_piece());
  for (int p0 = 0; p0 < n_prompt; p0 += piece) {
    if (interrupted()) {  // Ctrl-C during a long prompt: stop with the timings so far
      t.prompt_ms = ms_since(t0);
      t.prompt_tokens = p0;
      t.total_ms = load_ms + ms_since(start);
      r.stop_reason = "interrupted";
      return r;
    }
    backend.prefill(prompt.data() + p0, std::min(piece, n_prompt - p0), p0);
  }
  int token = backend.sample(opt.sampler, 0);
  t.prompt_ms = ms_since(t0);
  t.prompt_tokens = n_prompt;

  int pos = n_prompt;  // where the token just sampled goes
  for (;;) {
    if (!opt.ignore_eos && is_eos(config, token)) { r.stop_reason = "eos"; break; }
    if (opt.stop_on_bos && token == config.bos_id) { r.stop_reason = "bos"; break; }
    r.tokens.push_back(token);
    if (on_token) on_token(token);
    if (int(r.tokens.size()) >= opt.n_predict) { r.stop_reason = "length"; break; }
    if (interrupted()) { r.stop_reason = "interrupted"; break; }
    if (pos >= backend.ctx_size()) { r.stop_reason = "context"; break; }

    t0 = Clock::now();
    backend.decode(token, pos);
    token = backend.sample(opt.sampler, uint64_t(r.tokens.size()));
    t.eval_ms += ms_since(t0);
    t.eval_tokens++;
    pos++;
  }
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
  std::fprintf(out,
               "llama_perf_context_print:        eval time = %10.2f ms / %5d runs   (%8.2f ms per token, %8.2f "
               "tokens per second)\n",
               t.eval_ms, t.eval_tokens, per_token(t.eval_ms, t.eval_tokens), per_second(t.eval_ms, t.eval_tokens));
  std::fprintf(out, "llama_perf_context_print:       total time = %10.2f ms / %5d tokens\n", t.total_ms,
               t.prompt_tokens + t.eval_tokens);
}

std::vector<float> teacher_forced_logits(Backend& backend, const std::vector<int>& ids) {
  if (int(ids.size()) > backend.ctx_size())
    fail("the prompt has ", ids.size(), " tokens but the context holds ", backend.ctx_size());
  std::vector<float> out;
  for (size_t t = 0; t < ids.size(); ++t) {
    backend.decode(ids[t], int(t));
    std::vector<float> l = backend.logits();
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

}  // namespace llm
