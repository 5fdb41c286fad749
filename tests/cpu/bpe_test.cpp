// Byte-level BPE tests: ids and decoded text against Hugging Face `tokenizers` (tests/data/bpe_refs.json, made by
// tools/bpe_refs.py) for two small trained tokenizer.json files and the real SmolLM2 GGUF vocabulary; the streaming
// decoder against decode(); hand-computed GGUF vocabularies for each pre-tokenizer name; and bad inputs.
#include "tokenizer/bpe.h"

#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <cstdlib>
#include <functional>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/model.h"
#include "../utf8_check.h"

namespace llm {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kSmol = std::string(LLM_SOURCE_DIR) + "/models-cache/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kData = std::string(LLM_SOURCE_DIR) + "/tests/data/";
const std::string kFffd = "\xEF\xBF\xBD";

using llm_test::valid_utf8;

const json& refs() {
  static const json j = [] {
    std::ifstream in(kData + "bpe_refs.json");
    if (!in) fail("cannot open ", kData, "bpe_refs.json");
    return json::parse(in);
  }();
  return j;
}

// push() each id then flush(); every piece of output must be well-formed UTF-8.
std::string stream(const Tokenizer& tok, const std::vector<int>& ids) {
  StreamDecoder dec(tok);
  std::string all;
  for (int id : ids) {
    const std::string out = dec.push(id);
    EXPECT_TRUE(valid_utf8(out)) << "push(" << id << ")";
    all += out;
  }
  const std::string rest = dec.flush();
  EXPECT_TRUE(valid_utf8(rest));
  return all + rest;
}

// Everything bpe_refs.json says about one tokenizer.
void check_refs(const Tokenizer& tok, const json& r) {
  ASSERT_GE(r["cases"].size(), 25u);
  ASSERT_GE(r["random"].size(), 25u);
  ASSERT_EQ(tok.vocab_size(), r["vocab_size"].get<int>());
  EXPECT_TRUE(tok.byte_level());
  std::set<int> specials;
  for (const auto& [name, id] : r["specials"].items()) {
    EXPECT_EQ(tok.token_id(name), id.get<int>()) << name;
    EXPECT_EQ(tok.piece(id.get<int>()), name);
    EXPECT_EQ(tok.piece_kind(id.get<int>()), Tokenizer::PieceKind::kControl) << name;
    EXPECT_EQ(tok.decode({id.get<int>()}), "") << name;
    specials.insert(id.get<int>());
  }
  for (const auto& c : r["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<int> want = c["ids"].get<std::vector<int>>();
    const std::vector<int> got = tok.encode(text, false);
    EXPECT_EQ(got, want) << "text: " << text;
    for (int id : got) EXPECT_EQ(specials.count(id), 0u) << "special id " << id << " from text: " << text;
    EXPECT_EQ(tok.decode(want), c["decoded"].get<std::string>()) << "text: " << text;
    EXPECT_EQ(tok.decode(want), text);  // every ref string round-trips
    EXPECT_EQ(stream(tok, want), tok.decode(want)) << "text: " << text;
  }
  for (const auto& c : r["random"]) {
    const std::vector<int> ids = c["ids"].get<std::vector<int>>();
    EXPECT_EQ(tok.decode(ids), c["text"].get<std::string>()) << json(ids).dump();
    EXPECT_EQ(stream(tok, ids), c["text"].get<std::string>()) << json(ids).dump();
  }
}

// Random sequences over the whole vocabulary: partial characters, specials between the bytes of one character.
void check_random_streams(const Tokenizer& tok, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> id(0, tok.vocab_size() - 1), len(1, 24);
  for (int n = 0; n < 300; ++n) {
    std::vector<int> ids(len(rng));
    for (int& x : ids) x = id(rng);
    const std::string text = tok.decode(ids);
    EXPECT_TRUE(valid_utf8(text));
    EXPECT_EQ(stream(tok, ids), text) << json(ids).dump();
  }
}

TEST(BpeJson, SmolLMStyleMatchesHuggingFace) {
  const json& r = refs()["tokenizers"]["smollm_style"];
  const auto tok = load_bpe_json(std::string(LLM_SOURCE_DIR) + "/" + r["file"].get<std::string>());
  check_refs(*tok, r);
  EXPECT_FALSE(tok->adds_bos());  // no post-processor
  EXPECT_EQ(tok->eos_id(), tok->token_id("<|endoftext|>"));
  check_random_streams(*tok, 1);
}

TEST(BpeJson, Llama3StyleMatchesHuggingFace) {
  const json& r = refs()["tokenizers"]["llama3_style"];
  const auto tok = load_bpe_json(std::string(LLM_SOURCE_DIR) + "/" + r["file"].get<std::string>());
  check_refs(*tok, r);
  // TemplateProcessing puts <|begin_of_text|> first.
  EXPECT_TRUE(tok->adds_bos());
  EXPECT_EQ(tok->bos_id(), r["specials"]["<|begin_of_text|>"].get<int>());
  EXPECT_EQ(tok->eos_id(), r["specials"]["<|end_of_text|>"].get<int>());
  EXPECT_EQ(tok->encode(r["with_bos"]["text"].get<std::string>(), true),
            r["with_bos"]["ids"].get<std::vector<int>>());
  // A non-special added token is found by token_id and decodes as text; words no merge reaches exist (ignore_merges).
  const int reserved = r["non_special_added"]["<|reserved_x|>"].get<int>();
  EXPECT_EQ(tok->token_id("<|reserved_x|>"), reserved);
  EXPECT_EQ(tok->piece_kind(reserved), Tokenizer::PieceKind::kText);
  EXPECT_EQ(tok->decode({reserved}), "<|reserved_x|>");
  const int unreachable = r["unreachable_words"]["\xC4\xA0" "antidisestablishment"].get<int>();
  EXPECT_EQ(tok->encode(" antidisestablishment", false), std::vector<int>{unreachable});
  check_random_streams(*tok, 2);
}

std::unique_ptr<Tokenizer> smollm2_or_skip() {
  if (!fs::exists(kSmol)) return nullptr;
  const Model model = load_gguf(kSmol);
  if (!model.vocab) fail(kSmol, ": no vocabulary in the GGUF");
  return make_bpe_tokenizer(*model.vocab);
}

TEST(BpeGguf, SmolLM2MatchesHuggingFace) {
  const auto tok = smollm2_or_skip();
  if (!tok) {
    const char* req = std::getenv("LLM_REQUIRE_MODELS");
    if (req && std::string(req) == "1") FAIL() << kSmol << " is missing (LLM_REQUIRE_MODELS=1)";
    GTEST_SKIP() << kSmol << " not found: run scripts/setup.sh to fetch SmolLM2";
  }
  check_refs(*tok, refs()["tokenizers"]["smollm2_gguf"]);
  EXPECT_FALSE(tok->adds_bos());
  EXPECT_EQ(tok->bos_id(), tok->token_id("<|im_start|>"));
  EXPECT_EQ(tok->eos_id(), tok->token_id("<|im_end|>"));
  check_random_streams(*tok, 3);
}

// ---- hand-made GGUF vocabularies: the 256 byte characters, then a few merged tokens ----

std::string byte_char(unsigned char b) {  // GPT-2 bytes_to_unicode, written out for the test
  static std::string map[256];
  if (map[0].empty()) {
    int next = 256;
    for (int c = 0; c < 256; ++c) {
      const bool keep = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE);
      const int cp = keep ? c : next++;
      map[c] = cp < 0x80 ? std::string(1, char(cp))
                         : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
    }
  }
  return map[b];
}

EmbeddedVocab byte_vocab(const std::string& pre, const std::vector<std::string>& extra,
                         const std::vector<std::string>& merges) {
  EmbeddedVocab v;
  v.source = "test.gguf";
  v.model = "gpt2";
  v.pre = pre;
  v.tokens = {"<|end|>"};
  v.token_types = {3};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(byte_char(static_cast<unsigned char>(b)));
    v.token_types.push_back(1);
  }
  for (const auto& t : extra) {
    v.tokens.push_back(t);
    v.token_types.push_back(1);
  }
  v.merges = merges;
  v.eos_id = 0;
  return v;
}

int byte_id(char c) { return 1 + static_cast<unsigned char>(c); }  // ids in byte_vocab

TEST(BpeGguf, HandComputedMergesAndSplits) {
  // ids: 257 "Ġt", 258 "he", 259 "Ġthe", 260 "12", 261 "123", 262 "45", 263 "xyz" (no merge makes it)
  const std::vector<std::string> extra = {"\xC4\xA0t", "he", "\xC4\xA0the", "12", "123", "45", "xyz"};
  const std::vector<std::string> merges = {"\xC4\xA0 t", "h e", "\xC4\xA0t he", "1 2", "12 3", "4 5"};

  const auto gpt2 = make_bpe_tokenizer(byte_vocab("gpt2", extra, merges));
  EXPECT_EQ(gpt2->encode(" the", false), std::vector<int>{259});
  EXPECT_EQ(gpt2->encode("the", false), (std::vector<int>{byte_id('t'), 258}));
  // GPT-2 regex keeps " 12345" one word: 123 merges first (ranks 3, 4), then 45.
  EXPECT_EQ(gpt2->encode("12345", false), (std::vector<int>{261, 262}));
  EXPECT_EQ(gpt2->encode("xyz", false), (std::vector<int>{byte_id('x'), byte_id('y'), byte_id('z')}));
  EXPECT_FALSE(gpt2->adds_bos());
  EXPECT_EQ(gpt2->eos_id(), 0);

  // smollm: every digit alone, and the space before a digit is its own word.
  const auto smollm = make_bpe_tokenizer(byte_vocab("smollm", extra, merges));
  EXPECT_EQ(smollm->encode("a 12", false),
            (std::vector<int>{byte_id('a'), byte_id(' '), byte_id('1'), byte_id('2')}));
  // llama-bpe: digits in threes, and a word that is in the vocabulary is one token (ignore_merges).
  const auto llama = make_bpe_tokenizer(byte_vocab("llama-bpe", extra, merges));
  EXPECT_EQ(llama->encode("12345", false), (std::vector<int>{261, 262}));
  EXPECT_EQ(llama->encode("xyz", false), std::vector<int>{263});

  // The control token: found by name, never produced from text, skipped by decode.
  EXPECT_EQ(gpt2->token_id("<|end|>"), 0);
  EXPECT_EQ(gpt2->piece_kind(0), Tokenizer::PieceKind::kControl);
  for (int id : gpt2->encode("<|end|>", false)) EXPECT_NE(id, 0);
  EXPECT_EQ(gpt2->decode({0, 259, 0}), " the");
  EXPECT_EQ(gpt2->piece(259), "\xC4\xA0the");
  EXPECT_THROW(gpt2->decode({264}), Error);
  EXPECT_THROW(gpt2->encode("x", true), Error);  // no BOS in this vocabulary
}

TEST(BpeGguf, InvalidUtf8InputIsKeptByteForByte) {
  const auto tok = make_bpe_tokenizer(byte_vocab("gpt2", {}, {}));
  // Each byte of an ill-formed subsequence becomes its own byte token; decode() renders it as from_utf8_lossy does
  // (expected strings from Python's bytes.decode("utf-8", "replace")).
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a\xFF" "b", "a" + kFffd + "b"},
      {"\xE2\x82x", kFffd + "x"},
      {"\xED\xA0\x80", kFffd + kFffd + kFffd},
      {"\xF0\x9F\x98", kFffd},
      {"\xC0\xAF", kFffd + kFffd},
      {"\xE2\x82\xAC ok \xF4\x90\x80\x80", "\xE2\x82\xAC ok " + kFffd + kFffd + kFffd + kFffd},
  };
  for (const auto& [in, want] : cases) {
    const std::vector<int> ids = tok->encode(in, false);
    std::vector<int> bytes;
    for (char c : in) bytes.push_back(byte_id(c));
    EXPECT_EQ(ids, bytes);  // no merges: one id per byte, none dropped
    EXPECT_EQ(tok->decode(ids), want);
    EXPECT_EQ(stream(*tok, ids), want);
  }
}

TEST(BpeGguf, StreamHoldsPartialCharacters) {
  const auto tok = make_bpe_tokenizer(byte_vocab("gpt2", {}, {}));
  StreamDecoder dec(*tok);
  EXPECT_EQ(dec.push(byte_id('\xE2')), "");
  EXPECT_EQ(dec.push(0), "");  // a special id between the bytes does not end the character (HF skips it first)
  EXPECT_EQ(dec.push(byte_id('\x82')), "");
  EXPECT_EQ(dec.push(byte_id('\xAC')), "\xE2\x82\xAC");
  EXPECT_EQ(dec.push(byte_id('\xF0')), "");
  EXPECT_EQ(dec.push(byte_id('A')), kFffd + "A");
  EXPECT_EQ(dec.push(byte_id('\xF0')), "");
  EXPECT_EQ(dec.push(byte_id('\x9F')), "");
  EXPECT_EQ(dec.flush(), kFffd);
}

TEST(BpeGguf, LongWordsAreNotQuadratic) {
  // One 64 KB word (a run of punctuation is one GPT-2 regex match) and one 64 KB run of spaces, through a merge
  // table that pairs them up: the heap-based merge keeps this fast; the result round-trips.
  const auto tok = make_bpe_tokenizer(byte_vocab("gpt2", {"==", "====", "\xC4\xA0\xC4\xA0"},
                                                 {"= =", "== ==", "\xC4\xA0 \xC4\xA0"}));
  const std::string eq(1 << 16, '='), sp(1 << 16, ' ');
  const std::vector<int> ids = tok->encode(eq, false);
  EXPECT_EQ(ids, std::vector<int>((1 << 16) / 4, 258));
  EXPECT_EQ(tok->decode(ids), eq);
  EXPECT_EQ(tok->decode(tok->encode(sp + "x", false)), sp + "x");
}

// ---- bad inputs ----

void expect_error(const std::function<void()>& f, const std::string& must_name) {
  try {
    f();
    ADD_FAILURE() << "no error (expected one naming " << must_name << ")";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(must_name), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

class BadJson : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("bpe_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ifstream in(kData + "bpe_smollm_style.json");
    good_ = json::parse(in);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  void expect_refused(const std::string& name, const json& doc, const std::string& also = "") {
    const std::string path = write(name, doc.dump());
    expect_error([&] { load_bpe_json(path); }, path);
    if (!also.empty()) expect_error([&] { load_bpe_json(path); }, also);
  }
  fs::path dir_;
  json good_;
};

TEST_F(BadJson, MissingNotJsonTruncated) {
  const std::string missing = (dir_ / "nope.json").string();
  expect_error([&] { load_bpe_json(missing); }, missing);
  const std::string not_json = write("not.json", "this is not json {");
  expect_error([&] { load_bpe_json(not_json); }, not_json);
  const std::string text = good_.dump();
  const std::string cut = write("cut.json", text.substr(0, text.size() / 2));
  expect_error([&] { load_bpe_json(cut); }, cut);
  const std::string array = write("array.json", "[1, 2]");
  expect_error([&] { load_bpe_json(array); }, array);
  // The good file loads (so the refusals above are about the damage).
  EXPECT_NO_THROW(load_bpe_json(write("good.json", text)));
}

TEST_F(BadJson, UnsupportedModelTypes) {
  for (const char* type : {"WordPiece", "Unigram", "WordLevel"}) {
    json doc = good_;
    doc["model"]["type"] = type;
    expect_refused(std::string(type) + ".json", doc, type);
  }
  json doc = good_;
  doc.erase("model");
  expect_refused("nomodel.json", doc);
}

TEST_F(BadJson, UnsupportedPreTokenizersAndNormalizers) {
  json doc = good_;
  doc["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
  expect_refused("metaspace.json", doc, "Metaspace");
  const json byte_level = good_["pre_tokenizer"]["pretokenizers"][1];
  doc["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Whitespace"}}, byte_level}}};
  expect_refused("whitespace.json", doc, "Whitespace");
  doc["pre_tokenizer"] = nullptr;
  expect_refused("nopre.json", doc, "null");
  doc["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  expect_refused("prefix.json", doc, "add_prefix_space");
  const json bad_split = {
      {"type", "Split"}, {"pattern", {{"Regex", "("}}}, {"behavior", "Isolated"}, {"invert", false}};
  doc["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {bad_split, byte_level}}};
  expect_refused("badregex.json", doc, "regex");
  doc = good_;
  doc["normalizer"] = {{"type", "NFC"}};
  expect_refused("nfc.json", doc, "NFC");
  doc = good_;
  doc["decoder"] = {{"type", "WordPiece"}};
  expect_refused("decoder.json", doc, "decoder");
}

TEST_F(BadJson, BrokenVocabularies) {
  json doc = good_;
  doc["model"]["merges"].push_back({"\xC4\xA0", "notatoken"});
  expect_refused("merge.json", doc, "notatoken");
  doc = good_;
  doc["model"]["merges"].push_back("nospace");
  expect_refused("merge2.json", doc, "nospace");
  doc = good_;
  doc["model"]["vocab"]["zzz"] = -5;
  expect_refused("negid.json", doc, "-5");
  doc = good_;
  doc["model"]["vocab"]["zzz"] = 1.5;
  expect_refused("floatid.json", doc, "not an integer");
  doc = good_;
  doc["added_tokens"][0]["id"] = 99999999999ull;
  expect_refused("hugeid.json", doc, "out of range");
  doc = good_;
  doc["model"]["vocab"]["zzz"] = 3;  // id 3 already names another token
  expect_refused("dupid.json", doc, "id 3");
  doc = good_;
  doc["model"]["vocab"] = json::object();
  doc["model"]["merges"] = json::array();
  doc["added_tokens"] = json::array();
  expect_refused("empty.json", doc, "empty");
  doc = good_;
  doc["model"]["vocab"] = "oops";
  expect_refused("vocabtype.json", doc);
}

TEST(BadGgufVocab, Refused) {
  EmbeddedVocab v = byte_vocab("qwen2", {}, {});
  expect_error([&] { make_bpe_tokenizer(v); }, "qwen2");
  v = byte_vocab("gpt2", {}, {"a nothere"});
  expect_error([&] { make_bpe_tokenizer(v); }, "nothere");
  v = byte_vocab("gpt2", {}, {"ab"});
  expect_error([&] { make_bpe_tokenizer(v); }, "test.gguf");
  v = byte_vocab("gpt2", {}, {"a b"});  // "ab" is not a token
  expect_error([&] { make_bpe_tokenizer(v); }, "ab");
  v = byte_vocab("gpt2", {}, {});
  v.tokens.clear();
  v.token_types.clear();
  expect_error([&] { make_bpe_tokenizer(v); }, "empty");
  v = byte_vocab("gpt2", {}, {});
  v.token_types.pop_back();
  expect_error([&] { make_bpe_tokenizer(v); }, "token_type");
  v = byte_vocab("gpt2", {}, {});
  v.model = "llama";
  expect_error([&] { make_bpe_tokenizer(v); }, "llama");
  v = byte_vocab("gpt2", {}, {});
  v.bos_id = 9999;
  expect_error([&] { make_bpe_tokenizer(v); }, "9999");
}

}  // namespace
}  // namespace llm
