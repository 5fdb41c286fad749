// ChatSession: one conversation with a model, keeping its KV cache across turns. Turn 1 prefills the rendered
// [system?, user] prompt from position 0; every later turn prefills only ChatTemplate::after_reply(user) after the
// ids already cached (the previous reply's tokens are there: each was decoded at its position, the stop token not).
#pragma once
#include <csignal>
#include <functional>
#include <string>
#include <vector>

#include "chat/template.h"
#include "engine/backend.h"
#include "engine/speculative.h"
#include "tokenizer/tokenizer.h"

namespace llm {

// Timings of one reply. A timed step ends with the sample that follows it (where an asynchronous backend waits), as
// in engine/generate.h: prompt = prefill + first sample, reply = the decode + sample steps after it.
struct ChatStats {
  int prompt_tokens = 0;   // tokens prefilled for this turn (after_reply's tokens on later turns)
  double prompt_ms = 0.0;
  int reply_tokens = 0;    // tokens of the reply, each decoded once into the cache (a stop token is not)
  double reply_ms = 0.0;

  double prompt_tokens_per_s() const { return prompt_ms > 0 ? prompt_tokens * 1000.0 / prompt_ms : 0.0; }
  double reply_tokens_per_s() const { return reply_ms > 0 ? reply_tokens * 1000.0 / reply_ms : 0.0; }
};

struct ChatReply {
  std::string text;         // the streamed text, whole
  std::vector<int> tokens;  // the reply's ids (now in the KV cache)
  // stop_reason_name() of engine/decode_loop.h: "eos" (template end-of-turn or EOS sampled), "length" (max tokens),
  // "interrupted", "context" (the turn or the reply ran into the end of the context).
  std::string stop_reason;
  std::string message;      // for "context" and an interrupted prefill: what happened and what to do (one line)
  ChatStats stats;
};

struct ChatSessionOptions {
  std::string system;           // system prompt; "" = none
  SamplerParams sampler;
  bool ignore_eos = false;      // tests and benchmarks: stop tokens are ordinary tokens (the reply runs to its bound)
  Drafter* drafter = nullptr;   // given: replies decode speculatively (engine/speculative.h), the cache still kept
  SpecOptions spec;             // its draft lengths (history is set by the session)
};

// What ends a reply: the template's end-of-turn tokens and every end-of-sequence id the model or tokenizer declares.
std::vector<int> chat_stop_ids(const Tokenizer& tok, const ModelConfig& config, const ChatTemplate& tmpl);
// A whole conversation's prompt: `messages` rendered with the generation prompt after them, BOS first where the
// vocabulary wants it (ChatSession's first turn; the server's /v1/chat/completions).
std::vector<int> chat_prompt_ids(const Tokenizer& tok, const ChatTemplate& tmpl,
                                 const std::vector<ChatMessage>& messages);

class ChatSession {
 public:
  // Throws llm::Error when the vocabulary lacks a special token the template needs.
  ChatSession(Backend& backend, const Tokenizer& tok, const ModelConfig& config, const ChatTemplate& tmpl,
              const ChatSessionOptions& opt);

  // One user turn: prefills its tokens, then samples the reply (at most max_tokens) and streams its text through
  // on_text as it becomes complete UTF-8. `interrupt` (set by a SIGINT handler) is checked between prefill pieces
  // and before each decode: an interrupted reply stays in the conversation; an interrupted prefill leaves the
  // conversation as it was. When the turn does not fit in the context nothing is run and stop_reason is "context".
  ChatReply send(const std::string& user, int max_tokens, const std::function<void(const std::string&)>& on_text,
                 const volatile std::sig_atomic_t* interrupt = nullptr);

  // Forgets the conversation (positions restart at 0); the system prompt stays.
  void reset();
  // New system prompt ("" = none); resets the conversation, since the system prompt opens it.
  void set_system(const std::string& text);
  const std::string& system() const { return opt_.system; }

  // The ids in the KV cache, position order (position i holds ids()[i]).
  const std::vector<int>& ids() const { return ids_; }
  int turns() const { return turns_; }
  const ChatStats& last_stats() const { return last_; }
  const SpecStats& spec_stats() const { return spec_; }  // drafted and accepted over the conversation
  bool has_last() const { return has_last_; }
  Backend& backend() { return backend_; }
  const ChatTemplate& chat_template() const { return tmpl_; }
  int ctx_size() const { return backend_.ctx_size(); }

  // The ids this user turn would prefill now (turn 1: the rendered prompt, BOS first where the vocabulary wants it;
  // later turns: after_reply(user)).
  std::vector<int> turn_ids(const std::string& user) const;

 private:
  bool is_stop(int id) const;

  Backend& backend_;
  const Tokenizer& tok_;
  ModelConfig config_;
  ChatTemplate tmpl_;
  ChatSessionOptions opt_;
  std::vector<int> stop_ids_;
  std::vector<int> ids_;   // in the KV cache
  uint64_t samples_ = 0;   // sampler step counter over the conversation (same seed, same conversation)
  int turns_ = 0;
  ChatStats last_;
  bool has_last_ = false;
  SpecStats spec_;
};

}  // namespace llm
