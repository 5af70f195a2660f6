#include "services/ems/model_blocks.hpp"

#include "services/ems/block_checksum.hpp"
#include "services/ems/hash_ring.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <unordered_set>

namespace supernode::services::ems {

namespace {

constexpr std::string_view safetensors_suffix = ".safetensors";
// The safetensors format caps its header at 100 MB; anything larger is a broken file, not a
// header to read into memory.
constexpr uint64_t max_safetensors_header = 100'000'000;
// Bytes read from each end of a large file's data into the version: the fingerprint stays a few
// header-sized reads, yet a retrained checkpoint with the same shapes still gets a new version.
constexpr uint64_t sample_bytes = 64 << 10;

uint64_t le_u64(std::span<const std::byte> p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Length-prefixed fields, so ("ab","c") and ("a","bc") fingerprint differently.
class fingerprint {
public:
  void add(std::string_view field) {
    add(static_cast<uint64_t>(field.size()));
    text_.append(field);
  }
  void add(std::span<const std::byte> bytes) {
    add(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }
  void add(uint64_t v) {
    for (int i = 0; i < 8; ++i) text_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string hex() const { return hex16(stable_hash(text_)); }

private:
  std::string text_;
};

// A contiguous byte range of one file that gets its own key prefix.
struct part {
  std::string name;
  uint64_t offset = 0;
  uint64_t length = 0;
  bool single_block = false; // the header: one block whatever its size
};

struct tensor_range {
  std::string name;
  uint64_t begin = 0; // absolute, in the file
  uint64_t end = 0;
};

std::string join(const std::string& folder, const std::string& name) {
  return folder.empty() ? name : folder + "/" + name;
}

// The parts of a safetensors file from its header; adds what the version needs to `fp`.
std::vector<part> safetensors_parts(object_store& store, const std::string& path,
                                    const std::string& name, uint64_t size, fingerprint& fp) {
  const std::string where = "safetensors file " + (store.folder() / path).string();
  if (size < 8) throw std::runtime_error(where + ": shorter than its 8-byte header length");
  const uint64_t header_len = le_u64(store.read_metadata(path, 0, 8));
  if (header_len > max_safetensors_header || header_len > size - 8)
    throw std::runtime_error(where + ": header length " + std::to_string(header_len) +
                             " does not fit the file's " + std::to_string(size) + " bytes");
  const uint64_t data_start = 8 + header_len;

  std::vector<std::byte> whole;
  std::vector<std::byte> header_bytes;
  if (size < small_file_bytes) {
    whole = store.read_metadata(path, 0, size);
    header_bytes.assign(whole.begin() + 8, whole.begin() + static_cast<ptrdiff_t>(data_start));
    fp.add(whole);
  } else {
    header_bytes = store.read_metadata(path, 8, header_len);
    fp.add(header_bytes);
    const uint64_t data = size - data_start;
    const uint64_t n = std::min(sample_bytes, data);
    fp.add(store.read_metadata(path, data_start, n));
    fp.add(store.read_metadata(path, size - n, n));
  }

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(header_bytes.data()),
                                   reinterpret_cast<const char*>(header_bytes.data()) +
                                       header_bytes.size());
  } catch (const std::exception& e) {
    throw std::runtime_error(where + ": bad JSON header: " + e.what());
  }
  if (!header.is_object()) throw std::runtime_error(where + ": header is not a JSON object");

  std::vector<tensor_range> tensors;
  for (const auto& [tensor, info] : header.items()) {
    if (tensor == "__metadata__") continue;
    const auto offsets = info.is_object() ? info.find("data_offsets") : info.end();
    if (!info.is_object() || offsets == info.end() || !offsets->is_array() ||
        offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned())
      throw std::runtime_error(where + ": tensor " + tensor + " lacks data_offsets [begin, end]");
    const auto begin = (*offsets)[0].get<uint64_t>(), end = (*offsets)[1].get<uint64_t>();
    if (begin > end || end > size - data_start)
      throw std::runtime_error(where + ": tensor " + tensor + " data_offsets [" +
                               std::to_string(begin) + ", " + std::to_string(end) +
                               "] lie outside the file's " + std::to_string(size - data_start) +
                               " data bytes");
    if (begin == end) continue; // an empty tensor has no bytes to cover
    tensors.push_back({tensor, data_start + begin, data_start + end});
  }
  std::sort(tensors.begin(), tensors.end(),
            [](const tensor_range& a, const tensor_range& b) { return a.begin < b.begin; });

  std::vector<part> parts;
  parts.push_back({name + "#header", 0, data_start, true});
  uint64_t at = data_start;
  const auto gap_to = [&](uint64_t to) {
    if (to > at) parts.push_back({name + "#gap@" + std::to_string(at), at, to - at, false});
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    if (t.begin < at)
      throw std::runtime_error(where + ": tensor " + t.name + " overlaps tensor " +
                               tensors[i - 1].name);
    gap_to(t.begin);
    parts.push_back({t.name, t.begin, t.end - t.begin, false});
    at = t.end;
  }
  gap_to(size);
  return parts;
}

} // namespace

std::string model_key(const std::string& model_id, const std::string& version) {
  if (model_id.empty()) throw std::invalid_argument("model key: empty model id");
  if (version.empty()) throw std::invalid_argument("model key: empty version for " + model_id);
  if (model_id.find('@') != std::string::npos)
    throw std::invalid_argument("model key: model id " + model_id + " must not contain '@'");
  return model_id + "@" + version;
}

namespace {
constexpr std::string_view manifest_prefix = "model/", manifest_suffix = "/manifest";
}

std::string model_manifest_key(const std::string& model_key) {
  return std::string(manifest_prefix) + model_key + std::string(manifest_suffix);
}

std::optional<std::string> model_key_of_manifest_key(const std::string& pool_key) {
  const std::string_view k = pool_key;
  if (k.size() <= manifest_prefix.size() + manifest_suffix.size() ||
      !k.starts_with(manifest_prefix) || !k.ends_with(manifest_suffix))
    return std::nullopt;
  // Block keys end in their block index, never in the suffix.
  return std::string(
      k.substr(manifest_prefix.size(), k.size() - manifest_prefix.size() - manifest_suffix.size()));
}

std::string model_block_key(const std::string& model_key, const std::string& part, size_t index) {
  return "model/" + model_key + "/" + part + "/" + std::to_string(index);
}

std::string model_manifest::key() const {
  return model_key(model_id, version);
}

uint64_t model_manifest::total_bytes() const {
  uint64_t n = 0;
  for (const auto& f : files) n += f.size;
  return n;
}

size_t model_manifest::block_count() const {
  size_t n = 0;
  for (const auto& f : files) n += f.blocks.size();
  return n;
}

std::vector<std::string> model_manifest::block_keys() const {
  std::vector<std::string> keys;
  keys.reserve(block_count());
  for (const auto& f : files)
    for (const auto& b : f.blocks) keys.push_back(b.key);
  return keys;
}

uint64_t model_block_checksum(std::span<const std::byte> data) {
  return block_checksum({}, {}, data); // the pool's own checksum: near memory speed
}

model_manifest plan_model_blocks(object_store& store, const std::string& folder,
                                 const std::string& model_id, size_t block_bytes) {
  if (block_bytes == 0) throw std::invalid_argument("model blocks: block_bytes must be > 0");
  model_key(model_id, "probe"); // validates the id before any read
  const auto names = store.list(folder);
  if (names.empty())
    throw std::runtime_error("model blocks: no files in " + (store.folder() / folder).string());

  fingerprint fp;
  fp.add(std::string_view(model_manifest_format));
  std::vector<std::pair<model_file, std::vector<part>>> cut;
  for (const auto& name : names) {
    const std::string path = join(folder, name);
    model_file file;
    file.name = name;
    file.size = store.file_size(path);
    fp.add(name);
    fp.add(file.size);
    std::vector<part> parts;
    if (name.ends_with(safetensors_suffix)) {
      parts = safetensors_parts(store, path, name, file.size, fp);
    } else {
      if (file.size < small_file_bytes) fp.add(store.read_metadata(path, 0, file.size));
      if (file.size > 0) parts.push_back({name, 0, file.size, false});
    }
    cut.emplace_back(std::move(file), std::move(parts));
  }

  model_manifest manifest;
  manifest.model_id = model_id;
  manifest.version = fp.hex();
  manifest.block_bytes = block_bytes;
  const std::string key = manifest.key();
  std::unordered_set<std::string> part_names;
  for (auto& [file, parts] : cut) {
    for (const auto& p : parts) {
      if (!part_names.insert(p.name).second)
        throw std::runtime_error(
            "model blocks: " + (store.folder() / join(folder, file.name)).string() + " holds " +
            p.name + ", a name another file already used");
      const uint64_t step = p.single_block ? p.length : block_bytes;
      for (uint64_t at = 0, index = 0; at < p.length; at += step, ++index)
        file.blocks.push_back(
            {model_block_key(key, p.name, index), p.offset + at, std::min(step, p.length - at), 0});
    }
    manifest.files.push_back(std::move(file));
  }
  validate_manifest(manifest);
  return manifest;
}

model_manifest plan_model_blocks(const std::filesystem::path& folder, const std::string& model_id,
                                 size_t block_bytes) {
  object_store store(folder, 0);
  return plan_model_blocks(store, "", model_id, block_bytes);
}

std::string model_version(object_store& store, const std::string& folder) {
  return plan_model_blocks(store, folder, "version").version;
}

std::vector<std::byte> serialize_manifest(const model_manifest& manifest) {
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, manifest);
  const auto* p = reinterpret_cast<const std::byte*>(buffer.data());
  return {p, p + buffer.size()};
}

model_manifest parse_manifest(std::span<const std::byte> bytes) {
  model_manifest manifest;
  manifest.format.clear(); // a map without the tag must not pass as one
  try {
    // No container or string can hold more elements than there are bytes; shallow nesting.
    const auto n = bytes.size();
    const msgpack::unpack_limit limits(n, n, n, n, n, 8);
    size_t used = 0;
    const auto handle = msgpack::unpack(reinterpret_cast<const char*>(bytes.data()), n, used,
                                        nullptr, nullptr, limits);
    if (used != n) throw std::runtime_error(std::to_string(n - used) + " bytes after the manifest");
    handle.get().convert(manifest);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("malformed model manifest: ") + e.what());
  }
  try {
    validate_manifest(manifest);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("malformed model manifest: ") + e.what());
  }
  return manifest;
}

void validate_manifest(const model_manifest& m) {
  if (m.format != model_manifest_format)
    throw std::runtime_error("format is '" + m.format + "', expected '" + model_manifest_format +
                             "'");
  const std::string model = m.model_id + "@" + m.version;
  if (m.model_id.empty() || m.version.empty() || m.model_id.find('@') != std::string::npos)
    throw std::runtime_error("bad model id or version in " + model);
  if (m.block_bytes == 0) throw std::runtime_error(model + ": block_bytes is 0");
  if (m.files.empty()) throw std::runtime_error(model + ": no files");
  std::unordered_set<std::string> keys;
  for (size_t i = 0; i < m.files.size(); ++i) {
    const auto& f = m.files[i];
    if (f.name.empty() || f.name == "." || f.name == ".." ||
        f.name.find_first_of(std::string_view("/\0", 2)) != std::string::npos)
      throw std::runtime_error(model + ": bad file name '" + f.name + "'");
    if (i > 0 && !(m.files[i - 1].name < f.name))
      throw std::runtime_error(model + ": file " + f.name + " out of order or listed twice");
    uint64_t at = 0;
    for (size_t b = 0; b < f.blocks.size(); ++b) {
      const auto& block = f.blocks[b];
      const std::string where = model + " file " + f.name + " block " + std::to_string(b);
      if (block.key.empty()) throw std::runtime_error(where + ": empty key");
      if (block.offset != at)
        throw std::runtime_error(where + " (" + block.key + ") starts at " +
                                 std::to_string(block.offset) + ", expected " + std::to_string(at));
      if (block.length == 0 || block.length > f.size - at)
        throw std::runtime_error(where + " (" + block.key + ") has length " +
                                 std::to_string(block.length) + " at offset " + std::to_string(at) +
                                 " of " + std::to_string(f.size) + " bytes");
      if (!keys.insert(block.key).second)
        throw std::runtime_error(where + ": key " + block.key + " used twice");
      at += block.length;
    }
    if (at != f.size)
      throw std::runtime_error(model + " file " + f.name + ": blocks cover " + std::to_string(at) +
                               " of " + std::to_string(f.size) + " bytes");
  }
}

} // namespace supernode::services::ems
