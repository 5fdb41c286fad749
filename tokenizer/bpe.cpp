// Byte-level BPE tokenizer (GPT-2 style) from a Hugging Face tokenizer.json or a GGUF "gpt2" vocabulary: the
// pre-tokenizer splits (tokenizer/bpe_split.h), the GPT-2 bytes-to-unicode map, merges by rank with a per-word cache,
// lossy UTF-8 decode.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"  // llm::fail, llm::printable
#include "core/json_parse.h"
#include "tokenizer/bpe_split.h"  // the split patterns and SplitRegex

namespace llm {

namespace {

const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// from_utf8_lossy of a whole byte string.
std::string utf8_lossy(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    size_t len = 0;
    if (utf8_step(bytes, i, &len) == Utf8Step::kChar) {
      out.append(bytes, i, len);
    } else {
      out += kReplacement;
    }
    i += len;
  }
  return out;
}

void append_utf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 get U+0100.. in byte order.
struct ByteMap {
  std::string to_char[256];                           // byte -> UTF-8 of its stand-in character
  std::unordered_map<std::string, uint8_t> to_byte;   // the inverse
  ByteMap() {
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      append_utf8(&to_char[b], printable ? uint32_t(b) : uint32_t(256 + next++));
      to_byte[to_char[b]] = uint8_t(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

// The bytes a piece stands for, as HF's ByteLevel decoder gives them: every character through the byte map, or the
// piece's own UTF-8 when some character is not in the map (added tokens such as "<|im_end|>" are, "é<x>" too).
std::string piece_bytes(const std::string& piece) {
  const ByteMap& map = byte_map();
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    size_t len = 0;
    if (utf8_step(piece, i, &len) != Utf8Step::kChar) return piece;
    const auto it = map.to_byte.find(piece.substr(i, len));
    if (it == map.to_byte.end()) return piece;
    out.push_back(char(it->second));
    i += len;
  }
  return out;
}


// Everything a BpeTokenizer is made of, from either source.
struct BpeSpec {
  std::string name;                                      // file, for messages
  std::vector<std::string> pieces;                       // id -> spelling ("Ġthe"); "" for an id nothing uses
  std::vector<bool> special;                             // id -> special (skipped by decode, kControl)
  std::unordered_map<std::string, int> model_vocab;      // the BPE model's own tokens (what merges produce)
  std::unordered_map<std::string, int> added;            // added tokens (token_id finds them first, as HF does)
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  std::vector<std::string> patterns;                     // split stages, applied in order
  bool ignore_merges = false;
  int bos = -1, eos = -1, unk = -1;
  bool add_bos = false;
};

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeSpec spec) : s_(std::move(spec)) {
    for (const auto& p : s_.patterns) regexes_.push_back(std::make_unique<SplitRegex>(p, s_.name));
    const ByteMap& map = byte_map();
    for (int b = 0; b < 256; ++b) {
      const auto it = s_.model_vocab.find(map.to_char[b]);
      byte_id_[b] = it == s_.model_vocab.end() ? -1 : it->second;
    }
    check_byte_tokens();
    merges_.reserve(s_.merges.size());
    for (size_t rank = 0; rank < s_.merges.size(); ++rank) {
      const auto& [a, b] = s_.merges[rank];
      const int ia = model_id(a), ib = model_id(b), merged = model_id(a + b);
      if (ia < 0 || ib < 0 || merged < 0) {
        fail("tokenizer ", s_.name, ": merge ", rank, " \"", printable(a + " " + b), "\" names a token not in the "
             "vocabulary (", printable(ia < 0 ? a : ib < 0 ? b : a + b), ")");
      }
      merges_[pair_key(ia, ib)] = {int(rank), merged};  // a repeated pair keeps its last rank, as HF's map does
    }
    bytes_.reserve(s_.pieces.size());
    for (const auto& p : s_.pieces) bytes_.push_back(piece_bytes(p));
  }

  int vocab_size() const override { return int(s_.pieces.size()); }
  int bos_id() const override { return s_.bos; }
  int eos_id() const override { return s_.eos; }
  bool adds_bos() const override { return s_.add_bos; }
  bool byte_level() const override { return true; }

  std::vector<int> encode(const std::string& text, bool add_bos) const override {
    std::vector<int> ids;
    if (add_bos) {
      if (s_.bos < 0) fail("tokenizer ", s_.name, ": BOS requested but the vocabulary has no BOS token");
      ids.push_back(s_.bos);
    }
    // Well-formed stretches go through the regexes; each byte of an ill-formed subsequence is a word of its own
    // (Python strings, and so HF, cannot hold such bytes: this is our choice, and it never drops a byte).
    size_t run = 0;
    for (size_t i = 0; i < text.size();) {
      size_t len = 0;
      if (utf8_step(text, i, &len) == Utf8Step::kChar) {
        i += len;
        continue;
      }
      encode_valid(std::string_view(text).substr(run, i - run), &ids);
      for (size_t k = 0; k < len; ++k) encode_word(std::string_view(text).substr(i + k, 1), &ids);
      i += len;
      run = i;
    }
    encode_valid(std::string_view(text).substr(run), &ids);
    return ids;
  }

  std::string decode(const std::vector<int>& ids) const override {
    std::string bytes;
    for (int id : ids) {
      check_id(id);
      if (!s_.special[id]) bytes += bytes_[id];
    }
    return utf8_lossy(bytes);
  }

  std::string piece(int id) const override {
    check_id(id);
    return s_.pieces[id];
  }

  std::string token_bytes(int id) const override {
    check_id(id);
    return s_.special[id] ? std::string() : bytes_[id];
  }

  int token_id(const std::string& piece) const override {
    const auto a = s_.added.find(piece);
    if (a != s_.added.end()) return a->second;
    return model_id(piece);
  }

  PieceKind piece_kind(int id) const override {
    check_id(id);
    return s_.special[id] ? PieceKind::kControl : PieceKind::kText;
  }
  std::string unk_surface() const override { return ""; }
  LeadingSpace leading_space() const override { return LeadingSpace::kKeep; }

 private:
  struct Merge {
    int rank, merged;
  };
  static uint64_t pair_key(int a, int b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }

  // Every byte of a word starts as its byte token; a byte without one is dropped (or unk), so a vocabulary without
  // them turns ordinary text into nothing. Real vocabularies may lack a few (SmolLM2 has no token for 0x04, 0x06, ...,
  // 0xC0, 0xC1, 0xF5..0xFF), but none lacks tab, newline, carriage return or printable ASCII: those are required.
  void check_byte_tokens() const {
    int missing = 0, first = -1;
    for (int b = 0; b < 256; ++b) {
      if (byte_id_[b] >= 0) continue;
      ++missing;
      if (first < 0 && (b == '\t' || b == '\n' || b == '\r' || (b >= 0x20 && b <= 0x7E))) first = b;
    }
    if (first < 0) return;
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%02X", unsigned(first));
    fail("tokenizer ", s_.name, ": byte-level BPE vocabulary lacks the byte token '", byte_map().to_char[first],
         "' (byte ", hex, "; ", missing, " of the 256 byte tokens are missing); not a byte-level vocabulary");
  }

  int model_id(const std::string& piece) const {
    const auto it = s_.model_vocab.find(piece);
    return it == s_.model_vocab.end() ? -1 : it->second;
  }

  void check_id(int id) const {
    if (id < 0 || id >= vocab_size()) {
      fail("tokenizer ", s_.name, ": token id ", id, " out of range, expected 0 <= id < vocab size ", vocab_size());
    }
  }

  void encode_valid(std::string_view text, std::vector<int>* ids) const {
    if (text.empty()) return;
    std::vector<std::string_view> pieces{text}, next;
    for (const auto& re : regexes_) {
      next.clear();
      for (const auto& p : pieces) re->split(p, &next);
      pieces.swap(next);
    }
    for (const auto& w : pieces) encode_word(w, ids);
  }

  void encode_word(std::string_view word, std::vector<int>* ids) const {
    const std::string key(word);
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      const auto it = cache_.find(key);
      if (it != cache_.end()) {
        ids->insert(ids->end(), it->second.begin(), it->second.end());
        return;
      }
    }
    const std::vector<int> out = bpe(word);
    ids->insert(ids->end(), out.begin(), out.end());
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kCacheLimit) cache_.clear();
    cache_.emplace(key, out);
  }

  // HF's Word::merge_all: a heap of (rank, position) pairs; the lowest rank merges first, the leftmost on ties; a
  // popped entry whose pair no longer yields the same token is stale and skipped. O(n log n) per word.
  std::vector<int> bpe(std::string_view word) const {
    const ByteMap& map = byte_map();
    if (s_.ignore_merges) {
      std::string mapped;
      for (unsigned char c : word) mapped += map.to_char[c];
      const int id = model_id(mapped);
      if (id >= 0) return {id};
    }
    struct Sym {
      int id, prev, next;
      bool alive;
    };
    std::vector<Sym> sym;
    for (unsigned char c : word) {
      const int id = byte_id_[c] >= 0 ? byte_id_[c] : s_.unk;  // a byte missing from the vocabulary: unk, or
      if (id < 0) continue;                                     // dropped when there is none (as HF does)
      sym.push_back({id, int(sym.size()) - 1, int(sym.size()) + 1, true});
    }
    if (sym.empty()) return {};
    sym.back().next = -1;
    using Entry = std::pair<std::pair<int, int>, int>;  // ((rank, position), merged id)
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    auto push = [&](int pos) {
      if (pos < 0 || sym[pos].next < 0) return;
      const auto it = merges_.find(pair_key(sym[pos].id, sym[sym[pos].next].id));
      if (it != merges_.end()) heap.push({{it->second.rank, pos}, it->second.merged});
    };
    for (int i = 0; i + 1 < int(sym.size()); ++i) push(i);
    while (!heap.empty()) {
      const auto [order, merged] = heap.top();
      heap.pop();
      const int pos = order.second;
      if (!sym[pos].alive || sym[pos].next < 0) continue;
      const int right = sym[pos].next;
      const auto it = merges_.find(pair_key(sym[pos].id, sym[right].id));
      if (it == merges_.end() || it->second.merged != merged) continue;
      sym[pos].id = merged;
      sym[right].alive = false;
      sym[pos].next = sym[right].next;
      if (sym[pos].next >= 0) sym[sym[pos].next].prev = pos;
      push(sym[pos].prev);
      push(pos);
    }
    std::vector<int> out;
    for (int i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
    return out;
  }

  static constexpr size_t kCacheLimit = 1 << 16;  // words; cleared when full

  BpeSpec s_;
  std::vector<std::unique_ptr<SplitRegex>> regexes_;
  int byte_id_[256];
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank and result
  std::vector<std::string> bytes_;              // id -> the bytes it decodes to
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int>> cache_;
};

// ---- tokenizer.json ----

using json = nlohmann::json;

// A value from the file, or a message quoting one, fit for a one-line error.
std::string one_line(const std::string& s, size_t max = 200) { return printable(s, max); }

constexpr int kMaxId = 1 << 21;  // real vocabularies stay below 300k ids; a larger id is a broken file

// An id field: an integer in [0, kMaxId) (get<int>() of a float or of a huge integer would not be checkable). The
// range is checked on the integer as the file wrote it (signed or unsigned, up to 64 bits), and a refusal quotes the
// file's own text: narrowing first would report the bound instead of the value.
int json_id(const json& j, const std::string& path, const std::string& what) {
  if (!j.is_number_integer()) fail("tokenizer ", path, ": ", what, " id ", one_line(j.dump()), " is not an integer");
  const bool in_range = j.is_number_unsigned() ? j.get<uint64_t>() < uint64_t(kMaxId)
                                               : j.get<int64_t>() >= 0 && j.get<int64_t>() < kMaxId;
  if (!in_range) fail("tokenizer ", path, ": ", what, " id ", j.dump(), " out of range [0, ", kMaxId, ")");
  return int(j.get<int64_t>());
}

// The "type" of a component, escaped and cut for messages (known names come through unchanged).
std::string type_of(const json& j) { return j.is_object() && j.contains("type") && j["type"].is_string() ?
                                         printable(j["type"].get<std::string>()) : std::string("(none)"); }

// Split regexes are code from the file: one with a lookahead over the rest of the text makes encoding quadratic, so
// only the patterns of known pre-tokenizers run (always our copy). Null for any other pattern.
const char* known_split_pattern(const std::string& pattern) {
  for (const char* known : {kLlama3Pattern, kGpt2Pattern})
    if (pattern == known) return known;
  return nullptr;
}

// A field of a pre-tokenizer/model object with HF's default when absent or null.
bool flag(const json& j, const char* key, bool dflt) {
  return j.contains(key) && !j[key].is_null() ? j[key].get<bool>() : dflt;
}

// The pre-tokenizer as split stages: [Digits | Split]* then ByteLevel (whose use_regex adds the GPT-2 stage).
void json_pre_tokenizer(const json& pre, const std::string& path, BpeSpec* spec) {
  const std::string kinds = "expected ByteLevel, or a Sequence of Digits/Split steps ending in ByteLevel";
  std::vector<json> steps;
  if (type_of(pre) == "Sequence") {
    for (const auto& s : pre.at("pretokenizers")) steps.push_back(s);
  } else {
    steps.push_back(pre);
  }
  if (steps.empty() || type_of(steps.back()) != "ByteLevel") {
    fail("tokenizer ", path, ": pre_tokenizer ", pre.is_null() ? std::string("null") : type_of(pre),
         " is not supported (", kinds, ")");
  }
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    const json& s = steps[i];
    const std::string type = type_of(s);
    if (type == "Digits") {
      spec->patterns.push_back(flag(s, "individual_digits", false) ? kDigitPattern : kDigitsPattern);
    } else if (type == "Split") {
      const json& pat = s.at("pattern");
      const std::string behavior = s.at("behavior").get<std::string>();
      if (!pat.is_object() || !pat.contains("Regex") || behavior != "Isolated" || flag(s, "invert", false)) {
        fail("tokenizer ", path, ": pre_tokenizer Split is supported only with a Regex pattern, behavior Isolated "
             "and invert false (found ", one_line(s.dump()), ")");
      }
      const std::string regex = pat["Regex"].get<std::string>();
      const char* known = known_split_pattern(regex);
      if (!known) {
        fail("tokenizer ", path, ": pre_tokenizer Split regex \"", printable(regex, 60),
             "\" is not a known pre-tokenizer regex (supported: the Llama 3 and GPT-2 patterns)");
      }
      spec->patterns.push_back(known);
    } else {
      fail("tokenizer ", path, ": pre_tokenizer step ", type, " is not supported (", kinds, ")");
    }
  }
  const json& bl = steps.back();
  if (flag(bl, "add_prefix_space", true)) {
    fail("tokenizer ", path, ": pre_tokenizer ByteLevel with add_prefix_space true is not supported");
  }
  if (flag(bl, "use_regex", true)) spec->patterns.push_back(kGpt2Pattern);
}

void json_model(const json& model, const std::string& path, BpeSpec* spec) {
  if (type_of(model) != "BPE") {
    fail("tokenizer ", path, ": model type ", type_of(model), " is not supported (expected BPE)");
  }
  const bool dropout = model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() > 0;
  const auto set = [&](const char* key) {
    return model.contains(key) && !model[key].is_null() && !model[key].get<std::string>().empty();
  };
  if (dropout || set("continuing_subword_prefix") || set("end_of_word_suffix") || flag(model, "byte_fallback", false)) {
    fail("tokenizer ", path, ": BPE options dropout / continuing_subword_prefix / end_of_word_suffix / byte_fallback "
         "are not supported");
  }
  spec->ignore_merges = flag(model, "ignore_merges", false);
  for (const auto& [piece, idj] : model.at("vocab").items()) {
    const int id = json_id(idj, path, "vocab \"" + one_line(piece) + "\"");
    if (!spec->model_vocab.emplace(piece, id).second) {
      fail("tokenizer ", path, ": vocab repeats \"", one_line(piece), "\"");
    }
  }
  for (const auto& m : model.at("merges")) {
    if (m.is_string()) {  // "a b" (older files)
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos) {
        fail("tokenizer ", path, ": merge \"", one_line(s), "\" is not two tokens separated by a space");
      }
      spec->merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2) {  // ["a", "b"]
      spec->merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail("tokenizer ", path, ": merge ", one_line(m.dump()), " is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  if (set("unk_token")) {
    const std::string unk = model["unk_token"].get<std::string>();
    const auto it = spec->model_vocab.find(unk);
    if (it == spec->model_vocab.end()) {
      fail("tokenizer ", path, ": unk_token \"", one_line(unk), "\" is not in the vocabulary");
    }
    spec->unk = it->second;
  }
}

// Places every token at its id; ids nobody uses keep an empty spelling and decode to nothing.
void json_place_tokens(const json& root, const std::string& path, BpeSpec* spec) {
  std::vector<std::pair<int, std::string>> all;  // (id, spelling) of every token
  for (const auto& [piece, id] : spec->model_vocab) all.emplace_back(id, piece);
  std::vector<bool> all_special(all.size(), false);
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    for (const auto& t : root["added_tokens"]) {
      const std::string content = t.at("content").get<std::string>();
      const int id = json_id(t.at("id"), path, "added token \"" + one_line(content) + "\"");
      spec->added[content] = id;
      all.emplace_back(id, content);
      all_special.push_back(flag(t, "special", false));
    }
  }
  int size = 0;
  for (const auto& [id, p] : all) size = std::max(size, id + 1);
  if (size == 0) fail("tokenizer ", path, ": the vocabulary is empty");
  spec->pieces.assign(size, "");
  spec->special.assign(size, false);
  std::vector<bool> used(size, false);
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& [id, p] = all[i];
    if (used[id] && spec->pieces[id] != p) {
      fail("tokenizer ", path, ": id ", id, " names two tokens, \"", one_line(spec->pieces[id]), "\" and \"",
           one_line(p), "\"");
    }
    used[id] = true;
    spec->pieces[id] = p;
    if (all_special[i]) spec->special[id] = true;
  }
  for (int id = 0; id < size; ++id) {
    if (!used[id]) spec->special[id] = true;  // a hole: kControl, decodes to nothing
  }
}

// BOS from a TemplateProcessing post-processor (also anywhere in a Sequence of processors); ByteLevel is a no-op.
void json_post_processor(const json& pp, const std::string& path, BpeSpec* spec) {
  if (pp.is_null()) return;
  const std::string type = type_of(pp);
  if (type == "Sequence") {
    for (const auto& p : pp.at("processors")) json_post_processor(p, path, spec);
  } else if (type == "TemplateProcessing") {
    const json& single = pp.at("single");
    if (!single.empty() && single[0].contains("SpecialToken")) {
      const std::string name = single[0]["SpecialToken"].at("id").get<std::string>();
      const json& ids = pp.at("special_tokens").at(name).at("ids");
      if (ids.size() != 1) {
        fail("tokenizer ", path, ": post_processor special token ", one_line(name), " is not one id");
      }
      spec->bos = json_id(ids[0], path, "post_processor " + one_line(name));
      spec->add_bos = true;
    }
  } else if (type != "ByteLevel") {
    fail("tokenizer ", path, ": post_processor ", type, " is not supported (expected TemplateProcessing, ByteLevel)");
  }
}

int first_known(const BpeSpec& spec, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    const auto it = spec.added.find(n);
    if (it != spec.added.end()) return it->second;
  }
  return -1;
}

BpeSpec json_spec(const std::string& path) {
  std::error_code ec;
  std::ifstream in(path, std::ios::binary);
  if (!std::filesystem::is_regular_file(path, ec) || !in) {
    fail("tokenizer ", path, ": cannot open file (missing, unreadable or not a regular file)");
  }
  std::stringstream buf;
  buf << in.rdbuf();
  BpeSpec spec;
  spec.name = path;
  try {
    const json root = parse_json(buf.str(), "tokenizer " + path);
    if (!root.is_object()) fail("tokenizer ", path, ": not a tokenizer.json (top level is not an object)");
    json_model(root.at("model"), path, &spec);
    if (root.contains("normalizer") && !root["normalizer"].is_null()) {
      fail("tokenizer ", path, ": normalizer ", type_of(root["normalizer"]), " is not supported (expected null)");
    }
    json_pre_tokenizer(root.contains("pre_tokenizer") ? root["pre_tokenizer"] : json(), path, &spec);
    const json dec = root.contains("decoder") ? root["decoder"] : json();
    if (type_of(dec) != "ByteLevel") {
      fail("tokenizer ", path, ": decoder ", dec.is_null() ? std::string("null") : type_of(dec),
           " is not supported (expected ByteLevel)");
    }
    json_place_tokens(root, path, &spec);
    json_post_processor(root.contains("post_processor") ? root["post_processor"] : json(), path, &spec);
  } catch (const json::exception& e) {
    fail("tokenizer ", path, ": not a valid tokenizer.json (", one_line(e.what(), 300), ")");
  }
  if (spec.bos >= int(spec.pieces.size())) fail("tokenizer ", path, ": BOS id ", spec.bos, " outside the vocabulary");
  if (spec.bos < 0) spec.bos = first_known(spec, {"<|begin_of_text|>", "<s>", "<|startoftext|>"});
  spec.eos = first_known(spec, {"<|end_of_text|>", "</s>", "<|endoftext|>"});
  return spec;
}

// ---- GGUF ----

BpeSpec gguf_spec(const EmbeddedVocab& v) {
  const std::string& name = v.source;
  BpeSpec spec;
  spec.name = name;
  if (v.model != "gpt2") fail("tokenizer of ", name, ": tokenizer.ggml.model \"", one_line(v.model), "\" is not gpt2");
  if (v.tokens.empty()) fail("tokenizer of ", name, ": tokenizer.ggml.tokens is empty");
  if (!v.token_types.empty() && v.token_types.size() != v.tokens.size()) {
    fail("tokenizer of ", name, ": tokenizer.ggml.token_type has ", v.token_types.size(), " entries, expected ",
         v.tokens.size());
  }
  if (v.pre == "smollm") {
    spec.patterns = {kDigitPattern, kGpt2Pattern};
  } else if (v.pre == "llama-bpe") {
    spec.patterns = {kLlama3Pattern};
    spec.ignore_merges = true;  // as llama.cpp does for this pre-tokenizer (and Llama 3's tokenizer.json)
  } else if (v.pre == "gpt2" || v.pre == "gpt-2" || v.pre == "default" || v.pre.empty()) {  // "gpt-2": llama.cpp's name
    spec.patterns = {kGpt2Pattern};
  } else {
    fail("tokenizer of ", name, ": tokenizer.ggml.pre \"", one_line(v.pre),
         "\" is not supported (expected smollm, llama-bpe, gpt-2, gpt2 or default)");
  }
  spec.pieces = v.tokens;
  spec.special.assign(v.tokens.size(), false);
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const int type = v.token_types.empty() ? 1 : v.token_types[id];
    if (type == 3) {  // control: a special added token
      spec.special[id] = true;
      spec.added[v.tokens[id]] = int(id);
    } else if (type == 4) {  // user-defined: a non-special added token
      spec.added[v.tokens[id]] = int(id);
    } else {
      spec.model_vocab.emplace(v.tokens[id], int(id));  // a repeated spelling keeps its first id
    }
  }
  for (size_t rank = 0; rank < v.merges.size(); ++rank) {
    const std::string& m = v.merges[rank];
    const size_t sp = m.find(' ');
    if (sp == std::string::npos) fail("tokenizer of ", name, ": merge ", rank, " \"", one_line(m), "\" has no space");
    spec.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  const int n = int(v.tokens.size());
  const auto id_or_none = [&](int id, const char* what) {
    if (id >= n) fail("tokenizer of ", name, ": ", what, " id ", id, " outside the vocabulary of ", n);
    return id < 0 ? -1 : id;
  };
  spec.bos = id_or_none(v.bos_id, "BOS");
  spec.eos = id_or_none(v.eos_id, "EOS");
  spec.add_bos = v.add_bos;
  return spec;
}

}  // namespace

std::unique_ptr<Tokenizer> load_bpe_json(const std::string& path) {
  return std::make_unique<BpeTokenizer>(json_spec(path));
}

std::unique_ptr<Tokenizer> make_bpe_tokenizer(const EmbeddedVocab& vocab) {
  return std::make_unique<BpeTokenizer>(gguf_spec(vocab));
}

EmbeddedVocab bpe_json_vocab(const std::string& path) {
  const BpeSpec spec = json_spec(path);
  EmbeddedVocab v;
  v.source = path;
  v.model = "gpt2";
  // The pre-tokenizer names gguf_spec maps back to exactly these split stages.
  using Patterns = std::vector<std::string>;
  if (spec.patterns == Patterns{kDigitPattern, kGpt2Pattern} && !spec.ignore_merges) {
    v.pre = "smollm";
  } else if (spec.patterns == Patterns{kLlama3Pattern} && spec.ignore_merges) {
    v.pre = "llama-bpe";
  } else if (spec.patterns == Patterns{kGpt2Pattern} && !spec.ignore_merges) {
    v.pre = "gpt-2";
  } else {
    fail("tokenizer ", path, ": its pre-tokenizer (", spec.patterns.size(), " split stages", spec.ignore_merges ?
         ", ignore_merges" : "", ") has no GGUF name (known: smollm, llama-bpe, gpt-2)");
  }
  for (size_t id = 0; id < spec.pieces.size(); ++id) {
    const std::string& p = spec.pieces[id];
    if (p.empty()) {  // an id nothing uses
      v.tokens.push_back("[PAD" + std::to_string(id) + "]");
      v.token_types.push_back(5);
      continue;
    }
    v.tokens.push_back(p);
    const auto added = spec.added.find(p);
    const bool is_added = added != spec.added.end() && added->second == int(id);
    v.token_types.push_back(is_added ? (spec.special[id] ? 3 : 4) : 1);
  }
  for (const auto& [a, b] : spec.merges) v.merges.push_back(a + " " + b);
  v.bos_id = spec.bos;
  v.eos_id = spec.eos;
  v.unk_id = spec.unk;
  v.add_bos = spec.add_bos;
  return v;
}

}  // namespace llm
