#include "services/loadgen/load_runner.hpp"

#include "services/loadgen/http_client.hpp"

// clang-format off
#include <utility> // before asio: Boost 1.74's awaitable.hpp uses std::exchange
// clang-format on
#include <boost/asio.hpp>

namespace supernode::services::loadgen {

namespace net = boost::asio;
using clock_type = std::chrono::steady_clock;

namespace {

class load_run {
public:
  load_run(net::io_context& ioc, const std::vector<planned_request>& plan,
           const run_options& options)
      : ioc_(ioc), plan_(plan), options_(options), slot_freed_(ioc), ticker_(ioc) {
    result_.outcomes.resize(plan.size());
  }

  net::awaitable<void> dispatch() {
    net::ip::tcp::resolver resolver(ioc_);
    error_code ec;
    urls_.push_back(&options_.url);
    for (const auto& u : options_.more_urls) urls_.push_back(&u);
    for (const auto* url : urls_) {
      endpoints_.push_back(co_await resolver.async_resolve(
          url->host, url->port, net::redirect_error(net::use_awaitable, ec)));
      if (ec) break;
    }
    origin_ = clock_type::now();
    if (ec) {
      for (auto& o : result_.outcomes)
        o.error = "resolve " + urls_[endpoints_.size() - 1]->host + ": " + ec.message();
      finish();
      co_return;
    }
    if (options_.on_start) options_.on_start(origin_);
    net::steady_timer arrival(ioc_);
    for (size_t i = 0; i < plan_.size(); ++i) {
      const auto due = origin_ + std::chrono::duration_cast<clock_type::duration>(
                                     std::chrono::duration<double>(plan_[i].arrival_s));
      if (clock_type::now() < due) {
        arrival.expires_at(due);
        co_await arrival.async_wait(net::redirect_error(net::use_awaitable, ec));
      }
      while (options_.max_concurrency > 0 && in_flight_ >= options_.max_concurrency)
        co_await wait_for_slot();
      ++in_flight_;
      net::co_spawn(ioc_, send(i), net::detached);
    }
    while (in_flight_ > 0) co_await wait_for_slot();
    finish();
  }

  net::awaitable<void> report_progress() {
    if (!options_.on_progress) co_return;
    error_code ec;
    while (!finished_) {
      ticker_.expires_after(std::chrono::duration_cast<clock_type::duration>(
          std::chrono::duration<double>(options_.progress_interval_s)));
      co_await ticker_.async_wait(net::redirect_error(net::use_awaitable, ec));
      if (finished_) break; // finish() reports the final state itself
      options_.on_progress(progress());
    }
  }

  run_result take_result() { return std::move(result_); }

private:
  using error_code = boost::system::error_code;

  // The timer is a condition variable: a finishing request cancels it to wake the dispatcher.
  net::awaitable<void> wait_for_slot() {
    error_code ec;
    slot_freed_.expires_at(clock_type::time_point::max());
    co_await slot_freed_.async_wait(net::redirect_error(net::use_awaitable, ec));
  }

  net::awaitable<void> send(size_t i) {
    completion_call call;
    call.model = options_.model;
    call.origin = origin_;
    call.timeout = std::chrono::duration_cast<clock_type::duration>(
        std::chrono::duration<double>(options_.timeout_s));
    call.tokens_seen = &tokens_seen_;
    call.return_token_ids = options_.return_token_ids;
    auto& out = result_.outcomes[i];
    for (int64_t attempt = 0;; ++attempt) {
      const size_t server = static_cast<size_t>(attempt) % urls_.size();
      call.url = urls_[server];
      call.endpoints = &endpoints_[server];
      request_outcome tried;
      co_await stream_completion(call, plan_[i], tried);
      tried.retries = attempt;
      if (attempt > 0) tried.send_s = out.send_s;
      out = std::move(tried);
      if (out.ok || !out.connection_error || attempt >= options_.retries) break;
    }
    --in_flight_;
    ++done_;
    if (!out.ok) ++failed_;
    slot_freed_.cancel();
  }

  void finish() {
    result_.duration_s = std::chrono::duration<double>(clock_type::now() - origin_).count();
    for (size_t i = 0; i < plan_.size(); ++i) {
      result_.outcomes[i].prompt_tokens = static_cast<int64_t>(plan_[i].prompt.size());
      result_.outcomes[i].max_tokens = plan_[i].max_tokens;
    }
    if (done_ < static_cast<int64_t>(plan_.size())) { // resolve failed: nothing was sent
      failed_ = static_cast<int64_t>(plan_.size());
      done_ = failed_;
    }
    finished_ = true;
    ticker_.cancel();
    if (options_.on_progress) options_.on_progress(progress());
  }

  run_progress progress() const {
    run_progress p;
    p.total = static_cast<int64_t>(plan_.size());
    p.done = done_;
    p.failed = failed_;
    p.in_flight = in_flight_;
    p.output_tokens = tokens_seen_;
    p.elapsed_s = std::chrono::duration<double>(clock_type::now() - origin_).count();
    return p;
  }

  net::io_context& ioc_;
  const std::vector<planned_request>& plan_;
  const run_options& options_;
  net::steady_timer slot_freed_;
  net::steady_timer ticker_;
  std::vector<const http_url*> urls_;
  std::vector<net::ip::tcp::resolver::results_type> endpoints_; // of urls_, in order
  clock_type::time_point origin_ = clock_type::now();
  run_result result_;
  int64_t in_flight_ = 0, done_ = 0, failed_ = 0, tokens_seen_ = 0;
  bool finished_ = false;
};

} // namespace

run_result run_load(const std::vector<planned_request>& plan, const run_options& options) {
  net::io_context ioc{1};
  load_run run(ioc, plan, options);
  auto rethrow = [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  };
  net::co_spawn(ioc, run.dispatch(), rethrow);
  net::co_spawn(ioc, run.report_progress(), rethrow);
  ioc.run();
  return run.take_result();
}

} // namespace supernode::services::loadgen
