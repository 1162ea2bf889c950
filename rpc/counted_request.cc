#include "rpc/counted_request.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace trellis::rpc {

using google::protobuf::internal::WireFormatLite;

absl::StatusOr<int64_t> CountField(grpc::ByteBuffer& raw, int field_number) {
  grpc::ProtoBufferReader reader(&raw);
  if (!reader.status().ok()) return FromGrpc(reader.status(), "reading the request");
  google::protobuf::io::CodedInputStream in(&reader);
  int64_t count = 0;
  while (const uint32_t tag = in.ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) == field_number &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      ++count;
    }
    if (!WireFormatLite::SkipField(&in, tag)) break;
  }
  if (!in.ConsumedEntireMessage()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request is not a well-formed message (", count,
                     " entries of field ", field_number, " before the fault)"));
  }
  return count;
}

int MethodIndex(std::string_view service, std::string_view method) {
  const google::protobuf::ServiceDescriptor* s =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(std::string(service));
  if (s == nullptr) return -1;
  const google::protobuf::MethodDescriptor* m = s->FindMethodByName(std::string(method));
  return m == nullptr ? -1 : m->index();
}

}  // namespace trellis::rpc
