#ifndef TRELLIS_OBSERVE_JOB_PARAMS_H_
#define TRELLIS_OBSERVE_JOB_PARAMS_H_

// A job's every field, defaults filled in, as MLflow parameters:
// ("grpo.steps", "40"), ("sampling.temperature", "1"), ...

#include <vector>

#include "google/protobuf/message.h"
#include "observe/mlflow_client.h"

namespace trellis::observe {

// Every singular field of `job` and its sub-messages, set or not, by its
// path, as the resolved job.yaml writes them (strings unquoted), repeated fields
// as their values joined by ","; a repeated message's items as
// "path.<index>.field". Values longer than kMaxParamValue characters are cut.
std::vector<MlflowParam> JobParams(const google::protobuf::Message& job);

// What every MLflow server takes (older ones take no more).
constexpr size_t kMaxParamValue = 500;

}  // namespace trellis::observe

#endif  // TRELLIS_OBSERVE_JOB_PARAMS_H_
