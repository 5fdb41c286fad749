// ChatSession on the CPU reference: KV reuse across turns (turn 2 prefills only after_reply's tokens and its logits
// equal a fresh backend's over the same ids), reset, the context-full path and the interrupt flag. Models:
// stories260K with the Zephyr template (tests/data/models), SmolLM2-135M-Instruct with ChatML (models-cache/, when fetched).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "chat/session.h"
#include "chat/template.h"
#include "core/error.h"
#include "default_model_util.h"
#include "engine/backend.h"
#include "models/model.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using namespace llm;

namespace {

const std::string kStories = std::string(LLM_TEST_MODELS) + "/stories260K";

// Forwards to a CPU backend and records every prefill (position, count) with the logits right after it.
class RecordingBackend : public Backend {
 public:
  RecordingBackend(const Model& m, int ctx) {
    BackendOptions o;
    o.ctx_size = ctx;
    inner_ = make_cpu_backend(m, o);
  }
  std::string name() const override { return inner_->name(); }
  int ctx_size() const override { return inner_->ctx_size(); }
  void prefill(const int* tokens, int n, int pos) override {
    inner_->prefill(tokens, n, pos);
    calls.push_back({pos, n});
    last_prefill_logits = inner_->logits();
  }
  void decode(int token, int pos) override { inner_->decode(token, pos); }
  int sample(const SamplerParams& p, uint64_t step) override { return inner_->sample(p, step); }
  std::vector<float> logits() override { return inner_->logits(); }
  int prefill_piece() const override { return inner_->prefill_piece(); }

  struct Call { int pos, n; };
  std::vector<Call> calls;
  std::vector<float> last_prefill_logits;
  int prefilled() const {
    int s = 0;
    for (const Call& c : calls) s += c.n;
    return s;
  }

 private:
  std::unique_ptr<Backend> inner_;
};

struct Fixture {
  Model model;
  std::unique_ptr<Tokenizer> tok;
  ChatTemplate tmpl{ChatFormat::kZephyr};
};

// stories260K + its sentencepiece tokenizer + Zephyr (the only specials it needs are <s> and </s>); null to skip.
std::unique_ptr<Fixture> stories() {
  if (!fs::exists(kStories + "/stories260K.bin")) return nullptr;
  auto f = std::make_unique<Fixture>();
  f->model = load_model(kStories + "/stories260K.bin");
  f->tok = load_tokenizer(f->model, kStories + "/tok512.model");
  f->tmpl = ChatTemplate(ChatFormat::kZephyr);
  return f;
}

std::unique_ptr<Fixture> smollm2() {
  auto f = std::make_unique<Fixture>();
  f->model = load_model(llm_test::smollm2_path());
  f->tok = load_tokenizer(f->model, "");
  f->tmpl = ChatTemplate(ChatFormat::kChatML);
  return f;
}

#define REQUIRE_STORIES(f) \
  ASSERT_TRUE(f) << "stories260K is missing from the checkout: " << kStories

ChatSessionOptions greedy(const std::string& system = "") {
  ChatSessionOptions o;
  o.system = system;
  o.sampler.temperature = 0.0f;
  return o;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// Two turns; checks that turn 2 prefilled exactly after_reply(user2)'s tokens at the end of the cache, and that the
// logits after that prefill equal a fresh backend's over the session's ids up to there.
// Returns turn 1's reply.
ChatReply check_kv_reuse(Fixture& f, const std::string& system, const std::string& user1, int reply1_tokens,
                         int reply2_tokens) {
  RecordingBackend b(f.model, 256);
  ChatSession s(b, *f.tok, f.model.config, f.tmpl, greedy(system));

  const std::vector<int> turn1 = s.turn_ids(user1);
  ChatReply r1 = s.send(user1, reply1_tokens, nullptr);
  EXPECT_NE(r1.stop_reason, "context") << r1.message;
  EXPECT_EQ(b.calls.front().pos, 0);
  EXPECT_EQ(b.prefilled(), int(turn1.size()));
  EXPECT_EQ(r1.stats.prompt_tokens, int(turn1.size()));
  // The cache holds the prompt then every reply token; a stop token is never among them.
  std::vector<int> expect = turn1;
  expect.insert(expect.end(), r1.tokens.begin(), r1.tokens.end());
  EXPECT_EQ(s.ids(), expect);
  EXPECT_EQ(r1.stats.reply_tokens, int(r1.tokens.size()));
  EXPECT_EQ(f.tok->decode(r1.tokens), r1.text);

  const std::string user2 = "Tell me about the sea.";
  const std::vector<int> after = ChatTemplate::encode(*f.tok, f.tmpl.after_reply(user2));
  EXPECT_FALSE(after.empty());
  EXPECT_EQ(s.turn_ids(user2), after);
  const size_t before = s.ids().size();
  b.calls.clear();
  ChatReply r2 = s.send(user2, reply2_tokens, nullptr);
  EXPECT_NE(r2.stop_reason, "context") << r2.message;
  if (b.calls.empty()) {
    ADD_FAILURE() << "turn 2 prefilled nothing";
    return r1;
  }
  EXPECT_EQ(b.calls.front().pos, int(before));
  EXPECT_EQ(b.prefilled(), int(after.size())) << "turn 2 must prefill only after_reply's tokens";
  EXPECT_EQ(r2.stats.prompt_tokens, int(after.size()));
  if (s.ids().size() < before + after.size()) {
    ADD_FAILURE() << "the cache holds fewer ids than turn 1, turn 2's prompt";
    return r1;
  }
  EXPECT_TRUE(std::equal(after.begin(), after.end(), s.ids().begin() + long(before)));
  EXPECT_EQ(s.turns(), 2);

  // A fresh backend over exactly the ids the session had in its cache after turn 2's prefill.
  std::vector<int> prefix(s.ids().begin(), s.ids().begin() + long(before + after.size()));
  BackendOptions o;
  o.ctx_size = 256;
  auto fresh = make_cpu_backend(f.model, o);
  fresh->prefill(prefix.data(), int(prefix.size()), 0);
  EXPECT_LT(max_abs_diff(b.last_prefill_logits, fresh->logits()), 1e-4f);
  return r1;
}

TEST(ChatSession, KvReuseStoriesZephyr) {
  auto f = stories();
  REQUIRE_STORIES(f);
  check_kv_reuse(*f, "", "Hello! Who are you?", 12, 12);
}

TEST(ChatSession, KvReuseStoriesZephyrWithSystem) {
  auto f = stories();
  REQUIRE_STORIES(f);
  check_kv_reuse(*f, "You are a storyteller.", "Hello! Who are you?", 12, 12);
}

// One test for both checks: the CPU reference runs SmolLM2 at a few tokens per second.
TEST(ChatSession, KvReuseSmolLM2ChatML) {
  LLM_REQUIRE_SMOLLM2();
#if defined(LLM_SANITIZED)
  GTEST_SKIP() << "135M-parameter forward passes are too slow under AddressSanitizer; runs in the main suite";
#endif
  auto f = smollm2();
  ChatReply r1 = check_kv_reuse(*f, "", "What is 2+2?", 16, 4);  // "" = the template's default system turn
  // A sensible reply that ends at <|im_end|> (not in the cache: check_kv_reuse compared the ids).
  EXPECT_EQ(r1.stop_reason, "eos") << "reply: " << r1.text;
  EXPECT_NE(r1.text.find('4'), std::string::npos) << "reply: " << r1.text;
  EXPECT_EQ(std::find(r1.tokens.begin(), r1.tokens.end(), f->tok->token_id("<|im_end|>")), r1.tokens.end());
}

TEST(ChatSession, TemplateWithoutItsSpecialTokensFailsAtOnce) {
  auto f = stories();
  REQUIRE_STORIES(f);
  RecordingBackend b(f->model, 64);
  try {
    ChatSession s(b, *f->tok, f->model.config, ChatTemplate(ChatFormat::kChatML), greedy());
    FAIL() << "tok512 has no <|im_start|>, yet a ChatML session was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("<|im_start|>"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(b.calls.empty());
}

TEST(ChatSession, ResetRestartsAtPositionZero) {
  auto f = stories();
  REQUIRE_STORIES(f);
  RecordingBackend b(f->model, 256);
  ChatSession s(b, *f->tok, f->model.config, f->tmpl, greedy());
  const std::vector<int> turn1 = s.turn_ids("Hi");
  ChatReply a = s.send("Hi", 10, nullptr);
  s.send("More", 10, nullptr);
  ASSERT_GT(s.ids().size(), turn1.size());
  s.reset();
  EXPECT_TRUE(s.ids().empty());
  EXPECT_EQ(s.turns(), 0);
  EXPECT_EQ(s.turn_ids("Hi"), turn1);
  b.calls.clear();
  ChatReply again = s.send("Hi", 10, nullptr);
  ASSERT_FALSE(b.calls.empty());
  EXPECT_EQ(b.calls.front().pos, 0);
  EXPECT_EQ(b.prefilled(), int(turn1.size()));
  EXPECT_EQ(again.tokens, a.tokens);  // greedy from the same cache contents: the same reply

  // A new system prompt starts a new conversation that opens with it.
  s.set_system("Be brief.");
  EXPECT_TRUE(s.ids().empty());
  EXPECT_EQ(s.system(), "Be brief.");
  EXPECT_NE(s.turn_ids("Hi"), turn1);
}

TEST(ChatSession, ContextFullSaysSoAndKeepsTheConversation) {
  auto f = stories();
  REQUIRE_STORIES(f);
  ChatSessionOptions o = greedy();
  o.ignore_eos = true;  // the reply must run into the end of the context
  const int ctx = 48;
  RecordingBackend b(f->model, ctx);
  ChatSession s(b, *f->tok, f->model.config, f->tmpl, o);
  const size_t n1 = s.turn_ids("Hi").size();
  ASSERT_LT(n1 + 1, size_t(ctx));

  ChatReply r = s.send("Hi", 1000, nullptr);
  EXPECT_EQ(r.stop_reason, "context");
  EXPECT_NE(r.message.find("/reset"), std::string::npos) << r.message;
  EXPECT_EQ(s.ids().size(), size_t(ctx));  // the reply filled every position, none past the end
  EXPECT_EQ(r.tokens.size(), size_t(ctx) - n1);

  // The next turn cannot fit: nothing runs, the conversation is unchanged, the message says why and what to do.
  const std::vector<int> kept = s.ids();
  b.calls.clear();
  ChatReply r2 = s.send("And then?", 10, nullptr);
  EXPECT_EQ(r2.stop_reason, "context");
  EXPECT_NE(r2.message.find("context is full"), std::string::npos) << r2.message;
  EXPECT_NE(r2.message.find("/reset"), std::string::npos) << r2.message;
  EXPECT_TRUE(r2.tokens.empty());
  EXPECT_TRUE(b.calls.empty());
  EXPECT_EQ(s.ids(), kept);

  s.reset();
  ChatReply r3 = s.send("Hi", 5, nullptr);
  EXPECT_EQ(r3.stop_reason, "length");
  EXPECT_EQ(r3.tokens.size(), 5u);
}

TEST(ChatSession, FirstTurnLongerThanTheContext) {
  auto f = stories();
  REQUIRE_STORIES(f);
  RecordingBackend b(f->model, 8);
  ChatSession s(b, *f->tok, f->model.config, f->tmpl, greedy());
  ChatReply r = s.send("Once upon a time there was a very long prompt that cannot fit", 10, nullptr);
  EXPECT_EQ(r.stop_reason, "context");
  EXPECT_NE(r.message.find("the context holds 8"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("--ctx-size"), std::string::npos) << r.message;  // /reset would not help here
  EXPECT_TRUE(b.calls.empty());
  EXPECT_TRUE(s.ids().empty());
}

TEST(ChatSession, InterruptStopsTheReplyAndKeepsIt) {
  auto f = stories();
  REQUIRE_STORIES(f);
  ChatSessionOptions o = greedy();
  o.ignore_eos = true;
  RecordingBackend b(f->model, 256);
  ChatSession s(b, *f->tok, f->model.config, f->tmpl, o);
  volatile std::sig_atomic_t flag = 0;
  int pieces = 0;
  // As a SIGINT handler would: the flag goes up while the reply streams.
  ChatReply r = s.send("Tell me a story", 100, [&](const std::string&) {
    if (++pieces == 3) flag = 1;
  }, &flag);
  EXPECT_EQ(r.stop_reason, "interrupted");
  EXPECT_GE(r.tokens.size(), 3u);
  EXPECT_LT(r.tokens.size(), 100u);
  EXPECT_EQ(s.ids().back(), r.tokens.back());  // the partial reply stays in the conversation

  // The next turn continues after it.
  flag = 0;
  const size_t before = s.ids().size();
  b.calls.clear();
  ChatReply r2 = s.send("Go on", 3, nullptr, &flag);
  EXPECT_EQ(r2.stop_reason, "length");
  EXPECT_EQ(b.calls.front().pos, int(before));
}

TEST(ChatSession, InterruptDuringThePromptDropsTheTurn) {
  auto f = stories();
  REQUIRE_STORIES(f);
  RecordingBackend b(f->model, 256);
  ChatSession s(b, *f->tok, f->model.config, f->tmpl, greedy());
  s.send("Hi", 4, nullptr);
  const std::vector<int> kept = s.ids();
  volatile std::sig_atomic_t flag = 1;
  ChatReply r = s.send("This turn is interrupted before it starts", 4, nullptr, &flag);
  EXPECT_EQ(r.stop_reason, "interrupted");
  EXPECT_FALSE(r.message.empty());
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_EQ(s.ids(), kept);
  EXPECT_EQ(s.turns(), 1);
}

TEST(ChatSession, SameSeedSameConversation) {
  auto f = stories();
  REQUIRE_STORIES(f);
  ChatSessionOptions o;
  o.sampler.temperature = 1.0f;
  o.sampler.seed = 7;
  std::vector<std::vector<int>> runs;
  for (int k = 0; k < 2; ++k) {
    RecordingBackend b(f->model, 256);
    ChatSession s(b, *f->tok, f->model.config, f->tmpl, o);
    s.send("Hi", 10, nullptr);
    s.send("Again", 10, nullptr);
    runs.push_back(s.ids());
  }
  EXPECT_EQ(runs[0], runs[1]);
}

}  // namespace
