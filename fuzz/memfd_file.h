#ifndef TRELLIS_FUZZ_MEMFD_FILE_H_
#define TRELLIS_FUZZ_MEMFD_FILE_H_

// A file in memory with a path (/proc/self/fd/N), for readers that take a
// path: each fuzz input is written to it in place of the last.

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace trellis::fuzz {

class MemfdFile {
 public:
  MemfdFile() : fd_(memfd_create("trellis-fuzz", MFD_CLOEXEC)) {
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemfdFile() { close(fd_); }
  // Replaces the file's content; the path to read it by.
  const std::string& Write(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0 || (size > 0 && pwrite(fd_, data, size, 0) != ssize_t(size))) {
      abort();
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace trellis::fuzz

#endif  // TRELLIS_FUZZ_MEMFD_FILE_H_
