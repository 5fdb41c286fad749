// libFuzzer target for the byte-level BPE tokenizer. The first byte picks the mode:
//   0 (mod 3): the rest up to the first NUL is a tokenizer.json, the bytes after it a text (refusal must be
//              llm::Error);
//   1, 2:      the rest is a text for one of two fixed tokenizers built here (Llama-3-style Split + ignore_merges,
//              SmolLM2-style Digits + ByteLevel), which hold all 256 bytes, so valid UTF-8 must round-trip exactly.
// Always: encode never yields a special id, decode() and every StreamDecoder push() are well-formed UTF-8, and the
// stream rebuilds decode(), for the encoded ids and for the input bytes read as raw ids.
#include <cstdint>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "tokenizer/bpe.h"

namespace {

constexpr const char* kTarget = "fuzz_bpe";

void check_text(const llm::Tokenizer& tok, const std::string& text, bool all_bytes) {
  const std::vector<int> ids = tok.encode(text, false);
  for (int id : ids) {
    if (id < 0 || id >= tok.vocab_size()) llm_fuzz::finding(kTarget, "encode gave an id out of range");
    if (tok.piece_kind(id) == llm::Tokenizer::PieceKind::kControl)
      llm_fuzz::finding(kTarget, "encode gave the special id " + std::to_string(id));
  }
  llm_fuzz::check_stream(kTarget, tok, ids);
  if (all_bytes && llm_fuzz::valid_utf8(text) && tok.decode(ids) != text) llm_fuzz::finding(kTarget, "no round trip: " + text);
  std::vector<int> raw;  // the text's bytes as ids: sequences encode never makes
  for (size_t i = 0; i + 1 < text.size() && tok.vocab_size() > 0; i += 2)
    raw.push_back((uint8_t(text[i]) | uint8_t(text[i + 1]) << 8) % tok.vocab_size());
  llm_fuzz::check_stream(kTarget, tok, raw);
}

// A small tokenizer.json: every byte, a few merges, specials after the vocabulary.
std::string fixed_tokenizer(bool llama3) {
  using nlohmann::json;
  std::vector<std::string> byte_char(256);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const int cp = keep ? b : next++;
    byte_char[b] = cp < 0x80 ? std::string(1, char(cp)) : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
  }
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char[b]] = b;
  const std::string sp = byte_char[' '], nl = byte_char['\n'];
  const std::vector<std::pair<std::string, std::string>> merges = {
      {sp, "t"}, {"h", "e"}, {sp + "t", "he"}, {"i", "n"}, {"e", "r"}, {"1", "2"}, {"12", "3"}, {sp, sp},
      {sp + sp, sp + sp}, {nl, nl}, {byte_char[0xC3], byte_char[0xA9]}, {"o", "n"}, {sp, "a"}, {"'", "s"}, {"=", "="}};
  json m = json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = int(vocab.size());
    m.push_back({a, b});
  }
  vocab["xyzzy"] = int(vocab.size());  // reachable only through ignore_merges
  const int n = int(vocab.size());
  json pre;
  if (llama3) {
    pre = {{"type", "Sequence"}, {"pretokenizers",
           {{{"type", "Split"}, {"behavior", "Isolated"}, {"invert", false}, {"pattern", {{"Regex",
             R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
             R"(\s*[\r\n]+|\s+(?!\S)|\s+)"}}}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  } else {
    pre = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}},
           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}};
  }
  json doc = {{"normalizer", nullptr}, {"pre_tokenizer", pre}, {"decoder", {{"type", "ByteLevel"}}},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}, {"ignore_merges", llama3}}},
              {"added_tokens", {{{"id", n}, {"content", "<|im_end|>"}, {"special", true}},
                                {{"id", n + 1}, {"content", "<x>"}, {"special", false}}}}};
  return doc.dump();
}

const llm::Tokenizer& fixed(int which) {
  static const auto toks = [] {
    std::vector<std::unique_ptr<llm::Tokenizer>> t;
    for (bool llama3 : {true, false}) {
      const std::string doc = fixed_tokenizer(llama3), path = llm_fuzz::temp_dir() + "/fixed.json";
      llm_fuzz::write_file(path, reinterpret_cast<const uint8_t*>(doc.data()), doc.size());
      t.push_back(llm::load_bpe_json(path));
    }
    return t;
  }();
  return *toks[which];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int mode = data[0] % 3;
  ++data, --size;
  if (mode > 0) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    llm_fuzz::expect_ok_or_error(kTarget, [&] { check_text(fixed(mode - 1), text, true); });
    return 0;
  }
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t doc_size = nul ? size_t(nul - data) : size;
  const std::string path = llm_fuzz::temp_dir() + "/tokenizer.json";
  llm_fuzz::write_file(path, data, doc_size);
  const std::string text = nul ? std::string(reinterpret_cast<const char*>(nul + 1), size - doc_size - 1) : "";
  llm_fuzz::expect_ok_or_error(kTarget, [&] { check_text(*llm::load_bpe_json(path), text, false); });
  return 0;
}
