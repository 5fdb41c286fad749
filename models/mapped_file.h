// MappedFile: a read-only memory mapping of a whole file, shared by every tensor that points into it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace llm {

class MappedFile {
 public:
  // Maps `path` read-only. Throws llm::Error naming the path if it is missing, unreadable, not a regular file or
  // empty (an empty checkpoint is always a mistake, and mmap of length 0 is not allowed).
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size) : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace llm
