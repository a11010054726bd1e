// proxy::Session: one client connection. Reads requests one after another
// (keep-alive, pipelining), enforces the header/body/idle limits, checks
// admin access, and dispatches each request to its handler: completions
// (completion.h), the ops endpoints (ops_handlers.h).
//
//   auto session = std::make_shared<Session>(worker, state, std::move(socket));
//   net::co_spawn(worker.ioc, [session] { return session->Run(); }, net::detached);
//
// Owned by its own Run() coroutine (shared_from_this); lives on one worker
// for its whole life. Thread-safety: none needed: everything it touches
// runs on its worker's thread, and the shared state is thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "proxy/client_request.h"
#include "proxy/features.h"
#include "proxy/config.h"
#include "proxy/http_common.h"
#include "proxy/watchdog.h"

namespace kvroute::proxy {

struct SharedState;
struct Worker;

// Extra response header fields.
using Headers = std::vector<std::pair<std::string, std::string>>;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Worker& worker, SharedState& state, tcp::socket sock);

  // Serves requests until the client closes, a limit or an error ends the
  // connection, or the server drains.
  net::awaitable<void> Run();

  // For the request handlers, on this session's thread.
  Worker& worker() { return worker_; }
  SharedState& state() { return state_; }
  const Config& config() const { return cfg_; }
  beast::tcp_stream& client() { return stream_; }
  // Deadlines of the idle wait and of the upstream waits.
  Watchdog& watchdog() { return *watchdog_; }

  // Writes a response; returns whether the connection may be kept alive.
  net::awaitable<bool> SendBody(int status, std::string_view content_type, std::string body,
                                bool keep_alive, Headers extra = {});
  // An OpenAI-shaped error answer.
  net::awaitable<bool> SendError(int status, std::string_view message, bool keep_alive,
                                 Headers extra = {});
  // An error answered by kvroute itself on a completion route, in that API's
  // shape (Anthropic's on /v1/messages, else OpenAI's).
  net::awaitable<bool> SendApiError(Endpoint endpoint, int status, std::string_view message,
                                    bool keep_alive, Headers extra = {});

 private:
  // Answers a request that could not be read; returns whether it answered.
  net::awaitable<bool> ReadFailed(beast::error_code ec);
  net::awaitable<void> DrainBeforeClose();
  // Routes one request; returns whether the connection may be kept alive.
  net::awaitable<bool> Dispatch(ClientRequest& req);
  net::awaitable<bool> DispatchOther(ClientRequest& req);

  Worker& worker_;
  SharedState& state_;
  const Config& cfg_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  ClientRequest request_;  // the request being served; reused, its strings kept
  tcp::endpoint remote_;
  // Deadlines of the idle wait and of the upstream waits (see watchdog.h).
  std::shared_ptr<Watchdog> watchdog_ = std::make_shared<Watchdog>(stream_.get_executor());
};

}  // namespace kvroute::proxy
