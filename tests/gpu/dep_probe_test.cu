// The dependency probe (measure/probes/dep_probe.h): its barriers must order every block's vector writes before every
// block's reads of the next stage (no stale reads), with and without weights, on awkward grids and vector sizes; and it
// refuses what cannot run by name.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "measure/probes/dep_probe.h"
#include "tests/gpu/device_test_util.h"

namespace llm {
namespace {

using gpu_test::DeviceBuffer;

struct Probe {
  DeviceBuffer<unsigned> counters{dep_probe_counter_words(200)};
  DeviceBuffer<float> vec{2 * kDepProbeMaxVector};
  DeviceBuffer<unsigned> errors{1};
  DeviceBuffer<uint4> weights{(size_t(64) << 20) / 16};
  DeviceBuffer<float> sink{4096};
  DepProbeBuffers b() {
    DepProbeBuffers r;
    r.counters = counters.get();
    r.vec = vec.get();
    r.errors = errors.get();
    r.weights = weights.get();
    r.weight_bytes = weights.size() * 16;
    r.sink = sink.get();
    return r;
  }
  // Runs c; returns the stale reads and checks every block's sink is finite.
  unsigned run(DepProbeConfig c) {
    c.stages = 200;
    CUDA_CHECK(cudaMemset(errors.get(), 0, 4));
    CUDA_CHECK(cudaMemset(weights.get(), 0x3c, weights.size() * 16));
    std::vector<float> poison(4096, NAN);
    CUDA_CHECK(cudaMemcpy(sink.get(), poison.data(), 4096 * 4, cudaMemcpyHostToDevice));
    dep_probe_launch(c, b(), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    unsigned stale = 0;
    CUDA_CHECK(cudaMemcpy(&stale, errors.get(), 4, cudaMemcpyDeviceToHost));
    std::vector<float> s(size_t(c.blocks));
    CUDA_CHECK(cudaMemcpy(s.data(), sink.get(), s.size() * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < c.blocks; ++i) EXPECT_TRUE(std::isfinite(s[size_t(i)])) << "block " << i;
    if (c.weight_kb > 0) EXPECT_GT(s[0], 0.0f);  // the weights (0x3c3c: ~0.011) were read and used
    return stale;
  }
};

TEST(DepProbe, CounterBarrierOrdersTheVector) {
  SKIP_WITHOUT_CUDA();
  Probe p;
  const int most = dep_probe_max_blocks();
  for (int blocks : {1, 7, most})
    for (int vec : {576, 33, kDepProbeMaxVector})
      for (int kb : {0, 3, 64})
        for (bool before : {false, true}) {
          if (kb == 0 && before) continue;
          EXPECT_EQ(p.run(DepProbeConfig{DepSync::kCounter, blocks, 0, vec, kb, before}), 0u)
              << blocks << " blocks, vector " << vec << ", " << kb << " KiB, before " << before;
        }
}

TEST(DepProbe, ClusterBarrierOrdersTheVector) {
  SKIP_WITHOUT_CUDA();
  const int most = dep_probe_max_cluster();
  if (most < 2) GTEST_SKIP() << "this device schedules no cluster of 2 probe blocks";
  Probe p;
  for (int c : {2, most})
    for (int vec : {576, 33})
      for (int kb : {0, 8})
        EXPECT_EQ(p.run(DepProbeConfig{DepSync::kCluster, c, 0, vec, kb, false}), 0u)
            << "cluster " << c << ", vector " << vec << ", " << kb << " KiB";
}

TEST(DepProbe, RefusesWhatCannotRun) {
  SKIP_WITHOUT_CUDA();
  Probe p;
  auto refuses = [&](DepProbeConfig c, const char* what) {
    c.stages = 10;
    try {
      dep_probe_launch(c, p.b(), nullptr);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("dep probe"), std::string::npos) << e.what();
    }
  };
  refuses(DepProbeConfig{DepSync::kCounter, dep_probe_max_blocks() + 1, 0, 576, 0, false}, "more blocks than resident");
  refuses(DepProbeConfig{DepSync::kCluster, 17, 0, 576, 0, false}, "a cluster of 17");
  refuses(DepProbeConfig{DepSync::kCounter, 4, 0, kDepProbeMaxVector + 1, 0, false}, "too long a vector");
  refuses(DepProbeConfig{DepSync::kCounter, 4, 0, 576, 65, false}, "65 KiB (not a multiple of 64)");
  refuses(DepProbeConfig{DepSync::kCounter, 128, 0, 576, 1024, false}, "weights beyond the buffer");
  refuses(DepProbeConfig{DepSync::kCounter, 0, 0, 576, 0, false}, "no blocks");
}

}  // namespace
}  // namespace llm
