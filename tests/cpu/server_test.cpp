// The OpenAI-compatible server without a network (server/): request parsing and its errors, the response, chunk and
// error JSON, stop strings, the API-key check, the metrics text, and the generation worker on stories260K (greedy text
// as generate() gives it, KV prefix reuse, cancellation within one token, the bounded queue, the context check).
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "chat/session.h"
#include "engine/backend.h"
#include "engine/generate.h"
#include "engine/speculative.h"
#include "models/model.h"
#include "server/api.h"
#include "server/generator.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/stop_text.h"
#include "tokenizer/load.h"

namespace {

using namespace llm;
using namespace llm::server;
using nlohmann::json;

// The ApiError a body raises (status 0 when it parses).
ApiError error_of(const std::string& body, bool chat) {
  try {
    chat ? parse_chat_request(body) : parse_completion_request(body);
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(0, "parsed");
}

TEST(ServerApi, ParsesAChatRequestWithEveryField) {
  const GenerationRequest r = parse_chat_request(R"({
    "model": "m", "messages": [{"role": "developer", "content": "Be brief."},
                               {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
                               {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Again"}],
    "max_completion_tokens": 7, "max_tokens": 99, "temperature": 0.5, "top_p": 0.9, "top_k": 3, "seed": 12,
    "stop": ["\n\n", "END"], "stream": true, "stream_options": {"include_usage": true}, "n": 1,
    "ignore_eos": true, "user": "ignored", "frequency_penalty": 0})");
  EXPECT_TRUE(r.chat);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");  // developer is the system role
  EXPECT_EQ(r.messages[1].content, "Hi there");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.max_tokens, 7);  // max_completion_tokens wins over the older name
  EXPECT_FLOAT_EQ(r.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.top_p, 0.9f);
  EXPECT_EQ(r.top_k, 3);
  ASSERT_TRUE(r.seed.has_value());
  EXPECT_EQ(*r.seed, 12u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.ignore_eos);
}

TEST(ServerApi, CompletionDefaultsAreTheOpenAiOnes) {
  const GenerationRequest r = parse_completion_request(R"({"prompt": "Once", "stop": "x", "seed": null})");
  EXPECT_FALSE(r.chat);
  EXPECT_EQ(r.prompt, "Once");
  EXPECT_EQ(r.max_tokens, 0);  // up to the context
  EXPECT_FLOAT_EQ(r.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.top_p, 1.0f);
  EXPECT_EQ(r.top_k, 0);
  EXPECT_FALSE(r.seed.has_value());
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.ignore_eos);
  EXPECT_EQ(parse_completion_request(R"({"prompt": ["one string"]})").prompt, "one string");
}

TEST(ServerApi, EveryBadFieldIsA400NamingIt) {
  struct Case {
    const char* body;
    bool chat;
    const char* param;
  };
  const Case cases[] = {
      {R"({"prompt": 1})", false, "prompt"},
      {R"({"prompt": ["a", "b"]})", false, "prompt"},
      {R"({})", false, "prompt"},
      {R"({"prompt": "x", "max_tokens": 0})", false, "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1.5})", false, "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1000001})", false, "max_tokens"},
      {R"({"prompt": "x", "max_completion_tokens": -1})", false, "max_completion_tokens"},
      {R"({"prompt": "x", "temperature": 2.5})", false, "temperature"},
      {R"({"prompt": "x", "temperature": "0"})", false, "temperature"},
      {R"({"prompt": "x", "top_p": -0.1})", false, "top_p"},
      {R"({"prompt": "x", "top_k": -1})", false, "top_k"},
      {R"({"prompt": "x", "ignore_eos": 1})", false, "ignore_eos"},
      {R"({"prompt": "x", "seed": -1})", false, "seed"},
      {R"({"prompt": "x", "seed": 18446744073709551615})", false, "seed"},
      {R"({"prompt": "x", "stop": ""})", false, "stop"},
      {R"({"prompt": "x", "stop": [1]})", false, "stop"},
      {R"({"prompt": "x", "stop": {"a": 1}})", false, "stop"},
      {R"({"prompt": "x", "stream": "yes"})", false, "stream"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", false, "stream_options"},
      {R"({"prompt": "x", "n": 3})", false, "n"},
      {R"({"prompt": "x", "model": 3})", false, "model"},
      {R"({"messages": "hi"})", true, "messages"},
      {R"({"messages": []})", true, "messages"},
      {R"({"messages": [3]})", true, "messages[0]"},
      {R"({"messages": [{"content": "x"}]})", true, "messages[0].role"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", true, "messages[0].role"},
      {R"({"messages": [{"role": "user"}]})", true, "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", true, "messages[0].content"},
  };
  for (const Case& c : cases) {
    const ApiError e = error_of(c.body, c.chat);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << ": " << e.what();
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
  }
  const std::string stop_long = R"({"prompt": "x", "stop": ")" + std::string(kMaxStopBytes + 1, 'a') + "\"}";
  EXPECT_EQ(error_of(stop_long, false).param, "stop");
}

TEST(ServerApi, MalformedDeepOrNonObjectBodiesAre400) {
  EXPECT_NE(std::string(error_of("{\"prompt\": ", false).what()).find("not valid JSON"), std::string::npos);
  EXPECT_NE(std::string(error_of("[]", false).what()).find("must be a JSON object, not an array"), std::string::npos);
  EXPECT_EQ(error_of("\xff", false).status, 400);
  EXPECT_EQ(error_of(R"({"prompt": "x", "temperature": 1e999})", false).status, 400);  // out_of_range, not a crash
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');  // no stack overflow: refused early
  EXPECT_NE(std::string(error_of(deep, false).what()).find("deeper than 32"), std::string::npos);
  const std::string ok_depth = R"({"prompt": "x", "extra": )" + std::string(30, '[') + std::string(30, ']') + "}";
  EXPECT_EQ(error_of(ok_depth, false).status, 0);
}

TEST(ServerApi, ResponsesHaveTheOpenAiShape) {
  const Usage u{12, 5, 7};
  const json c = chat_completion("chatcmpl-1", 1700000000, "m", "Paris.", "stop", u);
  EXPECT_EQ(c["object"], "chat.completion");
  EXPECT_EQ(c["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(c["choices"][0]["message"]["content"], "Paris.");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(c["usage"]["total_tokens"], 17);
  EXPECT_EQ(c["usage"]["prompt_tokens_details"]["cached_tokens"], 7);
  const json t = text_completion("cmpl-1", 1, "m", " upon", "length", u);
  EXPECT_EQ(t["object"], "text_completion");
  EXPECT_EQ(t["choices"][0]["text"], " upon");

  const std::string piece = "hé";
  const json first = chat_chunk("id", 1, "m", "assistant", nullptr, nullptr);
  EXPECT_EQ(first["choices"][0]["delta"], json({{"role", "assistant"}}));
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(chat_chunk("id", 1, "m", nullptr, &piece, nullptr)["choices"][0]["delta"], json({{"content", "hé"}}));
  const json last = chat_chunk("id", 1, "m", nullptr, nullptr, "length");
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  const json uc = usage_chunk(true, "id", 1, "m", u);
  EXPECT_TRUE(uc["choices"].empty());
  EXPECT_EQ(uc["usage"]["completion_tokens"], 5);

  const std::string ev = sse_event(json{{"a", 1}});
  EXPECT_EQ(ev, "data: {\"a\":1}\n\n");
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");

  const json e = json::parse(error_body(ApiError(400, "bad \"x\"", "invalid_request_error", "top_p")));
  EXPECT_EQ(e, json::parse(R"({"error": {"message": "bad \"x\"", "type": "invalid_request_error",
                                         "param": "top_p", "code": null}})"));
  EXPECT_EQ(models_list("m", 5)["data"][0]["id"], "m");
}

TEST(ServerStopText, CutsBeforeTheFirstStopStringAcrossPieces) {
  StopText s({"wor", "zz"});
  EXPECT_EQ(s.push("Hel"), "Hel");
  EXPECT_EQ(s.push("lo w"), "lo ");  // "w" may start "wor": held
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.push("orld"), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.push("more"), "");
  EXPECT_EQ(s.flush(), "");

  StopText t({"abc"});
  EXPECT_EQ(t.push("xab"), "x");
  EXPECT_EQ(t.push("d"), "abd");  // not a stop after all: released
  EXPECT_EQ(t.push("ab"), "");
  EXPECT_EQ(t.flush(), "ab");  // the end: what was held is text
  EXPECT_FALSE(t.stopped());

  StopText earliest({"cd", "b"});
  EXPECT_EQ(earliest.push("abcd"), "a");
  StopText none({});
  EXPECT_EQ(none.push("abc"), "abc");
}

TEST(ServerAuth, BearerKeyComparedWhole) {
  EXPECT_TRUE(authorized("Bearer k3y", "k3y"));
  EXPECT_FALSE(authorized("Bearer k3z", "k3y"));
  EXPECT_FALSE(authorized("Bearer k3", "k3y"));
  EXPECT_FALSE(authorized("Bearer k3yy", "k3y"));
  EXPECT_FALSE(authorized("k3y", "k3y"));
  EXPECT_FALSE(authorized("", "k3y"));
  EXPECT_FALSE(authorized("Bearer ", ""));
  EXPECT_TRUE(is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(is_loopback_host("127.1.2.3"));
  EXPECT_TRUE(is_loopback_host("::1"));
  EXPECT_TRUE(is_loopback_host("localhost"));
  EXPECT_FALSE(is_loopback_host("0.0.0.0"));
  EXPECT_FALSE(is_loopback_host("192.168.1.5"));
  EXPECT_FALSE(is_loopback_host("::"));
}

TEST(ServerMetrics, PrometheusTextHasEveryFigure) {
  Metrics m;
  m.request("/v1/completions", 200);
  m.request("/v1/completions", 200);
  m.request("other", 404);
  m.generation(10, 4, 20, 19, 1000.0, 50.0);
  ServerInfo info{"m\"x", "cuda: H200", "warp", "graph", "bf16", 8192};
  const std::string t = m.text(info, 3, 8);
  for (const char* line :
       {"llm_requests_total{route=\"/v1/completions\",status=\"200\"} 2\n",
        "llm_requests_total{route=\"other\",status=\"404\"} 1\n", "llm_prompt_tokens_total 10\n",
        "llm_prompt_tokens_cached_total 4\n", "llm_completion_tokens_total 20\n",
        "llm_decode_tokens_per_second_last 19\n", "llm_decode_tokens_per_second_avg 19\n", "llm_queue_depth 3\n",
        "llm_queue_limit 8\n", "# TYPE llm_requests_total counter\n",
        "llm_info{model=\"m\\\"x\",device=\"cuda: H200\",mapping=\"warp\",decode=\"graph\",kv_dtype=\"bf16\","
        "ctx_size=\"8192\"} 1\n"})
    EXPECT_NE(t.find(line), std::string::npos) << line << "\nin:\n" << t;
  EXPECT_EQ(m.requests_with_status(200), 2u);
  // The draft counters appear once a speculative generation was counted (--spec), and add up.
  EXPECT_EQ(t.find("llm_spec_"), std::string::npos) << t;
  m.speculation(12, 9, 5);
  m.speculation(8, 1, 4);
  const std::string ts = m.text(info, 0, 8);
  for (const char* line : {"llm_spec_drafted_tokens_total 20\n", "llm_spec_accepted_tokens_total 10\n",
                           "llm_spec_steps_total 9\n", "# TYPE llm_spec_drafted_tokens_total counter\n"})
    EXPECT_NE(ts.find(line), std::string::npos) << line << "\nin:\n" << ts;
}

// ---- the worker, on stories260K ----

const std::string kStories = std::string(LLM_TEST_MODELS) + "/stories260K";

struct Engine {
  Model model = load_model(kStories + "/stories260K.bin");
  std::unique_ptr<Tokenizer> tok = load_tokenizer(model, kStories + "/tok512.model");
  std::unique_ptr<Backend> backend;
  Metrics metrics;
  explicit Engine(int ctx = 0) {
    BackendOptions bo;
    bo.ctx_size = ctx;
    backend = make_cpu_backend(model, bo);
  }
  std::unique_ptr<Generator> generator(int queue = 8, Drafter* drafter = nullptr) {
    GeneratorOptions o;
    o.queue_limit = queue;
    o.drafter = drafter;
    return std::make_unique<Generator>(*backend, *tok, model.config, ChatTemplate(ChatFormat::kZephyr), metrics, o);
  }
};

GenerationRequest completion(const std::string& prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.temperature = 0.0f;
  return r;
}

std::shared_ptr<Job> run(Generator& g, const GenerationRequest& r, std::function<bool()> alive = nullptr) {
  auto job = std::make_shared<Job>(r);
  job->client_alive = std::move(alive);
  EXPECT_TRUE(g.submit(job));
  job->wait_done();
  return job;
}

// generate() (run-llama's loop) on a fresh backend: the reference text.
std::string reference(const std::string& prompt, int n) {
  Engine e;
  GenerateOptions go;
  go.n_predict = n;
  go.sampler.temperature = 0.0f;
  StreamDecoder dec(*e.tok, prompt.empty());
  std::string text;
  generate(*e.backend, e.model.config, encode_prompt(*e.tok, prompt), go, [&](int id) { text += dec.push(id); });
  return text + dec.flush();
}

TEST(ServerGenerator, GreedyCompletionIsRunLlamasAndReusesTheCachedPrefix) {
  Engine e;
  auto g = e.generator();
  const auto a = run(*g, completion("Once upon a time", 40));
  ASSERT_FALSE(a->error) << a->error->what();
  EXPECT_EQ(a->text, reference("Once upon a time", 40));
  EXPECT_EQ(a->finish_reason, "length");
  EXPECT_EQ(a->usage.completion_tokens, 40);
  EXPECT_EQ(a->usage.cached_tokens, 0);
  const std::vector<int> prompt_a = encode_prompt(*e.tok, "Once upon a time");
  EXPECT_EQ(a->usage.prompt_tokens, int(prompt_a.size()));
  // The cache holds the prompt and every produced token but the last (never decoded).
  EXPECT_EQ(g->cached_ids().size(), prompt_a.size() + 39);

  // A prompt sharing the first words: its prefill starts after them, and the text is a fresh run's.
  const auto b = run(*g, completion("Once upon a time there was a dog", 30));
  const std::vector<int> prompt_b = encode_prompt(*e.tok, "Once upon a time there was a dog");
  size_t common = 0;
  while (common < prompt_a.size() && prompt_a[common] == prompt_b[common]) ++common;
  ASSERT_GT(common, 2u);
  EXPECT_EQ(b->usage.cached_tokens, int(common));
  EXPECT_EQ(b->text, reference("Once upon a time there was a dog", 30));
  // The same prompt again: everything but its last token is reused.
  const auto c = run(*g, completion("Once upon a time there was a dog", 30));
  EXPECT_EQ(c->usage.cached_tokens, int(prompt_b.size()) - 1);
  EXPECT_EQ(c->text, b->text);
}

TEST(ServerGenerator, StopStringsAndSeedsAndChat) {
  Engine e;
  auto g = e.generator();
  const std::string whole = reference("Once upon a time", 40);
  const std::string word = whole.substr(whole.find(' ', 3) + 1, 4);
  GenerationRequest r = completion("Once upon a time", 40);
  r.stop = {word};
  const auto s = run(*g, r);
  EXPECT_EQ(s->text, whole.substr(0, whole.find(word)));
  EXPECT_EQ(s->finish_reason, "stop");

  GenerationRequest sampled = completion("Once upon a time", 30);
  sampled.temperature = 0.9f;
  sampled.seed = 5;
  const std::string first = run(*g, sampled)->text;
  EXPECT_EQ(run(*g, sampled)->text, first);  // same seed, same text (whatever the cache held)
  sampled.seed.reset();
  const auto unseeded = run(*g, sampled);
  EXPECT_FALSE(unseeded->text.empty());

  GenerationRequest chat;
  chat.chat = true;
  chat.messages = {{"user", "Tell me a story."}};
  chat.temperature = 0.0f;
  chat.max_tokens = 20;
  const auto c = run(*g, chat);
  ASSERT_FALSE(c->error);
  // The prompt is the template's rendering, as ChatSession's first turn.
  EXPECT_EQ(c->usage.prompt_tokens,
            int(chat_prompt_ids(*e.tok, ChatTemplate(ChatFormat::kZephyr), chat.messages).size()));
  EXPECT_GT(c->usage.completion_tokens, 0);
}

// --spec: every generation through the speculative loop with prompt lookup. Greedy text is run-llama's plain text, the
// KV reuse rule still holds (the ids kept are what the cache holds at least), stop strings cut as before, a seeded
// sampled request repeats itself, and /metrics counts the drafts.
TEST(ServerGenerator, SpeculativeGenerationsKeepTheTextAndTheCacheReuse) {
  Engine e;
  LookupDrafter lookup;
  auto g = e.generator(8, &lookup);
  const std::string p = "Once upon a time, there was a little girl named Lily. She loved to play. Once upon a time,";
  const auto a = run(*g, completion(p, 48));
  ASSERT_FALSE(a->error) << a->error->what();
  EXPECT_EQ(a->text, reference(p, 48));
  EXPECT_EQ(a->usage.completion_tokens, 48);
  const std::vector<int> prompt_a = encode_prompt(*e.tok, p);
  EXPECT_GE(g->cached_ids().size(), prompt_a.size() + 47 - 8) << "the cache keeps the prompt and the reply";
  const std::string p2 = p + " there was a dog";
  const auto b = run(*g, completion(p2, 32));
  EXPECT_GT(b->usage.cached_tokens, 10);
  EXPECT_EQ(b->text, reference(p2, 32));
  const auto c = run(*g, completion(p2, 32));
  EXPECT_EQ(c->usage.cached_tokens, int(encode_prompt(*e.tok, p2).size()) - 1);
  EXPECT_EQ(c->text, b->text);

  const std::string whole = a->text;
  const std::string word = whole.substr(whole.find(' ', 3) + 1, 4);
  GenerationRequest r = completion(p, 48);
  r.stop = {word};
  const auto s = run(*g, r);
  EXPECT_EQ(s->text, whole.substr(0, whole.find(word)));
  EXPECT_EQ(s->finish_reason, "stop");

  GenerationRequest sampled = completion(p, 30);
  sampled.temperature = 0.9f;
  sampled.seed = 5;
  const std::string first = run(*g, sampled)->text;
  EXPECT_EQ(run(*g, sampled)->text, first);

  const std::string t = e.metrics.text(ServerInfo{}, 0, 8);
  const std::string key = "\nllm_spec_accepted_tokens_total ";
  const size_t at = t.find(key);
  ASSERT_NE(at, std::string::npos) << t;
  EXPECT_GT(std::stoll(t.substr(at + key.size())), 0) << t;
}

TEST(ServerGenerator, AClientThatLeavesStopsTheGenerationWithinOneToken) {
  Engine e;
  auto g = e.generator();
  int calls = 0;
  const auto j = run(*g, completion("Once upon a time", 200), [&] { return ++calls < 5; });
  EXPECT_TRUE(j->cancelled);
  // One check before the job starts, then one after each token: the 5th call (after token 4) saw the client gone,
  // and no token followed.
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(j->usage.completion_tokens, 4);
  // A job whose client left while it waited never runs.
  const auto gone = run(*g, completion("Once upon a time", 200), [] { return false; });
  EXPECT_TRUE(gone->cancelled);
  EXPECT_EQ(gone->usage.completion_tokens, 0);
  // The cache is still consistent: the next answer is a fresh run's.
  EXPECT_EQ(run(*g, completion("Once upon a time", 20))->text, reference("Once upon a time", 20));
}

// A client that leaves while a long prompt prefills stops the prefill within one piece: what was prefilled stays
// cached (and is reused), nothing is generated, and the next answer is a fresh run's. Both loops: the plain one and
// the speculative one (--spec), whose prefill honours the same check.
TEST(ServerGenerator, AClientThatLeavesDuringThePrefillStopsItWithinOnePiece) {
  for (bool speculative : {false, true}) {
    SCOPED_TRACE(speculative ? "speculative loop" : "decode loop");
    Engine e;
    LookupDrafter lookup;
    auto g = e.generator(8, speculative ? &lookup : nullptr);
    std::string prompt = "Once upon a time";
    for (int i = 0; i < 12; ++i) prompt += " there was a little girl named Lily who liked to play in the park.";
    const std::vector<int> ids = encode_prompt(*e.tok, prompt);
    const int piece = e.backend->prefill_piece();
    ASSERT_GT(int(ids.size()), 4 * piece) << "the prompt must span several prefill pieces";
    int calls = 0;
    // Call 1: before the job starts; calls 2 and 3: before the second and third pieces; the third sees the client
    // gone.
    const auto j = run(*g, completion(prompt, 50), [&] { return ++calls < 3; });
    EXPECT_TRUE(j->cancelled);
    EXPECT_EQ(calls, 3);
    EXPECT_EQ(j->usage.completion_tokens, 0);
    EXPECT_EQ(g->cached_ids().size(), size_t(2 * piece));  // two pieces prefilled, kept
    // The same prompt again reuses them, and its answer is a fresh run's.
    const auto again = run(*g, completion(prompt, 20));
    EXPECT_EQ(again->usage.cached_tokens, 2 * piece);
    EXPECT_EQ(again->text, reference(prompt, 20));
  }
}

TEST(ServerGenerator, TheQueueIsBoundedAndTheContextChecked) {
  Engine e(16);
  auto g = e.generator(/*queue=*/1);
  // Hold the worker inside a job until released.
  std::mutex m;
  std::condition_variable cv;
  bool entered = false, release = false;
  auto blocker = std::make_shared<Job>(completion("Once", 3));
  blocker->client_alive = [&] {
    std::unique_lock<std::mutex> lock(m);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    return true;
  };
  ASSERT_TRUE(g->submit(blocker));
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return entered; });
  }
  auto queued = std::make_shared<Job>(completion("Once", 3));
  EXPECT_TRUE(g->submit(queued));
  EXPECT_EQ(g->queue_depth(), 1);
  auto refused = std::make_shared<Job>(completion("Once", 3));
  EXPECT_FALSE(g->submit(refused));  // full: the HTTP side answers 503
  {
    std::lock_guard<std::mutex> lock(m);
    release = true;
  }
  cv.notify_all();
  queued->wait_done();
  EXPECT_FALSE(queued->error);
  EXPECT_EQ(queued->usage.completion_tokens, 3);

  // 16 positions: a prompt of 16 tokens leaves none for the reply.
  std::string long_prompt;
  while (encode_prompt(*e.tok, long_prompt).size() < 16) long_prompt += "Once upon a time ";
  const auto too_long = run(*g, completion(long_prompt, 3));
  ASSERT_TRUE(too_long->error);
  EXPECT_EQ(too_long->error->status, 400);
  EXPECT_EQ(too_long->error->code, "context_length_exceeded");
  // Without max_tokens the reply runs to the end of the context: "length".
  const auto to_end = run(*g, completion("Once", 0));
  EXPECT_EQ(to_end->finish_reason, "length");
  EXPECT_EQ(to_end->usage.prompt_tokens + to_end->usage.completion_tokens, 17);
}

}  // namespace
