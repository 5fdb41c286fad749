// Reader for GGUF version 3 files: "GGUF", uint32 version, uint64 tensor count, uint64 key-value count, the
// key-values (string key, uint32 type, value), the tensor infos (name, uint32 n_dims, uint64 dims innermost first,
// uint32 ggml type, uint64 offset into the data section), then the data section at the next multiple of
// general.alignment (default 32). Everything little-endian, the file memory-mapped.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/mapped_file.h"

namespace llm {

// GGML tensor types this reader knows the byte size of (ids as in ggml.h).
enum class GgmlType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q8_0 = 8, BF16 = 30 };

// GGUF metadata value types (the uint32 after each key, and an array's element type); shared by the reader here and
// the writer (models/gguf_writer.h).
namespace gguf_value {
enum Type : uint32_t { U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 };
}  // namespace gguf_value

constexpr uint64_t kGgufDefaultAlignment = 32;  // general.alignment when the key is absent

// "Q6_K" for any ggml type id (known or not), for messages.
std::string ggml_type_name(uint32_t type);

// A metadata value. Scalars keep their value; arrays of scalars or strings keep their elements (the tokenizer's
// tokens, scores, token types and merges); arrays of arrays keep only their element type and length.
struct GgufValue {
  uint32_t type = 0;          // GGUF value type: 0 u8 .. 12 f64 (4 u32, 6 f32, 7 bool, 8 string, 9 array)
  uint64_t u = 0;             // unsigned ints and bool
  int64_t i = 0;              // signed ints (unsigned ones too, when they fit)
  double f = 0;               // floats
  std::string s;              // strings
  uint32_t array_type = 0;    // arrays
  uint64_t array_len = 0;
  std::vector<std::string> strings;  // elements of a string array
  std::vector<int64_t> ints;         // elements of an integer or bool array (u64 above INT64_MAX -> -1)
  std::vector<double> floats;        // elements of a float array
};

struct GgufTensor {
  std::string name;
  std::vector<uint64_t> dims;  // innermost (contiguous) first: a [rows, cols] matrix is {cols, rows}
  uint32_t type = 0;           // ggml type id
  uint64_t offset = 0;         // within the data section
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
};

struct GgufFile {
  std::string path;
  std::shared_ptr<const MappedFile> mapping;  // keeps every `data` pointer alive
  uint32_t version = 0;
  uint64_t alignment = kGgufDefaultAlignment;
  std::map<std::string, GgufValue> kv;
  std::map<std::string, GgufTensor> tensors;

  const GgufValue* find_kv(const std::string& key) const {
    auto it = kv.find(key);
    return it == kv.end() ? nullptr : &it->second;
  }
  const GgufTensor* find(const std::string& name) const {
    auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
  }
  // Integer / float metadata; throws llm::Error naming the file and key when missing or of another kind.
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
};

// Maps and validates `path`: every read bounds-checked, counts and lengths capped by what the file can hold,
// tensor data in range and aligned, sizes matching types and dims. Tensors of types outside GgmlType are
// rejected naming the type. Throws llm::Error with a one-line message naming the file (and key or tensor).
GgufFile open_gguf(const std::string& path);

}  // namespace llm
