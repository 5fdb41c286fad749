// Safetensors parsing and validation; see safetensors.h for the layout.
#include "models/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/json_parse.h"

namespace llm {

using nlohmann::json;

std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  const size_t shown = std::min<size_t>(shape.size(), 16);  // a file's shape may have thousands of entries
  os << '[';
  for (size_t i = 0; i < shown; ++i) os << (i ? ", " : "") << shape[i];
  if (shown < shape.size()) os << ", ... (" << shape.size() << " dimensions)";
  os << ']';
  return os.str();
}

namespace {

bool parse_dtype(const std::string& s, DType* out) {
  if (s == "F32") *out = DType::F32;
  else if (s == "F16") *out = DType::F16;
  else if (s == "BF16") *out = DType::BF16;
  else return false;
  return true;
}

// Reads a JSON integer that must be non-negative; `what` names it in the message.
uint64_t non_negative(const json& v, const std::string& where, const char* what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return uint64_t(v.get<int64_t>());
  fail(where, ": ", what, " must be a non-negative integer, found ", printable(v.dump()));
}

SafetensorsTensor parse_entry(const std::string& path, const std::string& name, const json& e,
                              const uint8_t* data_start, uint64_t data_size, uint64_t* begin_out) {
  const std::string where = path + ": tensor " + printable(name);
  if (!e.is_object()) fail(where, ": header entry must be an object, found ", e.type_name());
  if (!e.contains("dtype") || !e["dtype"].is_string()) fail(where, ": missing or non-string 'dtype'");
  if (!e.contains("shape") || !e["shape"].is_array()) fail(where, ": missing or non-array 'shape'");
  if (!e.contains("data_offsets") || !e["data_offsets"].is_array() || e["data_offsets"].size() != 2)
    fail(where, ": 'data_offsets' must be an array [begin, end]");

  SafetensorsTensor t;
  t.name = name;
  const std::string dt = e["dtype"].get<std::string>();
  if (!parse_dtype(dt, &t.dtype)) fail(where, ": unsupported dtype ", printable(dt), " (supported: F32, F16, BF16)");

  uint64_t numel = 1;
  for (const json& d : e["shape"]) {
    uint64_t n = non_negative(d, where, "shape entry");
    // Overflow guard: no real tensor has 2^48 elements.
    if (n > (uint64_t(1) << 48) || (n && numel > (uint64_t(1) << 48) / n)) fail(where, ": shape is implausibly large");
    numel *= n;
    t.shape.push_back(int64_t(n));
  }
  uint64_t begin = non_negative(e["data_offsets"][0], where, "data_offsets[0]");
  uint64_t end = non_negative(e["data_offsets"][1], where, "data_offsets[1]");
  if (begin > end) fail(where, ": data_offsets begin ", begin, " > end ", end);
  if (end > data_size)
    fail(where, ": data_offsets [", begin, ", ", end, ") run past the end of the data (", data_size, " bytes)");
  uint64_t expected = numel * dtype_size(t.dtype);
  if (end - begin != expected)
    fail(where, ": ", end - begin, " bytes for shape ", shape_string(t.shape), " ", dt, ", expected ", expected);
  t.data = data_start + begin;
  t.nbytes = size_t(expected);
  *begin_out = begin;
  return t;
}

}  // namespace

SafetensorsFile open_safetensors(const std::string& path) {
  SafetensorsFile f;
  f.path = path;
  f.mapping = MappedFile::open(path);
  const uint8_t* base = f.mapping->data();
  const uint64_t size = f.mapping->size();
  if (size < 8) fail(path, ": too short for a safetensors file (", size, " bytes)");
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | base[i];
  if (hlen > size - 8)
    fail(path, ": header length ", hlen, " runs past the end of the file (", size, " bytes); not a safetensors file?");

  json header;
  try {
    header = parse_json(base + 8, base + 8 + hlen, path + ": header");
  } catch (const json::exception& e) {
    fail(path, ": header is not valid JSON (", printable(e.what(), 300), ")");
  }
  if (!header.is_object()) fail(path, ": header must be a JSON object, found ", header.type_name());

  const uint8_t* data_start = base + 8 + hlen;
  const uint64_t data_size = size - 8 - hlen;
  std::vector<std::pair<uint64_t, const SafetensorsTensor*>> spans;  // (begin, tensor) for the overlap check
  std::map<std::string, uint64_t> begins;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    uint64_t begin = 0;
    SafetensorsTensor t = parse_entry(path, it.key(), it.value(), data_start, data_size, &begin);
    begins[t.name] = begin;
    f.tensors.emplace(t.name, std::move(t));
  }
  for (const auto& kv : f.tensors) spans.emplace_back(begins[kv.first], &kv.second);
  std::sort(spans.begin(), spans.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  // Sorted by start, a tensor overlaps an earlier one iff it starts before the furthest end seen so far.
  const SafetensorsTensor* furthest = nullptr;
  uint64_t furthest_end = 0;
  for (const auto& [begin, t] : spans) {
    if (t->nbytes == 0) continue;  // occupies no bytes
    if (furthest && begin < furthest_end)
      fail(path, ": tensors ", printable(furthest->name), " and ", printable(t->name), " overlap (bytes [",
           begins[furthest->name], ", ", furthest_end, ") and [", begin, ", ", begin + t->nbytes, "))");
    if (begin + t->nbytes > furthest_end) furthest_end = begin + t->nbytes, furthest = t;
  }
  return f;
}

}  // namespace llm
