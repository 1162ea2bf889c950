#ifndef TRELLIS_RPC_COUNTED_REQUEST_H_
#define TRELLIS_RPC_COUNTED_REQUEST_H_

// Requests whose entries are counted before they are parsed. gRPC parses a
// request whole before its handler runs, and protobuf allocates a message
// for every entry of a repeated field: 5,000,000 empty Verify items arrive
// in 10 MB, well inside the verifier's receive limit, and take hundreds of
// MB parsed. A service built on CountingService takes such a method's
// request as bytes, counts the entries of its top-level repeated field on
// the wire, and refuses a request with too many with the same error the
// parsed request's check gives (config/request_limits.h), before anything
// is allocated for its entries; only then is it parsed and handed to the
// service's own handler, unchanged.

#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/method_handler.h>
#include <grpcpp/support/sync_stream.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rpc/status.h"

namespace trellis::rpc {

// Entries of top-level field `field_number` in the serialized message
// `raw` (length-delimited entries: messages, strings), counted without
// parsing it. InvalidArgument when `raw` is not a well-formed message.
[[nodiscard]] absl::StatusOr<int64_t> CountField(grpc::ByteBuffer& raw, int field_number);

// The index of method `method` among the methods of service `service` (a
// full name, "trellis.v1.Verifier") in the order its generated Service
// registers them; -1 when there is none.
int MethodIndex(std::string_view service, std::string_view method);

// Checks the count of a request's entries; OK lets it be parsed.
using CountCheck = std::function<absl::Status(int64_t count)>;

template <typename Base>
class CountingService : public Base {
 protected:
  // Unary `method` of service `service`: its request's entries of field
  // `field` pass `check` before the request is parsed and given to
  // `handler` (the service's own override, called as gRPC would).
  template <typename Self, typename Request, typename Response>
  void CountUnary(std::string_view service, std::string_view method, int field, CountCheck check,
                  grpc::Status (Self::*handler)(grpc::ServerContext*, const Request*,
                                                Response*)) {
    using Streamer = grpc::ServerUnaryStreamer<grpc::ByteBuffer, Response>;
    const int index = MethodIndex(service, method);
    if (index < 0) return;  // no such method: its requests are parsed as usual
    this->MarkMethodStreamed(
        index,
        new grpc::internal::StreamedUnaryHandler<grpc::ByteBuffer, Response>(
            [this, field, check = std::move(check), handler](grpc::ServerContext* context,
                                                             Streamer* stream) {
              Request request;
              if (grpc::Status s = Receive(stream, field, check, &request); !s.ok()) return s;
              Response response;
              grpc::Status status =
                  (static_cast<Self*>(this)->*handler)(context, &request, &response);
              if (status.ok()) stream->Write(response);
              return status;
            }));
  }

  // Server-streaming `method`: the same, with `handler` writing its
  // replies to the call's stream.
  template <typename Self, typename Request, typename Response>
  void CountServerStreaming(
      std::string_view service, std::string_view method, int field, CountCheck check,
      grpc::Status (Self::*handler)(grpc::ServerContext*, const Request*,
                                    grpc::internal::WriterInterface<Response>*)) {
    using Streamer = grpc::ServerSplitStreamer<grpc::ByteBuffer, Response>;
    const int index = MethodIndex(service, method);
    if (index < 0) return;  // no such method: its requests are parsed as usual
    this->MarkMethodStreamed(
        index,
        new grpc::internal::SplitServerStreamingHandler<grpc::ByteBuffer, Response>(
            [this, field, check = std::move(check), handler](grpc::ServerContext* context,
                                                             Streamer* stream) {
              Request request;
              if (grpc::Status s = Receive(stream, field, check, &request); !s.ok()) return s;
              return (static_cast<Self*>(this)->*handler)(context, &request, stream);
            }));
  }

 private:
  // Reads the request's bytes, counts and checks field `field`, then
  // parses them into *request.
  template <typename Streamer, typename Request>
  static grpc::Status Receive(Streamer* stream, int field, const CountCheck& check,
                              Request* request) {
    grpc::ByteBuffer raw;
    if (!stream->Read(&raw)) return grpc::Status(grpc::StatusCode::INTERNAL, "no request");
    absl::StatusOr<int64_t> count = CountField(raw, field);
    if (!count.ok()) return ToGrpc(count.status());
    if (absl::Status s = check(*count); !s.ok()) return ToGrpc(s);
    return grpc::SerializationTraits<Request>::Deserialize(&raw, request);
  }
};

}  // namespace trellis::rpc

#endif  // TRELLIS_RPC_COUNTED_REQUEST_H_
