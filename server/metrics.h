// The server's counters, read by GET /metrics in the Prometheus text format (version 0.0.4): requests by route and
// status, prompt, cached and completion tokens, generation time, the last and average decode tokens/s, the queue
// depth, under --spec the draft tokens verified and accepted and the verify steps, and an info gauge naming the model,
// device, GEMV mapping, decode path and KV dtype. Thread-safe.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace llm::server {

struct ServerInfo {
  std::string model;      // the served name
  std::string device;     // the backend's name ("cpu", "cuda: NVIDIA H200", ...)
  std::string mapping;    // the GEMV mapping ("" on the CPU reference: "none")
  std::string decode;     // "graph" or "persistent" ("" on the CPU reference: "none")
  std::string kv_dtype;   // "f32", "bf16", "fp8"
  int ctx_size = 0;
};

class Metrics {
 public:
  void request(const std::string& route, int status);
  // One generation: its prompt tokens (cached = of them, reused from the cache), completion tokens and the decode
  // time of the tokens after the first (tokens/s = eval_tokens / eval_s).
  void generation(int prompt_tokens, int cached_tokens, int completion_tokens, int eval_tokens, double eval_ms,
                  double prompt_ms);
  // One speculative generation's draft tokens verified, accepted, and verify steps (--spec).
  void speculation(int64_t drafted, int64_t accepted, int64_t steps);
  std::string text(const ServerInfo& info, int queue_depth, int queue_limit) const;
  // The requests counted for `status` over every route (tests).
  uint64_t requests_with_status(int status) const;

 private:
  mutable std::mutex m_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, completion_tokens_ = 0, generations_ = 0;
  uint64_t eval_tokens_ = 0;
  double eval_s_ = 0.0, prompt_s_ = 0.0;
  double last_tps_ = 0.0;
  bool speculating_ = false;  // a speculative generation was counted: the draft figures are printed
  uint64_t drafted_ = 0, accepted_ = 0, spec_steps_ = 0;
};

}  // namespace llm::server
