#include "transport/control_messages.hpp"
#include "transport/message.hpp"

#include <cstring>
#include <gtest/gtest.h>

using namespace supernode::transport;

namespace {
std::vector<std::byte> bytes_of(const byte_buffer& b) {
  return {b.bytes().begin(), b.bytes().end()};
}
std::vector<std::byte> encoded_ping(uint64_t seq, size_t payload = 8) {
  ping p;
  p.seq = seq;
  p.payload = std::vector<char>(payload, 'x');
  return bytes_of(make_envelope(p).encode());
}
} // namespace

class frame_fixture : public ::testing::Test {
protected:
  void SetUp() override { register_control_messages(); }
  frame_error_counters errors;
};

TEST_F(frame_fixture, every_control_message_round_trips) {
  member_join j{"decode-1", "decode", 42, {{"vpc", "ipc:///tmp/x"}, {"ub", "shm:decode-1"}}};
  auto got = decode_frame(bytes_of(make_envelope(j).encode()), errors);
  ASSERT_TRUE(got);
  const auto* jj = got->get<member_join>();
  ASSERT_TRUE(jj);
  EXPECT_EQ(jj->peer, "decode-1");
  EXPECT_EQ(jj->incarnation, 42u);
  EXPECT_EQ(jj->endpoints.at("ub"), "shm:decode-1");
  EXPECT_EQ(got->get<ping>(), nullptr);

  bulk_chunk c{7, 0, 3, {'a', 'b', 'c'}};
  got = decode_frame(bytes_of(make_envelope(c).encode()), errors);
  ASSERT_TRUE(got && got->get<bulk_chunk>());
  EXPECT_EQ(got->get<bulk_chunk>()->data, (std::vector<char>{'a', 'b', 'c'}));
  for (auto e : {make_envelope(pong{3, 4, {}}), make_envelope(bulk_ack{1, 2, 3}),
                 make_envelope(heartbeat{"p", 1, 9}), make_envelope(member_leave{"p", "drain"})}) {
    auto back = decode_frame(bytes_of(e.encode()), errors);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->type(), e.type());
  }
  EXPECT_EQ(errors.total(), 0u);
}

TEST_F(frame_fixture, bad_frames_are_rejected_counted_and_named) {
  std::string why;
  auto good = encoded_ping(1);

  auto truncated = good;
  truncated.resize(good.size() - 3);
  EXPECT_FALSE(decode_frame(truncated, errors, &why));
  EXPECT_EQ(errors.get(frame_error::truncated), 1u);
  EXPECT_NE(why.find("ping"), std::string::npos) << why;
  EXPECT_FALSE(decode_frame(std::span(good.data(), 5), errors));
  EXPECT_EQ(errors.get(frame_error::truncated), 2u);

  std::vector<std::byte> garbage(64);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = std::byte(i * 37 + 11);
  EXPECT_FALSE(decode_frame(garbage, errors));
  EXPECT_EQ(errors.get(frame_error::bad_magic), 1u);

  auto wrong_version = good;
  wrong_version[4] = std::byte{9};
  EXPECT_FALSE(decode_frame(wrong_version, errors, &why));
  EXPECT_EQ(errors.get(frame_error::wrong_version), 1u);
  EXPECT_NE(why.find("version 9"), std::string::npos) << why;

  auto unknown = good;
  unknown[6] = std::byte{0xEE};
  unknown[7] = std::byte{0x7E};
  EXPECT_FALSE(decode_frame(unknown, errors));
  EXPECT_EQ(errors.get(frame_error::unknown_type), 1u);

  auto oversized = encoded_ping(2, ping::max_bytes); // payload over the type's limit
  EXPECT_FALSE(decode_frame(oversized, errors, &why));
  EXPECT_EQ(errors.get(frame_error::oversized), 1u);

  auto trailing = good;
  trailing.push_back(std::byte{0});
  EXPECT_FALSE(decode_frame(trailing, errors));
  EXPECT_EQ(errors.get(frame_error::trailing_bytes), 1u);

  // A header claiming the right length over a body that is not a ping.
  auto malformed = good;
  std::memset(malformed.data() + frame_header_bytes, 0xC1, malformed.size() - frame_header_bytes);
  EXPECT_FALSE(decode_frame(malformed, errors));
  EXPECT_EQ(errors.get(frame_error::malformed_payload), 1u);

  // A huge array claim inside a tiny payload: limits stop the allocation.
  auto hostile = good;
  hostile.resize(frame_header_bytes + 5);
  const unsigned char array32[5] = {0xDD, 0xFF, 0xFF, 0xFF, 0xFF};
  std::memcpy(hostile.data() + frame_header_bytes, array32, 5);
  uint32_t len = 5;
  std::memcpy(hostile.data() + 8, &len, 4);
  EXPECT_FALSE(decode_frame(hostile, errors));
  EXPECT_EQ(errors.get(frame_error::malformed_payload), 2u);

  // The receiver still serves the next good frame.
  auto next = decode_frame(good, errors);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->get<ping>()->seq, 1u);
  EXPECT_EQ(errors.total(), 9u);
}

namespace {
struct impostor {
  static constexpr uint16_t type_id = ping::type_id;
  static constexpr const char* type_name = "impostor";
  static constexpr uint32_t max_bytes = 16;
  int x = 0;
  MSGPACK_DEFINE_MAP(x);
};
} // namespace

TEST_F(frame_fixture, registry_refuses_a_second_type_on_one_id) {
  EXPECT_THROW(register_message<impostor>(), std::logic_error);
}
