// Reader for one .safetensors file: 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end)}} (offsets relative to the byte after the header), then data.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "models/mapped_file.h"

namespace llm {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;   // as stored (row-major, outermost first)
  const void* data = nullptr;   // points into the mapping
  size_t nbytes = 0;
};

struct SafetensorsFile {
  std::string path;
  std::shared_ptr<const MappedFile> mapping;    // keeps every `data` pointer alive
  std::map<std::string, SafetensorsTensor> tensors;

  const SafetensorsTensor* find(const std::string& name) const {
    auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
  }
};

// Maps and validates `path` (header bounds, JSON, dtypes F32/F16/BF16, offsets in range and not overlapping,
// byte counts matching shapes). Throws llm::Error with a one-line message naming the file (and tensor).
SafetensorsFile open_safetensors(const std::string& path);

// "[4096, 1024]": shapes in messages.
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace llm
