#include "model/safetensors.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace supernode::model {

namespace {

// The JSON header of any real checkpoint is a few MB at most; anything larger is corruption.
constexpr uint64_t max_header_bytes = 100ull << 20;

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what) {
  throw std::runtime_error(file.string() + ": " + what);
}

dtype parse_dtype(const std::string& s, const std::filesystem::path& file,
                  const std::string& tensor) {
  if (s == "F32") return dtype::f32;
  if (s == "F16") return dtype::f16;
  if (s == "BF16") return dtype::bf16;
  if (s == "F8_E4M3") return dtype::f8_e4m3;
  if (s == "I8") return dtype::i8;
  if (s == "I32") return dtype::i32;
  if (s == "I64") return dtype::i64;
  fail(file, "tensor '" + tensor + "' has unsupported dtype '" + s + "'");
}

std::array<float, 256> make_e4m3_table() {
  std::array<float, 256> t{};
  for (int v = 0; v < 256; ++v) {
    int e = (v >> 3) & 0xF, m = v & 7;
    float mag;
    if (e == 0)
      mag = std::ldexp(static_cast<float>(m), -9);
    else if (e == 15 && m == 7)
      mag = std::numeric_limits<float>::quiet_NaN();
    else
      mag = std::ldexp(1.0f + m / 8.0f, e - 7);
    t[v] = (v & 0x80) ? -mag : mag;
  }
  return t;
}

const std::array<float, 256> e4m3_table = make_e4m3_table();

} // namespace

const char* dtype_name(dtype t) {
  switch (t) {
  case dtype::f32:
    return "F32";
  case dtype::f16:
    return "F16";
  case dtype::bf16:
    return "BF16";
  case dtype::f8_e4m3:
    return "F8_E4M3";
  case dtype::i8:
    return "I8";
  case dtype::i32:
    return "I32";
  case dtype::i64:
    return "I64";
  }
  return "?";
}

size_t dtype_size(dtype t) {
  switch (t) {
  case dtype::f32:
  case dtype::i32:
    return 4;
  case dtype::f16:
  case dtype::bf16:
    return 2;
  case dtype::f8_e4m3:
  case dtype::i8:
    return 1;
  case dtype::i64:
    return 8;
  }
  return 0;
}

uint16_t float_to_bf16(float f) {
  uint32_t b = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((b >> 16) | 0x40);
  b += 0x7FFF + ((b >> 16) & 1);
  return static_cast<uint16_t>(b >> 16);
}

float bf16_to_float(uint16_t v) {
  return std::bit_cast<float>(static_cast<uint32_t>(v) << 16);
}

float f16_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FF;
  if (e == 0) {
    float mag = std::ldexp(static_cast<float>(m), -24);
    return sign ? -mag : mag;
  }
  if (e == 31) return std::bit_cast<float>(sign | 0x7F800000u | (m << 13));
  return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}

uint8_t float_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7F;
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a >= 464.0f) // past the midpoint above 448 (the largest finite): saturate
    return sign | 0x7E;
  if (a < 0.015625f) // below 2^-6: subnormal steps of 2^-9; a result of 8 is the smallest normal
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  uint32_t b = std::bit_cast<uint32_t>(a);
  b += 0x7FFFF + ((b >> 20) & 1); // round the mantissa to three bits, ties to even
  int e = static_cast<int>(b >> 23) - 127 + 7;
  uint32_t m = (b >> 20) & 7;
  if (e > 15 || (e == 15 && m == 7)) return sign | 0x7E;
  return sign | static_cast<uint8_t>((e << 3) | m);
}

float e4m3_to_float(uint8_t v) {
  return e4m3_table[v];
}

int64_t tensor_view::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

namespace {

// A float is non-finite when its exponent bits are all ones (NaN or an infinity); E4M3 has no
// infinities, and its only NaN is S.1111.111. Converting loops OR these tests into one flag, so
// the check rides along the pass that already touches every value, without a branch per value.
constexpr bool f32_non_finite(uint32_t bits) {
  return (bits & 0x7F800000u) == 0x7F800000u;
}
constexpr bool bf16_non_finite(uint16_t bits) {
  return (bits & 0x7F80u) == 0x7F80u;
}
constexpr bool f16_non_finite(uint16_t bits) {
  return (bits & 0x7C00u) == 0x7C00u;
}
constexpr bool e4m3_non_finite(uint8_t bits) {
  return (bits & 0x7Fu) == 0x7Fu;
}

template<class Bits, class Convert, class NonFinite>
bool convert_checked(const std::byte* data, int64_t n, float* out, Convert convert,
                     NonFinite non_finite) {
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) {
    Bits v;
    std::memcpy(&v, data + sizeof(Bits) * i, sizeof(Bits));
    bad |= non_finite(v);
    out[i] = convert(v);
  }
  return bad;
}

} // namespace

int64_t first_non_finite(std::span<const float> values) {
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i])) return static_cast<int64_t>(i);
  return -1;
}

std::string non_finite_report(std::span<const float> values, std::span<const int64_t> shape) {
  const int64_t at = first_non_finite(values);
  if (at < 0) return "no non-finite value";
  const float v = values[at];
  std::string what = std::isnan(v) ? "NaN" : (v > 0 ? "+Inf" : "-Inf");
  // The flat index as coordinates, last dimension fastest (row-major, as safetensors stores).
  std::vector<int64_t> coords(shape.size());
  int64_t rest = at;
  for (size_t d = shape.size(); d-- > 0;) {
    coords[d] = shape[d] > 0 ? rest % shape[d] : 0;
    rest = shape[d] > 0 ? rest / shape[d] : 0;
  }
  return what + " at index " + std::to_string(at) + " " + shape_string(coords);
}

std::string shape_string(std::span<const int64_t> s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Lambdas, not function pointers, so each loop inlines its conversion and test.
void tensor_view::to_float(float* out) const {
  const int64_t n = numel();
  bool bad = false;
  switch (type) {
  case dtype::f32:
    bad = convert_checked<uint32_t>(
        data, n, out, [](uint32_t v) { return std::bit_cast<float>(v); },
        [](uint32_t v) { return f32_non_finite(v); });
    break;
  case dtype::bf16:
    bad = convert_checked<uint16_t>(
        data, n, out, [](uint16_t v) { return bf16_to_float(v); },
        [](uint16_t v) { return bf16_non_finite(v); });
    break;
  case dtype::f16:
    bad = convert_checked<uint16_t>(
        data, n, out, [](uint16_t v) { return f16_to_float(v); },
        [](uint16_t v) { return f16_non_finite(v); });
    break;
  case dtype::f8_e4m3:
    bad = convert_checked<uint8_t>(
        data, n, out, [](uint8_t v) { return e4m3_table[v]; },
        [](uint8_t v) { return e4m3_non_finite(v); });
    break;
  case dtype::i8:
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<int8_t>(data[i]));
    return;
  default:
    fail(file, "tensor '" + name + "' of dtype " + dtype_name(type) + " cannot be read as floats");
  }
  if (bad)
    fail(file, "tensor '" + name + "' (" + dtype_name(type) + " " + shape_string(shape) +
                   ") holds " + non_finite_report({out, static_cast<size_t>(n)}, shape) +
                   "; a checkpoint's weights must be finite");
}

void tensor_view::to_float_scaled(float* out, std::span<const float> scales, int64_t block_rows,
                                  int64_t block_cols, const std::string& scale_name) const {
  if (type != dtype::f8_e4m3 || shape.size() != 2)
    fail(file, "tensor '" + name + "' is not an F8_E4M3 matrix");
  const int64_t rows = shape[0], cols = shape[1];
  const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
  if (static_cast<int64_t>(scales.size()) != (rows + block_rows - 1) / block_rows * scale_cols)
    fail(file, "tensor '" + name + "' given " + std::to_string(scales.size()) + " scales from '" +
                   scale_name + "', not one per block");
  const auto* codes = reinterpret_cast<const uint8_t*>(data);
  // One pass: decode, scale by the block's scale_inv, and test the product, which is NaN for
  // E4M3's NaN code and infinite when a finite scale overflows a finite weight.
  bool bad = false;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row_scales = scales.data() + (r / block_rows) * scale_cols;
    for (int64_t c0 = 0; c0 < cols; c0 += block_cols) {
      const float s = row_scales[c0 / block_cols];
      const int64_t c1 = std::min(cols, c0 + block_cols);
      for (int64_t c = c0; c < c1; ++c) {
        const float x = e4m3_table[codes[r * cols + c]] * s;
        bad |= !(std::fabs(x) <= std::numeric_limits<float>::max());
        out[r * cols + c] = x;
      }
    }
  }
  if (bad)
    fail(file, "tensor '" + name + "' (" + dtype_name(type) + " " + shape_string(shape) +
                   ") dequantized with '" + scale_name + "' holds " +
                   non_finite_report({out, static_cast<size_t>(rows * cols)}, shape) +
                   "; a checkpoint's weights must be finite");
}

std::shared_ptr<safetensors_file> safetensors_file::open(const std::filesystem::path& path) {
  std::shared_ptr<safetensors_file> f(new safetensors_file());
  f->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail(path, "cannot stat");
  }
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ < 8) {
    ::close(fd);
    fail(path, "truncated: " + std::to_string(f->size_) + " bytes, no room for the header length");
  }
  f->map_ = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (f->map_ == MAP_FAILED) {
    f->map_ = nullptr;
    fail(path, "mmap failed");
  }
  const auto* base = static_cast<const std::byte*>(f->map_);
  uint64_t header_len;
  std::memcpy(&header_len, base, 8);
  if (header_len > max_header_bytes || header_len > f->size_ - 8)
    fail(path, "truncated or corrupt: header claims " + std::to_string(header_len) +
                   " bytes but the file has " + std::to_string(f->size_ - 8) + " after the length");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(base + 8),
                                   reinterpret_cast<const char*>(base + 8 + header_len));
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");
  const size_t data_start = 8 + header_len;
  const size_t data_size = f->size_ - data_start;
  for (auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (info.is_object())
        for (auto& [k, v] : info.items())
          if (v.is_string()) f->metadata_[k] = v.get<std::string>();
      continue;
    }
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") ||
        !info.contains("data_offsets"))
      fail(path, "tensor '" + name + "' lacks dtype, shape or data_offsets");
    tensor_view t;
    t.name = name;
    t.file = path;
    try {
      t.type = parse_dtype(info["dtype"].get<std::string>(), path, name);
      t.shape = info["shape"].get<std::vector<int64_t>>();
      auto off = info["data_offsets"].get<std::vector<uint64_t>>();
      if (off.size() != 2) fail(path, "tensor '" + name + "' data_offsets must have two entries");
      if (off[0] > off[1] || off[1] > data_size)
        fail(path, "tensor '" + name + "' offsets [" + std::to_string(off[0]) + ", " +
                       std::to_string(off[1]) + ") overrun the data section of " +
                       std::to_string(data_size) + " bytes");
      uint64_t expect = dtype_size(t.type);
      for (auto d : t.shape) {
        if (d < 0 || (d > 0 && expect > (uint64_t(1) << 62) / static_cast<uint64_t>(d)))
          fail(path, "tensor '" + name + "' has an invalid shape");
        expect *= static_cast<uint64_t>(d);
      }
      if (off[1] - off[0] != expect)
        fail(path, "tensor '" + name + "' holds " + std::to_string(off[1] - off[0]) +
                       " bytes but dtype and shape need " + std::to_string(expect));
      t.data = base + data_start + off[0];
      t.nbytes = off[1] - off[0];
    } catch (const nlohmann::json::exception& e) {
      fail(path, "tensor '" + name + "' has a malformed entry: " + e.what());
    }
    f->tensors_.emplace(name, std::move(t));
  }
  return f;
}

safetensors_file::~safetensors_file() {
  if (map_) ::munmap(map_, size_);
}

checkpoint_reader checkpoint_reader::open(const std::filesystem::path& dir) {
  checkpoint_reader r;
  r.dir_ = dir;
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  if (ec)
    throw std::runtime_error(dir.string() + ": cannot list checkpoint folder: " + ec.message());
  if (files.empty()) throw std::runtime_error(dir.string() + ": no *.safetensors files");
  std::sort(files.begin(), files.end());
  for (auto& p : files) r.files_.push_back(safetensors_file::open(p));
  for (auto& f : r.files_)
    for (auto& [name, t] : f->tensors()) {
      auto [it, inserted] = r.index_.emplace(name, &t);
      if (!inserted)
        throw std::runtime_error(dir.string() + ": tensor '" + name + "' appears in both " +
                                 it->second->file.filename().string() + " and " +
                                 f->path().filename().string());
    }
  return r;
}

const tensor_view& checkpoint_reader::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end())
    throw std::runtime_error(dir_.string() + ": missing tensor '" + name + "'");
  return *it->second;
}

const tensor_view& checkpoint_reader::get(const std::string& name,
                                          std::span<const int64_t> expected) const {
  const auto& t = get(name);
  if (!std::equal(t.shape.begin(), t.shape.end(), expected.begin(), expected.end()))
    throw std::runtime_error(t.file.string() + ": tensor '" + name + "' has shape " +
                             shape_string(t.shape) + ", expected " + shape_string(expected));
  return t;
}

struct safetensors_writer::impl {
  std::filesystem::path path;
  std::ofstream out;
  std::vector<entry> entries;
  size_t next = 0;
};

safetensors_writer::safetensors_writer(const std::filesystem::path& path,
                                       std::vector<entry> entries,
                                       const std::map<std::string, std::string>& metadata)
    : impl_(std::make_unique<impl>()) {
  impl_->path = path;
  impl_->entries = std::move(entries);
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (auto& e : impl_->entries) {
    uint64_t n = dtype_size(e.type);
    for (auto d : e.shape) n *= static_cast<uint64_t>(d);
    header[e.name] = {
        {"dtype", dtype_name(e.type)}, {"shape", e.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' '); // keeps the data 8-byte aligned, as HF does
  impl_->out.open(path, std::ios::binary | std::ios::trunc);
  if (!impl_->out) throw std::runtime_error(path.string() + ": cannot create");
  uint64_t len = text.size();
  impl_->out.write(reinterpret_cast<const char*>(&len), 8);
  impl_->out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

safetensors_writer::~safetensors_writer() = default;

void safetensors_writer::write_next(std::span<const std::byte> bytes) {
  if (impl_->next >= impl_->entries.size())
    throw std::logic_error(impl_->path.string() + ": more tensors written than declared");
  auto& e = impl_->entries[impl_->next];
  uint64_t n = dtype_size(e.type);
  for (auto d : e.shape) n *= static_cast<uint64_t>(d);
  if (bytes.size() != n)
    throw std::logic_error(impl_->path.string() + ": tensor '" + e.name + "' given " +
                           std::to_string(bytes.size()) + " bytes, declared " + std::to_string(n));
  impl_->out.write(reinterpret_cast<const char*>(bytes.data()),
                   static_cast<std::streamsize>(bytes.size()));
  ++impl_->next;
}

void safetensors_writer::finish() {
  if (impl_->next != impl_->entries.size())
    throw std::logic_error(impl_->path.string() + ": only " + std::to_string(impl_->next) + " of " +
                           std::to_string(impl_->entries.size()) + " tensors written");
  impl_->out.flush();
  if (!impl_->out) throw std::runtime_error(impl_->path.string() + ": write failed");
  impl_->out.close();
}

} // namespace supernode::model
