#ifndef TRELLIS_LOOP_STREAMING_VERIFY_H_
#define TRELLIS_LOOP_STREAMING_VERIFY_H_

// Verification beside the rollout: the parts a RolloutWorker hands over
// (GenerateStreaming) are verified on threads of this object's own as they
// arrive, while the actors still generate the rest, up to kCallsInFlight
// parts at once (launched actors each hand over a part; a verifier whose
// latency is its own, a remote service or a sandbox, answers them side by
// side); Finish puts the verdicts back in the rollout's sample order.

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "data/dataset.h"
#include "ledger/ledger.h"
#include "trellis/v1/rollout.pb.h"
#include "verifier/verifier.h"

namespace trellis::loop {

class StreamingVerify {
 public:
  // Verify calls in flight at once, at most.
  static constexpr int kCallsInFlight = 8;

  // `examples`: the prompt text and answer of each prompt id in the
  // request. The verifier and ledger must outlive this object.
  StreamingVerify(verifier::VerifierClient* verifier, ledger::Ledger* ledger,
                  std::map<uint64_t, const data::Example*> examples);
  ~StreamingVerify();
  StreamingVerify(const StreamingVerify&) = delete;
  StreamingVerify& operator=(const StreamingVerify&) = delete;

  // Queues a part for verification. Thread-safe.
  void Add(const v1::GenerateResponse& part);

  struct Result {
    // One result per sample of the rollout, in its order; each part's
    // stats appended.
    v1::VerifyResponse verdicts;
    // Seconds during which a verification ran (calls side by side count
    // once), and how many of them before the rollout ended
    // (`rollout_end`): the overlap streaming bought.
    double verify_seconds = 0;
    double overlap_seconds = 0;
  };
  // Call once the rollout returned `samples` at `rollout_end`: waits for
  // every queued part. The first verifier failure, or a sample no part
  // held, is an error.
  [[nodiscard]] absl::StatusOr<Result> Finish(
      const google::protobuf::RepeatedPtrField<v1::Sample>& samples, absl::Time rollout_end);

 private:
  void Run();
  // Stops taking parts and waits for the threads.
  void Close();

  verifier::VerifierClient* verifier_;
  ledger::Ledger* ledger_;
  const std::map<uint64_t, const data::Example*> examples_;

  std::mutex mu_;
  std::condition_variable cv_;
  // The parts not yet taken, each with its place in the order of Add.
  std::deque<std::pair<int64_t, v1::GenerateResponse>> queue_;
  int64_t added_ = 0;
  // Threads waiting for a part; a part no waiting thread takes starts one
  // (at most kCallsInFlight).
  int idle_ = 0;
  bool closed_ = false;
  // Filled by the threads.
  struct Verified {
    int64_t order = 0;
    v1::GenerateResponse part;
    v1::VerifyResponse verdicts;
    absl::Time start, end;
  };
  std::vector<Verified> verified_;
  absl::Status error_;
  std::vector<std::thread> threads_;
};

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_STREAMING_VERIFY_H_
