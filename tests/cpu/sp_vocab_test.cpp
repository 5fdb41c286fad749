// GGUF "llama" vocabularies through the sentencepiece library: a vocabulary built from tok512.model and Llama 2's
// tokenizer.model as llama.cpp's converter would must encode and decode exactly as the original .model does (the
// original, read through the library, is the judge); bad vocabularies fail naming the token; and a GGUF carrying
// tok512's vocabulary loads back into the same tokenizer.
#include "tokenizer/sp_vocab.h"

#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf_writer_util.h"
#include "models/model.h"
#include "models_test_util.h"
#include "tokenizer/load.h"

namespace llm {
namespace {

const std::string kTok512 = std::string(LLM_TEST_MODELS) + "/stories260K/tok512.model";
const std::string kLlama2 = std::string(LLM_TEST_MODELS) + "/llama2-tokenizer/tokenizer.model";

// The original model through the library, or null (the test then fails: the models are part of the checkout).
std::unique_ptr<sentencepiece::SentencePieceProcessor> load_original(const std::string& path) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = sp->Load(path);
  if (!status.ok()) {
    ADD_FAILURE() << path << ": " << status.ToString();
    return nullptr;
  }
  return sp;
}

// What llama.cpp's converter (_create_vocab_sentencepiece) writes for a tokenizer.model: every piece with its score
// and a type from the library's classification, the special ids, and add_space_prefix from the normalizer (both
// models here use the default add_dummy_prefix = true).
EmbeddedVocab vocab_like_llama_cpp(const sentencepiece::SentencePieceProcessor& sp, const std::string& source) {
  EmbeddedVocab v;
  v.source = source;
  v.model = "llama";
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    v.tokens.push_back(sp.IdToPiece(id));
    v.scores.push_back(sp.GetScore(id));
    int type = 1;  // normal
    if (sp.IsUnknown(id)) type = 2;
    else if (sp.IsControl(id)) type = 3;
    else if (sp.IsUnused(id)) type = 5;
    else if (sp.IsByte(id)) type = 6;
    v.token_types.push_back(type);
  }
  v.bos_id = sp.bos_id();
  v.eos_id = sp.eos_id();
  v.unk_id = sp.unk_id();
  v.pad_id = sp.pad_id();
  v.add_bos = true;
  v.add_space_prefix = true;
  return v;
}

std::vector<int> original_ids(const sentencepiece::SentencePieceProcessor& sp, const std::string& text) {
  std::vector<int> ids;
  EXPECT_TRUE(sp.Encode(text, &ids).ok()) << text;
  return ids;
}

std::string original_text(const sentencepiece::SentencePieceProcessor& sp, const std::vector<int>& ids) {
  std::string text;
  EXPECT_TRUE(sp.Decode(ids, &text).ok());
  return text;
}

// Text on which sentencepiece's whitespace normalization is a no-op (no leading, trailing or repeated spaces), so
// models trained with remove_extra_whitespaces (tok512) and GGUF vocabularies (which never remove any) agree.
const std::vector<std::string> kPlain = {
    "",
    "x",
    "Hello world",
    "Once upon a time, there was a little girl named Lily. She loved to play outside.",
    "line one\nline two\n\nline four",
    "tabs\tand\tmore",
    "digits 0123456789 and 3.14159, 1e-9",
    "caf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9 \xC3\x85ngstr\xC3\xB6m",  // accents
    // 日本語のテキスト
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88",
    "emoji \xF0\x9F\x98\x80\xF0\x9F\x8E\x89 llama \xF0\x9F\xA6\x99",  // 😀🎉 🦙 (byte fallback)
    "<s> and </s> are text here",
    "symbols: {}[]()<>=+-*/\\|~`^%$#@!?;:'\"",
};
// Whitespace that only a model without remove_extra_whitespaces (Llama 2) keeps.
const std::vector<std::string> kSpaces = {
    " leading space",
    "   three leading spaces",
    "trailing spaces   ",
    "runs   of    spaces",
    "\n\nnewlines first",
    " \n \n mixed \t ",
    " ",
};

void expect_same_tokenizer(const sentencepiece::SentencePieceProcessor& sp, const Tokenizer& tok,
                           const std::vector<std::string>& texts) {
  ASSERT_EQ(tok.vocab_size(), sp.GetPieceSize());
  EXPECT_EQ(tok.bos_id(), sp.bos_id());
  EXPECT_EQ(tok.eos_id(), sp.eos_id());
  EXPECT_EQ(tok.token_id("<s>"), sp.PieceToId("<s>"));
  EXPECT_EQ(tok.token_id("</s>"), sp.PieceToId("</s>"));
  EXPECT_EQ(tok.token_id("<0x0A>"), sp.PieceToId("<0x0A>"));
  for (int id = 0; id < sp.GetPieceSize(); ++id) ASSERT_EQ(tok.piece(id), sp.IdToPiece(id)) << "id " << id;
  for (const std::string& text : texts) {
    const std::vector<int> want = original_ids(sp, text);
    EXPECT_EQ(tok.encode(text, false), want) << "text: '" << text << "'";
    std::vector<int> with_bos = want;
    with_bos.insert(with_bos.begin(), sp.bos_id());
    EXPECT_EQ(tok.encode(text, true), with_bos) << "text: '" << text << "'";
    EXPECT_EQ(tok.decode(want), original_text(sp, want)) << "text: '" << text << "'";
  }
}

TEST(SpVocab, Tok512EncodesAsTheOriginal) {
  auto sp = load_original(kTok512);
  ASSERT_TRUE(sp);
  const EmbeddedVocab v = vocab_like_llama_cpp(*sp, "tok512.gguf");
  const auto tok = make_sentencepiece_from_vocab(v);
  expect_same_tokenizer(*sp, *tok, kPlain);
}

// tok512 was trained with remove_extra_whitespaces; a GGUF records no such flag and llama.cpp keeps every space,
// so here the rebuilt tokenizer must keep them too: lossless round trip, spaces as "▁" pieces, never collapsed.
TEST(SpVocab, Tok512KeepsEverySpaceAsLlamaCppDoes) {
  auto sp = load_original(kTok512);
  ASSERT_TRUE(sp);
  const auto tok = make_sentencepiece_from_vocab(vocab_like_llama_cpp(*sp, "tok512.gguf"));
  for (const std::string& text : kSpaces) EXPECT_EQ(tok->decode(tok->encode(text, false)), text) << "'" << text << "'";
  // "a  b" -> "▁a▁▁b": more pieces than the original's collapsed "▁a▁b".
  EXPECT_GT(tok->encode("a  b", false).size(), original_ids(*sp, "a  b").size());
}

TEST(SpVocab, Llama2EncodesAsTheOriginal) {
  auto sp = load_original(kLlama2);
  ASSERT_TRUE(sp);
  const auto tok = make_sentencepiece_from_vocab(vocab_like_llama_cpp(*sp, "llama2.gguf"));
  std::vector<std::string> texts = kPlain;
  texts.insert(texts.end(), kSpaces.begin(), kSpaces.end());
  expect_same_tokenizer(*sp, *tok, texts);
  // Control, unknown and byte ids decode as the original does (" ⁇ " for <unk>, nothing for <s>/</s>).
  const std::vector<int> odd = {1, 15043, 0, 2, 0xE2 + 3, 0x82 + 3, 0xAC + 3, 3, 29871, 13};
  EXPECT_EQ(tok->decode(odd), original_text(*sp, odd));
}

// add_space_prefix = false: "Hello world" gets no "▁" in front, so " Hello world" must give what the original
// (which adds one) gives for "Hello world".
TEST(SpVocab, NoSpacePrefix) {
  auto sp = load_original(kLlama2);
  ASSERT_TRUE(sp);
  EmbeddedVocab v = vocab_like_llama_cpp(*sp, "llama2.gguf");
  v.add_space_prefix = false;
  const auto tok = make_sentencepiece_from_vocab(v);
  EXPECT_EQ(tok->encode(" Hello world", false), original_ids(*sp, "Hello world"));
  EXPECT_NE(tok->encode("Hello world", false), original_ids(*sp, "Hello world"));
}

// Scores absent (llama.cpp writes them, a hand-made GGUF may not): accepted as all zero.
TEST(SpVocab, ScoresAbsentAreZero) {
  auto sp = load_original(kTok512);
  ASSERT_TRUE(sp);
  EmbeddedVocab v = vocab_like_llama_cpp(*sp, "noscores.gguf");
  v.scores.clear();
  const auto tok = make_sentencepiece_from_vocab(v);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->decode(tok->encode("Once upon a time", false)), "Once upon a time");
}

// ---- Bad vocabularies ----

EmbeddedVocab small_vocab() {
  EmbeddedVocab v;
  v.source = "bad.gguf";
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81" "a", "b"};
  v.scores = {0, 0, 0, -1, -2};
  v.token_types = {2, 3, 3, 1, 1};
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  return v;
}

TEST(SpVocab, SmallVocabularyWorks) {  // the base of the bad-input cases below is itself good
  const auto tok = make_sentencepiece_from_vocab(small_vocab());
  // "▁a▁b": "▁a" is a piece; the lone "▁" is not and there are no byte pieces, so it is <unk>; then "b".
  EXPECT_EQ(tok->encode("a b", true), (std::vector<int>{1, 3, 0, 4}));
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
}

TEST(SpVocab, BadInputNamesSourceAndToken) {
  using llm_test::expect_error;
  auto with = [](auto edit) {
    EmbeddedVocab v = small_vocab();
    edit(v);
    return v;
  };
  expect_error([&] { make_sentencepiece_from_vocab(with([](EmbeddedVocab& v) { v.tokens.clear(); })); },
               {"bad.gguf", "empty"});
  expect_error([&] { make_sentencepiece_from_vocab(with([](EmbeddedVocab& v) { v.scores.pop_back(); })); },
               {"bad.gguf", "scores", "4 entries", "expected 5"});
  expect_error([&] { make_sentencepiece_from_vocab(with([](EmbeddedVocab& v) { v.token_types.push_back(1); })); },
               {"bad.gguf", "token_type", "6 entries", "expected 5"});
  expect_error([&] { make_sentencepiece_from_vocab(with([](EmbeddedVocab& v) { v.token_types.clear(); })); },
               {"bad.gguf", "token_type", "0 entries"});
  expect_error([&] { make_sentencepiece_from_vocab(with([](EmbeddedVocab& v) { v.token_types[4] = 7; })); },
               {"bad.gguf", "token 4", "token_type 7"});
  expect_error([&] { make_sentencepiece_from_vocab(with([](EmbeddedVocab& v) { v.token_types[3] = 0; })); },
               {"bad.gguf", "token 3", "token_type 0"});
  expect_error([&] { make_sentencepiece_from_vocab(with([](EmbeddedVocab& v) { v.bos_id = 5; })); },
               {"bad.gguf", "bos", "5", "out of range"});
  expect_error([&] { make_sentencepiece_from_vocab(with([](EmbeddedVocab& v) { v.eos_id = -2; })); },
               {"bad.gguf", "eos", "-2"});
  expect_error([&] { make_sentencepiece_from_vocab(with([](EmbeddedVocab& v) { v.token_types[0] = 1; })); },
               {"bad.gguf", "unknown"});
  expect_error([&] { make_sentencepiece_from_vocab(with([](EmbeddedVocab& v) { v.unk_id = 4; })); },
               {"bad.gguf", "unknown token id 4"});
  expect_error([&] { make_sentencepiece_from_vocab(with([](EmbeddedVocab& v) { v.tokens[4] = "<s>"; })); },
               {"bad.gguf", "token 4", "twice"});
  expect_error([&] { make_sentencepiece_from_vocab(with([](EmbeddedVocab& v) { v.tokens[3] = ""; })); },
               {"bad.gguf", "token 3", "empty"});
}

// ---- GGUF round trip ----

enum : uint32_t { kGgmlF32 = 0 };

// A tiny llama GGUF (dim 64, 1 layer, 4 heads, 2 kv heads, hidden 160, vocab 512; zero weights) whose
// tokenizer.ggml.* arrays are `v`, written as llama.cpp writes them (token_type int32, scores float32).
std::string tiny_llama_gguf(const EmbeddedVocab& v) {
  llm_test::GgufWriter w;
  w.str("general.architecture", "llama");
  w.u32("llama.embedding_length", 64);
  w.u32("llama.block_count", 1);
  w.u32("llama.attention.head_count", 4);
  w.u32("llama.attention.head_count_kv", 2);
  w.u32("llama.feed_forward_length", 160);
  w.u32("llama.context_length", 128);
  w.u32("llama.rope.dimension_count", 16);
  w.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.str("tokenizer.ggml.model", "llama");
  w.str_array("tokenizer.ggml.tokens", v.tokens);
  w.f32_array("tokenizer.ggml.scores", v.scores);
  w.i32_array("tokenizer.ggml.token_type", v.token_types);
  w.u32("tokenizer.ggml.bos_token_id", uint32_t(v.bos_id));
  w.u32("tokenizer.ggml.eos_token_id", uint32_t(v.eos_id));
  w.u32("tokenizer.ggml.unknown_token_id", uint32_t(v.unk_id));
  w.boolean("tokenizer.ggml.add_bos_token", true);
  w.boolean("tokenizer.ggml.add_space_prefix", true);
  auto add = [&](const std::string& name, uint64_t rows, uint64_t cols) {
    const std::string zeros(rows * cols * sizeof(float), '\0');
    w.tensors.push_back({name, rows == 1 ? std::vector<uint64_t>{cols} : std::vector<uint64_t>{cols, rows},
                         kGgmlF32, zeros});
  };
  add("token_embd.weight", v.tokens.size(), 64);
  add("blk.0.attn_norm.weight", 1, 64);
  add("blk.0.attn_q.weight", 64, 64);
  add("blk.0.attn_k.weight", 32, 64);
  add("blk.0.attn_v.weight", 32, 64);
  add("blk.0.attn_output.weight", 64, 64);
  add("blk.0.ffn_norm.weight", 1, 64);
  add("blk.0.ffn_gate.weight", 160, 64);
  add("blk.0.ffn_up.weight", 160, 64);
  add("blk.0.ffn_down.weight", 64, 160);
  add("output_norm.weight", 1, 64);
  return w.build();
}

TEST(SpVocab, GgufRoundTripTok512) {
  auto sp = load_original(kTok512);
  ASSERT_TRUE(sp);
  const EmbeddedVocab written = vocab_like_llama_cpp(*sp, "written");
  llm_test::TempDir tmp;
  const std::string path = tmp.str("tok512.gguf");
  llm_test::write_file(path, tiny_llama_gguf(written));

  const Model m = load_gguf(path);
  ASSERT_TRUE(m.vocab) << "load_gguf gave no vocabulary";
  const EmbeddedVocab& v = *m.vocab;
  EXPECT_EQ(v.model, "llama");
  EXPECT_EQ(v.tokens, written.tokens);
  EXPECT_EQ(v.scores, written.scores);
  EXPECT_EQ(v.token_types, written.token_types);
  EXPECT_EQ(v.bos_id, sp->bos_id());
  EXPECT_EQ(v.eos_id, sp->eos_id());
  EXPECT_EQ(v.unk_id, sp->unk_id());
  const auto tok = make_sentencepiece_from_vocab(v);
  expect_same_tokenizer(*sp, *tok, kPlain);
}

}  // namespace
}  // namespace llm
