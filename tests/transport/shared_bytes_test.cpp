// shared_bytes and spliced frames: large bodies are referenced on encode and on decode, and a
// frame received in parts is judged as strictly as one received whole.
#include "transport/control_messages.hpp"
#include "transport/message.hpp"

#include <cstring>
#include <gtest/gtest.h>

using namespace supernode::transport;

namespace {

std::vector<char> pattern(size_t n, unsigned seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>(i * 131 + seed + (i >> 12));
  return v;
}

// The frame's pieces as parts a receiver owns (copies: the sender's buffers are not theirs).
std::vector<frame_part> received_parts(const encoded_frame& f) {
  std::vector<frame_part> parts;
  for (auto piece : f.pieces()) {
    auto copy = std::make_shared<std::vector<std::byte>>(piece.begin(), piece.end());
    parts.push_back({std::span<const std::byte>(*copy), copy});
  }
  return parts;
}

bool inside(const shared_bytes& b, std::span<const std::byte> buffer) {
  const auto* p = reinterpret_cast<const std::byte*>(b.data());
  return p >= buffer.data() && p + b.size() <= buffer.data() + buffer.size();
}

} // namespace

class shared_bytes_fixture : public ::testing::Test {
protected:
  void SetUp() override { register_control_messages(); }
  frame_error_counters errors;
};

TEST_F(shared_bytes_fixture, copies_share_bytes_and_compare_by_content) {
  shared_bytes a = pattern(1000, 1);
  shared_bytes b = a;
  EXPECT_EQ(a.data(), b.data());
  EXPECT_EQ(a, pattern(1000, 1));
  EXPECT_FALSE(a == pattern(1000, 2));
  EXPECT_TRUE(shared_bytes{} == shared_bytes(std::vector<char>{}));
  shared_bytes c = shared_bytes::copy_of(a.data(), a.size());
  EXPECT_NE(c.data(), a.data());
  EXPECT_EQ(c, a);
}

TEST_F(shared_bytes_fixture, a_large_body_is_spliced_not_copied_and_the_wire_bytes_do_not_change) {
  const bulk_chunk chunk{5, 0, 1 << 20, pattern(1 << 20, 3)};
  const auto e = make_envelope(chunk);
  const auto* sent = e.get<bulk_chunk>();
  const auto spliced = e.encode_spliced();
  ASSERT_EQ(spliced.splices.size(), 1u);
  EXPECT_EQ(spliced.splices[0].body.data(), sent->data.data()) << "the body was copied";
  EXPECT_LT(spliced.head.size, 128u);
  const auto flat = spliced.flatten();
  const auto whole = e.encode();
  ASSERT_EQ(flat.size, whole.size);
  EXPECT_EQ(std::memcmp(flat.data.get(), whole.data.get(), whole.size), 0);
  // Small bodies stay in the head.
  EXPECT_TRUE(make_envelope(ping{1, 2, pattern(100, 1)}).encode_spliced().splices.empty());
}

TEST_F(shared_bytes_fixture, decoding_with_an_owner_references_the_frame) {
  const bulk_chunk chunk{5, 0, 1 << 20, pattern(1 << 20, 4)};
  const auto flat = make_envelope(chunk).encode();
  auto buffer = std::make_shared<std::vector<std::byte>>(flat.bytes().begin(), flat.bytes().end());
  const std::span<const std::byte> frame(*buffer);

  auto copied = decode_frame(frame, errors);
  ASSERT_TRUE(copied);
  EXPECT_FALSE(inside(copied->get<bulk_chunk>()->data, frame));
  EXPECT_EQ(copied->get<bulk_chunk>()->data, chunk.data);

  auto referenced = decode_frame(frame, buffer, errors);
  ASSERT_TRUE(referenced);
  const auto& data = referenced->get<bulk_chunk>()->data;
  EXPECT_TRUE(inside(data, frame)) << "the body was copied";
  EXPECT_EQ(data, chunk.data);
  // The message keeps the buffer alive after everyone else let go of it.
  std::weak_ptr<std::vector<std::byte>> watch = buffer;
  buffer.reset();
  EXPECT_FALSE(watch.expired());
  EXPECT_EQ(data, chunk.data);
  referenced.reset();
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(errors.total(), 0u);
}

TEST_F(shared_bytes_fixture, a_frame_in_parts_decodes_with_its_bodies_referenced) {
  const bulk_chunk chunk{6, 64, 2 << 20, pattern(1 << 20, 5)};
  const auto parts = received_parts(make_envelope(chunk).encode_spliced());
  ASSERT_EQ(parts.size(), 2u);
  auto got = decode_frame(parts, errors);
  ASSERT_TRUE(got);
  const auto* c = got->get<bulk_chunk>();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->transfer_id, 6u);
  EXPECT_EQ(c->offset, 64u);
  EXPECT_EQ(c->data.data(), reinterpret_cast<const char*>(parts[1].bytes.data()));
  EXPECT_EQ(c->data, chunk.data);
  EXPECT_EQ(errors.total(), 0u);
}

TEST_F(shared_bytes_fixture, bad_frames_in_parts_are_rejected_and_counted) {
  const bulk_chunk chunk{7, 0, 1 << 20, pattern(1 << 20, 6)};
  const auto good = received_parts(make_envelope(chunk).encode_spliced());
  ASSERT_EQ(good.size(), 2u);
  std::string why;

  // One more part than the header's length accounts for.
  auto extra = good;
  extra.push_back(good[1]);
  EXPECT_FALSE(decode_frame(extra, errors, &why));
  EXPECT_EQ(errors.get(frame_error::trailing_bytes), 1u) << why;

  // The body cut short: fewer bytes than the header says.
  auto short_body = good;
  short_body[1].bytes = short_body[1].bytes.first(1000);
  EXPECT_FALSE(decode_frame(short_body, errors, &why));
  EXPECT_EQ(errors.get(frame_error::truncated), 1u) << why;

  // The lengths add up, but the split is not where the bin32 header says the body starts.
  auto shifted = good;
  shifted[0].bytes = good[0].bytes.first(good[0].bytes.size() - 1);
  auto moved = std::make_shared<std::vector<std::byte>>(good[1].bytes.size() + 1);
  (*moved)[0] = good[0].bytes.back();
  std::memcpy(moved->data() + 1, good[1].bytes.data(), good[1].bytes.size());
  shifted[1] = {std::span<const std::byte>(*moved), moved};
  EXPECT_FALSE(decode_frame(shifted, errors, &why));
  EXPECT_EQ(errors.get(frame_error::malformed_payload), 1u) << why;

  // A whole single-part frame followed by a part no field claims: the first part's msgpack
  // already ends, so the marker is trailing bytes of the payload.
  const auto small = make_envelope(ping{1, 0, pattern(10, 1)}).encode();
  auto head = std::make_shared<std::vector<std::byte>>(small.bytes().begin(), small.bytes().end());
  const std::byte bin32[5] = {std::byte{0xc6}, std::byte{0}, std::byte{0}, std::byte{0},
                              std::byte{4}};
  head->insert(head->end(), bin32, bin32 + 5);
  auto body = std::make_shared<std::vector<std::byte>>(4, std::byte{1});
  uint32_t length = static_cast<uint32_t>(head->size() + body->size() - frame_header_bytes);
  std::memcpy(head->data() + 8, &length, 4);
  std::vector<frame_part> unclaimed{{std::span<const std::byte>(*head), head},
                                    {std::span<const std::byte>(*body), body}};
  EXPECT_FALSE(decode_frame(unclaimed, errors, &why));
  EXPECT_EQ(errors.get(frame_error::malformed_payload), 2u) << why;

  // The receiver's own splice marker sent as data in a single part claims nothing.
  auto forged =
      std::make_shared<std::vector<std::byte>>(good[0].bytes.begin(), good[0].bytes.end() - 5);
  const std::byte marker[3] = {std::byte{0xd4}, std::byte(detail::splice_ext_type), std::byte{0}};
  forged->insert(forged->end(), marker, marker + 3);
  length = static_cast<uint32_t>(forged->size() - frame_header_bytes);
  std::memcpy(forged->data() + 8, &length, 4);
  EXPECT_FALSE(decode_frame(std::span<const std::byte>(*forged), forged, errors, &why));
  EXPECT_EQ(errors.get(frame_error::malformed_payload), 3u) << why;

  // Too many parts.
  std::vector<frame_part> many(max_frame_parts + 2, good[1]);
  many[0] = good[0];
  EXPECT_FALSE(decode_frame(many, errors, &why));
  EXPECT_EQ(errors.total(), 6u);

  // And the good frame still decodes.
  EXPECT_TRUE(decode_frame(good, errors));
  EXPECT_EQ(errors.total(), 6u);
}
