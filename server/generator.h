// The engine behind the server: one generation at a time on one worker thread, fed by a bounded FIFO queue. Device
// agnostic: it drives any Backend through the one decode loop (engine/decode_loop.h).
//
// A Job carries a parsed request; the worker tokenizes it (the chat template for chat, run-llama's BOS rule for
// completions), checks it against the context (ApiError 400 "context_length_exceeded"), then generates. Text is
// cut at stop strings and handed over in complete UTF-8 pieces, for streaming, as it comes.
//
// KV-cache reuse: the worker keeps the ids whose KV rows the cache holds and starts each prefill at the longest
// common prefix of those and the new prompt (at least the last prompt token is run, for its logits), so a chat that
// resends its history pays only for the new turn. The ids kept are exactly what the cache holds: the prompt, and of
// the produced tokens those the loop decoded (all but the last, unless generation stopped at a stop id). With an FP8
// KV cache the reuse point is rounded down to a block of 32 positions, where a rewind is exact (engine/kv_cache.h).
//
// Speculation (GeneratorOptions::drafter): the same, through the speculative loop; the cache then holds at least what
// the ids kept say (an accepted last draft is in it too), so the reuse rule stands.
//
// Cancellation: Job::cancel (set by the HTTP side when a write fails) or Job::client_alive() returning false stops
// the generation after the token being produced; both are checked after every token.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "chat/template.h"
#include "engine/backend.h"
#include "engine/speculative.h"  // Drafter, SpecOptions: --spec
#include "server/api.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"

namespace llm::server {

struct Job {
  enum class State { kQueued, kRunning, kDone };

  explicit Job(GenerationRequest r) : req(std::move(r)) {}
  GenerationRequest req;
  std::function<bool()> client_alive;  // optional; called on the worker thread after every token
  std::atomic<bool> cancel{false};

  // Written by the worker under `m`; wait_* below read them.
  std::mutex m;
  std::condition_variable cv;
  State state = State::kQueued;
  std::optional<ApiError> error;       // set when the job failed (then state is kDone)
  std::deque<std::string> pieces;      // streamed text not yet taken
  std::string text;                    // all the text (after stop strings)
  std::string finish_reason;           // "stop" or "length" ("" while running, or cancelled)
  bool cancelled = false;
  Usage usage;
  uint64_t seed = 0;                   // the seed used

  // Blocks until the job has started (prompt checked) or is done.
  void wait_started();
  void wait_done();
  // Blocks until there is a piece or the job is done, at most `ms`; moves the pieces into *out. Returns true when
  // the job is done and every piece has been taken.
  bool take_pieces(std::vector<std::string>* out, int ms);
};

struct GeneratorOptions {
  int queue_limit = 8;        // jobs that may wait (the one running not counted); more: submit() refuses
  int reuse_align = 1;        // the KV reuse point is a multiple of this (kKvFp8Block with an FP8 KV cache)
  uint64_t seed_base = 0;     // requests without a seed get seed_base + a counter
  // --spec: every generation runs the speculative loop with this drafter (owned by the caller, used by the worker
  // thread alone), the ids the cache already holds shown to it as history; greedy output and sampling unchanged.
  Drafter* drafter = nullptr;
  SpecOptions spec;
};

class Generator {
 public:
  Generator(Backend& backend, const Tokenizer& tok, const ModelConfig& config, const ChatTemplate& tmpl,
            Metrics& metrics, const GeneratorOptions& opt);
  ~Generator();  // shutdown(), then waits for the worker

  // Refuses new jobs, ends the queued ones with 503 and cancels the running one (it stops after its current token).
  void shutdown();

  // Queues the job; false (and the job untouched) when the queue is full.
  bool submit(const std::shared_ptr<Job>& job);
  int queue_depth() const;
  int queue_limit() const { return opt_.queue_limit; }
  int ctx_size() const { return backend_.ctx_size(); }

  // The prompt ids of a request (the worker calls it; public for tests). Throws ApiError 400 when it is empty.
  std::vector<int> prompt_ids(const GenerationRequest& r) const;
  // The ids the KV cache holds now (tests; only meaningful while no job runs).
  std::vector<int> cached_ids() const;

 private:
  void worker();
  void run(Job& job);
  void generate(Job& job, const std::vector<int>& prompt);

  Backend& backend_;
  const Tokenizer& tok_;
  ModelConfig config_;
  ChatTemplate tmpl_;
  Metrics& metrics_;
  GeneratorOptions opt_;
  std::vector<int> chat_stop_ids_, completion_stop_ids_;

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::shared_ptr<Job> running_;
  bool stopping_ = false;
  uint64_t unseeded_ = 0;
  std::vector<int> cached_;  // ids in the KV cache, position order (worker thread; copied under m_ for tests)
  std::thread thread_;
};

}  // namespace llm::server
