#ifndef TRELLIS_MODEL_TORCH_DEVICE_H_
#define TRELLIS_MODEL_TORCH_DEVICE_H_

// model/device.h's Device as LibTorch's, for the engines that make tensors.

#include <c10/core/Device.h>

#include <vector>

#include "model/device.h"

namespace trellis::model {

inline c10::Device TorchDevice(const Device& device) {
  if (!device.is_cuda()) return c10::Device(c10::kCPU);
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device.index));
}

inline std::vector<c10::Device> TorchDevices(const std::vector<Device>& devices) {
  std::vector<c10::Device> torch_devices;
  torch_devices.reserve(devices.size());
  for (const Device& d : devices) torch_devices.push_back(TorchDevice(d));
  return torch_devices;
}

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_TORCH_DEVICE_H_
