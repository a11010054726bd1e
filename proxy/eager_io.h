// Eager I/O on a beast::tcp_stream: every read or write is first tried at
// once on the non-blocking socket, and only when the socket would block does
// it wait through the reactor, under the timeout given (applied to the
// stream with expires_after only then: arming the stream's two timers read
// the clock twice and cost a timer-queue update per call, for waits that
// mostly never happen).
//
// Why: an Asio operation that completes at once still posts its completion
// through the scheduler, and every trip through the scheduler polls epoll.
// Most operations of a proxied request complete at once (the request is in
// the socket when it becomes readable, and writes fit in the socket buffer),
// so a request served only with async operations cost 7 epoll_wait calls
// and the per-operation machinery of composed operations and timers.
//
//   auto [ec, n] = co_await EagerRead(stream, buffer, [&](beast::error_code& e) {
//     return http::read_header(stream.socket(), buffer, parser, e);
//   }, /*try_first=*/true, timeout);
//   ec = co_await EagerWrite(stream, buffers, timeout);
//   ec = co_await EagerWriteMessage(stream, serializer, timeout);
//
// The timeout bounds the whole call from its first wait, as a deadline set
// with expires_after before a Beast algorithm bounds the algorithm.
//
// (No header-only variant: Beast's synchronous write_header loses track of a
// partly written header when the socket would block; serialize the header
// and EagerWrite it.)
//
// Thread-safety: as the stream's (one strand or thread at a time).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <optional>
#include <tuple>
#include <type_traits>

#include "proxy/http_common.h"

namespace kvroute::proxy {

using EagerTimeout = std::chrono::steady_clock::duration;

// Puts the socket in non-blocking mode for the synchronous attempts.
inline void MakeNonBlocking(tcp::socket& socket) {
  if (!socket.non_blocking()) {
    beast::error_code ignored;
    socket.non_blocking(true, ignored);
  }
}
inline void MakeNonBlocking(beast::tcp_stream& stream) { MakeNonBlocking(stream.socket()); }

// The synchronous first attempt of EagerRead, for callers that want no
// coroutine frame when the bytes are already there (see WriteNow):
//
//   auto [ec, n] = ReadNow(stream, sync_read);
//   if (ec == net::error::would_block) {
//     auto [wec, wn] = co_await EagerRead(stream, buffer, sync_read, false, timeout);
//     ec = wec;
//     n += wn;
//   }
template <class AsyncReadStream, class SyncRead>
std::tuple<beast::error_code, size_t> ReadNow(AsyncReadStream& stream, SyncRead& sync_read) {
  MakeNonBlocking(stream);
  beast::error_code ec;
  const size_t n = sync_read(ec);
  return {ec, n};
}

// Runs `sync_read(ec)` (a synchronous Beast read on the stream's socket that
// reads into `buffer`, returning bytes consumed) until it completes with
// anything but would_block; while it would block, waits for more bytes with
// one async read into `buffer` (a tcp_stream applies its timeout; a bare
// socket's waits are timed by a Watchdog). `try_first` = false skips the first
// synchronous attempt when no bytes can have arrived yet (a response just
// asked for). `timeout` (a tcp_stream's; none for a bare socket) bounds all
// the waits together. Returns the last error and the bytes the sync reads
// consumed.
template <class AsyncReadStream, class SyncRead>
net::awaitable<std::tuple<beast::error_code, size_t>> EagerRead(
    AsyncReadStream& stream, beast::flat_buffer& buffer, SyncRead sync_read,
    bool try_first = true, std::optional<EagerTimeout> timeout = std::nullopt) {
  MakeNonBlocking(stream);
  size_t consumed = 0;
  bool deadline_set = false;
  for (bool attempt = try_first;; attempt = true) {
    if (attempt) {
      beast::error_code ec;
      consumed += sync_read(ec);
      if (ec != net::error::would_block) co_return std::make_tuple(ec, consumed);
    }
    if constexpr (std::is_same_v<AsyncReadStream, beast::tcp_stream>) {
      if (timeout && !deadline_set) stream.expires_after(*timeout);
      deadline_set = true;
    }
    // At least 512 bytes, else the buffer's spare capacity (as Beast reads).
    const size_t room = std::max<size_t>(512, buffer.capacity() - buffer.size());
    auto [rec, n] = co_await stream.async_read_some(
        buffer.prepare(std::min(room, buffer.max_size() - buffer.size())), kUseTuple);
    buffer.commit(n);
    // End of stream: the synchronous read sees it again and ends the message
    // (or reports it) as Beast would.
    if (rec && rec != net::error::eof) co_return std::make_tuple(rec, consumed);
  }
}

// The two halves of EagerWrite, for the request path's writes, which
// mostly finish at once: calling a coroutine allocates its frame and runs
// Asio's resumption machinery even when it never suspends, so
//
//   const WriteAttempt w = WriteNow(stream, buffers);
//   ec = w.ec;
//   if (!w.done) ec = co_await WriteRest(stream, buffers, w.written, timeout);
//
// enters a coroutine only when the socket would block.
struct WriteAttempt {
  bool done = false;  // false: the socket would block after `written` bytes
  beast::error_code ec;
  size_t written = 0;
};

template <class ConstBufferSequence>
WriteAttempt WriteNow(beast::tcp_stream& stream, const ConstBufferSequence& buffers) {
  MakeNonBlocking(stream);
  WriteAttempt w;
  w.written = net::write(stream.socket(), buffers, w.ec);
  w.done = w.ec != net::error::would_block;
  return w;
}

// Writes what WriteNow left (all of `buffers` past `written`) through the
// reactor, under `timeout`.
template <class ConstBufferSequence>
net::awaitable<beast::error_code> WriteRest(beast::tcp_stream& stream,
                                            const ConstBufferSequence& buffers, size_t written,
                                            EagerTimeout timeout) {
  stream.expires_after(timeout);
  beast::buffers_suffix<ConstBufferSequence> rest(buffers);
  rest.consume(written);
  auto [wec, wn] = co_await net::async_write(stream, rest, kUseTuple);
  co_return wec;
}

// Writes all of `buffers`: at once when the socket takes them, else the rest
// through the reactor.
template <class ConstBufferSequence>
net::awaitable<beast::error_code> EagerWrite(beast::tcp_stream& stream,
                                             const ConstBufferSequence& buffers,
                                             EagerTimeout timeout) {
  const WriteAttempt w = WriteNow(stream, buffers);
  if (w.done) co_return w.ec;
  co_return co_await WriteRest(stream, buffers, w.written, timeout);
}

// Writes an HTTP message (or what is left of it) through its serializer.
template <class Serializer>
net::awaitable<beast::error_code> EagerWriteMessage(beast::tcp_stream& stream, Serializer& sr,
                                                    EagerTimeout timeout) {
  MakeNonBlocking(stream);
  beast::error_code ec;
  http::write(stream.socket(), sr, ec);
  if (ec != net::error::would_block) co_return ec;
  stream.expires_after(timeout);
  auto [wec, wn] = co_await http::async_write(stream, sr, kUseTuple);
  co_return wec;
}

}  // namespace kvroute::proxy
