#include "model/safetensors.hpp"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <unistd.h>

using namespace supernode::model;
namespace fs = std::filesystem;

namespace {

class safetensors_fixture : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("supernode-st-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Two tensors: "a" F32 [2,3] = 0..5, "b" BF16 [4] = 1,2,3,4.
  fs::path write_sample(const std::string& name = "model.safetensors") {
    auto path = dir_ / name;
    safetensors_writer w(path, {{"a", dtype::f32, {2, 3}}, {"b", dtype::bf16, {4}}});
    std::vector<float> a{0, 1, 2, 3, 4, 5};
    std::vector<uint16_t> b{float_to_bf16(1), float_to_bf16(2), float_to_bf16(3), float_to_bf16(4)};
    w.write_next(std::as_bytes(std::span(a)));
    w.write_next(std::as_bytes(std::span(b)));
    w.finish();
    return path;
  }

  std::string read_all(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  void write_all(const fs::path& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  // Replaces the JSON header with `header` (padded), keeping the data section.
  void rewrite_header(const fs::path& p, std::string header) {
    std::string all = read_all(p);
    uint64_t old_len;
    std::memcpy(&old_len, all.data(), 8);
    std::string data = all.substr(8 + old_len);
    uint64_t len = header.size();
    std::string out(8, '\0');
    std::memcpy(out.data(), &len, 8);
    write_all(p, out + header + data);
  }

  template<class F>
  std::string error_of(F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

} // namespace

TEST_F(safetensors_fixture, round_trip_of_every_float_dtype) {
  write_sample();
  auto ckpt = checkpoint_reader::open(dir_);
  EXPECT_EQ(ckpt.tensor_count(), 2u);
  const auto& a = ckpt.get("a", std::vector<int64_t>{2, 3});
  std::vector<float> av(6);
  a.to_float(av.data());
  EXPECT_EQ(av, (std::vector<float>{0, 1, 2, 3, 4, 5}));
  const auto& b = ckpt.get("b", std::vector<int64_t>{4});
  std::vector<float> bv(4);
  b.to_float(bv.data());
  EXPECT_EQ(bv, (std::vector<float>{1, 2, 3, 4}));
}

TEST_F(safetensors_fixture, number_formats_match_their_definitions) {
  // E4M3 (float8_e4m3fn): bias 7, no infinities, 448 the largest finite, 2^-9 the smallest.
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F)));
  EXPECT_EQ(float_to_e4m3(1000.0f), 0x7E); // saturates
  EXPECT_EQ(float_to_e4m3(-448.0f), 0xFE);
  for (int v = 0; v < 256; ++v) {
    if ((v & 0x7F) == 0x7F) continue;
    float f = e4m3_to_float(static_cast<uint8_t>(v));
    if (f == 0.0f) continue; // -0 and +0
    EXPECT_EQ(float_to_e4m3(f), v) << "code " << v;
  }
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38); // tie between 1 and 1.125 rounds to even
  EXPECT_EQ(bf16_to_float(float_to_bf16(3.140625f)), 3.140625f);
  EXPECT_EQ(f16_to_float(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_float(0xC000), -2.0f);
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));
}

TEST_F(safetensors_fixture, truncated_file_names_the_file) {
  auto p = write_sample();
  std::string all = read_all(p);
  write_all(p, all.substr(0, all.size() - 5));
  auto msg = error_of([&] { checkpoint_reader::open(dir_); });
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'b'"), std::string::npos) << msg; // the tensor that no longer fits
  write_all(p, all.substr(0, 6));
  msg = error_of([&] { checkpoint_reader::open(dir_); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST_F(safetensors_fixture, header_longer_than_file_is_rejected) {
  auto p = write_sample();
  std::string all = read_all(p);
  uint64_t huge = all.size() * 4;
  std::memcpy(all.data(), &huge, 8);
  write_all(p, all);
  auto msg = error_of([&] { checkpoint_reader::open(dir_); });
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("header"), std::string::npos) << msg;
}

TEST_F(safetensors_fixture, offsets_overrunning_the_file_are_rejected) {
  auto p = write_sample();
  rewrite_header(p, R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                    R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,4000]}})");
  auto msg = error_of([&] { checkpoint_reader::open(dir_); });
  EXPECT_NE(msg.find("'b'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("overrun"), std::string::npos) << msg;
}

TEST_F(safetensors_fixture, byte_count_must_match_shape) {
  auto p = write_sample();
  rewrite_header(p, R"({"a":{"dtype":"F32","shape":[2,4],"data_offsets":[0,24]},)"
                    R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}})");
  auto msg = error_of([&] { checkpoint_reader::open(dir_); });
  EXPECT_NE(msg.find("'a'"), std::string::npos) << msg;
}

TEST_F(safetensors_fixture, garbage_header_and_unknown_dtype_are_rejected) {
  auto p = write_sample();
  rewrite_header(p, "{not json");
  EXPECT_NE(error_of([&] { checkpoint_reader::open(dir_); }).find("JSON"), std::string::npos);
  rewrite_header(p, R"({"a":{"dtype":"Q4_K","shape":[2,3],"data_offsets":[0,24]}})");
  auto msg = error_of([&] { checkpoint_reader::open(dir_); });
  EXPECT_NE(msg.find("Q4_K"), std::string::npos) << msg;
}

TEST_F(safetensors_fixture, missing_tensor_and_wrong_shape_name_the_tensor) {
  write_sample();
  auto ckpt = checkpoint_reader::open(dir_);
  auto msg = error_of([&] { ckpt.get("model.norm.weight"); });
  EXPECT_NE(msg.find("missing tensor 'model.norm.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir_.string()), std::string::npos) << msg;
  msg = error_of([&] { ckpt.get("a", std::vector<int64_t>{3, 2}); });
  EXPECT_NE(msg.find("'a' has shape [2, 3], expected [3, 2]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
}

TEST_F(safetensors_fixture, sharded_checkpoints_are_one_namespace) {
  write_sample("model-00001-of-00002.safetensors");
  {
    safetensors_writer w(dir_ / "model-00002-of-00002.safetensors", {{"c", dtype::f32, {1}}});
    float v = 7.0f;
    w.write_next(std::as_bytes(std::span(&v, 1)));
    w.finish();
  }
  auto ckpt = checkpoint_reader::open(dir_);
  EXPECT_TRUE(ckpt.contains("a"));
  EXPECT_TRUE(ckpt.contains("c"));
  // The same tensor in two shards is an error, not a silent pick.
  {
    safetensors_writer w(dir_ / "model-extra.safetensors", {{"c", dtype::f32, {1}}});
    float v = 8.0f;
    w.write_next(std::as_bytes(std::span(&v, 1)));
    w.finish();
  }
  auto msg = error_of([&] { checkpoint_reader::open(dir_); });
  EXPECT_NE(msg.find("'c' appears in both"), std::string::npos) << msg;
}

TEST_F(safetensors_fixture, non_finite_values_name_the_tensor_and_first_index) {
  // F16 +Inf (0x7C00) and F32 NaN; the finite values before them convert as usual.
  {
    safetensors_writer w(dir_ / "model.safetensors",
                         {{"half", dtype::f16, {2, 2}}, {"single", dtype::f32, {3}}});
    std::vector<uint16_t> half{0x3C00, 0x3C00, 0x3C00, 0x7C00};
    std::vector<float> single{1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
    w.write_next(std::as_bytes(std::span(half)));
    w.write_next(std::as_bytes(std::span(single)));
    w.finish();
  }
  auto ckpt = checkpoint_reader::open(dir_);
  std::vector<float> out(4);
  auto msg = error_of([&] { ckpt.get("half").to_float(out.data()); });
  EXPECT_NE(msg.find("model.safetensors: tensor 'half' (F16 [2, 2]) holds +Inf at index 3 [1, 1]"),
            std::string::npos)
      << msg;
  msg = error_of([&] { ckpt.get("single").to_float(out.data()); });
  EXPECT_NE(msg.find("tensor 'single' (F32 [3]) holds NaN at index 1 [1]"), std::string::npos)
      << msg;
  // Large finite values are weights like any other.
  EXPECT_EQ(error_of([&] {
              std::vector<float> big{std::numeric_limits<float>::max()};
              safetensors_writer w(dir_ / "big.safetensors", {{"big", dtype::f32, {1}}});
              w.write_next(std::as_bytes(std::span(big)));
              w.finish();
              auto f = safetensors_file::open(dir_ / "big.safetensors");
              f->tensors().at("big").to_float(out.data());
            }),
            "");
  EXPECT_EQ(out[0], std::numeric_limits<float>::max());
}
