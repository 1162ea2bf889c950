#include "launch/capabilities.h"

#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace trellis::launch {

v1::Capabilities Capabilities() {
  v1::Capabilities caps;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  caps.set_hostname(host);
  caps.set_cpus(static_cast<int>(std::thread::hardware_concurrency()));
  caps.set_memory_bytes(static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE));
  // The devices the launcher pinned this worker to.
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
    for (absl::string_view d : absl::StrSplit(visible, ',', absl::SkipEmpty())) {
      int ordinal = 0;
      if (absl::SimpleAtoi(d, &ordinal)) caps.add_gpus(ordinal);
    }
  }
  return caps;
}

}  // namespace trellis::launch
