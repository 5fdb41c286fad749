// config.json parsing: defaults, both rope spellings, refused options, token ids and generation_config.json.
#include "models/hf_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "models_test_util.h"

namespace {

using llm_test::expect_error;
using llm_test::TempDir;
using nlohmann::json;

// A minimal TinyLlama-like config (no optional keys).
json base_config() {
  return json{{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"hidden_size", 256},
              {"intermediate_size", 688},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 8},
              {"vocab_size", 1000},
              {"max_position_embeddings", 512},
              {"rms_norm_eps", 1e-5}};
}

struct ConfigDir {
  TempDir tmp;
  std::string path;
  explicit ConfigDir(const json& config, const json* generation = nullptr) : path(tmp.str("config.json")) {
    llm_test::write_file(path, config.dump());
    if (generation) llm_test::write_file(tmp.path() / "generation_config.json", generation->dump());
  }
  llm::ModelConfig load() const { return llm::load_hf_config(path); }
};

TEST(HfConfig, DefaultsFollowLlamaConfig) {
  ConfigDir d(base_config());
  llm::ModelConfig c = d.load();
  EXPECT_EQ(c.dim, 256);
  EXPECT_EQ(c.hidden_dim, 688);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 8);  // no num_key_value_heads: plain multi-head attention
  EXPECT_EQ(c.head_dim, 32);   // hidden_size / heads
  EXPECT_EQ(c.vocab_size, 1000);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_FALSE(c.tied_embeddings);  // LlamaConfig's default
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_scaling.type, "none");
  EXPECT_EQ(c.bos_id, 1);
  EXPECT_EQ(c.eos_ids, std::vector<int>{2});
}

TEST(HfConfig, GqaAndExplicitHeadDim) {
  json j = base_config();
  j["num_key_value_heads"] = 2;
  j["head_dim"] = 48;  // q_dim 384 != hidden 256, as some Llama-shaped models do
  j["tie_word_embeddings"] = true;
  llm::ModelConfig c = ConfigDir(j).load();
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 48);
  EXPECT_EQ(c.q_dim(), 384);
  EXPECT_EQ(c.kv_dim(), 96);
  EXPECT_TRUE(c.tied_embeddings);
  j["head_dim"] = nullptr;  // null means "derive it"
  EXPECT_EQ(ConfigDir(j).load().head_dim, 32);
}

void expect_llama3(const llm::ModelConfig& c) {
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
}

TEST(HfConfig, RopeClassicForm) {
  json j = base_config();
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  expect_llama3(ConfigDir(j).load());
  // Legacy spelling of the type key.
  j["rope_scaling"].erase("rope_type");
  j["rope_scaling"]["type"] = "llama3";
  expect_llama3(ConfigDir(j).load());
  j["rope_scaling"] = nullptr;
  llm::ModelConfig c = ConfigDir(j).load();
  EXPECT_EQ(c.rope_scaling.type, "none");
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
}

TEST(HfConfig, RopeParametersForm) {
  json j = base_config();
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0},
                          {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}};
  expect_llama3(ConfigDir(j).load());
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 100000.0}};
  llm::ModelConfig c = ConfigDir(j).load();
  EXPECT_EQ(c.rope_scaling.type, "none");
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.0f);
}

TEST(HfConfig, RefusesUnsupportedOptionsByName) {
  struct Case {
    const char* key;
    json value;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"attention_bias", true, {"attention_bias"}},
      {"mlp_bias", true, {"mlp_bias"}},
      {"hidden_act", "gelu", {"hidden_act", "gelu"}},
      {"rope_scaling", json{{"rope_type", "yarn"}, {"factor", 4.0}}, {"rope type 'yarn'"}},
      {"rope_scaling", json{{"type", "linear"}, {"factor", 2.0}}, {"rope type 'linear'"}},
      {"rope_parameters", json{{"rope_type", "dynamic"}, {"rope_theta", 1e4}}, {"rope type 'dynamic'"}},
      {"architectures", json{"MistralForCausalLM"}, {"MistralForCausalLM"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    json j = base_config();
    j[c.key] = c.value;
    ConfigDir d(j);
    std::vector<std::string> needles = c.needles;
    needles.push_back(d.path);
    try {
      d.load();
      ADD_FAILURE() << "accepted " << c.key << " = " << c.value.dump();
    } catch (const llm::Error& e) {
      for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  }
  // Explicit false is fine.
  json j = base_config();
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["hidden_act"] = "silu";
  EXPECT_NO_THROW(ConfigDir(j).load());
}

TEST(HfConfig, ArchitectureFromModelTypeAlone) {
  json j = base_config();
  j.erase("architectures");
  EXPECT_EQ(ConfigDir(j).load().dim, 256);
  j["model_type"] = "qwen2";
  ConfigDir d(j);
  expect_error([&] { d.load(); }, {d.path, "qwen2"});
}

TEST(HfConfig, MissingKeysAndWrongTypesNameKeyAndFile) {
  for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                          "vocab_size", "max_position_embeddings"}) {
    SCOPED_TRACE(key);
    json j = base_config();
    j.erase(key);
    ConfigDir d(j);
    expect_error([&] { d.load(); }, {d.path, std::string("'") + key + "'", "missing"});
  }
  struct Case {
    const char* key;
    json value;
  };
  const std::vector<Case> cases = {{"hidden_size", "256"},        {"num_attention_heads", 8.5},
                                   {"rms_norm_eps", "1e-5"},      {"tie_word_embeddings", 1},
                                   {"eos_token_id", json{1, "2"}}, {"rope_scaling", "llama3"},
                                   {"architectures", "LlamaForCausalLM"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    json j = base_config();
    j[c.key] = c.value;
    ConfigDir d(j);
    expect_error([&] { d.load(); }, {d.path, c.key});
  }
  json j = base_config();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"original_max_position_embeddings", 8192}};
  ConfigDir d(j);
  expect_error([&] { d.load(); }, {d.path, "rope_scaling.high_freq_factor"});
}

TEST(HfConfig, InconsistentSizesAreRejected) {
  json j = base_config();
  j["num_key_value_heads"] = 3;  // 8 heads do not share 3 kv heads evenly
  ConfigDir d(j);
  expect_error([&] { d.load(); }, {d.path, "num_key_value_heads"});
  j = base_config();
  j["num_attention_heads"] = 7;  // 256 / 7 has no head_dim
  ConfigDir d2(j);
  expect_error([&] { d2.load(); }, {d2.path, "head_dim"});
  j = base_config();
  j["eos_token_id"] = 5000;
  ConfigDir d3(j);
  expect_error([&] { d3.load(); }, {d3.path, "5000"});
}

TEST(HfConfig, EosIntOrListAndGenerationConfigOverride) {
  json j = base_config();
  j["bos_token_id"] = 7;
  j["eos_token_id"] = 9;
  llm::ModelConfig c = ConfigDir(j).load();
  EXPECT_EQ(c.bos_id, 7);
  EXPECT_EQ(c.eos_ids, std::vector<int>{9});
  j["eos_token_id"] = {9, 10, 11};
  EXPECT_EQ(ConfigDir(j).load().eos_ids, (std::vector<int>{9, 10, 11}));

  // generation_config.json wins, as transformers' generate() reads it: Llama 3.1 lists three eos ids there.
  json gen = {{"bos_token_id", 3}, {"eos_token_id", {12, 13}}, {"do_sample", true}};
  c = ConfigDir(j, &gen).load();
  EXPECT_EQ(c.bos_id, 3);
  EXPECT_EQ(c.eos_ids, (std::vector<int>{12, 13}));
  gen = {{"eos_token_id", 14}};
  c = ConfigDir(j, &gen).load();
  EXPECT_EQ(c.bos_id, 7);
  EXPECT_EQ(c.eos_ids, std::vector<int>{14});
  gen = {{"eos_token_id", "x"}};
  ConfigDir bad(j, &gen);
  expect_error([&] { bad.load(); }, {"generation_config.json", "eos_token_id"});
}

TEST(HfConfig, UnreadableFilesNameThePath) {
  TempDir tmp;
  expect_error([&] { llm::load_hf_config(tmp.str("config.json")); }, {tmp.str("config.json")});
  llm_test::write_file(tmp.path() / "config.json", "{\"hidden_size\": ");
  expect_error([&] { llm::load_hf_config(tmp.str("config.json")); }, {tmp.str("config.json"), "JSON"});
  llm_test::write_file(tmp.path() / "config.json", "[1]");
  expect_error([&] { llm::load_hf_config(tmp.str("config.json")); }, {tmp.str("config.json"), "object"});
}

}  // namespace
