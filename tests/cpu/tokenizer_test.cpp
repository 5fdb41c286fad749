// Tokenizer tests: encode/decode against Python sentencepiece's output (tests/data/tokenizer_refs.json, made by
// tools/tokenizer_refs.py), the streaming decoder's UTF-8 and leading-space behaviour, and load errors.
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "../utf8_check.h"

namespace llm {
namespace {

using nlohmann::json;

const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD
const std::string kLlama = "\xF0\x9F\xA6\x99";     // U+1F999 🦙

using llm_test::valid_utf8;

const json& refs() {
  static const json j = [] {
    const std::string path = std::string(LLM_SOURCE_DIR) + "/tests/data/tokenizer_refs.json";
    std::ifstream in(path);
    if (!in) fail("cannot open ", path);
    return json::parse(in);
  }();
  return j;
}

struct Streamed {
  std::string text;                 // every push() and the final flush(), concatenated
  std::vector<std::string> pushes;  // what each push() returned
};

Streamed stream(const Tokenizer& tok, const std::vector<int>& ids, bool strip = true) {
  StreamDecoder dec(tok, strip);
  Streamed out;
  for (int id : ids) {
    out.pushes.push_back(dec.push(id));
    out.text += out.pushes.back();
  }
  out.text += dec.flush();
  return out;
}

// One fixture per model in the reference file; the tokenizer models are committed under tests/data/models/.
class TokenizerRefTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    for (const auto& m : refs().at("models")) {
      if (m.at("name") == GetParam()) ref_ = m;
    }
    ASSERT_FALSE(ref_.is_null()) << "model " << GetParam() << " missing from tokenizer_refs.json";
    const std::string path = std::string(LLM_TEST_MODELS) + "/" + ref_.at("model").get<std::string>();
    ASSERT_TRUE(std::filesystem::exists(path)) << "tokenizer model " << path << " is missing from the checkout";
    tok_ = load_tokenizer_file(path);
  }

  // The streamed text must equal the reference decode, and no push may hand out malformed UTF-8.
  void expect_streams_to(const std::vector<int>& ids, const std::string& expected, const std::string& what) {
    const Streamed s = stream(*tok_, ids);
    EXPECT_EQ(s.text, expected) << what;
    for (size_t i = 0; i < s.pushes.size(); ++i) {
      EXPECT_TRUE(valid_utf8(s.pushes[i])) << what << ": push " << i << " (id " << ids[i] << ") is malformed";
    }
  }

  const json& find_case(const char* list, const std::string& name) const {
    for (const auto& c : ref_.at(list)) {
      if (c.at("name") == name) return c;
    }
    throw Error("no reference case " + name);
  }

  json ref_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(TokenizerRefTest, VocabAndSpecialIds) {
  EXPECT_EQ(tok_->vocab_size(), ref_.at("vocab_size").get<int>());
  EXPECT_EQ(tok_->bos_id(), ref_.at("bos_id").get<int>());
  EXPECT_EQ(tok_->eos_id(), ref_.at("eos_id").get<int>());
  EXPECT_EQ(tok_->piece(tok_->bos_id()), "<s>");
  EXPECT_EQ(tok_->piece(tok_->eos_id()), "</s>");
  EXPECT_EQ(tok_->piece_kind(tok_->bos_id()), Tokenizer::PieceKind::kControl);
  EXPECT_EQ(tok_->piece_kind(ref_.at("unk_id").get<int>()), Tokenizer::PieceKind::kUnknown);
}

TEST_P(TokenizerRefTest, EncodeMatchesReference) {
  for (const auto& c : ref_.at("cases")) {
    const std::string text = c.at("text");
    EXPECT_EQ(tok_->encode(text, false), c.at("ids").get<std::vector<int>>()) << c.at("name");
    EXPECT_EQ(tok_->encode(text, true), c.at("ids_bos").get<std::vector<int>>()) << c.at("name");
  }
}

TEST_P(TokenizerRefTest, PiecesMatchReference) {
  for (const auto& c : ref_.at("cases")) {
    const auto ids = c.at("ids").get<std::vector<int>>();
    const auto pieces = c.at("pieces").get<std::vector<std::string>>();
    ASSERT_EQ(ids.size(), pieces.size());
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(tok_->piece(ids[i]), pieces[i]) << c.at("name");
  }
}

TEST_P(TokenizerRefTest, DecodeMatchesReference) {
  for (const auto& c : ref_.at("cases")) {
    EXPECT_EQ(tok_->decode(c.at("ids").get<std::vector<int>>()), c.at("decoded").get<std::string>()) << c.at("name");
    EXPECT_EQ(tok_->decode(c.at("ids_bos").get<std::vector<int>>()), c.at("decoded_bos").get<std::string>())
        << c.at("name");
  }
  for (const auto& c : ref_.at("decode_cases")) {
    EXPECT_EQ(tok_->decode(c.at("ids").get<std::vector<int>>()), c.at("text").get<std::string>()) << c.at("name");
  }
}

TEST_P(TokenizerRefTest, StreamingOneIdAtATimeMatchesReferenceDecode) {
  for (const auto& c : ref_.at("cases")) {
    const std::string name = c.at("name");
    expect_streams_to(c.at("ids").get<std::vector<int>>(), c.at("decoded"), name);
    expect_streams_to(c.at("ids_bos").get<std::vector<int>>(), c.at("decoded_bos"), name + " with BOS");
  }
  for (const auto& c : ref_.at("decode_cases")) {
    expect_streams_to(c.at("ids").get<std::vector<int>>(), c.at("text"), c.at("name"));
  }
}

// Without stripping, the output is decode()'s plus the leading spaces decode() drops: nothing else changes.
TEST_P(TokenizerRefTest, StreamingWithoutStripKeepsOnlyTheDroppedLeadingSpaces) {
  for (const auto& list : {"cases", "decode_cases"}) {
    for (const auto& c : ref_.at(list)) {
      const auto ids = c.at("ids").get<std::vector<int>>();
      const std::string want = c.at(list == std::string("cases") ? "decoded" : "text");
      const std::string got = stream(*tok_, ids, false).text;
      size_t first = 0;  // the first id that is not a control token
      while (first < ids.size() && tok_->piece_kind(ids[first]) == Tokenizer::PieceKind::kControl) ++first;
      const bool space_first = first < ids.size() && tok_->piece(ids[first]).rfind("\xE2\x96\x81", 0) == 0;
      if (!space_first) {
        EXPECT_EQ(got, want) << c.at("name");
      } else {
        ASSERT_GT(got.size(), want.size()) << c.at("name");
        EXPECT_EQ(got.substr(got.size() - want.size()), want) << c.at("name");
        EXPECT_EQ(got.substr(0, got.size() - want.size()).find_first_not_of(' '), std::string::npos)
            << c.at("name") << ": only spaces may be added";
      }
    }
  }
}

// Hand-worked: tok512 removes extra whitespace (every leading "▁" goes), Llama 2 only adds a dummy prefix (the first
// "▁" goes and the rest are text).
TEST_P(TokenizerRefTest, LeadingSpaceRuleByHand) {
  const bool tok512 = GetParam() == "tok512";
  EXPECT_EQ(tok_->leading_space(),
            tok512 ? Tokenizer::LeadingSpace::kDropAll : Tokenizer::LeadingSpace::kDropFirst);
  const auto ids = [&](const char* name) { return find_case("decode_cases", name).at("ids").get<std::vector<int>>(); };
  EXPECT_EQ(stream(*tok_, ids("bos_word")).text, "Oncea");
  EXPECT_EQ(stream(*tok_, ids("bos_word"), false).text, " Oncea");
  EXPECT_EQ(stream(*tok_, ids("no_space_first")).text, "a Once");
  EXPECT_EQ(stream(*tok_, ids("byte_then_word")).text, "A Once");
  EXPECT_EQ(stream(*tok_, ids("bos_space_then_word")).text, tok512 ? "Once" : " Once");
  EXPECT_EQ(stream(*tok_, ids("two_spaces_then_word")).text, tok512 ? "Once" : "  Once");
  EXPECT_EQ(stream(*tok_, ids("two_spaces_then_word"), false).text, "   Once");
}

// Characters tok512 lacks must come out of byte tokens, and no intermediate output may be malformed or replaced.
TEST_P(TokenizerRefTest, ByteFallbackNeverEmitsPartialCharacters) {
  for (const char* name : {"accents", "cjk", "emoji", "mixed"}) {
    const auto& c = find_case("cases", name);
    const auto ids = c.at("ids_bos").get<std::vector<int>>();
    int bytes = 0;
    for (int id : ids) bytes += tok_->piece_kind(id) == Tokenizer::PieceKind::kByte;
    if (GetParam() == "tok512") {
      EXPECT_GT(bytes, 0) << name << " should need byte-fallback tokens in tok512";
    }
    const Streamed s = stream(*tok_, ids);
    EXPECT_EQ(s.text, c.at("decoded_bos").get<std::string>()) << name;
    for (size_t i = 0; i < s.pushes.size(); ++i) {
      EXPECT_TRUE(valid_utf8(s.pushes[i])) << name << ": push " << i;
      EXPECT_EQ(s.pushes[i].find(kReplacement), std::string::npos) << name << ": push " << i << " has U+FFFD";
    }
  }
}

TEST_P(TokenizerRefTest, EmojiSplitAcrossFourByteTokens) {
  const auto ids = find_case("cases", "emoji").at("ids").get<std::vector<int>>();  // ▁ F0 9F A6 99 F0 9F 9A 80
  const std::vector<int> llama(ids.begin() + 1, ids.begin() + 5);
  const char* want[] = {"<0xF0>", "<0x9F>", "<0xA6>", "<0x99>"};
  for (int i = 0; i < 4; ++i) ASSERT_EQ(tok_->piece(llama[i]), want[i]);
  StreamDecoder dec(*tok_);
  EXPECT_EQ(dec.push(llama[0]), "");
  EXPECT_EQ(dec.push(llama[1]), "");
  EXPECT_EQ(dec.push(llama[2]), "");
  EXPECT_EQ(dec.push(llama[3]), kLlama);
  EXPECT_EQ(dec.flush(), "");
}

TEST_P(TokenizerRefTest, InvalidBytesBecomeReplacementCharacters) {
  const auto ids = find_case("cases", "emoji").at("ids").get<std::vector<int>>();
  StreamDecoder dec(*tok_);
  EXPECT_EQ(dec.push(ids[1]), "");  // F0: may start a character
  EXPECT_EQ(dec.push(ids[2]), "");  // 9F: still may
  EXPECT_EQ(dec.flush(), kReplacement + kReplacement);  // the run ended short: one U+FFFD per byte, as decode()
  EXPECT_EQ(dec.flush(), "");

  const auto bad = find_case("decode_cases", "invalid_bytes").at("ids").get<std::vector<int>>();
  ASSERT_EQ(tok_->piece(bad[0]), "<0xFF>");
  StreamDecoder dec2(*tok_);
  EXPECT_EQ(dec2.push(bad[0]), kReplacement);  // FF never starts a character: replaced at once
  EXPECT_EQ(dec2.push(bad[1]), kReplacement);  // C0 only starts overlong forms
}

TEST_P(TokenizerRefTest, OutOfRangeIdNamesIdAndVocabSize) {
  const int n = tok_->vocab_size();
  try {
    tok_->piece(n);
    FAIL() << "piece(" << n << ") did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(n)), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("vocab size " + std::to_string(n)), std::string::npos) << e.what();
  }
  EXPECT_THROW(tok_->piece(-1), Error);
  EXPECT_THROW(tok_->decode({1, n + 5}), Error);
}

// Random id sequences that mix byte runs, control, unknown and "▁" pieces: the stream must rebuild the library's
// decode() exactly, with well-formed UTF-8 at every step.
TEST_P(TokenizerRefTest, RandomSequencesStreamToLibraryDecode) {
  std::vector<int> pool = {tok_->bos_id(), tok_->eos_id(), ref_.at("unk_id").get<int>()};
  for (const char* name : {"emoji", "cjk", "accents", "mixed", "leading_space", "multiple_spaces"}) {
    for (int id : find_case("cases", name).at("ids").get<std::vector<int>>()) pool.push_back(id);
  }
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int> ids(rng() % 12);
    for (int& id : ids) id = rng() % 4 == 0 ? static_cast<int>(rng() % tok_->vocab_size()) : pool[rng() % pool.size()];
    const Streamed s = stream(*tok_, ids);
    ASSERT_EQ(s.text, tok_->decode(ids)) << "trial " << trial;
    for (const auto& p : s.pushes) ASSERT_TRUE(valid_utf8(p)) << "trial " << trial;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TokenizerRefTest, ::testing::Values("tok512", "llama2"),
                         [](const auto& info) { return info.param; });

TEST(TokenizerLoad, MissingFileNamesThePath) {
  const std::string path = "/nonexistent-dir/no-such-tokenizer.model";
  try {
    load_tokenizer_file(path);
    FAIL() << "load did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "message must be one line";
  }
}

TEST(TokenizerLoad, NotASentencepieceModelNamesThePath) {
  const auto path = (std::filesystem::temp_directory_path() / "llm_tokenizer_test_not_a_model.txt").string();
  {
    std::ofstream(path) << "this is plain text, not a serialized sentencepiece ModelProto\n";
  }
  try {
    load_tokenizer_file(path);
    ADD_FAILURE() << "load did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "message must be one line";
  }
  std::remove(path.c_str());
}

TEST(Utf8Validator, RejectsWhatItMust) {  // the validator above is the judge of the streaming tests
  EXPECT_TRUE(valid_utf8("a\xC3\xA9" + kLlama + kReplacement));
  EXPECT_FALSE(valid_utf8("\xF0\x9F\xA6"));      // truncated
  EXPECT_FALSE(valid_utf8("\xC0\x80"));          // overlong
  EXPECT_FALSE(valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(valid_utf8("\x9F"));              // lone continuation
}

}  // namespace
}  // namespace llm
