// BufferStash keeps a worker thread's spare buffers (Beast flat buffers,
// strings) for reuse, so that a proxied request does not allocate and free
// its read buffers, relay buffer and body string every time: those were five
// allocations of 4-64 KiB per request, each a trip through malloc's bins.
//
//   BufferStash<beast::flat_buffer> stash(/*max_items=*/64, /*max_capacity=*/64 << 10,
//                                         /*max_bytes=*/2 << 20);
//   beast::flat_buffer b = stash.Take();   // empty, with its old capacity
//   ...
//   stash.Give(std::move(b));              // kept, or freed if over a bound
//
// Bounded: at most `max_items` buffers of at most `max_bytes` together, none
// larger than `max_capacity` (a larger one is freed; one under kMinCapacity
// too), however many connections the worker has. An idle keep-alive
// connection gives its read buffer back and holds none. Not thread-safe: one
// per worker thread, used only on it.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace kvroute::proxy {

template <class Buffer>
class BufferStash {
 public:
  BufferStash(size_t max_items, size_t max_capacity, size_t max_bytes)
      : max_items_(max_items), max_capacity_(max_capacity), max_bytes_(max_bytes) {
    free_.reserve(max_items);
  }
  BufferStash(const BufferStash&) = delete;
  BufferStash& operator=(const BufferStash&) = delete;

  // An empty buffer: the most recently given back one, or a new one.
  Buffer Take() {
    if (free_.empty()) return Buffer();
    Buffer b = std::move(free_.back());
    free_.pop_back();
    bytes_ -= b.capacity();
    return b;
  }

  // Takes `b` back, emptied; frees it instead when it is out of bounds or
  // would put the stash over one.
  void Give(Buffer&& b) {
    const size_t capacity = b.capacity();
    if (free_.size() >= max_items_ || capacity > max_capacity_ || capacity < kMinCapacity ||
        bytes_ + capacity > max_bytes_) {
      Buffer dropped = std::move(b);  // the caller's buffer holds nothing after Give
      return;
    }
    b.clear();
    free_.push_back(std::move(b));
    bytes_ += capacity;
  }

  size_t size() const { return free_.size(); }
  size_t bytes() const { return bytes_; }  // the stashed buffers' capacity

  // Smaller buffers (an empty flat buffer, a string in its inline storage)
  // hold nothing worth keeping.
  static constexpr size_t kMinCapacity = 64;

  // Gives a buffer back when it goes out of scope (every return path of a
  // coroutine).
  class Lease {
   public:
    explicit Lease(BufferStash& stash) : stash_(stash), buffer_(stash.Take()) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { stash_.Give(std::move(buffer_)); }
    Buffer& operator*() { return buffer_; }
    Buffer* operator->() { return &buffer_; }

   private:
    BufferStash& stash_;
    Buffer buffer_;
  };

 private:
  size_t max_items_;
  size_t max_capacity_;
  size_t max_bytes_;
  size_t bytes_ = 0;
  std::vector<Buffer> free_;
};

}  // namespace kvroute::proxy
