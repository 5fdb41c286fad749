// The one-loop check shared by the CPU test (tests/cpu/decode_loop_test.cpp) and the GPU test
// (tests/gpu/decode_loop_gpu_test.cu): for the same model, prompt ids, seed and backend, run-llama's generate(), one
// chat turn (its rendered prompt as the ids) and llama-ab's pass produce identical token ids.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chat/session.h"
#include "chat/template.h"
#include "measure/ab_run.h"
#include "engine/backend.h"
#include "engine/generate.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace llm_test {

// n tokens from each path; greedy for all three (llama-ab is greedy), then a seeded temperature for run-llama vs chat.
inline void expect_one_loop(const llm::Model& model, const llm::Tokenizer& tok, const llm::BackendOptions& bo,
                            int n) {
  using namespace llm;
  ChatSessionOptions co;
  co.sampler.temperature = 0.0f;
  co.ignore_eos = true;  // every path runs exactly n tokens
  auto chat_backend = make_backend(model, bo);
  ChatSession chat(*chat_backend, tok, model.config, ChatTemplate(ChatFormat::kZephyr), co);
  const std::vector<int> ids = chat.turn_ids("Tell me a story about a cat.");
  ASSERT_GT(ids.size(), 4u);
  const ChatReply reply = chat.send("Tell me a story about a cat.", n, nullptr);
  EXPECT_EQ(reply.stop_reason, "length");
  ASSERT_EQ(int(reply.tokens.size()), n);

  auto run_backend = make_backend(model, bo);
  GenerateOptions go;
  go.n_predict = n;
  go.ignore_eos = true;
  go.sampler.temperature = 0.0f;
  const GenerateResult gen = generate(*run_backend, model.config, ids, go, nullptr);
  EXPECT_EQ(gen.stop_reason, "length");
  EXPECT_EQ(gen.tokens, reply.tokens) << "run-llama's loop and the chat's differ";

  auto ab_backend = make_backend(model, bo);
  const AbPass pass = ab_decode_pass(*ab_backend, ids, n - 1, go.sampler.seed);
  EXPECT_EQ(pass.tokens, reply.tokens) << "llama-ab's loop and the chat's differ";

  // Sampling with a temperature: the same seed and step numbering in both loops give the same draws.
  co.sampler.temperature = 0.9f;
  co.sampler.seed = 1234;
  go.sampler = co.sampler;
  auto chat_backend2 = make_backend(model, bo);
  ChatSession chat2(*chat_backend2, tok, model.config, ChatTemplate(ChatFormat::kZephyr), co);
  const ChatReply r2 = chat2.send("Tell me a story about a cat.", n, nullptr);
  auto run_backend2 = make_backend(model, bo);
  const GenerateResult g2 = generate(*run_backend2, model.config, ids, go, nullptr);
  EXPECT_EQ(g2.tokens, r2.tokens) << "seeded sampling differs between run-llama's loop and the chat's";
  EXPECT_NE(g2.tokens, gen.tokens) << "temperature 0.9 gave the greedy sequence: the sampled check proves nothing";
}

}  // namespace llm_test
