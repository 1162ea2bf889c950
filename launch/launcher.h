#ifndef TRELLIS_LAUNCH_LAUNCHER_H_
#define TRELLIS_LAUNCH_LAUNCHER_H_

// `trellis launch`: the scheduler and every role of a job as separate
// processes on this host, on free ports. Each process's output lines are
// prefixed with its role and index ("[actor-1] ..."). Teardown leaves no
// process behind: at the end of the job, on SIGINT/SIGTERM, or when a role
// other than an actor fails (a failed actor's work is re-dispatched by the
// scheduler, so the job goes on). Then, within deployment.max_restarts,
// every process is started again from the newest checkpoint (or from the
// start when there is none): the job completes without a person. OUT/launch/
// holds the job as launched (resolved), the scheduler's address, processes.tsv (name,
// pid), restarts.tsv (each restart's cause and starting point) and, unless
// another secret file is given, the job's secret (mode 0600) that every
// process checks and sends on every call (rpc/auth.h).

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "launch/secret.h"
#include "trellis/v1/cluster.pb.h"
#include "trellis/v1/job.pb.h"

namespace trellis::launch {

// Exit codes of `trellis` commands besides 0 and 1: bad input (fix it and
// run again), and a failure a retry may mend (a peer died or went silent:
// absl's Unavailable, Aborted, DeadlineExceeded), which `trellis launch`
// answers by restarting the job from its newest checkpoint.
inline constexpr int kExitInvalidInput = 2;
inline constexpr int kExitRetryable = 3;

// This host as a cluster: one pool "local" with its GPUs (/dev/nvidiaN)
// and cores.
v1::ClusterSpec ThisHost();

// Prepares the job as every command does (loop::PrepareJob: the model's
// shape from model.path's config.json) and launches that resolved job: it
// is OUT/launch/job.yaml, the scheduler's job and every worker's. Places it
// on `cluster` (scheduler/placement.h) first: a job that
// does not fit is refused, naming the pool and the shortfall, before any
// process starts. Every node it uses must be this host (other hosts are
// for Slurm or Kubernetes). Each worker sees only its GPUs
// (CUDA_VISIBLE_DEVICES). `trellis_binary` starts the processes (normally
// /proc/self/exe). With `resume`, out_dir holds a launched run (its
// job.yaml is `job`) that continues from its newest checkpoint. With
// `http` (host:port) the scheduler serves the dashboard and /metrics there
// and writes the bound address to out_dir/http.addr. `secret`: the
// operator's secret file, or --insecure; by default a new secret in
// OUT/launch/secret (env::RunDir::LaunchSecret). Before it writes anything
// it takes out_dir (run::ClaimRunDir): while another process writes there
// it fails at once, naming that process; everything it and its processes
// write there has the modes of the job's runtime.run_dir_access.
[[nodiscard]] absl::Status LaunchLocal(const v1::JobConfig& job, const v1::ClusterSpec& cluster,
                                       const std::string& out_dir,
                                       const std::string& trellis_binary, std::ostream& progress,
                                       bool resume = false, const std::string& http = "",
                                       const SecretSource& secret = SecretSource());

}  // namespace trellis::launch

#endif  // TRELLIS_LAUNCH_LAUNCHER_H_
