#pragma once
// Round trips of a protocol message through every way a byte plane carries it — one contiguous
// frame decoded by copy and by reference, and a spliced frame received in parts — compared with
// the original by re-encoding both with MessagePack (a field the comparison forgets still
// differs in the bytes). expect_every_field_set() makes the test's sample fill every field
// with a value other than its default, so a field added later without a test fails here.

#include "transport/message.hpp"

#include <gtest/gtest.h>
#include <memory>
#include <msgpack.hpp>
#include <string>
#include <vector>

namespace supernode::testing {

template<class T>
std::string packed(const T& message) {
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, message);
  return {buffer.data(), buffer.size()};
}

// Bytes that are a function of their length and seed, so a misplaced byte is seen.
inline std::vector<char> patterned_bytes(size_t n, unsigned seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>(i * 131 + seed + (i >> 10));
  return v;
}

namespace detail {

inline const msgpack::object* field_of(const msgpack::object& map, const std::string& name) {
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    const auto& key = map.via.map.ptr[i].key;
    if (key.type == msgpack::type::STR && key.as<std::string>() == name)
      return &map.via.map.ptr[i].val;
  }
  return nullptr;
}

// Every key of `filled` differs from `defaults`; nested structs (maps in both) field by field.
inline void expect_fields_differ(const msgpack::object& filled, const msgpack::object& defaults,
                                 const std::string& path) {
  ASSERT_EQ(filled.type, msgpack::type::MAP) << path;
  for (uint32_t i = 0; i < filled.via.map.size; ++i) {
    const auto name = filled.via.map.ptr[i].key.as<std::string>();
    const auto& value = filled.via.map.ptr[i].val;
    const auto* standard = field_of(defaults, name);
    ASSERT_NE(standard, nullptr) << path << name;
    if (value.type == msgpack::type::MAP && standard->type == msgpack::type::MAP &&
        standard->via.map.size > 0)
      expect_fields_differ(value, *standard, path + name + ".");
    else
      EXPECT_FALSE(value == *standard) << path << name << " keeps its default value";
  }
}

template<class T>
std::shared_ptr<const T> decoded_as(const std::optional<transport::envelope>& e) {
  if (!e || !e->template is<T>()) return nullptr;
  return std::static_pointer_cast<const T>(e->object());
}

// The frame's pieces as parts a receiver owns, as a zmq receiver gets them.
inline std::vector<transport::frame_part> received_parts(const transport::encoded_frame& f) {
  std::vector<transport::frame_part> parts;
  for (auto piece : f.pieces()) {
    auto copy = std::make_shared<std::vector<std::byte>>(piece.begin(), piece.end());
    parts.push_back({std::span<const std::byte>(*copy), copy});
  }
  return parts;
}

} // namespace detail

// Every field (and every field of a nested struct) of `filled` holds something other than what
// a default-constructed T holds. Elements of vectors are checked by calling this on them.
template<class T>
void expect_every_field_set(const T& filled) {
  const auto a = packed(filled), b = packed(T{});
  auto filled_handle = msgpack::unpack(a.data(), a.size());
  auto default_handle = msgpack::unpack(b.data(), b.size());
  detail::expect_fields_differ(filled_handle.get(), default_handle.get(), "");
}

// Sends `sent` through each frame path and returns what the spliced path decoded (null when a
// path failed); `splices` is how many shared_bytes bodies the spliced encoding must reference.
template<class T>
std::shared_ptr<const T> expect_round_trip(const T& sent, size_t splices) {
  transport::frame_error_counters errors;
  const auto envelope = transport::make_envelope(sent);
  const auto want = packed(sent);
  auto expect_same = [&](const std::shared_ptr<const T>& got, const char* path) {
    ASSERT_TRUE(got) << T::type_name << " (" << path << ")";
    // Not EXPECT_EQ: a mismatch would print megabytes of payload.
    EXPECT_TRUE(packed(*got) == want) << T::type_name << " (" << path << ") decodes differently";
  };

  const auto whole = envelope.encode();
  expect_same(detail::decoded_as<T>(transport::decode_frame(whole.bytes(), errors)), "copied");
  auto buffer =
      std::make_shared<std::vector<std::byte>>(whole.bytes().begin(), whole.bytes().end());
  expect_same(detail::decoded_as<T>(
                  transport::decode_frame(std::span<const std::byte>(*buffer), buffer, errors)),
              "referenced");

  const auto spliced = envelope.encode_spliced();
  EXPECT_EQ(spliced.splices.size(), splices) << T::type_name;
  // The concatenation decodes like any frame (a spliced body's BIN header is always bin32, so its
  // bytes may differ from the contiguous encoding's).
  const auto flat = spliced.flatten();
  expect_same(detail::decoded_as<T>(transport::decode_frame(flat.bytes(), errors)), "flattened");
  const auto parts = detail::received_parts(spliced);
  auto in_parts = detail::decoded_as<T>(transport::decode_frame(parts, errors));
  expect_same(in_parts, "in parts");

  EXPECT_EQ(errors.total(), 0u) << T::type_name;
  return in_parts;
}

// A frame one byte short (whole and in parts) and a header claiming one byte more than the
// type's limit are rejected and counted under their reasons.
template<class T>
void expect_damaged_frames_rejected(const T& sample) {
  transport::frame_error_counters errors;
  const auto envelope = transport::make_envelope(sample);
  const auto whole = envelope.encode();
  std::string why;
  EXPECT_FALSE(transport::decode_frame(whole.bytes().first(whole.size - 1), errors, &why))
      << T::type_name;
  EXPECT_EQ(errors.get(transport::frame_error::truncated), 1u) << T::type_name;
  EXPECT_NE(why.find(T::type_name), std::string::npos) << why;

  auto parts = detail::received_parts(envelope.encode_spliced());
  parts.back().bytes = parts.back().bytes.first(parts.back().bytes.size() - 1);
  EXPECT_FALSE(transport::decode_frame(parts, errors)) << T::type_name;
  EXPECT_EQ(errors.get(transport::frame_error::truncated), 2u) << T::type_name;

  // The limit is judged on the header, before any payload is read.
  std::vector<std::byte> oversized(whole.bytes().begin(), whole.bytes().end());
  auto header = transport::read_header(oversized.data());
  header.length = T::max_bytes + 1;
  transport::write_header(header, oversized.data());
  EXPECT_FALSE(transport::decode_frame(oversized, errors, &why)) << T::type_name;
  EXPECT_EQ(errors.get(transport::frame_error::oversized), 1u) << T::type_name;
  EXPECT_EQ(errors.total(), 3u) << T::type_name;
}

// A message really over its type's limit (built by the caller) is refused as oversized.
template<class T>
void expect_oversized_rejected(const T& too_big) {
  transport::frame_error_counters errors;
  const auto whole = transport::make_envelope(too_big).encode();
  ASSERT_GT(whole.size - transport::frame_header_bytes, size_t{T::max_bytes}) << T::type_name;
  EXPECT_FALSE(transport::decode_frame(whole.bytes(), errors)) << T::type_name;
  EXPECT_EQ(errors.get(transport::frame_error::oversized), 1u) << T::type_name;
  EXPECT_EQ(errors.total(), 1u) << T::type_name;
}

} // namespace supernode::testing
