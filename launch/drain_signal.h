#ifndef TRELLIS_LAUNCH_DRAIN_SIGNAL_H_
#define TRELLIS_LAUNCH_DRAIN_SIGNAL_H_

// SIGTERM to an actor process asks it to drain rather than die with its
// work: it keeps serving what the pool gave it, its heartbeats say
// `draining`, and it exits once the scheduler releases it (launch/worker.h).
// A second SIGTERM, or SIGKILL, still ends it at once.

namespace trellis::launch {

// Installs the SIGTERM handler (once is enough; again is harmless).
void DrainOnSigterm();

// Whether SIGTERM came since DrainOnSigterm.
bool DrainRequested();

}  // namespace trellis::launch

#endif  // TRELLIS_LAUNCH_DRAIN_SIGNAL_H_
