#pragma once
// Scratch buffers that a kernel overwrites in full before anything reads them. std::vector's
// resize value-initializes every element it adds, so a buffer that shrinks for one call and
// grows back for the next (the dense MLP's and the shared expert's intermediates share one)
// is zero-filled again each time: in a 2,048-token prefill that memset, and the page faults
// of first touches inside it, cost more than a tenth of the CPU time. Elements added here are
// default-initialized instead, which for float and int is no write at all.

#include "kernels/weight_memory.hpp"

#include <memory>
#include <utility>
#include <vector>

namespace supernode::kernels {

// `Base` allocates (std::allocator, or weight_allocator for huge pages).
template<class T, template<class> class Base = std::allocator>
struct default_init_allocator : Base<T> {
  using value_type = T;
  template<class U>
  struct rebind {
    using other = default_init_allocator<U, Base>;
  };
  default_init_allocator() = default;
  template<class U>
  default_init_allocator(const default_init_allocator<U, Base>&) noexcept {}
  template<class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0)
      ::new (static_cast<void*>(p)) U;
    else
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// Only for outputs written in full by the code that sizes them: resize leaves new elements
// indeterminate.
template<class T>
using scratch_vector = std::vector<T, default_init_allocator<T>>;

// The same, in memory advised to huge pages (weight_memory.hpp) whichever thread allocates it:
// a pool worker's own buffers would otherwise come from its malloc arena, outside the
// huge-page heap, and fault in 4 KB at a time on first use.
template<class T>
using huge_page_scratch_vector = std::vector<T, default_init_allocator<T, weight_allocator>>;

} // namespace supernode::kernels
