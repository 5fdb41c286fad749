// The worker thread and its queue (see server/generator.h).
#include "server/generator.h"

#include <algorithm>
#include <chrono>

#include "chat/session.h"  // chat_prompt_ids, chat_stop_ids
#include "core/error.h"
#include "engine/decode_loop.h"
#include "server/stop_text.h"

namespace llm::server {

void Job::wait_started() {
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [&] { return state != State::kQueued; });
}

void Job::wait_done() {
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [&] { return state == State::kDone; });
}

bool Job::take_pieces(std::vector<std::string>* out, int ms) {
  std::unique_lock<std::mutex> lock(m);
  cv.wait_for(lock, std::chrono::milliseconds(ms), [&] { return !pieces.empty() || state == State::kDone; });
  for (std::string& p : pieces) out->push_back(std::move(p));
  pieces.clear();
  return state == State::kDone;
}

Generator::Generator(Backend& backend, const Tokenizer& tok, const ModelConfig& config, const ChatTemplate& tmpl,
                     Metrics& metrics, const GeneratorOptions& opt)
    : backend_(backend), tok_(tok), config_(config), tmpl_(tmpl), metrics_(metrics), opt_(opt) {
  chat_stop_ids_ = chat_stop_ids(tok_, config_, tmpl_);
  completion_stop_ids_ = config_.eos_ids;  // as run-llama
  opt_.reuse_align = std::max(1, opt_.reuse_align);
  thread_ = std::thread([this] { worker(); });
}

Generator::~Generator() {
  shutdown();
  thread_.join();
}

void Generator::shutdown() {
  std::deque<std::shared_ptr<Job>> queued;
  {
    std::lock_guard<std::mutex> lock(m_);
    stopping_ = true;
    queued.swap(queue_);
    if (running_) running_->cancel = true;
  }
  cv_.notify_all();
  for (const std::shared_ptr<Job>& job : queued) {
    std::lock_guard<std::mutex> lock(job->m);
    job->error = ApiError(503, "the server is shutting down", "server_error");
    job->state = Job::State::kDone;
    job->cv.notify_all();
  }
}

bool Generator::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lock(m_);
    if (stopping_ || int(queue_.size()) >= opt_.queue_limit) return false;
    if (!job->req.seed) job->req.seed = opt_.seed_base + unseeded_++;
    queue_.push_back(job);
  }
  cv_.notify_one();
  return true;
}

int Generator::queue_depth() const {
  std::lock_guard<std::mutex> lock(m_);
  return int(queue_.size());
}

std::vector<int> Generator::cached_ids() const {
  std::lock_guard<std::mutex> lock(m_);
  return cached_;
}

std::vector<int> Generator::prompt_ids(const GenerationRequest& r) const {
  if (r.chat) return chat_prompt_ids(tok_, tmpl_, r.messages);
  if (r.prompt.empty() && tok_.bos_id() < 0)
    throw ApiError(400, "'prompt' is empty and the vocabulary has no BOS token to start from", "invalid_request_error",
                   "prompt");
  return encode_prompt(tok_, r.prompt);
}

void Generator::worker() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = running_ = queue_.front();
      queue_.pop_front();
    }
    run(*job);
    {
      std::lock_guard<std::mutex> lock(m_);
      running_.reset();
    }
    std::lock_guard<std::mutex> lock(job->m);
    job->state = Job::State::kDone;
    job->cv.notify_all();
  }
}

void Generator::run(Job& job) {
  auto fail_job = [&](const ApiError& e) {
    std::lock_guard<std::mutex> lock(job.m);
    job.error = e;
  };
  if (job.cancel || (job.client_alive && !job.client_alive())) {  // the client left while the job waited
    std::lock_guard<std::mutex> lock(job.m);
    job.cancelled = true;
    return;
  }
  std::vector<int> prompt;
  try {
    prompt = prompt_ids(job.req);
  } catch (const ApiError& e) {
    return fail_job(e);
  } catch (const std::exception& e) {
    return fail_job(ApiError(400, std::string("the prompt cannot be encoded: ") + e.what()));
  }
  if (prompt.empty())  // a text that encodes to nothing, in a vocabulary without BOS
    return fail_job(ApiError(400, "the prompt encodes to no tokens", "invalid_request_error",
                             job.req.chat ? "messages" : "prompt"));
  const int ctx = backend_.ctx_size();
  if (int64_t(prompt.size()) + 1 > ctx)
    return fail_job(ApiError(400,
                             "This model's maximum context length is " + std::to_string(ctx) +
                                 " tokens. However, your " + (job.req.chat ? "messages" : "prompt") + " resulted in " +
                                 std::to_string(prompt.size()) + " tokens (and the reply needs at least 1).",
                             "invalid_request_error", job.req.chat ? "messages" : "prompt", "context_length_exceeded"));
  {
    std::lock_guard<std::mutex> lock(job.m);
    job.state = Job::State::kRunning;
    job.seed = *job.req.seed;
    job.cv.notify_all();
  }
  try {
    generate(job, prompt);
  } catch (const std::exception& e) {
    {
      std::lock_guard<std::mutex> lock(m_);
      cached_.clear();  // what the cache holds is unknown now: the next request prefills from 0
    }
    fail_job(ApiError(500, std::string("generation failed: ") + printable_message(e.what()), "server_error"));
  }
}

void Generator::generate(Job& job, const std::vector<int>& prompt) {
  const GenerationRequest& req = job.req;
  // The longest common prefix with what the cache holds, less at least the last prompt token (its logits are
  // needed), rounded down to the reuse alignment.
  size_t lcp = 0;
  {
    std::lock_guard<std::mutex> lock(m_);
    const size_t n = std::min(cached_.size(), prompt.size() - 1);
    while (lcp < n && cached_[lcp] == prompt[lcp]) ++lcp;
    lcp -= lcp % size_t(opt_.reuse_align);
    cached_.resize(lcp);  // rows past lcp are about to be overwritten
  }
  const std::vector<int> suffix(prompt.begin() + std::ptrdiff_t(lcp), prompt.end());

  DecodeLoopOptions lo;
  lo.start_pos = int(lcp);
  lo.max_new = req.max_tokens > 0 ? req.max_tokens : backend_.ctx_size();
  lo.sampler = {req.temperature, req.top_k, req.top_p, *req.seed};
  if (!req.ignore_eos) lo.stop_ids = req.chat ? chat_stop_ids_ : completion_stop_ids_;
  lo.cache_every_token = false;
  // A client that leaves while its prompt prefills stops the prefill within one piece (Backend::prefill_piece).
  lo.cancelled = [&job] { return job.cancel || (job.client_alive && !job.client_alive()); };

  StreamDecoder dec(tok_, /*strip_leading_space=*/req.chat || req.prompt.empty());
  StopText stop(req.stop);
  bool cancelled = false;
  auto emit = [&](const std::string& s) {
    if (s.empty()) return;
    std::lock_guard<std::mutex> lock(job.m);
    job.text += s;
    if (req.stream) {
      job.pieces.push_back(s);
      job.cv.notify_all();
    }
  };
  const auto on_token = [&](int id) {
    emit(stop.push(dec.push(id)));
    if (stop.stopped()) return false;
    if (job.cancel || (job.client_alive && !job.client_alive())) {
      cancelled = true;
      return false;
    }
    return true;
  };
  SpecStats spec_stats;
  DecodeLoopResult d;
  if (opt_.drafter) {
    std::vector<int> history;  // what the cache holds before the suffix: the drafter's context too
    {
      std::lock_guard<std::mutex> lock(m_);
      history = cached_;
    }
    SpecOptions so = opt_.spec;
    so.history = &history;
    d = speculative_loop(backend_, *opt_.drafter, suffix, lo, so, &spec_stats, on_token);
  } else {
    d = decode_loop(backend_, suffix, lo, on_token);
  }
  if (d.stop == StopReason::kInterrupted) cancelled = true;  // during the prefill (lo.cancelled)
  emit(stop.push(dec.flush()));
  emit(stop.flush());

  // What the cache holds now: the prompt prefilled, and the produced tokens the loop decoded (all but the last one,
  // except when it stopped at a stop id: then every produced token was decoded).
  {
    std::lock_guard<std::mutex> lock(m_);
    cached_.insert(cached_.end(), suffix.begin(), suffix.begin() + d.prefilled);
    if (d.prefilled == int(suffix.size())) {
      size_t decoded = d.tokens.size();
      if (decoded > 0 && d.stop != StopReason::kEos && d.stop != StopReason::kBos) --decoded;
      cached_.insert(cached_.end(), d.tokens.begin(), d.tokens.begin() + std::ptrdiff_t(decoded));
    }
  }
  const bool by_stop = d.stop == StopReason::kEos || d.stop == StopReason::kBos || stop.stopped();
  metrics_.generation(int(prompt.size()), int(lcp), int(d.tokens.size()), d.eval_tokens, d.eval_ms, d.prompt_ms);
  if (opt_.drafter) metrics_.speculation(spec_stats.drafted, spec_stats.accepted, spec_stats.steps);
  std::lock_guard<std::mutex> lock(job.m);
  job.usage = {int(prompt.size()), int(d.tokens.size()), int(lcp)};
  job.cancelled = cancelled;
  job.finish_reason = by_stop ? "stop" : "length";
}

}  // namespace llm::server
