#ifndef TRELLIS_LAUNCH_CAPABILITIES_H_
#define TRELLIS_LAUNCH_CAPABILITIES_H_

// What a worker process brings, as it registers with the scheduler: its
// host, cores, memory and the GPUs it may use.

#include "trellis/v1/scheduler.pb.h"

namespace trellis::launch {

// This process's host name, hardware threads, physical memory, and the
// devices CUDA_VISIBLE_DEVICES names (what the launcher pinned it to).
v1::Capabilities Capabilities();

}  // namespace trellis::launch

#endif  // TRELLIS_LAUNCH_CAPABILITIES_H_
