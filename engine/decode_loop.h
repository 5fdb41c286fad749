// The one decode loop: prefill(prompt) -> sample -> [decode -> sample]... with one vocabulary of stop reasons.
// run-llama (engine/generate.h), the chat (chat/session.h) and the A/B run (measure/ab_run.h) all run it, so the
// quantized, long-context and persistent paths change one place.
#pragma once
#include <chrono>
#include <csignal>
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/backend.h"

namespace llm {

// Milliseconds since t0 on the steady clock: the loops' timings (decode_loop, speculative_loop, generate).
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Why a loop stopped. Its name (stop_reason_name) is what results and reports carry.
enum class StopReason {
  kEos,          // "eos": a stop id was sampled (EOS, or a chat template's end of turn); not produced
  kBos,          // "bos": BOS sampled where it ends a sequence (llama2.c); not produced
  kLength,       // "length": max_new tokens produced
  kContext,      // "context": the next token has no position left in the KV cache
  kInterrupted,  // "interrupted": the interrupt flag was up (between prefill pieces or after a token)
  kCallback,     // "callback": on_token asked to stop after the token it was given
};
const char* stop_reason_name(StopReason r);

struct DecodeLoopOptions {
  int start_pos = 0;          // position of prompt[0]: tokens [0, start_pos) are already in the cache (chat turns)
  int max_new = 256;          // tokens to produce at most (>= 1)
  SamplerParams sampler;
  uint64_t first_step = 0;    // sampler step of the first sample; the k-th sample uses first_step + k
  std::vector<int> stop_ids;  // sampled ids that end the loop (EOS ids, end-of-turn ids); empty: none
  int stop_bos_id = -1;       // >= 0: sampling this id ends the loop (llama2.c's BOS rule)
  // true: every produced token is decoded into the cache, the last one included, so the cache holds the whole reply
  // (the chat, whose next turn continues after it); false: the last produced token is never decoded (one-shot runs).
  bool cache_every_token = false;
  const volatile std::sig_atomic_t* interrupt = nullptr;  // checked between prefill pieces and after each token
  // Given: asked between prefill pieces (not before the first); true stops the loop as an interrupt does (the
  // server's client that left while its long prompt was prefilling). After a token, on_token decides.
  std::function<bool()> cancelled;
};

// Times in milliseconds. A timed step ends when its sampled id reaches the host: prompt = prefill + first sample;
// eval = the decode (+ sample) steps after it. A backend that runs ahead (Backend::runs_ahead) times each step from
// the previous id's arrival (the device runs on meanwhile, so the callback overlaps it); otherwise from after the
// callback.
struct DecodeLoopResult {
  std::vector<int> tokens;    // produced tokens, in order (a stopping id not included)
  StopReason stop = StopReason::kLength;
  int prefilled = 0;          // prompt tokens now in the cache (fewer than the prompt when interrupted in prefill)
  double prompt_ms = 0.0;
  double eval_ms = 0.0;
  int eval_tokens = 0;        // decode steps run after the prefill
  uint64_t next_step = 0;     // the sampler step a following loop continues from
};

// The checks every loop makes before it runs (decode_loop, speculative_loop): throws llm::Error when the prompt is
// empty, start_pos is negative, start_pos + prompt.size() exceeds the context, or max_new < 1.
void check_decode_loop_args(const Backend& backend, const std::vector<int>& prompt, const DecodeLoopOptions& opt);

// on_token(id) is called with each produced token as soon as it is sampled (and, with cache_every_token, decoded);
// returning false stops the loop after it (StopReason::kCallback). Throws llm::Error when the prompt is empty or
// start_pos + prompt.size() exceeds the backend's context.
DecodeLoopResult decode_loop(Backend& backend, const std::vector<int>& prompt, const DecodeLoopOptions& opt,
                             const std::function<bool(int)>& on_token = nullptr);

}  // namespace llm
