#include "services/moe/expert_placement.hpp"

#include <algorithm>
#include <stdexcept>

namespace supernode::services {

namespace {

[[noreturn]] void fail(const std::string& why) {
  throw std::invalid_argument("expert placement words: " + why);
}

} // namespace

expert_placement expert_placement::uniform(int32_t experts, int32_t ranks) {
  if (experts <= 0 || ranks <= 0 || ranks > experts)
    throw std::invalid_argument("expert placement: need 0 < ranks <= experts, got " +
                                std::to_string(ranks) + " ranks for " + std::to_string(experts) +
                                " experts");
  expert_placement p;
  p.replicas_.resize(experts);
  p.hosted_.resize(ranks);
  const int32_t base = experts / ranks, extra = experts % ranks;
  int32_t e = 0;
  for (int32_t r = 0; r < ranks; ++r)
    for (int32_t i = 0; i < base + (r < extra ? 1 : 0); ++i, ++e) {
      p.replicas_[e].push_back({r, i});
      p.hosted_[r].push_back(e);
    }
  return p;
}

expert_placement expert_placement::from_hosted(int32_t experts,
                                               std::vector<std::vector<int32_t>> hosted_by_rank) {
  if (experts <= 0 || hosted_by_rank.empty())
    throw std::invalid_argument("expert placement: need at least one expert and one rank, got " +
                                std::to_string(experts) + " experts over " +
                                std::to_string(hosted_by_rank.size()) + " ranks");
  expert_placement p;
  p.replicas_.resize(experts);
  p.hosted_ = std::move(hosted_by_rank);
  for (int32_t r = 0; r < p.ranks(); ++r) {
    const auto& hosted = p.hosted_[r];
    for (int32_t i = 0; i < static_cast<int32_t>(hosted.size()); ++i) {
      const int32_t e = hosted[i];
      if (e < 0 || e >= experts)
        throw std::invalid_argument("expert placement: rank " + std::to_string(r) +
                                    " hosts expert id " + std::to_string(e) +
                                    ", out of range for " + std::to_string(experts) + " experts");
      auto& reps = p.replicas_[e];
      // Ranks are visited in order, so a second copy on this rank is always the last one seen.
      if (!reps.empty() && reps.back().rank == r)
        throw std::invalid_argument("expert placement: rank " + std::to_string(r) +
                                    " hosts expert " + std::to_string(e) + " twice");
      reps.push_back({r, i});
    }
  }
  for (int32_t e = 0; e < experts; ++e)
    if (p.replicas_[e].empty())
      throw std::invalid_argument("expert placement: expert " + std::to_string(e) +
                                  " has no replica on any rank");
  return p;
}

std::vector<int32_t> expert_placement::to_words() const {
  std::vector<int32_t> words{experts(), ranks()};
  for (auto& hosted : hosted_) {
    words.push_back(static_cast<int32_t>(hosted.size()));
    words.insert(words.end(), hosted.begin(), hosted.end());
  }
  return words;
}

expert_placement expert_placement::from_words(std::span<const int32_t> words) {
  if (words.size() < 2)
    fail("truncated: " + std::to_string(words.size()) + " words, need at least 2 (experts, ranks)");
  const int32_t experts = words[0], ranks = words[1];
  if (experts <= 0) fail("bad expert count " + std::to_string(experts) + ", must be positive");
  if (ranks <= 0) fail("bad rank count " + std::to_string(ranks) + ", must be positive");
  // Checked before allocating, so a corrupt rank count cannot ask for gigabytes.
  if (static_cast<size_t>(ranks) > words.size() - 2)
    fail("truncated: " + std::to_string(ranks) + " ranks need a count word each, only " +
         std::to_string(words.size() - 2) + " words follow the header");
  std::vector<std::vector<int32_t>> hosted(ranks);
  size_t at = 2;
  for (int32_t r = 0; r < ranks; ++r) {
    if (at >= words.size()) fail("truncated: no count word for rank " + std::to_string(r));
    const int32_t count = words[at++];
    if (count < 0 || count > experts)
      fail("bad count " + std::to_string(count) + " for rank " + std::to_string(r) +
           ", must be in [0, " + std::to_string(experts) + "]");
    if (static_cast<size_t>(count) > words.size() - at)
      fail("truncated: rank " + std::to_string(r) + " lists " + std::to_string(count) +
           " experts, only " + std::to_string(words.size() - at) + " words left");
    hosted[r].assign(words.begin() + at, words.begin() + at + count);
    at += count;
  }
  if (at != words.size())
    fail(std::to_string(words.size() - at) + " trailing words after the last rank");
  return from_hosted(experts, std::move(hosted));
}

void expert_placement::add_replica(int32_t expert, int32_t rank) {
  if (expert < 0 || expert >= experts() || rank < 0 || rank >= ranks())
    throw std::invalid_argument("expert placement: expert " + std::to_string(expert) + " or rank " +
                                std::to_string(rank) + " out of range");
  auto& reps = replicas_[expert];
  if (std::any_of(reps.begin(), reps.end(), [&](const expert_slot& s) { return s.rank == rank; }))
    throw std::invalid_argument("expert placement: rank " + std::to_string(rank) +
                                " already hosts expert " + std::to_string(expert));
  reps.push_back({rank, static_cast<int32_t>(hosted_[rank].size())});
  hosted_[rank].push_back(expert);
}

int32_t expert_placement::max_experts_per_rank() const {
  size_t most = 0;
  for (auto& h : hosted_) most = std::max(most, h.size());
  return static_cast<int32_t>(most);
}

expert_slot expert_placement::route(int32_t expert, int32_t source_rank) const {
  const auto& reps = replicas_.at(expert);
  for (auto& s : reps)
    if (s.rank == source_rank) return s;
  return reps[static_cast<size_t>(source_rank) % reps.size()];
}

std::string expert_placement::describe() const {
  int32_t copies = 0;
  for (auto& r : replicas_) copies += static_cast<int32_t>(r.size());
  return std::to_string(experts()) + " experts (" + std::to_string(copies - experts()) +
         " redundant copies) over " + std::to_string(ranks()) + " ranks, at most " +
         std::to_string(max_experts_per_rank()) + " per rank";
}

} // namespace supernode::services
