#include "loop/internal/task_pool.h"

#include <utility>

namespace trellis::loop::internal {

TaskPool::TaskPool(int workers) {
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { Work(); });
}

TaskPool::~TaskPool() {
  Wait();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void TaskPool::Schedule(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
}

void TaskPool::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &TaskPool::Idle));
}

bool TaskPool::Idle() const { return queue_.empty() && running_ == 0; }

bool TaskPool::HasWork() const { return !queue_.empty() || stopping_; }

void TaskPool::Work() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &TaskPool::HasWork));
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    task();
    absl::MutexLock lock(&mu_);
    --running_;
  }
}

}  // namespace trellis::loop::internal
