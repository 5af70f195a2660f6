// The draft vocabulary (model/draft_vocab.hpp): the lowest ids without a ranking, a ranked file
// read in its order, and a bad file refused naming the problem; its head's logits are the full
// head's at the kept tokens.

#include "../support/test_run_dir.hpp"
#include "model/draft_vocab.hpp"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <random>
#include <unistd.h>

using namespace supernode::model;

namespace {
// A ranked-ids file with `text`, in a folder removed when the test program ends.
std::filesystem::path ranked_file(const std::string& text) {
  static const supernode::testing::test_run_dir dir("draft-vocab");
  const auto path = dir.path() / "ranked.txt";
  std::ofstream(path) << text;
  return path;
}
std::string refusal(int64_t vocab, int64_t n, const std::string& text) {
  try {
    draft_vocabulary(vocab, n, ranked_file(text));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}
} // namespace

TEST(draft_vocabulary, is_the_lowest_ids_without_a_ranking) {
  EXPECT_EQ(draft_vocabulary(10, 4), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_THROW(draft_vocabulary(10, 11), std::invalid_argument);
  EXPECT_THROW(draft_vocabulary(10, 0), std::invalid_argument);
}

TEST(draft_vocabulary, takes_the_first_n_ids_of_a_ranked_file_in_order) {
  EXPECT_EQ(draft_vocabulary(10, 3, ranked_file("7 2\n9\n0 1")), (std::vector<int32_t>{7, 2, 9}));
  EXPECT_EQ(draft_vocabulary(10, 5, ranked_file("4 3")), (std::vector<int32_t>{4, 3}))
      << "a shorter list gives what it has";
}

TEST(draft_vocabulary, refuses_a_bad_file_naming_the_problem) {
  EXPECT_NE(refusal(10, 3, "1 12 3").find("token id 12 is outside the vocabulary of 10"),
            std::string::npos);
  EXPECT_NE(refusal(10, 3, "1 4 1").find("token id 1 is listed twice"), std::string::npos);
  EXPECT_NE(refusal(10, 3, "1 two 3").find("not a list of token ids"), std::string::npos);
  EXPECT_NE(refusal(10, 3, "").find("no token id"), std::string::npos);
  try {
    draft_vocabulary(10, 3, "/nonexistent/ranks.txt");
    ADD_FAILURE() << "a missing file was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read the draft vocabulary"), std::string::npos);
  }
}

TEST(draft_head, gives_the_full_heads_logits_at_its_tokens) {
  const int64_t vocab = 300, hidden = 64, rows = 3;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> w(vocab * hidden), x(rows * hidden);
  for (auto& v : w) v = normal(rng);
  for (auto& v : x) v = normal(rng);
  for (auto p : {precision::int8, precision::fp32}) {
    const auto head = linear::from_float(w.data(), vocab, hidden, p);
    supernode::kernels::quantized_rows scratch;
    std::vector<float> full(rows * vocab);
    head.forward(x.data(), rows, hidden, full.data(), vocab, scratch);
    const std::vector<int32_t> ids{299, 0, 17, 150};
    draft_head reduced(head, ids);
    std::vector<float> got;
    reduced.logits(x.data(), rows, got);
    ASSERT_EQ(got.size(), static_cast<size_t>(rows) * ids.size());
    for (int64_t r = 0; r < rows; ++r)
      for (size_t i = 0; i < ids.size(); ++i)
        EXPECT_EQ(got[r * ids.size() + i], full[r * vocab + ids[i]])
            << precision_name(p) << " row " << r << " token " << ids[i];
  }
  EXPECT_THROW(draft_head(linear::from_float(w.data(), vocab, hidden, precision::int8), {300}),
               std::invalid_argument);
}
