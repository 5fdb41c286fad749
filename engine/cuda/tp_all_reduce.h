// The buffers of the one-shot all-reduce (kernels/collective/all_reduce.h) for a group of tensor-parallel ranks, each
// rank on its device (ranks may share a GPU: then a rank's peers are plain device memory). Between distinct GPUs,
// peer access is enabled both ways, or the group is refused in one line naming the two devices.
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/collective/all_reduce.h"

namespace llm {

class TpAllReduceGroup {
 public:
  // devices[r]: rank r's device. capacity: the most floats one all-reduce carries.
  TpAllReduceGroup(const std::vector<int>& devices, size_t capacity);
  ~TpAllReduceGroup();
  TpAllReduceGroup(const TpAllReduceGroup&) = delete;
  TpAllReduceGroup& operator=(const TpAllReduceGroup&) = delete;

  int n_ranks() const { return int(peers_.size()); }
  int device(int rank) const { return devices_[size_t(rank)]; }
  size_t capacity() const { return capacity_; }
  // Rank r's view, for all_reduce_sum on rank r's device and stream.
  const AllReducePeers& peers(int rank) const { return peers_[size_t(rank)]; }

 private:
  struct Alloc {
    int device;
    void* p;
  };
  std::vector<int> devices_;
  size_t capacity_ = 0;
  std::vector<Alloc> allocs_;
  std::vector<AllReducePeers> peers_;
};

}  // namespace llm
