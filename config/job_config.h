#ifndef TRELLIS_CONFIG_JOB_CONFIG_H_
#define TRELLIS_CONFIG_JOB_CONFIG_H_

// Job files: YAML parsed into trellis.v1.JobConfig (proto/trellis/v1/job.proto),
// validated once at start-up. Errors name the field path ("grpo.clip_eps"),
// what was expected and what was found.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "trellis/v1/job.pb.h"
#include "trellis/v1/scheduler.pb.h"

namespace trellis::config {

// Parses YAML text. Unknown fields, wrong types and out-of-range values are
// InvalidArgument errors naming the field path and the YAML line. `source`
// names the text in messages (a path, or "<default>").
[[nodiscard]] absl::StatusOr<v1::JobConfig> ParseJobYaml(
    const std::string& text, const std::string& source = "<yaml>");

// The same for any config message (a cluster spec, ...): YAML `text` into
// `message`.
[[nodiscard]] absl::Status ParseYamlInto(const std::string& text, const std::string& source,
                                         google::protobuf::Message* message);
[[nodiscard]] absl::Status LoadYamlFile(const std::string& path,
                                        google::protobuf::Message* message);

// Reads and parses a job file. A file with no fields (empty, or only
// comments) is InvalidArgument naming the file: it would be a job of the
// proto's defaults, not the built-in job.
[[nodiscard]] absl::StatusOr<v1::JobConfig> LoadJobFile(const std::string& path);

// Checks ranges and cross-field rules (n_kv_heads divides n_heads, ...):
// every number finite, every size and scale within its bounds
// (internal/limits.h, docs/jobs.md). Whether job.algorithm names a recipe
// is the loop's recipe registry's to check (loop::CheckRecipe), whether the
// job fits this machine's memory config/job_size.h's (both through
// loop::PrepareJob).
[[nodiscard]] absl::Status ValidateJob(const v1::JobConfig& job);

// The rules of a job run embedded (`trellis run`, in one process): no
// sampling.concurrency auto, which sizes a launched job's actor pool
// (scheduler/actor_pool.h). InvalidArgument naming the field.
[[nodiscard]] absl::Status ValidateEmbeddedJob(const v1::JobConfig& job);

// The device rules of a job launched as services (`trellis place`,
// `trellis launch`; `trellis run` ignores deployment), for the computing
// roles it launches (`roles`: of actor, learner, reference, those with
// workers). With runtime.device cuda each has gpus_per_worker >= 1 (a
// served worker computes on cuda:0 of its own GPUs). With
// deployment.placement colocated they share their GPUs, so they name the
// same pool and the same gpus_per_worker. InvalidArgument naming the field.
[[nodiscard]] absl::Status ValidateLaunchDevices(const v1::JobConfig& job,
                                                 const std::vector<v1::Role>& roles);

// Every field of the job, defaults filled in, as YAML that ParseJobYaml
// reads back to an equal message.
std::string ResolvedJobYaml(const v1::JobConfig& job);

}  // namespace trellis::config

#endif  // TRELLIS_CONFIG_JOB_CONFIG_H_
