#include "model/torch_status.h"

#include <c10/util/Exception.h>

#include <new>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace trellis::model {
namespace {

// In what LibTorch 1.13's default CPU allocator throws (a plain c10::Error,
// "[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: ...")
// when the system refuses memory.
constexpr absl::string_view kCpuAllocatorRefused = "DefaultCPUAllocator: can't allocate memory";

absl::Status WithWhere(absl::StatusCode code, absl::string_view where, absl::string_view what) {
  return absl::Status(code, absl::StrCat(where, ": ", what));
}

}  // namespace

absl::Status StatusFromException(std::exception_ptr error, absl::string_view where) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::OutOfMemoryError& e) {
    return WithWhere(absl::StatusCode::kResourceExhausted, where,
                     absl::StrCat("out of memory: ", e.what_without_backtrace()));
  } catch (const c10::Error& e) {
    const absl::string_view what = e.what_without_backtrace();
    if (absl::StrContains(what, kCpuAllocatorRefused)) {
      return WithWhere(absl::StatusCode::kResourceExhausted, where,
                       absl::StrCat("out of memory: ", what));
    }
    return WithWhere(absl::StatusCode::kInternal, where, what);
  } catch (const std::bad_alloc& e) {
    return WithWhere(absl::StatusCode::kResourceExhausted, where,
                     absl::StrCat("out of memory: ", e.what()));
  } catch (const std::exception& e) {
    return WithWhere(absl::StatusCode::kInternal, where, e.what());
  } catch (...) {
    return WithWhere(absl::StatusCode::kUnknown, where, "unknown exception");
  }
}

}  // namespace trellis::model
