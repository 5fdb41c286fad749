// The README's bad-input catalogue, end to end: each bad model file, config or option given to the built run-llama
// must end in a non-zero exit (never a signal), nothing on stdout, and one "error: " line naming the file or value.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "models/hf_writer.h"
#include "models/model.h"
#include "models_test_util.h"
#include "run_program_util.h"  // run_program, lines, expect_run_llama_refused


namespace {

namespace fs = std::filesystem;
using llm_test::TempDir;
using llm_test::write_file;
using nlohmann::json;

const std::string kRunLlama = std::string(LLM_BINARY_DIR) + "/run-llama";

void expect_refused(const std::vector<std::string>& args, int code, std::initializer_list<std::string> needles,
                    const TempDir& tmp) {
  llm_test::expect_run_llama_refused(kRunLlama, args, code, needles, tmp);
}

// A safetensors file from its header text and data bytes.
std::string safetensors(const std::string& header, const std::string& data) {
  return llm_test::safetensors_bytes(header, data);
}

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kRunLlama)) FAIL() <<  "(every tree that runs this test builds it) " << kRunLlama << " not built (build the run-llama target)";
    llm::HfWriteOptions opt;
    opt.dtype = llm::DType::F32;
    llm::write_hf_model(llm::load_synthetic("tiny-gqa"), tmp_.str("good"), opt);
    config_ = json::parse(llm_test::read_file(tmp_.path() / "good" / "config.json"));
  }

  // A copy of the good tiny checkpoint under `name`, to be broken by the caller.
  std::string copy_of_good(const std::string& name) {
    fs::copy(tmp_.path() / "good", tmp_.path() / name, fs::copy_options::recursive);
    return tmp_.str(name);
  }

  // The good checkpoint with config.json edited by `edit`.
  template <typename F>
  std::string with_config(const std::string& name, F edit) {
    const std::string dir = copy_of_good(name);
    json c = config_;
    edit(c);
    write_file(fs::path(dir) / "config.json", c.dump());
    return dir;
  }

  // The good config.json beside a hand-made model.safetensors.
  std::string with_weights(const std::string& name, const std::string& bytes) {
    const std::string dir = copy_of_good(name);
    write_file(fs::path(dir) / "model.safetensors", bytes);
    return dir;
  }

  void refused(const std::string& model, int code, std::initializer_list<std::string> needles,
               std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--model", model, "--prompt", "hi", "--device", "cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    expect_refused(args, code, needles, tmp_);
  }

  TempDir tmp_;
  json config_;
};

TEST_F(BadInput, MissingPathAndDirectoryWithoutConfig) {
  refused(tmp_.str("no/such/model.bin"), 1, {"model path not found", tmp_.str("no/such/model.bin")});
  fs::create_directory(tmp_.path() / "empty");
  refused(tmp_.str("empty"), 1, {tmp_.str("empty"), "no config.json"});
}

TEST_F(BadInput, BrokenSafetensorsFiles) {
  const fs::path good = tmp_.path() / "good" / "model.safetensors";
  const std::string bytes = llm_test::read_file(good);

  std::string dir = with_weights("truncated", bytes.substr(0, bytes.size() / 2));
  refused(dir, 1, {dir + "/model.safetensors", "run past the end of the data"});

  std::string past = bytes;
  for (int i = 0; i < 8; ++i) past[size_t(i)] = char(i == 5 ? 1 : 0);  // 2^40
  dir = with_weights("header-past-end", past);
  refused(dir, 1, {dir + "/model.safetensors", "header length 1099511627776", "past the end of the file"});

  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | uint8_t(bytes[size_t(i)]);
  std::string garbage = bytes;
  std::fill(garbage.begin() + 8, garbage.begin() + 8 + std::ptrdiff_t(hlen), '#');
  dir = with_weights("not-json", garbage);
  refused(dir, 1, {dir + "/model.safetensors", "header is not valid JSON"});

  const std::string floats(16, '\0');
  dir = with_weights("overlap", safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                            floats));
  refused(dir, 1, {dir + "/model.safetensors", "tensors a and b overlap"});

  dir = with_weights("dtype", safetensors(R"({"w":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", "1234"));
  refused(dir, 1, {dir + "/model.safetensors", "tensor w", "unsupported dtype I8"});

  dir = with_weights("count", safetensors(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", floats));
  refused(dir, 1, {dir + "/model.safetensors", "tensor w", "12 bytes for shape [2, 2] F32, expected 16"});
}

TEST_F(BadInput, ConfigThatTheEngineDoesNotSupport) {
  std::string dir = with_config("sizes", [](json& c) { c["intermediate_size"] = 128; });
  refused(dir, 1, {"model.layers.0.mlp.gate_proj.weight", "expected shape [128, 64]", "found [160, 64]"});

  dir = with_config("arch", [](json& c) { c["architectures"] = {"MistralForCausalLM"}; });
  refused(dir, 1, {dir + "/config.json", "unsupported architecture 'MistralForCausalLM'"});

  dir = with_config("bias", [](json& c) { c["attention_bias"] = true; });
  refused(dir, 1, {dir + "/config.json", "attention_bias: true is not supported"});

  dir = with_config("rope", [](json& c) { c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; });
  refused(dir, 1, {dir + "/config.json", "unsupported rope type 'yarn'"});
}

TEST_F(BadInput, MissingTokenizerAndGarbageLlama2c) {
  refused(tmp_.str("good"), 1, {"no tokenizer found beside " + tmp_.str("good"), "--tokenizer"});

  std::string junk(4096, '\0');
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = char(i * 131 + 7);
  write_file(tmp_.path() / "junk.bin", junk);
  refused(tmp_.str("junk.bin"), 1, {tmp_.str("junk.bin"), "implausible llama2.c header"});
}

// Synthetic models run without a tokenizer (the prompt is token ids), so these need no model files.
TEST_F(BadInput, ContextLimits) {
  const std::string m = "synthetic:tiny-gqa";
  const int max_pos = llm::load_synthetic("tiny-gqa").config.max_seq_len;
  refused(m, 1, {"ctx-size 100000", "maximum of " + std::to_string(max_pos) + " positions"}, {"--ctx-size", "100000"});
  expect_refused({"--model", m, "--prompt", "5 6 7 8 9 10", "--ctx-size", "4", "--device", "cpu"}, 1,
                 {"the prompt has 7 tokens", "context of 4 positions"}, tmp_);
}

// True when /proc/meminfo's MemAvailable is known and at most `gib` GiB (a host-memory refusal can happen here).
bool host_available_at_most_gib(uint64_t gib) {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  while (meminfo >> key >> kb && key != "MemAvailable:") meminfo.ignore(1 << 10, '\n');
  return key == "MemAvailable:" && kb <= (gib << 20);
}

// The 8B shape at its full 131072-position context needs ~66 GB (FP32 weights + KV cache): refused before any
// allocation, naming both byte counts. Skipped on hosts that could actually hold it.
TEST_F(BadInput, ModelTooBigForHostMemory) {
  if (!host_available_at_most_gib(60)) GTEST_SKIP() << "MemAvailable unknown or above 60 GiB";
  refused("synthetic:llama3.1-8b", 1, {"not enough host memory for synthetic:llama3.1-8b", "need ", "available "},
          {"--ctx-size", "131072"});
}

// Llama 3.1 70B's shape on the CPU reference: 282 GB of FP32 weights, refused by name before any allocation.
TEST_F(BadInput, SeventyBOnTheCpuReferenceIsRefusedWithTheBytes) {
  if (!host_available_at_most_gib(300)) GTEST_SKIP() << "MemAvailable unknown or above 300 GiB";
  refused("synthetic:llama3.1-70b", 1, {"not enough host memory for synthetic:llama3.1-70b", "need ", "available "},
          {"--ctx-size", "256"});
}

TEST_F(BadInput, OutOfRangeOptionsNameTheValueAndTheAllowedRange) {
  struct Case {
    std::string opt, value, range;
  };
  const Case cases[] = {{"-n", "0", "1 to 1000000"},
                        {"--ctx-size", "0", "1 to 16777216"},
                        {"--top-p", "1.5", "greater than 0, at most 1"},
                        {"--temp", "-1", "0 to 100"},
                        {"--top-k", "-3", "0 to 16777216, 0 = all"}};
  for (const Case& c : cases)
    refused("synthetic:tiny-gqa", 2, {c.opt + ": invalid value '" + c.value + "' (allowed: " + c.range + ")"},
            {c.opt, c.value});
}

// Found by fuzz_safetensors (tests/fuzz/corpus/fuzz_safetensors/regress-long-shard-name): a shard name longer than
// a file name may be made std::filesystem throw its own exception instead of llm::Error.
TEST_F(BadInput, ShardNameLongerThanAFileName) {
  const std::string dir = copy_of_good("long-shard");
  fs::rename(fs::path(dir) / "model.safetensors", fs::path(dir) / "model-00001-of-00001.safetensors");
  const std::string name(300, 'a');
  write_file(fs::path(dir) / "model.safetensors.index.json",
             json{{"weight_map", {{"model.embed_tokens.weight", name + ".safetensors"}}}}.dump());
  try {
    llm::load_hf_dir(dir);
    ADD_FAILURE() << "a 300-character shard name was accepted";
  } catch (const llm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors.index.json"), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected llm::Error naming the index, got another exception: " << e.what();
  }
  refused(dir, 1, {dir + "/model.safetensors.index.json"});
}

}  // namespace
