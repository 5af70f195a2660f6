#include "transport/encoded_frame.hpp"

#include <algorithm>
#include <new>

namespace supernode::transport {

namespace {
thread_local frame_writer* active_writer = nullptr;
} // namespace

size_t encoded_frame::size() const {
  size_t n = head.size;
  for (auto& s : splices) n += s.body.size();
  return n;
}

std::vector<std::span<const std::byte>> encoded_frame::pieces() const {
  std::vector<std::span<const std::byte>> out;
  out.reserve(2 * splices.size() + 1);
  const auto h = head.bytes();
  size_t from = 0;
  for (auto& s : splices) {
    if (s.at > from) out.push_back(h.subspan(from, s.at - from));
    if (!s.body.empty()) out.push_back(s.body.bytes());
    from = s.at;
  }
  if (from < h.size()) out.push_back(h.subspan(from));
  return out;
}

byte_buffer encoded_frame::flatten() const {
  byte_buffer b;
  b.size = size();
  b.data.reset(static_cast<char*>(std::malloc(std::max<size_t>(b.size, 1))));
  if (!b.data) throw std::bad_alloc();
  size_t at = 0;
  for (auto piece : pieces()) {
    if (!piece.empty()) std::memcpy(b.data.get() + at, piece.data(), piece.size());
    at += piece.size();
  }
  return b;
}

frame_writer::frame_writer(bool splicing)
    : data_(static_cast<char*>(std::malloc(512))), capacity_(512), splicing_(splicing) {
  if (!data_) throw std::bad_alloc();
}

void frame_writer::grow(size_t needed) {
  // Doubling keeps many small writes cheap; a write larger than that gets its size plus room
  // for the fields that may follow it.
  const size_t capacity = std::max(capacity_ * 2, needed + 4096);
  auto* bigger = static_cast<char*>(std::realloc(data_, capacity));
  if (!bigger) throw std::bad_alloc();
  data_ = bigger;
  capacity_ = capacity;
}

bool frame_writer::splice(const shared_bytes& body) {
  // Without an owner nothing keeps the bytes alive until the plane has sent them: copy.
  if (!splicing_ || !body.owner() || body.size() < splice_min_bytes || body.size() > UINT32_MAX)
    return false;
  // Always bin32, so a receiver of separate parts knows where the header before a body starts.
  const auto n = static_cast<uint32_t>(body.size());
  const char header[5] = {char(0xc6), char(n >> 24), char(n >> 16), char(n >> 8), char(n)};
  write(header, sizeof header);
  splices_.push_back({size_, body});
  return true;
}

encoded_frame frame_writer::release() {
  encoded_frame f;
  f.head.size = size_;
  f.head.data.reset(data_);
  f.splices = std::move(splices_);
  data_ = nullptr;
  size_ = capacity_ = 0;
  return f;
}

frame_writer::active_scope::active_scope(frame_writer& w) : previous_(active_writer) {
  active_writer = &w;
}

frame_writer::active_scope::~active_scope() {
  active_writer = previous_;
}

namespace detail {
bool splice_into_active_writer(const shared_bytes& b) {
  return active_writer && active_writer->splice(b);
}
} // namespace detail

} // namespace supernode::transport
