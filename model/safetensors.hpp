#pragma once
// The safetensors format: an 8-byte little-endian header length, a JSON header mapping tensor
// names to {dtype, shape, data_offsets}, then the raw little-endian data. Files are
// memory-mapped; nothing in a header is trusted until checked against the file size.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace supernode::model {

enum class dtype : uint8_t { f32, f16, bf16, f8_e4m3, i8, i32, i64 };

const char* dtype_name(dtype t);
size_t dtype_size(dtype t);

struct tensor_view {
  std::string name;
  dtype type = dtype::f32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
  std::filesystem::path file; // for error messages

  int64_t numel() const;
  // Converts to FP32 (F32, F16, BF16, F8_E4M3 and I8 sources). `out` must hold numel() floats.
  // Throws naming the file, the tensor and the first bad index when a value is NaN or infinite:
  // one such weight silently poisons every activation downstream.
  void to_float(float* out) const;
  // An F8_E4M3 matrix times its per-block scales (DeepSeek's weight_scale_inv, `scales` of
  // [ceil(rows / block_rows)][ceil(cols / block_cols)]), decoded and checked in one pass; a NaN
  // or a product that overflows is refused like to_float's, naming `scale_name` too.
  void to_float_scaled(float* out, std::span<const float> scales, int64_t block_rows,
                       int64_t block_cols, const std::string& scale_name) const;
};

// One memory-mapped .safetensors file.
class safetensors_file {
public:
  // Throws std::runtime_error naming the file and, where it applies, the tensor: truncated file,
  // header longer than the file, bad JSON, unknown dtype, offsets out of range or overlapping
  // the header, a byte count that does not match dtype x shape.
  static std::shared_ptr<safetensors_file> open(const std::filesystem::path& path);
  ~safetensors_file();

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, tensor_view>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

private:
  safetensors_file() = default;
  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, tensor_view> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All *.safetensors files of a checkpoint folder, seen as one name -> tensor map.
class checkpoint_reader {
public:
  static checkpoint_reader open(const std::filesystem::path& dir);

  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Throws naming the folder and the tensor when it is missing, or when the shape differs.
  const tensor_view& get(const std::string& name) const;
  const tensor_view& get(const std::string& name, std::span<const int64_t> expected_shape) const;
  const std::filesystem::path& dir() const { return dir_; }
  size_t tensor_count() const { return index_.size(); }

private:
  std::filesystem::path dir_;
  std::vector<std::shared_ptr<safetensors_file>> files_;
  std::map<std::string, const tensor_view*> index_;
};

// Streams tensors into a .safetensors file: the header is written first from the declared list,
// then each tensor's bytes in order, so multi-gigabyte checkpoints never sit in memory at once.
class safetensors_writer {
public:
  struct entry {
    std::string name;
    dtype type;
    std::vector<int64_t> shape;
  };
  safetensors_writer(const std::filesystem::path& path, std::vector<entry> entries,
                     const std::map<std::string, std::string>& metadata = {});
  ~safetensors_writer();
  // Appends the next tensor's bytes; must follow the declared order and sizes exactly.
  void write_next(std::span<const std::byte> bytes);
  void finish();

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// "[2, 3]".
std::string shape_string(std::span<const int64_t> shape);
// The first NaN or infinity of `values`, or -1.
int64_t first_non_finite(std::span<const float> values);
// "NaN at index 7 [0, 7]": the first non-finite value of a tensor of `shape`, for errors.
std::string non_finite_report(std::span<const float> values, std::span<const int64_t> shape);

// Conversions used by the writer and by tensor_view::to_float.
uint16_t float_to_bf16(float f); // round to nearest even
float bf16_to_float(uint16_t b);
float f16_to_float(uint16_t h);
uint8_t float_to_e4m3(float f); // saturating, round to nearest even
float e4m3_to_float(uint8_t v);

} // namespace supernode::model
