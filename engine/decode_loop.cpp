// The one decode loop (see engine/decode_loop.h).
#include "engine/decode_loop.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace llm {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kEos: return "eos";
    case StopReason::kBos: return "bos";
    case StopReason::kLength: return "length";
    case StopReason::kContext: return "context";
    case StopReason::kInterrupted: return "interrupted";
    case StopReason::kCallback: return "callback";
  }
  return "unknown";
}

void check_decode_loop_args(const Backend& backend, const std::vector<int>& prompt, const DecodeLoopOptions& opt) {
  const int n_prompt = int(prompt.size());
  const int ctx = backend.ctx_size();
  if (n_prompt == 0) fail("the prompt is empty (it needs at least the BOS token)");
  if (opt.start_pos < 0) fail("decode loop: start position ", opt.start_pos, " is negative");
  if (int64_t(opt.start_pos) + n_prompt > ctx)
    fail("the prompt has ", n_prompt, " tokens, longer than the context of ", ctx, " positions",
         opt.start_pos > 0 ? " (after the " + std::to_string(opt.start_pos) + " already in use)" : std::string());
  if (opt.max_new < 1) fail("n_predict must be >= 1, found ", opt.max_new);
}

DecodeLoopResult decode_loop(Backend& backend, const std::vector<int>& prompt, const DecodeLoopOptions& opt,
                             const std::function<bool(int)>& on_token) {
  check_decode_loop_args(backend, prompt, opt);
  const int n_prompt = int(prompt.size());
  const int ctx = backend.ctx_size();

  DecodeLoopResult r;
  uint64_t step = opt.first_step;
  auto interrupted = [&] { return opt.interrupt && *opt.interrupt; };
  auto is_stop = [&](int id) {
    return std::find(opt.stop_ids.begin(), opt.stop_ids.end(), id) != opt.stop_ids.end();
  };

  // Prefill, in the pieces the backend batches, so an interrupt is seen between pieces of a long prompt.
  auto t0 = Clock::now();
  const int piece = std::max(1, backend.prefill_piece());
  for (int p0 = 0; p0 < n_prompt; p0 += piece) {
    if (interrupted() || (p0 > 0 && opt.cancelled && opt.cancelled())) {
      r.prompt_ms = ms_since(t0);
      r.stop = StopReason::kInterrupted;
      r.next_step = step;
      return r;
    }
    const int n = std::min(piece, n_prompt - p0);
    backend.prefill(prompt.data() + p0, n, opt.start_pos + p0);
    r.prefilled += n;
  }
  // Samples start with sample_async and their ids come back, in order, from wait_sampled. A backend that runs ahead
  // gets the next step (the decode of the id in flight at pos, and the sample after it) before the loop waits for
  // that id, wherever the loop will decode the id unless it stops at it (a stop id, the callback, an interrupt), so
  // the device never waits for the host. Such a stop leaves one step to drop; its KV row lies past what the loop
  // reports as cached, and whatever comes next overwrites it.
  const bool ahead = backend.runs_ahead();
  int pos = opt.start_pos + n_prompt;  // where the id in flight goes
  bool first = true;
  try {
    backend.sample_async(opt.sampler, step);
    for (;;) {
      const bool queued =
          ahead && pos < ctx && (opt.cache_every_token || int(r.tokens.size()) + 1 < opt.max_new);
      if (queued) {
        backend.decode_sampled(pos);
        backend.sample_async(opt.sampler, step + 1);
      }
      const int token = backend.wait_sampled();
      ++step;
      if (first) {
        r.prompt_ms = ms_since(t0);
        first = false;
      } else {
        r.eval_ms += ms_since(t0);
        r.eval_tokens++;
      }
      // A step's time runs to its id: from the previous id (ahead: the device ran on meanwhile) or, one round trip
      // per token, from after the callback.
      if (ahead) t0 = Clock::now();
      if (is_stop(token)) { r.stop = StopReason::kEos; break; }
      if (opt.stop_bos_id >= 0 && token == opt.stop_bos_id) { r.stop = StopReason::kBos; break; }
      // A token that must be cached needs a position of its own before it is produced.
      if (opt.cache_every_token && pos >= ctx) { r.stop = StopReason::kContext; break; }
      r.tokens.push_back(token);
      const bool keep_going = on_token ? on_token(token) : true;
      if (!ahead) t0 = Clock::now();
      const bool done = int(r.tokens.size()) >= opt.max_new;
      const bool stop = done || !keep_going || interrupted();
      const StopReason why = done ? StopReason::kLength : !keep_going ? StopReason::kCallback : StopReason::kInterrupted;
      if (opt.cache_every_token) {
        if (!queued) backend.decode_sampled(pos);
        ++pos;
        if (stop) {  // the last token's decode is a timed step (ahead: the sample after it is dropped)
          backend.drop_sampled();
          r.eval_ms += ms_since(t0);
          r.eval_tokens++;
          r.stop = why;
          break;
        }
      } else {
        if (stop) { r.stop = why; break; }
        if (pos >= ctx) { r.stop = StopReason::kContext; break; }
        if (!queued) backend.decode_sampled(pos);
        ++pos;
      }
      if (!queued) backend.sample_async(opt.sampler, step);
    }
    backend.drop_sampled();  // a step queued ahead of a stop
  } catch (...) {
    try {
      backend.drop_sampled();
    } catch (...) {  // the error that stopped the loop is the one to report
    }
    throw;
  }
  r.next_step = step;
  return r;
}

}  // namespace llm
