#include "weightsync/testing/gpu_transport_checks.h"

#include <torch/torch.h>

#include <memory>
#include <utility>

#include "comm/tcp_store.h"
#include "gtest/gtest.h"

namespace trellis::weightsync::conformance {

TransportOptions FreshStoreOptions() {
  absl::StatusOr<int> port = comm::PickFreeTcpPort("127.0.0.1");
  TransportOptions options;
  options.port = port.ok() ? *port : 0;
  options.connect_timeout = absl::Seconds(20);
  return options;
}

absl::StatusOr<TransportEnds> MakeOnDevices(absl::Status (*register_transport)(TransportRegistry&),
                                            const std::string& name, const TransportOptions& base,
                                            int publisher_device, int receiver_device) {
  TransportRegistry registry;
  if (absl::Status s = register_transport(registry); !s.ok()) return s;
  TransportOptions options = FreshStoreOptions();
  options.bucket_bytes = base.bucket_bytes;
  options.cuda_device = publisher_device;
  absl::StatusOr<std::unique_ptr<Publisher>> publisher = registry.NewPublisher(name, options);
  if (!publisher.ok()) return publisher.status();
  options.cuda_device = receiver_device;
  absl::StatusOr<std::unique_ptr<Receiver>> receiver = registry.NewReceiver(name, options);
  if (!receiver.ok()) return receiver.status();
  return TransportEnds{*std::move(publisher), *std::move(receiver)};
}

void ExpectNoPublisherIsAnError(Receiver& receiver) {
  NamedTensors dst = {{"w", torch::zeros({4})}};
  absl::StatusOr<v1::WeightSyncStats> got = receiver.Receive(1, dst, absl::Seconds(1));
  EXPECT_TRUE(got.status().code() == absl::StatusCode::kDeadlineExceeded ||
              got.status().code() == absl::StatusCode::kUnavailable)
      << got.status();
}

void ExpectBadOptionsAreInvalidArgument(const TransportRegistry::PublisherFactory& new_publisher,
                                        const TransportRegistry::ReceiverFactory& new_receiver) {
  TransportOptions options;
  EXPECT_EQ(new_publisher(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.port = 5000;
  options.receiver_index = 3;
  EXPECT_EQ(new_receiver(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace trellis::weightsync::conformance
