#include "services/moe/expert_parallel.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace supernode::services {

namespace {

using clock_type = std::chrono::steady_clock;

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

// Bytes of one dispatched token's payload: its INT8 row (padded as the kernels read it) or, for
// FP32 models, its floats.
size_t payload_bytes(const model::model_config& c, model::precision prec) {
  const auto h = static_cast<size_t>(c.hidden_size);
  return prec == model::precision::int8 ? round_up(h, kernels::quantize_k_step) : h * sizeof(float);
}

std::vector<int32_t> hosts_of(const ep_options& o) {
  if (!o.expert_hosts.empty()) return o.expert_hosts;
  std::vector<int32_t> all(static_cast<size_t>(o.ranks));
  for (int32_t r = 0; r < o.ranks; ++r) all[r] = r;
  return all;
}

} // namespace

const char* ep_stage_times::name(int s) {
  static const char* names[] = {"attention", "gate", "dispatch", "experts", "combine", "idle"};
  return s >= 0 && s < count ? names[s] : "?";
}

void ep_stage_times::add(const ep_stage_times& other) {
  if (seconds.size() < other.seconds.size()) seconds.resize(other.seconds.size(), {});
  for (size_t l = 0; l < other.seconds.size(); ++l)
    for (int s = 0; s < count; ++s) seconds[l][s] += other.seconds[l][s];
  ops += other.ops;
  forwards += other.forwards;
  dispatch_latency += other.dispatch_latency;
  combine_latency += other.combine_latency;
}

ep_layout expert_parallel::layout_for(const model::model_config& c, model::precision prec,
                                      const ep_options& o) {
  if (o.ranks < 1 || o.rank < 0 || o.rank >= o.ranks)
    throw std::invalid_argument("expert parallelism: rank " + std::to_string(o.rank) + " of " +
                                std::to_string(o.ranks) + " is out of range");
  if (o.microbatches < 1 || o.microbatches > 2)
    throw std::invalid_argument("expert parallelism: microbatches must be 1 or 2");
  if (o.redundant_per_rank < 0)
    throw std::invalid_argument("expert parallelism: redundant_per_rank must be >= 0");
  const auto hosts = hosts_of(o);
  for (auto h : hosts)
    if (h < 0 || h >= o.ranks)
      throw std::invalid_argument("expert parallelism: expert host " + std::to_string(h) +
                                  " is not a rank of the group");
  const int64_t n_hosts = static_cast<int64_t>(hosts.size());
  if (n_hosts > c.n_routed_experts)
    throw std::invalid_argument("expert parallelism: " + std::to_string(n_hosts) +
                                " expert hosts for " + std::to_string(c.n_routed_experts) +
                                " routed experts");
  ep_layout l;
  l.sizes.ranks = o.ranks;
  l.sizes.local_batch = o.local_batch;
  l.sizes.topk = c.num_experts_per_tok;
  // The most any host may hold: an even share plus the replica slots EPLB may fill.
  l.sizes.experts_per_rank = (c.n_routed_experts + n_hosts - 1) / n_hosts + o.redundant_per_rank;
  l.sizes.hidden = static_cast<int64_t>(payload_bytes(c, prec));
  l.sizes.validate();
  l.hidden = c.hidden_size;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) l.moe_layers += i >= c.first_k_dense_replace;
  l.experts = c.n_routed_experts;
  l.placement_words = 3 + static_cast<size_t>(l.moe_layers) *
                              (3 + n_hosts + c.n_routed_experts + n_hosts * o.redundant_per_rank);
  return l;
}

expert_parallel::expert_parallel(std::shared_ptr<const model::model_weights> weights,
                                 transport::rank_fabric& fabric, const ep_options& options)
    : weights_(std::move(weights)), fabric_(fabric), options_(options),
      layout_(layout_for(weights_->config, weights_->prec, options)), hosts_(hosts_of(options)) {
  const auto& c = weights_->config;
  if (fabric.ranks() != options.ranks || fabric.rank() != options.rank ||
      fabric.bytes() < layout_.total_bytes() || fabric.flags() < ep_flag_count)
    throw std::invalid_argument("expert parallelism: the fabric does not fit the layout (" +
                                layout_.describe() + ")");
  if (layout_.moe_layers == 0)
    throw std::invalid_argument("expert parallelism: the model has no MoE layer");
  int64_t m = 0;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    moe_layer_of_.push_back(weights_->layers[i].is_moe ? m++ : -1);
  const auto base = expert_placement::uniform(static_cast<int32_t>(c.n_routed_experts),
                                              static_cast<int32_t>(hosts_.size()));
  placements_.assign(static_cast<size_t>(layout_.moe_layers), base);
  routed_counts_.assign(static_cast<size_t>(layout_.moe_layers * layout_.experts), 0);
  staging_.resize(static_cast<size_t>(options.ranks * layout_.sizes.max_tokens()) *
                  layout_.dispatch_message_bytes());
  batches_.resize(static_cast<size_t>(c.n_routed_experts));
  by_expert_.resize(static_cast<size_t>(c.n_routed_experts));
  times_.seconds.assign(static_cast<size_t>(layout_.moe_layers), {});
}

// ---- failure --------------------------------------------------------------------------------

void expert_parallel::fail(const std::string& why) {
  {
    std::lock_guard lock(shared_mutex_);
    if (!failure_.empty()) return;
    failure_ = why;
  }
  failed_ = true;
  // Leave a note in every peer's region first: a peer that then sees this rank leave can say
  // why, instead of only "rank N left the group".
  std::string note = why.substr(0, ep_layout::note_bytes - 1);
  note.resize(ep_layout::note_bytes, '\0');
  for (int32_t r = 0; r < options_.ranks; ++r) {
    if (r == options_.rank) continue;
    try {
      fabric_.write(r, layout_.note_offset(options_.rank), std::as_bytes(std::span(note)));
      fabric_.add(r, ep_flag_doorbell, 1); // orders the note before the leave that follows
    } catch (const std::exception&) {
      // That peer is gone or unreachable: nobody there to read it.
    }
  }
  ring();
}

std::string expert_parallel::peer_notes() const {
  fabric_.load(ep_flag_doorbell); // acquire: notes written before their doorbell add
  std::string notes;
  for (int32_t r = 0; r < options_.ranks; ++r) {
    if (r == options_.rank) continue;
    const char* text = reinterpret_cast<const char*>(fabric_.local() + layout_.note_offset(r));
    const std::string note(text, strnlen(text, ep_layout::note_bytes));
    if (!note.empty()) notes += "; rank " + std::to_string(r) + " said: " + note;
  }
  return notes;
}

std::string expert_parallel::failure() const {
  std::lock_guard lock(shared_mutex_);
  return failure_;
}

void expert_parallel::check_failed() const {
  if (failed_) throw ep_failure("expert-parallel group broken: " + failure());
}

void expert_parallel::wait_flag(size_t flag, uint64_t at_least, const char* what, uint64_t op) {
  const auto deadline = clock_type::now() + options_.op_timeout;
  while (!fabric_.wait(flag, at_least, std::chrono::milliseconds(20))) {
    check_failed();
    if (auto why = fabric_.peer_failure(); !why.empty()) {
      // A peer may leave right after its last write: what this op needs can be complete.
      if (fabric_.load(flag) >= at_least) return;
      fail(why + peer_notes());
      check_failed();
    }
    if (clock_type::now() >= deadline) {
      fail("rank " + std::to_string(options_.rank) + " waited " +
           std::to_string(options_.op_timeout.count()) + " ms for " + what + " of op " +
           std::to_string(op));
      check_failed();
    }
  }
}

// ---- idle ranks -----------------------------------------------------------------------------

void expert_parallel::announce() {
  for (int32_t r = 0; r < options_.ranks; ++r) {
    if (r == options_.rank) continue;
    fabric_.add(r, ep_flag_announce, 1);
    fabric_.add(r, ep_flag_doorbell, 1);
  }
}

bool expert_parallel::peer_waiting() const {
  const uint64_t per_forward = static_cast<uint64_t>(layout_.moe_layers * options_.microbatches);
  const uint64_t joined = ops_ / per_forward;
  return fabric_.load(ep_flag_announce) > joined * static_cast<uint64_t>(options_.ranks - 1);
}

void expert_parallel::serve_idle_forward() {
  for (size_t layer = 0; layer < moe_layer_of_.size(); ++layer) {
    if (moe_layer_of_[layer] < 0) continue;
    for (int32_t mb = 0; mb < options_.microbatches; ++mb)
      forward(static_cast<int64_t>(layer), weights_->layers[layer].moe, nullptr, 0, nullptr);
  }
}

uint64_t expert_parallel::doorbell_value() const {
  return fabric_.load(ep_flag_doorbell);
}

void expert_parallel::sleep(uint64_t seen, std::chrono::milliseconds timeout) {
  fabric_.wait(ep_flag_doorbell, seen + 1, timeout);
}

void expert_parallel::ring() {
  fabric_.add(options_.rank, ep_flag_doorbell, 1);
}

// ---- one op ---------------------------------------------------------------------------------

void expert_parallel::record(int64_t moe_layer, int stage, clock_type::time_point& since) {
  const auto now = clock_type::now();
  std::lock_guard lock(shared_mutex_);
  times_.seconds[moe_layer][stage] += std::chrono::duration<double>(now - since).count();
  since = now;
}

int64_t expert_parallel::begin_op(int64_t layer, int64_t rows) {
  check_failed();
  if (layer < 0 || layer >= static_cast<int64_t>(moe_layer_of_.size()) || moe_layer_of_[layer] < 0)
    throw std::invalid_argument("expert parallelism: layer " + std::to_string(layer) +
                                " is not an MoE layer");
  if (rows > options_.local_batch)
    throw std::invalid_argument("expert parallelism: " + std::to_string(rows) +
                                " tokens in one op, the buffers hold " +
                                std::to_string(options_.local_batch) + " per rank");
  const int64_t moe_layer = moe_layer_of_[layer];
  const uint64_t per_forward = static_cast<uint64_t>(layout_.moe_layers * options_.microbatches);
  if (ops_ % per_forward == 0) {
    if (options_.eplb_interval > 0) exchange_stats();
    apply_published_placement();
    if (announced_early_) {
      // Since the forward began: embedding, dense layers and this layer's attention.
      auto start = forward_start_;
      record(moe_layer, ep_stage_times::attention, start);
    } else {
      announce(); // an idle forward, or a caller that did not say when it began
    }
    announced_early_ = false;
    std::lock_guard lock(shared_mutex_);
    ++times_.forwards;
  } else {
    // Since the previous op of this forward: this layer's attention (and norms, dense MLPs).
    auto prev = last_op_end_;
    record(moe_layer, ep_stage_times::attention, prev);
  }
  return moe_layer;
}

void expert_parallel::forward_begins() {
  check_failed();
  const uint64_t per_forward = static_cast<uint64_t>(layout_.moe_layers * options_.microbatches);
  if (announced_early_ || ops_ % per_forward != 0) return; // mid-forward (microbatch B)
  forward_start_ = clock_type::now();
  announce();
  announced_early_ = true;
}

void expert_parallel::forward(int64_t layer, const model::moe_weights& w, const float* x,
                              int64_t rows, float* out) {
  const int64_t moe_layer = begin_op(layer, rows);
  auto since = clock_type::now();
  model::route_tokens(weights_->config, w, x, rows, routing_);
  record(moe_layer, ep_stage_times::gate, since);
  run_op(moe_layer, routing_, x, rows, out, [&](std::span<model::expert_batch* const> batches) {
    model::run_experts(weights_->config, w, weights_->prec, batches);
  });
}

void expert_parallel::exchange(int64_t layer, const model::moe_routing& routing, const float* x,
                               int64_t rows, float* out, const expert_step& experts) {
  if (routing.rows != rows || routing.k != weights_->config.num_experts_per_tok)
    throw std::invalid_argument("expert parallelism: routing for " + std::to_string(routing.rows) +
                                " tokens given with " + std::to_string(rows));
  run_op(begin_op(layer, rows), routing, x, rows, out, experts);
}

void expert_parallel::run_op(int64_t moe_layer, const model::moe_routing& routing, const float* x,
                             int64_t rows, float* out, const expert_step& experts) {
  const uint64_t op = ops_;
  const int slot = static_cast<int>(op % 2);
  auto since = clock_type::now();
  dispatch_start_ = since;
  dispatch(slot, op, moe_layer, routing, x, rows);
  record(moe_layer, ep_stage_times::dispatch, since);
  serve_experts(slot, op, moe_layer, experts);
  combine(slot, op, moe_layer, routing, rows, out);
  ++ops_;
  last_op_end_ = clock_type::now();
  std::lock_guard lock(shared_mutex_);
  ++times_.ops;
}

void expert_parallel::dispatch(int slot, uint64_t op, int64_t moe_layer,
                               const model::moe_routing& routing, const float* x, int64_t rows) {
  const auto& c = weights_->config;
  const int64_t k = routing.k, h = c.hidden_size, max_tokens = layout_.sizes.max_tokens();
  const size_t msg = layout_.dispatch_message_bytes(),
               payload = static_cast<size_t>(layout_.sizes.hidden),
               header_at = round_up(payload, layout_.sizes.alignment);
  const bool int8 = weights_->prec == model::precision::int8;
  if (int8 && rows > 0) kernels::quantize_rows(x, rows, h, h, xq_);
  per_dest_.assign(static_cast<size_t>(options_.ranks), 0);
  const auto& placement = placements_[moe_layer];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = routing.expert[r * k + j];
      ++routed_counts_[moe_layer * layout_.experts + e];
      const int32_t dest = hosts_[placement.route(e, options_.rank).rank];
      const int64_t index = per_dest_[dest]++;
      // Impossible by construction (a token's k experts are distinct, a host holds at most
      // experts_per_rank of them): the check guards the buffer, not the routing.
      if (index >= max_tokens)
        throw std::logic_error("expert parallelism: dispatch to rank " + std::to_string(dest) +
                               " overflows its " + std::to_string(max_tokens) + " messages");
      std::byte* m = staging_.data() + (static_cast<size_t>(dest * max_tokens + index)) * msg;
      dispatch_header hd;
      hd.source_rank = options_.rank;
      hd.batch_slot = static_cast<int32_t>(r);
      hd.route_slot = static_cast<int32_t>(j);
      hd.expert = e;
      if (int8) {
        std::memcpy(m, xq_.row(r), payload);
        hd.scale = xq_.scale[r];
      } else {
        std::memcpy(m, x + r * h, payload);
      }
      std::memcpy(m + header_at, &hd, sizeof hd);
    }
  for (int32_t dest = 0; dest < options_.ranks; ++dest) {
    const int64_t n = per_dest_[dest];
    if (n > 0)
      fabric_.write(dest, layout_.dispatch_offset(slot, options_.rank, 0),
                    std::span(staging_.data() + static_cast<size_t>(dest * max_tokens) * msg,
                              static_cast<size_t>(n) * msg));
    const ep_count_entry count{op + 1, n};
    fabric_.write(dest, layout_.count_offset(slot, options_.rank),
                  std::as_bytes(std::span(&count, 1)));
    fabric_.add(dest, ep_flag_dispatch + slot, 1);
  }
}

void expert_parallel::serve_experts(int slot, uint64_t op, int64_t moe_layer,
                                    const expert_step& experts) {
  const auto& c = weights_->config;
  const int64_t h = c.hidden_size, ranks = options_.ranks;
  auto since = clock_type::now();
  wait_flag(ep_flag_dispatch + slot, (op / 2 + 1) * static_cast<uint64_t>(ranks), "dispatches", op);
  {
    std::lock_guard lock(shared_mutex_);
    times_.dispatch_latency +=
        std::chrono::duration<double>(clock_type::now() - dispatch_start_).count();
  }
  record(moe_layer, ep_stage_times::idle, since);

  const std::byte* base = fabric_.local();
  const size_t payload = static_cast<size_t>(layout_.sizes.hidden),
               header_at = round_up(payload, layout_.sizes.alignment);
  for (auto& list : by_expert_) list.clear();
  for (int32_t s = 0; s < ranks; ++s) {
    ep_count_entry count;
    std::memcpy(&count, base + layout_.count_offset(slot, s), sizeof count);
    if (count.op_stamp != op + 1 || count.messages < 0 ||
        count.messages > layout_.sizes.max_tokens()) {
      fail("rank " + std::to_string(s) + " sent a dispatch count for op " +
           std::to_string(count.op_stamp - 1) + " with " + std::to_string(count.messages) +
           " messages while rank " + std::to_string(options_.rank) + " runs op " +
           std::to_string(op));
      check_failed();
    }
    for (int64_t i = 0; i < count.messages; ++i) {
      const std::byte* m = base + layout_.dispatch_offset(slot, s, i);
      dispatch_header hd;
      std::memcpy(&hd, m + header_at, sizeof hd);
      if (hd.expert < 0 || hd.expert >= c.n_routed_experts || hd.batch_slot < 0 ||
          hd.batch_slot >= options_.local_batch || hd.route_slot < 0 ||
          hd.route_slot >= c.num_experts_per_tok || hd.source_rank != s) {
        fail("rank " + std::to_string(s) + " sent a malformed dispatch message (expert " +
             std::to_string(hd.expert) + ", batch slot " + std::to_string(hd.batch_slot) +
             ", route slot " + std::to_string(hd.route_slot) + ")");
        check_failed();
      }
      by_expert_[hd.expert].push_back({m, hd});
    }
  }
  const bool int8 = weights_->prec == model::precision::int8;
  batch_pointers_.clear();
  for (int32_t e = 0; e < c.n_routed_experts; ++e) {
    auto& b = batches_[e];
    const auto& list = by_expert_[e];
    b.expert = e;
    b.rows = static_cast<int64_t>(list.size());
    if (b.rows == 0) continue;
    if (int8) {
      b.in_q.rows = b.rows;
      b.in_q.cols = h;
      b.in_q.stride = static_cast<int64_t>(payload);
      b.in_q.q.resize(static_cast<size_t>(b.rows) * payload);
      b.in_q.scale.resize(static_cast<size_t>(b.rows));
    } else {
      b.in_f.resize(static_cast<size_t>(b.rows * h));
    }
    for (int64_t t = 0; t < b.rows; ++t) {
      if (int8) {
        std::memcpy(b.in_q.q.data() + t * payload, list[t].payload, payload);
        b.in_q.scale[t] = list[t].header.scale;
      } else {
        std::memcpy(b.in_f.data() + t * h, list[t].payload, payload);
      }
    }
    batch_pointers_.push_back(&b);
  }
  experts(batch_pointers_);
  record(moe_layer, ep_stage_times::experts, since);
  combine_start_ = since;

  // Each output goes straight to its source's combine buffer at [batch slot][route slot].
  auto& sent = combines_sent_;
  sent.assign(static_cast<size_t>(ranks), 0);
  auto& message = combine_message_;
  message.resize(layout_.combine_message_bytes());
  const ep_combine_header stamp{op + 1};
  std::memcpy(message.data(), &stamp, sizeof stamp);
  for (auto* b : batch_pointers_) {
    const auto& list = by_expert_[b->expert];
    for (int64_t t = 0; t < b->rows; ++t) {
      const auto& hd = list[t].header;
      std::memcpy(message.data() + sizeof stamp, b->out.data() + t * h, h * sizeof(float));
      fabric_.write(hd.source_rank, layout_.combine_offset(slot, hd.batch_slot, hd.route_slot),
                    std::span(message.data(), sizeof stamp + h * sizeof(float)));
      ++sent[hd.source_rank];
    }
  }
  for (int32_t s = 0; s < ranks; ++s)
    if (sent[s] > 0) fabric_.add(s, ep_flag_combine + slot, sent[s]);
  record(moe_layer, ep_stage_times::combine, since);
}

void expert_parallel::combine(int slot, uint64_t op, int64_t moe_layer,
                              const model::moe_routing& routing, int64_t rows, float* out) {
  const int64_t k = routing.k, h = weights_->config.hidden_size;
  auto since = clock_type::now();
  combine_expected_[slot] += static_cast<uint64_t>(rows * k);
  wait_flag(ep_flag_combine + slot, combine_expected_[slot], "combine outputs", op);
  {
    std::lock_guard lock(shared_mutex_);
    times_.combine_latency +=
        std::chrono::duration<double>(clock_type::now() - combine_start_).count();
  }
  record(moe_layer, ep_stage_times::idle, since);
  if (rows == 0) return;
  const std::byte* base = fabric_.local();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) {
      ep_combine_header hd;
      std::memcpy(&hd, base + layout_.combine_offset(slot, r, j), sizeof hd);
      if (hd.op_stamp != op + 1) {
        fail("combine output for token " + std::to_string(r) + " route " + std::to_string(j) +
             " of op " + std::to_string(op) + " never arrived (stamp " +
             std::to_string(hd.op_stamp) + ")");
        check_failed();
      }
    }
  model::combine_routes(
      routing, h,
      [&](int64_t r, int64_t j) {
        return reinterpret_cast<const float*>(base + layout_.combine_offset(slot, r, j) +
                                              sizeof(ep_combine_header));
      },
      nullptr, out);
  record(moe_layer, ep_stage_times::combine, since);
}

ep_stage_times expert_parallel::stage_times() const {
  std::lock_guard lock(shared_mutex_);
  return times_;
}

expert_parallel::rebalance_report expert_parallel::first_rebalance() const {
  std::lock_guard lock(shared_mutex_);
  return first_rebalance_;
}

expert_parallel::rebalance_report expert_parallel::last_rebalance() const {
  std::lock_guard lock(shared_mutex_);
  return rebalance_;
}

} // namespace supernode::services
