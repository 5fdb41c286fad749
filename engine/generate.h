// One-shot generation (run-llama): the one decode loop (engine/decode_loop.h) from position 0, streaming each new
// token, with the timings llama.cpp users read (llama_perf lines).
#pragma once
#include <csignal>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/speculative.h"

namespace llm {

struct GenerateOptions {
  int n_predict = 256;                              // new tokens at most
  SamplerParams sampler;
  bool ignore_eos = false;                          // benchmarks: always run n_predict tokens
  bool stop_on_bos = false;                         // llama2.c: a sampled BOS ends the sequence
  const volatile std::sig_atomic_t* interrupt = nullptr;  // set (e.g. by a SIGINT handler) to stop after this token
  Drafter* drafter = nullptr;                       // given: speculative decoding (engine/speculative.h)
  SpecOptions spec;                                 // its draft lengths
};

// Times of one run, in milliseconds. A timed step ends with the sample that follows it, since that is where an
// asynchronous backend waits for the device: "prompt eval" = prefill + first sample, "eval" = decode + sample.
struct Timings {
  double load_ms = 0.0;    // filled in by the caller (model load + backend setup)
  double prompt_ms = 0.0;
  int prompt_tokens = 0;
  double eval_ms = 0.0;
  int eval_tokens = 0;     // decode steps run after the prefill
  double total_ms = 0.0;   // load + the whole of generate()
  // Time to first token: from the start of the prefill to the first sampled id on the host (= prompt_ms of a plain
  // run); < 0 where the run does not time it apart (speculative decoding: its first token comes out of a verify).
  double first_token_ms = -1.0;
};

struct GenerateResult {
  std::vector<int> tokens;  // the generated tokens (a stopping EOS/BOS not included)
  std::string stop_reason;  // stop_reason_name(): "eos", "bos", "length", "context" or "interrupted"
  Timings timings;
  SpecStats spec;           // with a drafter: drafted and accepted tokens
};

// Runs the prompt from position 0, then generates. on_token is called with each new token as soon as it is sampled.
// Throws llm::Error when the prompt is empty or longer than the backend's context.
GenerateResult generate(Backend& backend, const ModelConfig& config, const std::vector<int>& prompt,
                        const GenerateOptions& opt, const std::function<void(int)>& on_token, double load_ms = 0.0);

// Teacher-forced logits: feeds ids[t] at position t one token at a time (decode path) and returns the logits after
// each, [ids.size(), vocab] row-major. For comparisons with independent implementations (tools/hf_compare.py).
// prefill_n > 0: ids[0, prefill_n) go through one prefill as a prompt does, then the rest one decode step each, as a
// generation computes them; rows from ids[prefill_n - 1] on, [ids.size() - prefill_n + 1, vocab]
// (tools/spec_margin.py: the plain run's own logits at a token it generated).
std::vector<float> teacher_forced_logits(Backend& backend, const std::vector<int>& ids, int prefill_n = 0);

// Prints the llama_perf-style timing block.
void print_timings(const Timings& t, std::FILE* out = stderr);

}  // namespace llm
