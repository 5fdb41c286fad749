// Comparing a GGUF file's tensors with the gguf Python package's dequantization of them (gguf.quants.dequantize), as
// tools/gguf_dequant_refs.py's tensor_entry() records it per tensor: "type", "type_id", "dims" (innermost first),
// "raw_sha256", "dequant_sha256" (float32 little-endian) and "samples" ([index, float32 bytes as hex]). Used by
// tests/cpu/tiny_q4km_test.cpp (tests/data/tiny_q4km_refs.json) and tests/cpu/smollm2_dequant_test.cpp
// (tests/data/smollm2_dequant_refs.json). Test code only.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"  // f32_to_bits
#include "models/gguf.h"
#include "models/model.h"
#include "models/quant.h"
#include "sha256_util.h"

namespace llm_test {

// A JSON file of the source tree (path relative to it); `writer` names what makes it, for the message when missing.
inline nlohmann::json read_source_json(const std::string& relative, const std::string& writer) {
  std::ifstream f(std::string(LLM_SOURCE_DIR) + "/" + relative);
  if (!f) throw std::runtime_error(relative + " missing (" + writer + " writes it)");
  return nlohmann::json::parse(f);
}

inline std::string sha_of(const std::vector<float>& v) { return sha256_hex(v.data(), v.size() * sizeof(float)); }

// The bits of a float32 from the hex of its little-endian bytes (Python's numpy float32 tobytes().hex()).
inline uint32_t bits_from_hex(const std::string& hex) {
  if (hex.size() != 8) throw std::runtime_error("not the hex of 4 bytes: " + hex);
  uint32_t u = 0;
  for (int i = 0; i < 4; ++i) u |= uint32_t(std::stoul(hex.substr(size_t(2 * i), 2), nullptr, 16)) << (8 * i);
  return u;
}

// Count of the reference's sampled values whose bits differ from `v`.
inline int sample_mismatches(const nlohmann::json& ref, const std::vector<float>& v) {
  int bad = 0;
  for (const auto& s : ref.at("samples")) {
    const size_t i = s.at(0);
    bad += i >= v.size() || llm::f32_to_bits(v[i]) != bits_from_hex(s.at(1));
  }
  return bad;
}

// Our dequantization of one GGUF tensor's bytes (`data`: its own or a modified copy): F32 as stored, quantized types
// through models/quant.h's dequantize_blocks (the CPU reference dequantizer).
inline std::vector<float> dequant_gguf_tensor(const llm::GgufTensor& t, const uint8_t* data) {
  uint64_t n = 1;
  for (uint64_t d : t.dims) n *= d;
  std::vector<float> out(size_t(n), 0.0f);
  if (t.type == 0) {
    std::memcpy(out.data(), data, out.size() * 4);
  } else {
    const auto q = llm::GgmlQuantType(t.type);
    llm::dequantize_blocks(q, data, int64_t(n) / llm::ggml_quant_block_weights(q), out.data());
  }
  return out;
}

// The tensor as the file has it is the one the reference describes: type, dims and raw bytes.
inline void expect_gguf_tensor_is_the_reference_one(const llm::GgufTensor& t, const nlohmann::json& ref) {
  EXPECT_EQ(t.type, ref.at("type_id").get<uint32_t>());
  EXPECT_EQ(llm::ggml_type_name(t.type), ref.at("type").get<std::string>());
  EXPECT_EQ(t.dims, ref.at("dims").get<std::vector<uint64_t>>());
  EXPECT_EQ(sha256_hex(t.data, t.nbytes), ref.at("raw_sha256").get<std::string>());
}

// Every tensor of a loaded model by its GGUF name (a tied head is the embedding, one entry).
inline std::map<std::string, const llm::HostTensor*> tensors_by_name(const llm::Model& m) {
  std::map<std::string, const llm::HostTensor*> out;
  const llm::ModelWeights& w = m.weights;
  for (const llm::HostTensor* t : {&w.embedding, &w.final_norm, &w.head}) out[t->name] = t;
  for (const llm::LayerWeights& l : w.layers)
    for (const llm::HostTensor* t :
         {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down})
      out[t->name] = t;
  return out;
}

}  // namespace llm_test
