#include "weightsync/registry.h"

#include <torch/torch.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::weightsync {
namespace {

using ::absl::StatusCode;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TransportRegistry Builtins() {
  TransportRegistry registry;
  EXPECT_TRUE(RegisterBuiltinTransports(registry).ok());
  return registry;
}

TEST(TransportRegistryTest, BuiltinsAreGlooInProcessAndTcp) {
  EXPECT_THAT(Builtins().Names(), ElementsAre("gloo", "inprocess", "tcp"));
}

TEST(TransportRegistryTest, UnknownNameIsNotFoundListingTheKnownOnes) {
  TransportRegistry registry = Builtins();
  absl::StatusOr<std::unique_ptr<Publisher>> publisher = registry.NewPublisher("udp", {});
  EXPECT_EQ(publisher.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(std::string(publisher.status().message()),
              HasSubstr("unknown transport \"udp\"; registered transports: gloo, inprocess, tcp"));
  EXPECT_EQ(registry.NewReceiver("nccl", {}).status().code(), StatusCode::kNotFound);
  EXPECT_THAT(std::string(TransportRegistry().NewReceiver("gloo", {}).status().message()),
              HasSubstr("registered transports: (none)"));
}

TEST(TransportRegistryTest, DuplicateIsAlreadyExists) {
  TransportRegistry registry = Builtins();
  absl::Status again = RegisterBuiltinTransports(registry);
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(again.message()), HasSubstr("\"inprocess\" is already registered"));
  EXPECT_THAT(registry.Names(), ElementsAre("gloo", "inprocess", "tcp"));
}

TEST(TransportRegistryTest, NamesAreLowercaseAndFactoriesPresent) {
  TransportRegistry registry;
  auto publisher = [](const TransportOptions&) -> absl::StatusOr<std::unique_ptr<Publisher>> {
    return absl::UnimplementedError("test");
  };
  auto receiver = [](const TransportOptions&) -> absl::StatusOr<std::unique_ptr<Receiver>> {
    return absl::UnimplementedError("test");
  };
  EXPECT_EQ(registry.Register("Gloo", publisher, receiver).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Register("", publisher, receiver).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Register("shm", nullptr, receiver).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(registry.Register("shm_v2", publisher, receiver).ok());
  EXPECT_EQ(registry.NewPublisher("shm_v2", {}).status().code(), StatusCode::kUnimplemented);
}

// A proto enum value's name finds the transport as well as the config
// string does.
TEST(TransportRegistryTest, LookupIgnoresCase) {
  TransportRegistry registry = Builtins();
  absl::StatusOr<std::unique_ptr<Publisher>> publisher = registry.NewPublisher("INPROCESS", {});
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  EXPECT_TRUE(registry.NewReceiver("InProcess", {}).ok());
}

TEST(TransportRegistryTest, InProcessReceiverFindsItsPublisherByAddress) {
  TransportRegistry registry = Builtins();
  TransportOptions here;
  here.port = 1;
  TransportOptions there;
  there.port = 2;
  EXPECT_EQ(registry.NewReceiver("inprocess", here).status().code(),
            StatusCode::kFailedPrecondition);
  absl::StatusOr<std::unique_ptr<Publisher>> publisher = registry.NewPublisher("inprocess", here);
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  EXPECT_EQ(registry.NewPublisher("inprocess", here).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.NewReceiver("inprocess", there).status().code(),
            StatusCode::kFailedPrecondition);
  absl::StatusOr<std::unique_ptr<Receiver>> receiver = registry.NewReceiver("inprocess", here);
  ASSERT_TRUE(receiver.ok()) << receiver.status();

  ASSERT_TRUE((*publisher)->Publish(1, {{"w", torch::ones({3})}}).ok());
  torch::Tensor dst = torch::zeros({3});
  ASSERT_TRUE((*receiver)->Receive(1, {{"w", dst}}, absl::Seconds(1)).ok());
  EXPECT_TRUE(torch::equal(dst, torch::ones({3})));

  // Once the publisher is gone, its address is free again; its receivers
  // keep what they have and are told it is gone.
  publisher->reset();
  EXPECT_EQ((*receiver)->Receive(2, {{"w", dst}}, absl::Seconds(1)).status().code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(registry.NewReceiver("inprocess", here).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(registry.NewPublisher("inprocess", here).ok());
}

TEST(TransportRegistryTest, GlooEndsCheckTheirOptions) {
  TransportRegistry registry = Builtins();
  TransportOptions options;  // No port.
  EXPECT_EQ(registry.NewPublisher("gloo", options).status().code(), StatusCode::kInvalidArgument);
  options.port = 5000;
  options.receiver_index = 1;  // Of one slot.
  absl::StatusOr<std::unique_ptr<Receiver>> receiver = registry.NewReceiver("gloo", options);
  EXPECT_EQ(receiver.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(receiver.status().message()), HasSubstr("receiver_index"));
}

}  // namespace
}  // namespace trellis::weightsync
