// Hostile model files: JSON nested ~100,000 levels (refused at parse time, never a stack overflow), a tokenizer.json
// Split regex that is not a known pre-tokenizer's (refused by name, never run), and file-derived strings in error
// lines (control bytes escaped, at most 200 bytes of any value). Unit level, and end to end through run-llama.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_parse.h"
#include "gguf_writer_util.h"
#include "measure/ab_render.h"
#include "models/gguf.h"
#include "models/hf_config.h"
#include "models/hf_writer.h"
#include "models/model.h"
#include "models/safetensors.h"
#include "models_test_util.h"
#include "run_program_util.h"  // run_program, lines, expect_run_llama_refused
#include "tokenizer/bpe.h"


namespace {

namespace fs = std::filesystem;
using llm_test::TempDir;
using llm_test::write_file;
using nlohmann::json;

constexpr int kDeep = 100000;  // as in the report: ~200 KB of brackets
const std::string kData = std::string(LLM_SOURCE_DIR) + "/tests/data/";
const std::string kRunLlama = std::string(LLM_BINARY_DIR) + "/run-llama";

std::string nested_array(int depth, const std::string& inner = "1") {
  return std::string(size_t(depth), '[') + inner + std::string(size_t(depth), ']');
}

// Bytes that must never reach a terminal from a file: C0 controls and DEL (ESC starts colour/cursor sequences).
bool has_control_byte(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7F) return true;
  return false;
}

// Runs f, expecting llm::Error holding every needle, on one line with no control byte and at most `max_len` bytes.
template <typename F>
std::string expect_clean_error(F f, std::initializer_list<std::string> needles, size_t max_len = 1000) {
  try {
    f();
  } catch (const llm::Error& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    EXPECT_FALSE(has_control_byte(msg)) << msg;
    EXPECT_LE(msg.size(), max_len) << msg.substr(0, 2000);
    return msg;
  }
  ADD_FAILURE() << "expected llm::Error mentioning '" << *needles.begin() << "'";
  return "";
}

// ---- llm::printable ----

TEST(Printable, EscapesControlBytes) {
  EXPECT_EQ(llm::printable("w\n\x1b[31mred"), "w\\n\\x1b[31mred");
  EXPECT_EQ(llm::printable(std::string("a\0b\r\t\x7f", 6)), "a\\x00b\\r\\t\\x7f");
  EXPECT_EQ(llm::printable("plain name.weight"), "plain name.weight");
  EXPECT_EQ(llm::printable("\xC4\xA0the \xE2\x96\x81x \xF0\x9F\x98\x80"), "\xC4\xA0the \xE2\x96\x81x \xF0\x9F\x98\x80");
  // Bytes that are not UTF-8, and the C1 controls (U+009B is a one-character CSI on some terminals).
  EXPECT_EQ(llm::printable("a\xFF" "b\xC3"), "a\\xffb\\xc3");
  EXPECT_EQ(llm::printable("\xC2\x9B" "31m"), "\\xc2\\x9b31m");
  EXPECT_EQ(llm::printable_message("line\nbreak \x1b[0m"), "line\\nbreak \\x1b[0m");
}

TEST(Printable, CutsLongValues) {
  const std::string big(1000000, 'x');
  const std::string p = llm::printable(big);
  EXPECT_EQ(p, std::string(200, 'x') + "... (1000000 bytes)");
  EXPECT_EQ(llm::printable(std::string(200, 'y')), std::string(200, 'y'));  // exactly the limit: whole
  // Escapes count against the limit, and a character is never cut in half.
  EXPECT_EQ(llm::printable(std::string(100, '\n'), 10), "\\n\\n\\n\\n\\n... (100 bytes)");
  EXPECT_EQ(llm::printable("ab\xE2\x96\x81", 4), "ab... (5 bytes)");
  EXPECT_EQ(llm::printable_message(big).size(), big.size());
}

// ---- nesting ----

TEST(ParseJson, RefusesNestingDeeperThan64Levels) {
  EXPECT_EQ(llm::parse_json(nested_array(64), "ok.json").dump(), nested_array(64));
  EXPECT_NO_THROW(llm::parse_json(std::string(63, '[') + "{\"a\": 1}" + std::string(63, ']'), "ok.json"));
  expect_clean_error([] { llm::parse_json(nested_array(65), "deep.json"); },
                     {"deep.json", "nesting deeper than 64 levels"});
  expect_clean_error([] { llm::parse_json(nested_array(kDeep), "deep.json"); }, {"deep.json", "64 levels"});
  std::string objects;
  for (int i = 0; i < kDeep; ++i) objects += "{\"a\":";
  objects += "1" + std::string(size_t(kDeep), '}');
  expect_clean_error([&] { llm::parse_json(objects, "objects.json"); }, {"objects.json", "64 levels"});
  std::istringstream stream(nested_array(kDeep));
  expect_clean_error([&] { llm::parse_json(stream, "stream.json"); }, {"stream.json", "64 levels"});
  const std::string text = nested_array(kDeep);
  expect_clean_error([&] { llm::parse_json(text.data(), text.data() + text.size(), "bytes"); }, {"bytes", "64 levels"});
  // Syntax errors stay json::parse_error, for each caller to word.
  EXPECT_THROW(llm::parse_json(std::string("{"), "bad.json"), json::parse_error);
}

class Hostile : public ::testing::Test {
 protected:
  // The good tiny checkpoint (tiny-gqa, F32) under `name`.
  std::string good_model(const std::string& name) {
    llm::HfWriteOptions opt;
    opt.dtype = llm::DType::F32;
    llm::write_hf_model(llm::load_synthetic("tiny-gqa"), tmp_.str(name), opt);
    return tmp_.str(name);
  }
  // good_model with its config.json's text edited.
  std::string model_with_config(const std::string& name, const std::string& key, const std::string& value_text) {
    const std::string dir = good_model(name);
    json c = json::parse(llm_test::read_file(fs::path(dir) / "config.json"));
    c.erase(key);
    std::string text = c.dump();
    text.insert(1, "\"" + key + "\": " + value_text + ", ");
    write_file(fs::path(dir) / "config.json", text);
    return dir;
  }
  std::string smollm_tokenizer_with(const std::string& name, const std::string& pre_tokenizer_text) {
    json doc = json::parse(llm_test::read_file(kData + "bpe_smollm_style.json"));
    doc.erase("pre_tokenizer");
    std::string text = doc.dump();
    text.insert(1, "\"pre_tokenizer\": " + pre_tokenizer_text + ", ");
    write_file(tmp_.path() / name, text);
    return tmp_.str(name);
  }
  static json split_step(const std::string& regex) {
    return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
  }
  static json byte_level(bool use_regex) {
    return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
  }
  std::string tokenizer_with_split(const std::string& name, const std::string& regex) {
    const json pre = {{"type", "Sequence"}, {"pretokenizers", {split_step(regex), byte_level(false)}}};
    return smollm_tokenizer_with(name, pre.dump());
  }

  TempDir tmp_;
};

TEST_F(Hostile, NestedConfigValue) {
  const std::string dir = model_with_config("deep", "rope_scaling", nested_array(kDeep));
  const std::string config = dir + "/config.json";
  ASSERT_GT(fs::file_size(config), 2u * kDeep);
  expect_clean_error([&] { llm::load_hf_config(config); }, {config, "nesting deeper than 64 levels"});
  // Within the limit (63 arrays in the top-level object) the value is read and refused by type.
  const std::string dir2 = model_with_config("deep64", "rope_scaling", nested_array(63));
  expect_clean_error([&] { llm::load_hf_config(dir2 + "/config.json"); }, {"rope_scaling", "must be an object"}, 500);
  // generation_config.json goes through the same parser.
  const std::string dir3 = good_model("deepgen");
  write_file(fs::path(dir3) / "generation_config.json", "{\"eos_token_id\": " + nested_array(kDeep) + "}");
  expect_clean_error([&] { llm::load_hf_config(dir3 + "/config.json"); }, {"generation_config.json", "64 levels"});
}

TEST_F(Hostile, NestedTokenizerPreTokenizer) {
  std::string seq;
  for (int i = 0; i < kDeep; ++i) seq += "{\"type\":\"Sequence\",\"pretokenizers\":[";
  seq += byte_level(true).dump();
  for (int i = 0; i < kDeep; ++i) seq += "]}";
  const std::string path = smollm_tokenizer_with("deep_pre.json", seq);
  expect_clean_error([&] { llm::load_bpe_json(path); }, {path, "nesting deeper than 64 levels"});
  const std::string path2 = smollm_tokenizer_with("deep_array.json", nested_array(kDeep));
  expect_clean_error([&] { llm::load_bpe_json(path2); }, {path2, "64 levels"});
}

TEST_F(Hostile, NestedSafetensorsShape) {
  const std::string header =
      "{\"w\": {\"dtype\": \"F32\", \"shape\": " + nested_array(kDeep, "2") + ", \"data_offsets\": [0, 8]}}";
  const std::string path = tmp_.str("deep.safetensors");
  write_file(path, llm_test::safetensors_bytes(header, std::string(8, '\0')));
  expect_clean_error([&] { llm::open_safetensors(path); }, {path, "nesting deeper than 64 levels"});
  // A flat shape of 50,000 entries is refused with a bounded message.
  std::string flat = "[";
  for (int i = 0; i < 50000; ++i) flat += i ? ",1" : "1";
  flat += "]";
  write_file(path, llm_test::safetensors_bytes(
                       "{\"w\": {\"dtype\": \"F32\", \"shape\": " + flat + ", \"data_offsets\": [0, 8]}}",
                       std::string(8, '\0')));
  expect_clean_error([&] { llm::open_safetensors(path); }, {path, "50000 dimensions"});
}

TEST_F(Hostile, NestedIndexAndTokenizerConfig) {
  const std::string dir = good_model("deepindex");
  fs::rename(fs::path(dir) / "model.safetensors", fs::path(dir) / "shard.safetensors");
  write_file(fs::path(dir) / "model.safetensors.index.json", "{\"weight_map\": " + nested_array(kDeep) + "}");
  expect_clean_error([&] { llm::load_hf_dir(dir); }, {"model.safetensors.index.json", "64 levels"});
  const std::string dir2 = good_model("deeptokcfg");
  write_file(fs::path(dir2) / "tokenizer_config.json", "{\"chat_template\": " + nested_array(kDeep) + "}");
  expect_clean_error([&] { llm::load_hf_dir(dir2); }, {"tokenizer_config.json", "64 levels"});
}

TEST(HostileAbJson, Nested) {
  expect_clean_error([] { llm::ab_data_from_json("{\"data\": " + nested_array(kDeep) + "}"); },
                     {"A/B JSON", "64 levels"});
}

// ---- Split regexes ----

TEST_F(Hostile, UnknownSplitRegexRefusedByName) {
  // A lookahead over the rest of the text: every match scans to the end, so encoding was quadratic.
  const std::string path = tokenizer_with_split("lookahead.json", R"(\s+(?=[^\x{1}]*\x{2})|\p{L}+)");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = expect_clean_error([&] { llm::load_bpe_json(path); },
                                             {path, "Split regex", R"(\s+(?=[^\x{1}]*\x{2})|\p{L}+)",
                                              "is not a known pre-tokenizer regex", "Llama 3", "GPT-2"});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  // A long pattern with control bytes in it: at most 60 bytes of it, escaped.
  const std::string evil = "\x1b[31m\n" + std::string(5000, 'a') + "(?=.*z)";
  const std::string path2 = tokenizer_with_split("long.json", evil);
  const std::string msg2 = expect_clean_error([&] { llm::load_bpe_json(path2); },
                                              {"Split regex \"\\x1b[31m\\n", "... (5013 bytes)"}, 400);
  EXPECT_EQ(msg2.find(std::string(61, 'a')), std::string::npos) << msg2;
  // GPT-2's and Llama 3's own patterns are accepted (and the Llama 3 one is what tests/data/bpe_llama3_style.json has).
  const std::string gpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  EXPECT_NO_THROW(llm::load_bpe_json(tokenizer_with_split("gpt2.json", gpt2)));
  const json llama3 = json::parse(llm_test::read_file(kData + "bpe_llama3_style.json"));
  const std::string llama3_regex = llama3["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"];
  EXPECT_NO_THROW(llm::load_bpe_json(tokenizer_with_split("llama3.json", llama3_regex)));
  // One byte off is another regex.
  expect_clean_error([&] { llm::load_bpe_json(tokenizer_with_split("almost.json", gpt2 + "|x")); },
                     {"is not a known pre-tokenizer regex"});
}

// ---- ids out of range: the file's own value in the message ----

// A token id past the tokenizer's bound is reported as the file wrote it, with the bound it broke: an added-token id of
// 2^30 was once shown clamped to the bound ("id 2097152 out of range [0, 2097152)"). Every id field (vocab, added
// tokens, post-processor) goes through the same check, signed or unsigned, up to 64 bits.
TEST_F(Hostile, OutOfRangeTokenIdsShowTheFilesValue) {
  const json good = json::parse(llm_test::read_file(kData + "bpe_smollm_style.json"));
  ASSERT_FALSE(good["added_tokens"].empty());
  struct Case {
    const char* id_text;  // as written into the file
    const char* shown;
  };
  for (const Case& c : {Case{"1073741824", "id 1073741824 out of range [0, 2097152)"},
                        Case{"2097152", "id 2097152 out of range [0, 2097152)"},
                        Case{"18446744073709551615", "id 18446744073709551615 out of range [0, 2097152)"},
                        Case{"-1", "id -1 out of range [0, 2097152)"},
                        Case{"-9223372036854775808", "id -9223372036854775808 out of range [0, 2097152)"}}) {
    SCOPED_TRACE(c.id_text);
    json doc = good;
    const std::string content = doc["added_tokens"][0]["content"];
    doc["added_tokens"][0]["id"] = 123456789;  // a placeholder, replaced by the exact text below
    std::string text = doc.dump();
    const size_t at = text.find("123456789");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 9, c.id_text);
    write_file(tmp_.path() / "ids.json", text);
    expect_clean_error([&] { llm::load_bpe_json(tmp_.str("ids.json")); },
                       {tmp_.str("ids.json"), "added token \"" + llm::printable(content) + "\" " + c.shown});
  }
  // The model's vocab goes through the same check.
  json doc = good;
  const std::string piece = doc["model"]["vocab"].begin().key();
  doc["model"]["vocab"][piece] = uint64_t(1) << 30;
  write_file(tmp_.path() / "vocab.json", doc.dump());
  expect_clean_error([&] { llm::load_bpe_json(tmp_.str("vocab.json")); },
                     {"vocab \"" + llm::printable(piece) + "\" id 1073741824 out of range [0, 2097152)"});
}

// ---- control bytes and long values in messages ----

TEST_F(Hostile, TensorNameWithTerminalEscape) {
  const std::string path = tmp_.str("evil.safetensors");
  const json header = {{"w\n\x1b[31mred", {{"dtype", "I8"}, {"shape", {4}}, {"data_offsets", {0, 4}}}}};
  write_file(path, llm_test::safetensors_bytes(header.dump(), "1234"));
  expect_clean_error([&] { llm::open_safetensors(path); }, {"tensor w\\n\\x1b[31mred: unsupported dtype I8"});
  // The same name as an overlapping tensor.
  const json overlap = {{"a\x1b]0;title\x07", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                        {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {4, 12}}}}};
  write_file(path, llm_test::safetensors_bytes(overlap.dump(), std::string(12, '\0')));
  expect_clean_error([&] { llm::open_safetensors(path); }, {"a\\x1b]0;title\\x07", "overlap"});
  // And in a GGUF, as a tensor name and as a metadata key.
  llm_test::GgufWriter g;
  g.str("general.architecture", "llama\x1b[2J");
  g.tensors.push_back({"blk.0\n\x1b[31m", {32}, /*I8*/ 24, std::string(32, '\0')});
  const std::string gguf = tmp_.str("evil.gguf");
  write_file(gguf, g.build());
  expect_clean_error([&] { llm::open_gguf(gguf); }, {"tensor blk.0\\n\\x1b[31m: unsupported tensor type I8"});
  g.tensors.clear();
  write_file(gguf, g.build());
  expect_clean_error([&] { llm::load_gguf(gguf); }, {"general.architecture is 'llama\\x1b[2J'"});
  llm_test::GgufWriter twice;
  twice.u32("k\r\x1b[K", 1);
  twice.u32("k\r\x1b[K", 2);
  write_file(gguf, twice.build());
  expect_clean_error([&] { llm::open_gguf(gguf); }, {"key 'k\\r\\x1b[K' appears twice"});
}

TEST_F(Hostile, MegabyteValuesEchoedAtMost200Bytes) {
  const std::string big(1000000, 'M');
  const std::string cut = std::string(200, 'M') + "... (1000000 bytes)";
  const std::string dir = model_with_config("bigarch", "architectures", json::array({big}).dump());
  expect_clean_error([&] { llm::load_hf_config(dir + "/config.json"); }, {"unsupported architecture '" + cut + "'"},
                     500);
  const std::string dir2 = model_with_config("bigact", "hidden_act", json(big).dump());
  expect_clean_error([&] { llm::load_hf_config(dir2 + "/config.json"); }, {"hidden_act '" + cut + "'"}, 500);
  const std::string dir3 = model_with_config("bigtype", "hidden_size", json(big).dump());
  expect_clean_error([&] { llm::load_hf_config(dir3 + "/config.json"); }, {"hidden_size", "(1000002 bytes)"}, 500);
  const std::string path = tmp_.str("bigdtype.safetensors");
  const json header = {{"w", {{"dtype", big}, {"shape", {4}}, {"data_offsets", {0, 4}}}}};
  write_file(path, llm_test::safetensors_bytes(header.dump(), "1234"));
  expect_clean_error([&] { llm::open_safetensors(path); }, {"unsupported dtype " + cut}, 500);
  const json name = {{big + "\n", {{"dtype", "I8"}, {"shape", {4}}, {"data_offsets", {0, 4}}}}};
  write_file(path, llm_test::safetensors_bytes(name.dump(), "1234"));
  expect_clean_error([&] { llm::open_safetensors(path); }, {"tensor " + std::string(200, 'M') + "... (1000001 bytes)"},
                     500);
  // A 1 MB JSON string left open: the parser's "last read" token is the whole string.
  write_file(path, llm_test::safetensors_bytes("{\"" + big, ""));
  expect_clean_error([&] { llm::open_safetensors(path); }, {"header is not valid JSON"}, 600);
  // tokenizer.json: a 1 MB component type, a 1 MB Split behaviour.
  const std::string tok = smollm_tokenizer_with("bigtype.json", json{{"type", big}}.dump());
  expect_clean_error([&] { llm::load_bpe_json(tok); }, {"pre_tokenizer " + cut}, 500);
  json split = split_step("x");
  split["behavior"] = big;
  const json seq = {{"type", "Sequence"}, {"pretokenizers", {split, byte_level(false)}}};
  const std::string tok2 = smollm_tokenizer_with("bigsplit.json", seq.dump());
  expect_clean_error([&] { llm::load_bpe_json(tok2); }, {"Split is supported only"}, 500);
  // A GGUF pre-tokenizer name.
  llm::EmbeddedVocab v;
  v.source = "big.gguf";
  v.model = "gpt2";
  v.pre = big + "\x1b";
  v.tokens = {"a", "b"};
  expect_clean_error([&] { llm::make_bpe_tokenizer(v); }, {"tokenizer.ggml.pre \"" + std::string(200, 'M')}, 500);
}

// ---- end to end: run-llama ----

using Outcome = llm_test::ProgramRun;

Outcome run_llama(const std::vector<std::string>& args, const TempDir& tmp) {
  return llm_test::run_program(kRunLlama, args, tmp);
}

class HostileRunLlama : public Hostile {
 protected:
  void SetUp() override {
    if (!fs::exists(kRunLlama)) FAIL() <<  "(every tree that runs this test builds it) " << kRunLlama << " not built (build the run-llama target)";
  }
  // Exit 1, nothing on stdout, exactly one stderr line: "error: ..." holding every needle, no control byte.
  void refused(std::vector<std::string> extra, std::initializer_list<std::string> needles) {
    std::vector<std::string> args{"--prompt", "hi", "--device", "cpu", "-n", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    const Outcome r = run_llama(args, tmp_);
    ASSERT_TRUE(r.exited) << "killed by signal " << -r.code << "\n" << r.err.substr(0, 2000);
    EXPECT_EQ(r.code, 1) << r.err.substr(0, 2000);
    EXPECT_EQ(r.out, "");
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.back(), '\n');
    const std::string line = r.err.substr(0, r.err.size() - 1);
    EXPECT_EQ(line.rfind("error: ", 0), 0u) << line.substr(0, 2000);
    EXPECT_FALSE(has_control_byte(line)) << "not exactly one clean line: " << line.substr(0, 2000);
    EXPECT_LE(line.size(), 1000u) << line.substr(0, 2000);
    for (const std::string& n : needles) EXPECT_NE(line.find(n), std::string::npos) << "'" << n << "' not in: " << line;
  }
};

TEST_F(HostileRunLlama, NestedConfigJson) {
  const std::string dir = model_with_config("deep", "max_position_embeddings", nested_array(kDeep));
  refused({"--model", dir}, {dir + "/config.json: JSON nesting deeper than 64 levels"});
}

TEST_F(HostileRunLlama, NestedSafetensorsShape) {
  const std::string dir = good_model("deepst");
  write_file(fs::path(dir) / "model.safetensors",
             llm_test::safetensors_bytes("{\"w\": {\"dtype\": \"F32\", \"shape\": " + nested_array(kDeep, "2") +
                                             ", \"data_offsets\": [0, 8]}}",
                                         std::string(8, '\0')));
  refused({"--model", dir}, {dir + "/model.safetensors: header: JSON nesting deeper than 64 levels"});
}

TEST_F(HostileRunLlama, TensorNameWithTerminalEscape) {
  const std::string dir = good_model("evil");
  const json header = {{"w\n\x1b[31mred", {{"dtype", "I8"}, {"shape", {4}}, {"data_offsets", {0, 4}}}}};
  write_file(fs::path(dir) / "model.safetensors", llm_test::safetensors_bytes(header.dump(), "1234"));
  refused({"--model", dir}, {"tensor w\\n\\x1b[31mred: unsupported dtype I8"});
}

TEST_F(HostileRunLlama, MegabyteArchitecture) {
  const std::string dir =
      model_with_config("bigarch", "architectures", json::array({std::string(1000000, 'A') + "\x1b[0m"}).dump());
  refused({"--model", dir}, {"unsupported architecture '" + std::string(200, 'A') + "... (1000004 bytes)'"});
}

TEST_F(HostileRunLlama, LookaheadSplitRegex) {
  const std::string dir = good_model("regex");
  const std::string tok = tokenizer_with_split("tokenizer.json", R"(\s+(?=[^\x{1}]*\x{2})|\p{L}+)");
  refused({"--model", dir, "--tokenizer", tok},
          {"tokenizer " + tok + ": pre_tokenizer Split regex", "is not a known pre-tokenizer regex"});
}

TEST_F(HostileRunLlama, NestedTokenizerJson) {
  const std::string dir = good_model("deeptok");
  const std::string tok = smollm_tokenizer_with("tokenizer.json", nested_array(kDeep));
  refused({"--model", dir, "--tokenizer", tok}, {"tokenizer " + tok + ": JSON nesting deeper than 64 levels"});
}

}  // namespace
