// Hostile numbers on the GPU path (issue 11): the sampling kernel flags NaN/Inf logits in the id it already writes
// (kSampleNonFinite), the CUDA engine turns that into the "step N: the logits hold NaN or Inf" error, sampling never
// returns an id past the tokenizer's vocabulary when the embedding is padded, and the default context is capped at
// kDefaultCtxCap whatever the model claims. Each test skips without a CUDA device.
#include <gtest/gtest.h>

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "../cpu/hostile_model_util.h"
#include "core/error.h"
#include "engine/backend.h"
#include "engine/cuda_backend.h"
#include "kernels/ops/ops.h"
#include "models/model.h"

namespace fs = std::filesystem;
using namespace llm;

namespace {

#define REQUIRE_GPU() \
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device"

// sample_device on host logits, the first `vocab` of them candidates; returns the id written (or the flag).
int sample_on_device(const std::vector<float>& logits, int vocab, float temperature, int top_k, float top_p,
                     float u) {
  float* d_logits = nullptr;
  int* d_out = nullptr;
  void* scratch = nullptr;
  EXPECT_EQ(cudaMalloc(&d_logits, logits.size() * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&d_out, sizeof(int)), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&scratch, sample_scratch_bytes(int(logits.size()))), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d_logits, logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemset(d_out, 0xFF, sizeof(int)), cudaSuccess);  // -1: "not written"
  sample_device(d_logits, vocab, temperature, top_k, top_p, u, d_out, scratch, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  int id = -1;
  EXPECT_EQ(cudaMemcpy(&id, d_out, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_logits);
  cudaFree(d_out);
  cudaFree(scratch);
  return id;
}

std::vector<float> ramp(int n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = 0.01f * float(i % 97);
  return v;
}

TEST(HostileGpu, SampleKernelFlagsNonFiniteLogits) {
  REQUIRE_GPU();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int n : {1, 1000, 128256}) {
    for (int where : {0, n / 2, n - 1}) {
      for (float bad : {nan, inf, -inf}) {
        std::vector<float> l = ramp(n);
        l[size_t(where)] = bad;
        SCOPED_TRACE("n " + std::to_string(n) + " at " + std::to_string(where) + " value " + std::to_string(bad));
        EXPECT_EQ(sample_on_device(l, n, 0.0f, 0, 1.0f, 0.5f), kSampleNonFinite);   // greedy
        EXPECT_EQ(sample_on_device(l, n, 0.8f, 40, 0.95f, 0.5f), kSampleNonFinite); // top-k / top-p
        EXPECT_EQ(sample_on_device(l, n, 1.0f, 0, 1.0f, 0.3f), kSampleNonFinite);   // full softmax
      }
    }
  }
  // Finite logits still give a real id.
  const std::vector<float> ok = ramp(1000);
  const int id = sample_on_device(ok, 1000, 0.0f, 0, 1.0f, 0.5f);
  EXPECT_EQ(id, 96);
}

TEST(HostileGpu, SampleKernelNeverLooksPastTheVocabulary) {
  REQUIRE_GPU();
  std::vector<float> l = ramp(600);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int i = 512; i < 600; ++i) l[size_t(i)] = i % 2 ? 100.0f : nan;  // padding: huge or NaN, never a candidate
  EXPECT_EQ(sample_on_device(l, 512, 0.0f, 0, 1.0f, 0.5f), 96);
  std::set<int> seen;
  for (int j = 0; j < 200; ++j) {
    const float u = (float(j) + 0.5f) / 200.0f;
    for (auto [t, k, p] : {std::tuple<float, int, float>{1.0f, 0, 1.0f}, {2.0f, 40, 0.95f}, {5.0f, 600, 1.0f}}) {
      const int id = sample_on_device(l, 512, t, k, p, u);
      ASSERT_GE(id, 0);
      ASSERT_LT(id, 512);
      seen.insert(id);
    }
  }
  EXPECT_GT(seen.size(), 10u);
}

class HostileEngine : public ::testing::Test {
 protected:
  std::string write(const llm_test::Llama2cSpec& spec, const std::string& name) {
    const fs::path dir = fs::temp_directory_path() / ("llm_hostile_gpu_" + std::to_string(getpid()));
    fs::create_directories(dir);
    dirs_.push_back(dir);
    const std::string bytes = llm_test::llama2c_bytes(spec);
    std::FILE* f = std::fopen((dir / name).c_str(), "wb");
    EXPECT_TRUE(f);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
    return (dir / name).string();
  }
  ~HostileEngine() override {
    std::error_code ec;
    for (const auto& d : dirs_) fs::remove_all(d, ec);
  }
  std::vector<fs::path> dirs_;
};

TEST_F(HostileEngine, NonFiniteLogitsStopTheRunNamingTheStep) {
  REQUIRE_GPU();
  llm_test::Llama2cSpec spec;
  spec.nan_final_norm = true;
  const Model m = load_llama2c(write(spec, "nan.bin"));
  BackendOptions bo;
  bo.device = "cuda";
  bo.ctx_size = 16;
  auto be = make_backend(m, bo);
  const int toks[2] = {1, 5};
  be->prefill(toks, 2, 0);  // the batched path
  for (float temp : {0.0f, 1.0f}) {
    SamplerParams p;
    p.temperature = temp;
    try {
      be->sample(p, 0);
      ADD_FAILURE() << "sampled from NaN logits";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(),
                   "step 0: the logits hold NaN or Inf (model weights or config produce non-finite values)");
    }
  }
  be->decode(7, 2);  // the graph path
  try {
    be->sample(SamplerParams{}, 3);
    ADD_FAILURE() << "sampled from NaN logits";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step 3: the logits hold NaN or Inf"), std::string::npos) << e.what();
  }
  // The persistent path: greedy samples inside the step's kernel, a temperature through the sample kernel.
  bo.persistent = true;
  auto pe = make_cuda_engine(m, bo);
  ASSERT_TRUE(pe->persistent());
  pe->prefill(toks, 2, 0);
  for (int pos = 2; pos < 4; ++pos)
    for (float temp : {0.0f, 1.0f}) {
      SamplerParams p;
      p.temperature = temp;
      pe->decode(7, pos);
      try {
        pe->sample(p, uint64_t(pos + 10));
        ADD_FAILURE() << "sampled from NaN logits (persistent, temperature " << temp << ")";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("step " + std::to_string(pos + 10) + ": the logits hold NaN or Inf"),
                  std::string::npos)
            << e.what();
      }
    }
}

TEST_F(HostileEngine, PaddedEmbeddingIsNeverSampledPast) {
  REQUIRE_GPU();
  llm_test::Llama2cSpec spec;  // 600 rows, the first 512 real
  const Model m = load_llama2c(write(spec, "padded.bin"));
  BackendOptions bo;
  bo.device = "cuda";
  bo.ctx_size = 16;
  const int first = 1;
  {
    auto be = make_backend(m, bo);  // control: without the limit the padding wins
    be->prefill(&first, 1, 0);
    EXPECT_GE(be->sample(SamplerParams{0.0f, 0, 1.0f, 1}, 0), 512);
  }
  bo.sample_vocab = 512;
  auto be = make_backend(m, bo);
  be->prefill(&first, 1, 0);
  const int greedy = be->sample(SamplerParams{0.0f, 0, 1.0f, 1}, 0);
  EXPECT_EQ(greedy % 7, 6) << greedy;  // a row with the highest real logit (BF16 GEMV order may break the tie)
  EXPECT_LT(greedy, 512);
  int tok = first;
  for (int pos = 1; pos < 16; ++pos) {
    be->decode(tok, pos);
    for (const SamplerParams& p : {SamplerParams{1.0f, 0, 1.0f, 7}, SamplerParams{2.0f, 40, 0.95f, 8}}) {
      tok = be->sample(p, uint64_t(pos));
      ASSERT_GE(tok, 0);
      ASSERT_LT(tok, 512) << "pos " << pos;
    }
  }
  // The persistent path's in-kernel greedy sample: the first of the real rows' tied maxima (rows i % 7 == 6 are
  // identical, so their logits are too), never a padding row.
  bo.persistent = true;
  auto pe = make_cuda_engine(m, bo);
  ASSERT_TRUE(pe->persistent());
  pe->prefill(&first, 1, 0);
  for (int pos = 1; pos < 8; ++pos) {
    pe->decode(first, pos);
    const std::vector<float> l = pe->logits();
    const int want = int(std::max_element(l.begin(), l.begin() + 512) - l.begin());
    EXPECT_EQ(want % 7, 6);
    EXPECT_EQ(pe->sample(SamplerParams{0.0f, 0, 1.0f, 1}, uint64_t(pos)), want) << "pos " << pos;
  }
}

TEST(HostileGpu, DefaultContextIsCapped) {
  REQUIRE_GPU();
  Model m = load_synthetic("tiny-gqa");
  m.config.max_seq_len = 1 << 24;  // a model that claims 16M positions
  BackendOptions bo;
  bo.device = "cuda";
  EXPECT_EQ(make_backend(m, bo)->ctx_size(), kDefaultCudaCtxCap);  // tiny-gqa's KV cache at 131,072 fits
  bo.ctx_size = 10000;
  EXPECT_EQ(make_backend(m, bo)->ctx_size(), 10000);
}

}  // namespace
