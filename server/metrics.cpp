// Counters and their Prometheus text (see server/metrics.h).
#include "server/metrics.h"

#include <algorithm>
#include <cstdio>

namespace llm::server {

namespace {

// A label value as the text format escapes it: backslash, double quote and newline.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void metric(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

void Metrics::request(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(m_);
  requests_[{route, status}]++;
}

void Metrics::generation(int prompt_tokens, int cached_tokens, int completion_tokens, int eval_tokens,
                         double eval_ms, double prompt_ms) {
  std::lock_guard<std::mutex> lock(m_);
  prompt_tokens_ += uint64_t(prompt_tokens);
  cached_tokens_ += uint64_t(cached_tokens);
  completion_tokens_ += uint64_t(completion_tokens);
  generations_++;
  prompt_s_ += prompt_ms / 1e3;
  if (eval_tokens > 0 && eval_ms > 0) {
    eval_tokens_ += uint64_t(eval_tokens);
    eval_s_ += eval_ms / 1e3;
    last_tps_ = eval_tokens * 1e3 / eval_ms;
  }
}

void Metrics::speculation(int64_t drafted, int64_t accepted, int64_t steps) {
  std::lock_guard<std::mutex> lock(m_);
  speculating_ = true;
  drafted_ += uint64_t(std::max<int64_t>(drafted, 0));
  accepted_ += uint64_t(std::max<int64_t>(accepted, 0));
  spec_steps_ += uint64_t(std::max<int64_t>(steps, 0));
}

uint64_t Metrics::requests_with_status(int status) const {
  std::lock_guard<std::mutex> lock(m_);
  uint64_t n = 0;
  for (const auto& [key, count] : requests_)
    if (key.second == status) n += count;
  return n;
}

std::string Metrics::text(const ServerInfo& info, int queue_depth, int queue_limit) const {
  std::lock_guard<std::mutex> lock(m_);
  std::string out;
  metric(out, "llm_requests_total", "counter", "HTTP requests answered, by route and status.");
  for (const auto& [key, count] : requests_)
    out += "llm_requests_total{route=\"" + label(key.first) + "\",status=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(count) + "\n";
  metric(out, "llm_generations_total", "counter", "Generations run on the engine.");
  out += "llm_generations_total " + std::to_string(generations_) + "\n";
  metric(out, "llm_prompt_tokens_total", "counter", "Prompt tokens of the generations run.");
  out += "llm_prompt_tokens_total " + std::to_string(prompt_tokens_) + "\n";
  metric(out, "llm_prompt_tokens_cached_total", "counter",
         "Prompt tokens whose KV cache rows were reused from the previous request (longest common prefix).");
  out += "llm_prompt_tokens_cached_total " + std::to_string(cached_tokens_) + "\n";
  metric(out, "llm_completion_tokens_total", "counter", "Tokens generated.");
  out += "llm_completion_tokens_total " + std::to_string(completion_tokens_) + "\n";
  metric(out, "llm_prompt_seconds_total", "counter", "Time spent on prompts (prefill and first sample).");
  out += "llm_prompt_seconds_total " + num(prompt_s_) + "\n";
  metric(out, "llm_decode_seconds_total", "counter", "Time spent on decode steps after the first token.");
  out += "llm_decode_seconds_total " + num(eval_s_) + "\n";
  metric(out, "llm_decode_tokens_per_second_last", "gauge", "Decode tokens per second of the last generation.");
  out += "llm_decode_tokens_per_second_last " + num(last_tps_) + "\n";
  metric(out, "llm_decode_tokens_per_second_avg", "gauge", "Decode tokens per second over every generation.");
  out += "llm_decode_tokens_per_second_avg " + num(eval_s_ > 0 ? double(eval_tokens_) / eval_s_ : 0.0) + "\n";
  metric(out, "llm_queue_depth", "gauge", "Requests waiting for the engine (the one running not included).");
  out += "llm_queue_depth " + std::to_string(queue_depth) + "\n";
  metric(out, "llm_queue_limit", "gauge", "Requests that may wait before the server answers 503.");
  out += "llm_queue_limit " + std::to_string(queue_limit) + "\n";
  if (speculating_) {
    metric(out, "llm_spec_drafted_tokens_total", "counter", "Draft tokens verified (--spec).");
    out += "llm_spec_drafted_tokens_total " + std::to_string(drafted_) + "\n";
    metric(out, "llm_spec_accepted_tokens_total", "counter", "Draft tokens accepted (--spec).");
    out += "llm_spec_accepted_tokens_total " + std::to_string(accepted_) + "\n";
    metric(out, "llm_spec_steps_total", "counter", "Verify passes, and plain steps where nothing was drafted (--spec).");
    out += "llm_spec_steps_total " + std::to_string(spec_steps_) + "\n";
  }
  metric(out, "llm_info", "gauge", "The model and how it runs.");
  out += "llm_info{model=\"" + label(info.model) + "\",device=\"" + label(info.device) + "\",mapping=\"" +
         label(info.mapping.empty() ? "none" : info.mapping) + "\",decode=\"" +
         label(info.decode.empty() ? "none" : info.decode) + "\",kv_dtype=\"" + label(info.kv_dtype) +
         "\",ctx_size=\"" + std::to_string(info.ctx_size) + "\"} 1\n";
  return out;
}

}  // namespace llm::server
