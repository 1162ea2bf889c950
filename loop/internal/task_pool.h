#ifndef TRELLIS_LOOP_INTERNAL_TASK_POOL_H_
#define TRELLIS_LOOP_INTERNAL_TASK_POOL_H_

// A fixed number of threads that run scheduled tasks in the order given:
// the episode runner's environment calls, at most environment.workers at
// once, scheduled from its own thread (Open, Close) or from a streaming
// actor's part sink (Step) while generation goes on.

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace trellis::loop::internal {

class TaskPool {
 public:
  // REQUIRES: workers >= 1.
  explicit TaskPool(int workers);
  // Waits for every scheduled task, then stops the threads.
  ~TaskPool();

  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Runs `task` on one of the threads once one is free. Any thread may call
  // it.
  void Schedule(std::function<void()> task);

  // Returns once every task scheduled so far has finished.
  void Wait();

 private:
  void Work();
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace trellis::loop::internal

#endif  // TRELLIS_LOOP_INTERNAL_TASK_POOL_H_
