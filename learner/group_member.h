#ifndef TRELLIS_LEARNER_GROUP_MEMBER_H_
#define TRELLIS_LEARNER_GROUP_MEMBER_H_

// A learner's place in the data-parallel group of deployment.learner.count
// learners that train every batch together (memory.zero_stage).

#include <string>

namespace trellis::learner {

struct GroupMember {
  int rank = 0;
  int size = 1;
  // The rendezvous store, which rank 0 hosts (unused when size is 1).
  std::string store_host;
  int store_port = 0;
  // The host this rank's Gloo device binds; empty: the store host when it
  // is a loopback address, else the default interface.
  std::string local_host;
  // The job's secret, which the store asks of every rank
  // (comm/store_server.h); empty: an insecure job.
  std::string secret;
};

}  // namespace trellis::learner

#endif  // TRELLIS_LEARNER_GROUP_MEMBER_H_
