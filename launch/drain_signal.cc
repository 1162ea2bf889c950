#include "launch/drain_signal.h"

#include <signal.h>

#include <atomic>

namespace trellis::launch {
namespace {

// Lock-free: written from the signal handler.
std::atomic<bool> g_drain{false};

void OnDrainSignal(int) { g_drain = true; }

}  // namespace

void DrainOnSigterm() {
  struct sigaction action = {};
  action.sa_handler = OnDrainSignal;
  // Reset after the first: the second SIGTERM terminates as by default.
  action.sa_flags = SA_RESTART | SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
}

bool DrainRequested() { return g_drain; }

}  // namespace trellis::launch
