// A minimal GGUF v3 writer for tests: metadata key-values (scalars, string/int32/float arrays) and tensors.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace llm_test {

template <typename T>
void gguf_put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));  // little-endian hosts only, like the reader
}
inline void gguf_put_str(std::string& s, const std::string& v) {
  gguf_put<uint64_t>(s, v.size());
  s += v;
}

struct GgufTensorSpec {
  std::string name;
  std::vector<uint64_t> dims;  // innermost first
  uint32_t type;               // ggml type id
  std::string bytes;
  int64_t offset_override = -1;
};

struct GgufWriter {
  // GGUF metadata value types.
  enum : uint32_t { kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9 };

  uint32_t version = 3;
  uint64_t alignment = 32;
  std::string kv;
  uint64_t n_kv = 0;
  std::vector<GgufTensorSpec> tensors;

  void u32(const std::string& key, uint32_t v) { header(key, kU32), gguf_put(kv, v); }
  void f32(const std::string& key, float v) { header(key, kF32), gguf_put(kv, v); }
  void boolean(const std::string& key, bool v) { header(key, kBool), gguf_put<uint8_t>(kv, v ? 1 : 0); }
  void str(const std::string& key, const std::string& v) { header(key, kString), gguf_put_str(kv, v); }
  void str_array(const std::string& key, const std::vector<std::string>& v) {
    array_header(key, kString, v.size());
    for (const auto& s : v) gguf_put_str(kv, s);
  }
  void i32_array(const std::string& key, const std::vector<int32_t>& v) {
    array_header(key, kI32, v.size());
    for (int32_t x : v) gguf_put(kv, x);
  }
  void f32_array(const std::string& key, const std::vector<float>& v) {
    array_header(key, kF32, v.size());
    for (float x : v) gguf_put(kv, x);
  }
  void header(const std::string& key, uint32_t type) {
    gguf_put_str(kv, key);
    gguf_put(kv, type);
    ++n_kv;
  }
  void array_header(const std::string& key, uint32_t elem_type, size_t n) {
    header(key, kArray);
    gguf_put(kv, elem_type);
    gguf_put<uint64_t>(kv, n);
  }
  GgufTensorSpec* find(const std::string& name) {
    for (auto& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
  void erase(const std::string& name) {
    for (size_t i = 0; i < tensors.size(); ++i)
      if (tensors[i].name == name) tensors.erase(tensors.begin() + long(i));
  }

  std::string build() const {
    std::string out = "GGUF";
    gguf_put(out, version);
    gguf_put<uint64_t>(out, tensors.size());
    gguf_put<uint64_t>(out, n_kv);
    out += kv;
    std::string data;
    for (const auto& t : tensors) {
      while (data.size() % alignment) data += '\0';
      gguf_put_str(out, t.name);
      gguf_put<uint32_t>(out, uint32_t(t.dims.size()));
      for (uint64_t d : t.dims) gguf_put(out, d);
      gguf_put(out, t.type);
      gguf_put<uint64_t>(out, t.offset_override >= 0 ? uint64_t(t.offset_override) : data.size());
      data += t.bytes;
    }
    while (out.size() % alignment) out += '\0';
    return out + data;
  }
};

}  // namespace llm_test
