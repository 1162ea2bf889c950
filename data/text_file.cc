#include "data/text_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace trellis::data {

absl::Status WriteTextFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::out | std::ios::trunc | std::ios::binary);
    out << text;
    out.flush();
    if (!out) return absl::ErrnoToStatus(errno, absl::StrCat("writing ", tmp));
  }
  const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("opening ", tmp));
  const bool synced = ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  if (!synced) return absl::ErrnoToStatus(error, absl::StrCat("fsync ", tmp));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("renaming ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace trellis::data
