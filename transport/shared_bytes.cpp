#include "transport/shared_bytes.hpp"

#include <algorithm>

namespace supernode::transport {

namespace {
thread_local detail::bytes_decode_scope* active_scope = nullptr;
} // namespace

shared_bytes::shared_bytes(std::vector<char> bytes) {
  if (bytes.empty()) return;
  auto held = std::make_shared<const std::vector<char>>(std::move(bytes));
  data_ = held->data();
  size_ = held->size();
  owner_ = std::move(held);
}

shared_bytes shared_bytes::copy_of(const void* data, size_t size) {
  if (size == 0) return {};
  // Not a vector: it would zero the bytes before they are overwritten.
  std::shared_ptr<char[]> copy(new char[size]);
  std::memcpy(copy.get(), data, size);
  const char* p = copy.get();
  return shared_bytes(std::move(copy), p, size);
}

namespace detail {

bytes_decode_scope::bytes_decode_scope(const char* payload, size_t size,
                                       std::shared_ptr<const void> owner_,
                                       std::span<const frame_part> spliced_)
    : begin(payload), end(payload + size), owner(std::move(owner_)), spliced(spliced_),
      used(spliced_.size(), false), previous_(active_scope) {
  active_scope = this;
}

bytes_decode_scope::~bytes_decode_scope() {
  active_scope = previous_;
}

bool bytes_decode_scope::all_spliced_used() const {
  return std::all_of(used.begin(), used.end(), [](bool u) { return u; });
}

shared_bytes bytes_from_object(const msgpack::object& o) {
  auto* scope = active_scope;
  if (o.type == msgpack::type::BIN || o.type == msgpack::type::STR) {
    const char* p = o.type == msgpack::type::BIN ? o.via.bin.ptr : o.via.str.ptr;
    const size_t n = o.type == msgpack::type::BIN ? o.via.bin.size : o.via.str.size;
    // Referenced only when the bytes are provably inside the owned payload; anything else (a
    // zone copy, a payload nobody owns past this call) is copied.
    if (scope && scope->owner && n > 0 && p >= scope->begin && p + n <= scope->end)
      return shared_bytes(scope->owner, p, n);
    return shared_bytes::copy_of(p, n);
  }
  // The receiver's marker for an out-of-line body: each body is claimed exactly once, so a
  // sender cannot make two fields share one or leave one unaccounted for.
  if (o.type == msgpack::type::EXT && scope && o.via.ext.type() == splice_ext_type &&
      o.via.ext.size == 1) {
    const auto index = static_cast<unsigned char>(o.via.ext.data()[0]);
    if (index < scope->spliced.size() && !scope->used[index]) {
      scope->used[index] = true;
      const auto& part = scope->spliced[index];
      const auto* p = reinterpret_cast<const char*>(part.bytes.data());
      if (part.owner) return shared_bytes(part.owner, p, part.bytes.size());
      return shared_bytes::copy_of(p, part.bytes.size());
    }
  }
  throw msgpack::type_error();
}

} // namespace detail
} // namespace supernode::transport
