// Safetensors reader: good files with every supported dtype, and each kind of malformed file.
#include "models/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "models/mapped_file.h"
#include "models_test_util.h"

namespace {

using llm_test::expect_error;
using llm_test::safetensors_bytes;
using llm_test::TempDir;

std::string bytes_of(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

TEST(Safetensors, ReadsF32F16Bf16AndIgnoresMetadata) {
  TempDir tmp;
  const float f32[6] = {1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, -7.0f};
  const uint16_t f16[2] = {0x3c00, 0xc000};    // 1.0, -2.0
  const uint16_t bf16[3] = {0x3f80, 0x4040, 0xbf00};  // 1.0, 3.0, -0.5
  std::string data = bytes_of(f32, 24) + bytes_of(f16, 4) + bytes_of(bf16, 6);
  std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"F16","shape":[2],"data_offsets":[24,28]},)"
      R"("c":{"dtype":"BF16","shape":[3],"data_offsets":[28,34]}})";
  llm_test::write_file(tmp.path() / "m.safetensors", safetensors_bytes(header, data));

  llm::SafetensorsFile f = llm::open_safetensors(tmp.str("m.safetensors"));
  ASSERT_EQ(f.tensors.size(), 3u);
  EXPECT_EQ(f.find("__metadata__"), nullptr);
  const auto* a = f.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, llm::DType::F32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->nbytes, 24u);
  EXPECT_EQ(std::memcmp(a->data, f32, 24), 0);
  EXPECT_EQ(static_cast<const uint8_t*>(a->data), f.mapping->data() + 8 + header.size());
  const auto* b = f.find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, llm::DType::F16);
  EXPECT_EQ(std::memcmp(b->data, f16, 4), 0);
  const auto* c = f.find("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->dtype, llm::DType::BF16);
  EXPECT_EQ(c->shape, (std::vector<int64_t>{3}));
  uint16_t c1;
  std::memcpy(&c1, static_cast<const uint8_t*>(c->data) + 2, 2);
  EXPECT_EQ(llm::bf16_to_f32(c1), 3.0f);
}

TEST(Safetensors, DataOutlivesTheFileObject) {
  TempDir tmp;
  const float v[2] = {4.0f, 5.0f};
  llm_test::write_file(tmp.path() / "m.safetensors",
                       safetensors_bytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", bytes_of(v, 8)));
  std::shared_ptr<const llm::MappedFile> keep;
  const void* p = nullptr;
  {
    llm::SafetensorsFile f = llm::open_safetensors(tmp.str("m.safetensors"));
    keep = f.mapping;
    p = f.find("x")->data;
  }
  float got[2];
  std::memcpy(got, p, 8);
  EXPECT_EQ(got[1], 5.0f);
}

// Each malformed file: the error is an llm::Error naming the file and what is wrong.
struct BadCase {
  const char* what;
  std::string header;
  size_t data_bytes;
  std::vector<std::string> needles;
};

TEST(Safetensors, RejectsMalformedHeadersNamingFileAndTensor) {
  const std::vector<BadCase> cases = {
      {"non-JSON header", "{not json", 0, {"not valid JSON"}},
      {"non-object header", "[1, 2, 3]", 0, {"must be a JSON object"}},
      {"entry not an object", R"({"w": 5})", 0, {"tensor w", "must be an object"}},
      {"unknown dtype", R"({"w":{"dtype":"Q7","shape":[2],"data_offsets":[0,2]}})", 2, {"tensor w", "Q7"}},
      {"unsupported dtype", R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8, {"tensor w", "I64"}},
      {"missing offsets", R"({"w":{"dtype":"F32","shape":[1]}})", 4, {"tensor w", "data_offsets"}},
      {"negative dim", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, {"tensor w", "shape"}},
      {"offsets past end", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8,
       {"tensor w", "past the end"}},
      {"begin > end", R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 8, {"tensor w", "begin 8 > end 4"}},
      {"byte count vs shape", R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}})", 8,
       {"tensor w", "8 bytes", "[2, 3]", "expected 12"}},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, {"tensors a and b overlap"}},
      {"overlap across an empty tensor",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[6,10]}})",
       10, {"tensors a and b overlap"}},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.what);
    TempDir tmp;
    const std::string path = tmp.str("bad.safetensors");
    llm_test::write_file(path, safetensors_bytes(c.header, std::string(c.data_bytes, '\0')));
    std::vector<std::string> needles = c.needles;
    needles.push_back(path);
    try {
      llm::open_safetensors(path);
      ADD_FAILURE() << "accepted: " << c.what;
    } catch (const llm::Error& e) {
      const std::string msg = e.what();
      for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    }
  }
}

TEST(Safetensors, RejectsBadFilesNamingThePath) {
  TempDir tmp;
  expect_error([&] { llm::open_safetensors(tmp.str("missing.safetensors")); }, {tmp.str("missing.safetensors")});
  llm_test::write_file(tmp.path() / "empty.safetensors", "");
  expect_error([&] { llm::open_safetensors(tmp.str("empty.safetensors")); }, {tmp.str("empty.safetensors"), "empty"});
  llm_test::write_file(tmp.path() / "short.safetensors", "abc");
  expect_error([&] { llm::open_safetensors(tmp.str("short.safetensors")); },
               {tmp.str("short.safetensors"), "too short"});
  // Header length larger than the file: e.g. a text file or a truncated download.
  std::string bytes = safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "abcd");
  bytes[0] = char(0xff), bytes[1] = char(0xff);
  llm_test::write_file(tmp.path() / "long.safetensors", bytes);
  expect_error([&] { llm::open_safetensors(tmp.str("long.safetensors")); },
               {tmp.str("long.safetensors"), "header length", "past the end"});
  expect_error([&] { llm::open_safetensors(tmp.str()); }, {tmp.str(), "not a regular file"});
}

}  // namespace
