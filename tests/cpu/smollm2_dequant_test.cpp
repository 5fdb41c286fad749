// The default model, SmolLM2-135M-Instruct (Q4_1 GGUF, scripts/fetch-model.sh), against the gguf Python package: every
// quantized tensor of the real file (Q4_1 x 210, Q8_0 x 1) dequantizes exactly as gguf.quants.dequantize does
// (tests/data/smollm2_dequant_refs.json, written by tools/gguf_dequant_refs.py), bit for bit, through each of our
// paths: the CPU reference dequantizer over the file's blocks, the loaded model's tensors (what the CPU path reads),
// and the prepacked layout the GPU kernels read (pack_quant -> unpack_quant). The file is the one the references,
// scripts/fetch-model.sh and the README name. About 135M weights: a few seconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"  // f32_to_bits
#include "default_model_util.h"  // LLM_REQUIRE_SMOLLM2, smollm2_path
#include "gguf_refs_util.h"
#include "models/gguf.h"
#include "models/model.h"
#include "models/quant.h"
#include "sha256_util.h"

namespace {

using llm::GgmlQuantType;
using llm_test::sha_of;

const nlohmann::json& refs() {
  static const nlohmann::json j =
      llm_test::read_source_json("tests/data/smollm2_dequant_refs.json", "tools/gguf_dequant_refs.py");
  return j;
}

// The sha256 scripts/fetch-model.sh checks the download against (its `readonly sha=` line).
std::string fetch_script_sha256() {
  std::ifstream f(std::string(LLM_SOURCE_DIR) + "/scripts/fetch-model.sh");
  const std::string key = "readonly sha=";
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key, 0) == 0) return line.substr(key.size());
  return "";
}

// Index of the first float whose bits differ between a and b (-1: none; the size when the sizes differ).
int64_t first_bit_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return int64_t(std::min(a.size(), b.size()));
  if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0) return -1;
  for (size_t i = 0; i < a.size(); ++i)
    if (llm::f32_to_bits(a[i]) != llm::f32_to_bits(b[i])) return int64_t(i);
  return -1;
}

TEST(SmolLM2Dequant, TheFileIsTheOneTheReferencesDescribe) {
  LLM_REQUIRE_SMOLLM2();
  const llm::GgufFile f = llm::open_gguf(llm_test::smollm2_path());
  const auto& r = refs();
  const std::string sha = llm_test::sha256_hex(f.mapping->data(), f.mapping->size());
  EXPECT_EQ(sha, r.at("file_sha256").get<std::string>())
      << "the default model changed without tools/gguf_dequant_refs.py";
  EXPECT_EQ(sha, fetch_script_sha256()) << "scripts/fetch-model.sh checks another file";
  EXPECT_EQ(sha, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53");  // as the README says
  std::map<std::string, int> types;
  size_t quantized = 0;
  for (const auto& [name, t] : f.tensors) {
    if (!llm::is_ggml_quant_type(t.type)) {  // the norms: F32, not part of the references
      EXPECT_FALSE(r.at("tensors").contains(name)) << name;
      continue;
    }
    SCOPED_TRACE(name);
    ++quantized;
    ASSERT_TRUE(r.at("tensors").contains(name));
    llm_test::expect_gguf_tensor_is_the_reference_one(t, r.at("tensors").at(name));
    types[llm::ggml_type_name(t.type)]++;
  }
  EXPECT_EQ(quantized, r.at("tensors").size());
  EXPECT_EQ(types, (r.at("type_counts").get<std::map<std::string, int>>()));
  // 30 layers x 7 projections in Q4_1, the (tied) embedding in Q8_0; 61 F32 norms besides.
  EXPECT_EQ(types, (std::map<std::string, int>{{"Q4_1", 210}, {"Q8_0", 1}}));
  EXPECT_EQ(f.tensors.size(), quantized + 61);
}

TEST(SmolLM2Dequant, EveryQuantizedTensorDequantizesExactlyAsTheGgufPackage) {
  LLM_REQUIRE_SMOLLM2();
  const llm::GgufFile f = llm::open_gguf(llm_test::smollm2_path());
  const llm::Model m = llm::load_gguf(llm_test::smollm2_path());
  const std::map<std::string, const llm::HostTensor*> loaded = llm_test::tensors_by_name(m);
  ASSERT_EQ(loaded.size(), f.tensors.size());  // tied: the head is token_embd.weight
  int64_t weights = 0;
  for (const auto& [name, e] : refs().at("tensors").items()) {
    ASSERT_TRUE(f.tensors.count(name)) << name;
    const llm::GgufTensor& t = f.tensors.at(name);
    SCOPED_TRACE(name + " (" + llm::ggml_type_name(t.type) + ")");
    ASSERT_TRUE(llm::is_ggml_quant_type(t.type));
    ASSERT_EQ(t.dims.size(), 2u);
    // 1. the CPU reference dequantizer over the file's blocks: the gguf package's values, by hash and samples
    const std::vector<float> y = llm_test::dequant_gguf_tensor(t, t.data);
    weights += int64_t(y.size());
    EXPECT_EQ(sha_of(y), e.at("dequant_sha256").get<std::string>());
    EXPECT_EQ(llm_test::sample_mismatches(e, y), 0);
    // 2. the loaded model's tensor, kept as its blocks and dequantized on reading: the same bits
    ASSERT_TRUE(loaded.count(name));
    const llm::HostTensor& h = *loaded.at(name);
    EXPECT_EQ(h.quant, t.type);
    EXPECT_EQ(h.rows, int64_t(t.dims[1]));
    EXPECT_EQ(h.cols, int64_t(t.dims[0]));
    EXPECT_EQ(first_bit_difference(h.to_f32(), y), -1);
    // 3. the prepacked layout the GPU kernels read, unpacked: the same bits
    const llm::PackedQuant p =
        llm::pack_quant(t.data, GgmlQuantType(t.type), int64_t(t.dims[1]), int64_t(t.dims[0]), name);
    EXPECT_EQ(first_bit_difference(llm::unpack_quant(p), y), -1);
  }
  EXPECT_EQ(weights, int64_t(49152) * 576 + 30 * (3 * 576 * 1536 + 2 * 576 * 576 + 2 * 192 * 576));
}

TEST(SmolLM2Dequant, OneFlippedBitFailsTheComparison) {
  // Negative control: the comparisons above see one flipped code bit (by hash, and in the prepacked layout at the
  // right weight) and one flipped scale bit of each type (a small Q4_1 projection and the Q8_0 embedding), and a
  // wrong sampled value.
  LLM_REQUIRE_SMOLLM2();
  const llm::GgufFile f = llm::open_gguf(llm_test::smollm2_path());
  for (const char* name : {"blk.0.attn_k.weight", "token_embd.weight"}) {
    SCOPED_TRACE(name);
    const llm::GgufTensor& t = f.tensors.at(name);
    const auto& e = refs().at("tensors").at(name);
    const std::string want = e.at("dequant_sha256");
    std::vector<uint8_t> bytes(t.data, t.data + t.nbytes);
    const std::vector<float> y = llm_test::dequant_gguf_tensor(t, bytes.data());
    ASSERT_EQ(sha_of(y), want);
    const size_t block = llm::ggml_quant_block_bytes(GgmlQuantType(t.type));  // Q4_1: d, m, 16 code bytes; Q8_0: d, 32
    std::vector<uint8_t> bad = bytes;
    bad[7 * block + block - 3] ^= 0x10;  // a code bit of block 7: weight 29 of it in both types (Q4_1: a high nibble)
    EXPECT_NE(sha_of(llm_test::dequant_gguf_tensor(t, bad.data())), want);
    const llm::PackedQuant p =
        llm::pack_quant(bad.data(), GgmlQuantType(t.type), int64_t(t.dims[1]), int64_t(t.dims[0]), name);
    EXPECT_EQ(first_bit_difference(llm::unpack_quant(p), y), int64_t(7 * 32 + 29));  // row 0: 18 blocks a row
    bad = bytes;
    bad[9 * block] ^= 0x01;  // the lowest mantissa bit of block 9's fp16 scale d
    EXPECT_NE(sha_of(llm_test::dequant_gguf_tensor(t, bad.data())), want);
    nlohmann::json wrong = e;
    std::string hex = wrong["samples"][1][1];
    hex[1] = hex[1] == '0' ? '1' : '0';  // the lowest mantissa bit of sampled value 1
    wrong["samples"][1][1] = hex;
    EXPECT_EQ(llm_test::sample_mismatches(wrong, y), 1);
  }
}

}  // namespace
