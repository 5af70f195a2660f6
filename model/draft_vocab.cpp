#include "model/draft_vocab.hpp"

#include <fstream>
#include <stdexcept>
#include <string>

namespace supernode::model {

namespace {
// Row r of `head`, as the floats its kernel multiplies (INT8: the value times its row's scale).
void copy_row(const linear& head, int64_t r, float* out) {
  const int64_t k = head.k();
  if (head.is_int8()) {
    const auto& w = head.int8();
    for (int64_t c = 0; c < k; ++c) out[c] = static_cast<float>(w.at(r, c)) * w.scale(r);
  } else {
    for (int64_t c = 0; c < k; ++c) out[c] = head.fp32().at(r, c);
  }
}
} // namespace

draft_head::draft_head(const linear& head, std::vector<int32_t> ids) : ids_(std::move(ids)) {
  if (ids_.empty()) throw std::invalid_argument("a draft vocabulary needs at least one token");
  const int64_t k = head.k();
  std::vector<float> rows(ids_.size() * static_cast<size_t>(k));
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (ids_[i] < 0 || ids_[i] >= head.n())
      throw std::invalid_argument("draft token id " + std::to_string(ids_[i]) +
                                  " is outside the head's " + std::to_string(head.n()) + " rows");
    copy_row(head, ids_[i], rows.data() + i * static_cast<size_t>(k));
  }
  // Re-quantizing an INT8 row gives back its values (its largest is +-127 times its scale); a
  // last-bit difference in a scale would change a draft, never an output.
  rows_ = linear::from_float(rows.data(), size(), k,
                             head.is_int8() ? precision::int8 : precision::fp32);
}

void draft_head::logits(const float* hidden, int64_t rows, std::vector<float>& out) {
  out.resize(static_cast<size_t>(rows * size()));
  rows_.forward(hidden, rows, rows_.k(), out.data(), size(), scratch_);
}

std::vector<int32_t> draft_vocabulary(int64_t vocab, int64_t n,
                                      const std::filesystem::path& ranked_file) {
  if (n <= 0 || n > vocab)
    throw std::invalid_argument("a draft vocabulary of " + std::to_string(n) +
                                " tokens does not fit a vocabulary of " + std::to_string(vocab));
  std::vector<int32_t> ids;
  if (ranked_file.empty()) {
    for (int32_t id = 0; id < n; ++id) ids.push_back(id);
    return ids;
  }
  std::ifstream in(ranked_file);
  if (!in) throw std::invalid_argument("cannot read the draft vocabulary " + ranked_file.string());
  std::vector<bool> seen(static_cast<size_t>(vocab), false);
  int64_t id = 0;
  while (static_cast<int64_t>(ids.size()) < n && in >> id) {
    if (id < 0 || id >= vocab)
      throw std::invalid_argument(ranked_file.string() + ": token id " + std::to_string(id) +
                                  " is outside the vocabulary of " + std::to_string(vocab));
    if (seen[static_cast<size_t>(id)])
      throw std::invalid_argument(ranked_file.string() + ": token id " + std::to_string(id) +
                                  " is listed twice");
    seen[static_cast<size_t>(id)] = true;
    ids.push_back(static_cast<int32_t>(id));
  }
  if (!in.eof() && static_cast<int64_t>(ids.size()) < n)
    throw std::invalid_argument(ranked_file.string() + ": not a list of token ids");
  if (ids.empty()) throw std::invalid_argument(ranked_file.string() + ": no token id");
  return ids;
}

} // namespace supernode::model
