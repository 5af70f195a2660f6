#pragma once
// A registered region: N bytes plus M 64-bit flag/counter words in one shm segment, named
// "/supernode.<cluster>.region.<name>". The owner creates it; other processes on the host open it
// by name, write() straight into it (one-sided, no receiver involvement) and then publish() or
// add() a flag; a waiter blocks in wait() until the flag reaches a value and then reads the data.
// This is the UB primitive FusedDispatch/FusedCombine build on: writers fill a rank's static
// dispatch/combine buffer and bump its ready flags.
//
// Memory ordering: the data bytes are plain stores (memcpy). publish()/add() write the flag with
// release semantics after them; wait() reads the flag with acquire semantics. Once a waiter
// observes a flag value written by a release, every store the writer made before that release
// (the whole memcpy) happens-before the waiter's subsequent reads — across processes too, since
// the flag is a lock-free (address-free) atomic in memory both map. A waiter that sees an older
// value may see any mix of old and new data, which is why it reads only after wait() returns.
// Flags are monotonic by convention (round numbers, counts): wait(i, v) waits for value >= v, so
// a waiter that arrives late is never stuck on a value that has already been passed.
// Sleeping: each flag has its own futex word and sleeper count (doorbell); publish() makes the
// wake syscall only when someone sleeps on that flag, so a spinning owner costs writers nothing.

#include "transport/shm_segment.hpp"
#include "transport/shm_sync.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace supernode::transport {

class shm_region {
public:
  shm_region() = default;
  static shm_region create(std::string_view cluster, std::string_view name, size_t bytes,
                           size_t flags);
  static shm_region open(std::string_view cluster, std::string_view name);
  // Nothing while the owner has not created it yet (or only a dead owner's leftover exists).
  static std::optional<shm_region> try_open(std::string_view cluster, std::string_view name);

  size_t size() const { return bytes_; }
  size_t flag_count() const { return flags_; }
  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  // Bounds-checked view for writers that build data in place; throws std::out_of_range.
  std::span<std::byte> span(size_t offset, size_t size);

  // Copies into [offset, offset + bytes.size()); throws std::out_of_range naming the region.
  void write(size_t offset, std::span<const std::byte> bytes);
  // Release-stores `value` into flag `index`, waking its sleepers.
  void publish(size_t index, uint64_t value);
  // Release-adds `delta` (several writers counting into one flag); returns the new value.
  uint64_t add(size_t index, uint64_t delta);
  // Acquire-loads the flag.
  uint64_t load(size_t index) const;
  // Until flag `index` >= `at_least` (acquire); spins for `spin`, then sleeps. False on timeout.
  bool wait(size_t index, uint64_t at_least, std::chrono::nanoseconds timeout,
            std::chrono::nanoseconds spin = std::chrono::microseconds(50));

  const std::string& name() const { return segment_.name(); }
  bool owner_alive() const { return segment_.creator_alive(); }
  pid_t owner_pid() const { return segment_.creator_pid(); }
  // The owner marks its region closed when it leaves cleanly; openers see it.
  void mark_closed() { segment_.mark_closed(); }
  bool closed() const { return segment_.closed(); }

private:
  struct flag;
  void check_flag(size_t index) const;
  shm_region(shm_segment seg);
  static shm_region from_segment(shm_segment seg); // checks the header

  shm_segment segment_;
  flag* flag_words_ = nullptr;
  std::byte* data_ = nullptr;
  size_t bytes_ = 0, flags_ = 0;
};

} // namespace supernode::transport
