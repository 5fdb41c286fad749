// TpAllReduceGroup (engine/cuda/tp_all_reduce.h).
#include "engine/cuda/tp_all_reduce.h"

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda_check.h"

namespace llm {

namespace {

// Restores the calling thread's device when the group is done with the others.
struct DeviceGuard {
  int saved = 0;
  DeviceGuard() { CUDA_CHECK(cudaGetDevice(&saved)); }
  ~DeviceGuard() { cudaSetDevice(saved); }
};

}  // namespace

TpAllReduceGroup::TpAllReduceGroup(const std::vector<int>& devices, size_t capacity)
    : devices_(devices), capacity_((capacity + 3) / 4 * 4) {
  const int n = int(devices.size());
  if (n < 1 || n > kAllReduceMaxRanks)
    fail("--tp ", n, ": the all-reduce takes 1 to ", kAllReduceMaxRanks, " ranks");
  DeviceGuard guard;
  // Peer access between every two distinct devices of the group.
  for (int a : devices)
    for (int b : devices) {
      if (a == b) continue;
      int ok = 0;
      CUDA_CHECK(cudaDeviceCanAccessPeer(&ok, a, b));
      if (!ok)
        fail("--tp ", n, ": GPU ", a, " cannot access GPU ", b, "'s memory peer to peer (the all-reduce needs it)");
      CUDA_CHECK(cudaSetDevice(a));
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled)
        cudaGetLastError();
      else
        CUDA_CHECK(e);
    }
  peers_.resize(size_t(n));
  std::vector<float*> exch(static_cast<size_t>(n));
  std::vector<unsigned*> flags(static_cast<size_t>(n));
  std::vector<unsigned*> epoch(static_cast<size_t>(n));
  auto alloc = [&](int dev, size_t bytes) {
    CUDA_CHECK(cudaSetDevice(dev));
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    allocs_.push_back({dev, p});
    CUDA_CHECK(cudaMemset(p, 0, bytes));
    return p;
  };
  try {
    for (int r = 0; r < n; ++r) {
      exch[size_t(r)] = static_cast<float*>(alloc(devices[size_t(r)], all_reduce_exchange_floats(capacity_) * 4));
      flags[size_t(r)] = static_cast<unsigned*>(alloc(devices[size_t(r)], kAllReduceFlagWords * 4));
      epoch[size_t(r)] = static_cast<unsigned*>(alloc(devices[size_t(r)], kAllReduceBlocks * 4));
    }
    for (int r = 0; r < n; ++r) {  // the zeroing is done before any rank's first launch
      CUDA_CHECK(cudaSetDevice(devices[size_t(r)]));
      CUDA_CHECK(cudaDeviceSynchronize());
    }
  } catch (...) {
    for (const Alloc& a : allocs_) {
      cudaSetDevice(a.device);
      cudaFree(a.p);
    }
    throw;
  }
  for (int r = 0; r < n; ++r) {
    AllReducePeers& p = peers_[size_t(r)];
    p.rank = r;
    p.n_ranks = n;
    p.capacity = capacity_;
    p.epoch = epoch[size_t(r)];
    for (int q = 0; q < n; ++q) {
      p.exch[q] = exch[size_t(q)];
      p.flags[q] = flags[size_t(q)];
    }
  }
}

TpAllReduceGroup::~TpAllReduceGroup() {
  DeviceGuard guard;
  for (const Alloc& a : allocs_) {
    cudaSetDevice(a.device);
    cudaFree(a.p);
  }
}

}  // namespace llm
