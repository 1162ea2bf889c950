// The malloc hook: the C heap's functions, each glibc's own
// (__libc_malloc and the rest) with the block's usable bytes added to or
// taken from HeapCount() (ledger/heap_count.h). A program that links this
// object counts every block its libraries (LibTorch, gRPC, protobuf)
// allocate; glibc's functions call malloc, free and realloc through these
// too. Not linked into sanitizer builds, whose runtime replaces malloc.

#include <malloc.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "ledger/heap_count.h"

extern "C" {
void* __libc_malloc(size_t size);
void __libc_free(void* block);
void* __libc_calloc(size_t count, size_t size);
void* __libc_realloc(void* block, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
void* __libc_valloc(size_t size);
void* __libc_pvalloc(size_t size);
}

namespace {

void* Counted(void* block) {
  if (block != nullptr) {
    trellis::ledger::HeapCount().Add(static_cast<int64_t>(malloc_usable_size(block)));
  }
  return block;
}

void Uncount(void* block) {
  if (block != nullptr) {
    trellis::ledger::HeapCount().Sub(static_cast<int64_t>(malloc_usable_size(block)));
  }
}

}  // namespace

extern "C" {

void* malloc(size_t size) { return Counted(__libc_malloc(size)); }

void free(void* block) {
  Uncount(block);
  __libc_free(block);
}

void* calloc(size_t count, size_t size) { return Counted(__libc_calloc(count, size)); }

void* realloc(void* block, size_t size) {
  const size_t before = block != nullptr ? malloc_usable_size(block) : 0;
  void* moved = __libc_realloc(block, size);
  // NULL with a size: failed, the block stays; NULL with size 0: freed.
  if (moved == nullptr && size != 0) return nullptr;
  trellis::ledger::HeapCount().Sub(static_cast<int64_t>(before));
  return Counted(moved);
}

void* memalign(size_t alignment, size_t size) {
  return Counted(__libc_memalign(alignment, size));
}

void* aligned_alloc(size_t alignment, size_t size) {
  return Counted(__libc_memalign(alignment, size));
}

int posix_memalign(void** out, size_t alignment, size_t size) {
  // glibc's rule: a power of two that is a multiple of sizeof(void*).
  if (alignment == 0 || alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) {
    return EINVAL;
  }
  void* block = Counted(__libc_memalign(alignment, size));
  if (block == nullptr) return ENOMEM;
  *out = block;
  return 0;
}

void* valloc(size_t size) { return Counted(__libc_valloc(size)); }

void* pvalloc(size_t size) { return Counted(__libc_pvalloc(size)); }

}  // extern "C"
