#include "transport/rank_fabric.hpp"

#include <stdexcept>

namespace supernode::transport {

rank_fabric::rank_fabric(int rank, int ranks, size_t bytes, size_t flags, log::logger log)
    : rank_(rank), ranks_(ranks), bytes_(bytes), flags_(flags), log_(std::move(log)) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw std::invalid_argument("rank fabric: rank " + std::to_string(rank) + " of " +
                                std::to_string(ranks) + " is out of range");
}

void rank_fabric::check_peer(int to) const {
  if (to < 0 || to >= ranks_)
    throw std::out_of_range("rank fabric: no rank " + std::to_string(to) + " in a group of " +
                            std::to_string(ranks_));
}

void rank_fabric::check_flag(size_t flag) const {
  if (flag >= flags_)
    throw std::out_of_range("rank fabric: flag " + std::to_string(flag) + " is outside the " +
                            std::to_string(flags_) + " flags");
}

} // namespace supernode::transport
