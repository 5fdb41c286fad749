// ChatSession: the conversation loop over a Backend, with the KV cache kept across turns (see chat/session.h).
#include "chat/session.h"

#include <algorithm>

#include "core/error.h"
#include "engine/decode_loop.h"

namespace llm {

namespace {

const char* kResetHint = "type /reset to start a new conversation";

}  // namespace

std::vector<int> chat_stop_ids(const Tokenizer& tok, const ModelConfig& config, const ChatTemplate& tmpl) {
  std::vector<int> ids;
  for (const std::string& s : tmpl.end_of_turn()) {
    int id = tok.token_id(s);
    if (id >= 0) ids.push_back(id);
  }
  for (int id : config.eos_ids) ids.push_back(id);
  if (tok.eos_id() >= 0) ids.push_back(tok.eos_id());
  return ids;
}

std::vector<int> chat_prompt_ids(const Tokenizer& tok, const ChatTemplate& tmpl,
                                 const std::vector<ChatMessage>& messages) {
  std::vector<int> ids = ChatTemplate::encode(tok, tmpl.render(messages, /*add_generation_prompt=*/true));
  // Templates that leave BOS to the tokenizer (ChatML, Zephyr) get it here, as llama.cpp adds it to a chat prompt.
  if (tok.adds_bos() && tok.bos_id() >= 0 && (ids.empty() || ids[0] != tok.bos_id()))
    ids.insert(ids.begin(), tok.bos_id());
  return ids;
}

ChatSession::ChatSession(Backend& backend, const Tokenizer& tok, const ModelConfig& config, const ChatTemplate& tmpl,
                         const ChatSessionOptions& opt)
    : backend_(backend), tok_(tok), config_(config), tmpl_(tmpl), opt_(opt) {
  stop_ids_ = chat_stop_ids(tok_, config_, tmpl_);
  // A template whose special tokens the vocabulary lacks fails here, once, rather than on every turn.
  ChatTemplate::encode(tok_, tmpl_.render({{"user", "x"}}, /*add_generation_prompt=*/true));
  ChatTemplate::encode(tok_, tmpl_.after_reply("x"));
}

bool ChatSession::is_stop(int id) const {
  return std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end();
}

std::vector<int> ChatSession::turn_ids(const std::string& user) const {
  if (!ids_.empty()) return ChatTemplate::encode(tok_, tmpl_.after_reply(user));
  std::vector<ChatMessage> messages;
  if (!opt_.system.empty()) messages.push_back({"system", opt_.system});
  messages.push_back({"user", user});
  return chat_prompt_ids(tok_, tmpl_, messages);
}

ChatReply ChatSession::send(const std::string& user, int max_tokens,
                            const std::function<void(const std::string&)>& on_text,
                            const volatile std::sig_atomic_t* interrupt) {
  if (max_tokens < 1) fail("chat: the reply bound must be at least 1 token, found ", max_tokens);
  ChatReply r;
  const std::vector<int> in = turn_ids(user);
  const int ctx = backend_.ctx_size();
  const size_t used = ids_.size();
  // The turn needs its own tokens plus room for at least one reply token.
  if (used + in.size() + 1 > size_t(ctx)) {
    r.stop_reason = "context";
    const std::string need = "this turn needs " + std::to_string(in.size()) + " positions for the prompt and 1 for " +
                             "the reply, ";
    r.message = used == 0 ? "the turn does not fit in the context: " + need + "the context holds " +
                                std::to_string(ctx) + " (raise --ctx-size or shorten the message)"
                          : "the context is full: " + need + std::to_string(used) + " of " + std::to_string(ctx) +
                                " are in use; " + kResetHint;
    // On the first turn the system prompt opens the conversation: when it alone (with an empty user message) leaves
    // no room for a reply, it is what is too long, not the user's message.
    if (used == 0 && !opt_.system.empty()) {
      const size_t sys = turn_ids("").size();
      if (sys + 1 > size_t(ctx))
        r.message = "the system prompt is too long for the context: with the template's markup it needs " +
                    std::to_string(sys) + " positions and the reply at least 1, the context holds " +
                    std::to_string(ctx) + " (raise --ctx-size or set a shorter one with /system TEXT)";
    }
    return r;
  }

  // The one decode loop, continuing after the cached ids; every reply token is decoded into the cache (the next turn
  // continues after it).
  DecodeLoopOptions lo;
  lo.start_pos = int(used);
  lo.max_new = max_tokens;
  lo.sampler = opt_.sampler;
  lo.first_step = samples_;
  if (!opt_.ignore_eos) lo.stop_ids = stop_ids_;
  lo.cache_every_token = true;
  lo.interrupt = interrupt;
  StreamDecoder dec(tok_, /*strip_leading_space=*/true);
  auto emit = [&](const std::string& s) {
    if (s.empty()) return;
    r.text += s;
    if (on_text) on_text(s);
  };
  const auto on_token = [&](int id) {
    emit(dec.push(id));
    return true;
  };
  SpecOptions spec = opt_.spec;
  spec.history = &ids_;
  const DecodeLoopResult d = opt_.drafter ? speculative_loop(backend_, *opt_.drafter, in, lo, spec, &spec_, on_token)
                                          : decode_loop(backend_, in, lo, on_token);
  samples_ = d.next_step;
  if (d.prefilled < int(in.size())) {  // interrupted while reading the prompt
    // The positions written past `used` are overwritten by the next turn.
    r.stop_reason = stop_reason_name(StopReason::kInterrupted);
    r.message = "interrupted while reading the prompt; this turn was dropped";
    return r;
  }
  ids_.insert(ids_.end(), in.begin(), in.end());
  ids_.insert(ids_.end(), d.tokens.begin(), d.tokens.end());
  turns_++;
  r.tokens = d.tokens;
  r.stop_reason = stop_reason_name(d.stop);
  if (d.stop == StopReason::kContext)
    r.message = "the reply reached the end of the context (" + std::to_string(ctx) + " positions); " + kResetHint;
  ChatStats& st = r.stats;
  st.prompt_ms = d.prompt_ms;
  st.prompt_tokens = int(in.size());
  st.reply_ms = d.eval_ms;
  emit(dec.flush());
  st.reply_tokens = int(r.tokens.size());
  last_ = st;
  has_last_ = true;
  return r;
}

void ChatSession::reset() {
  ids_.clear();
  samples_ = 0;
  turns_ = 0;
  last_ = ChatStats{};
  has_last_ = false;
}

void ChatSession::set_system(const std::string& text) {
  opt_.system = text;
  reset();
}

}  // namespace llm
