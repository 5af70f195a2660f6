#pragma once
// A model folder cut into EMS pool blocks (§4.4 model caching). Every file directly in the
// folder (config.json, *.safetensors, tokenizer files, anything else) becomes a list of blocks
// that cover its bytes exactly once, keyed by (model, version, tensor, block):
//   model/<id>@<version>/<tensor or file>/<block index>
// A safetensors file gives one block for its header ("<file>#header"), blocks of at most
// block_bytes per tensor named after the tensor, and blocks for any bytes between or after the
// tensors ("<file>#gap@<offset>"); any other file is cut by size under its own name. Keying by
// tensor lets an instance that needs only some tensors fetch only those.
//
// The version is a fingerprint of what the folder holds, computed from file names and sizes,
// the safetensors headers and the bytes of small files, so it costs a few header reads rather
// than a pass over the weights: the same folder always gives the same version, and any change
// of a tensor's offset, shape or dtype, of a file's size or of a small file gives another, so a
// changed model never reads an old model's blocks.

#include "services/ems/object_store.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <msgpack.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace supernode::services::ems {

inline constexpr size_t default_model_block_bytes = 4ull << 20;
// Files below this size enter the version with their bytes, larger ones with their size only
// (their content is covered by the safetensors header when they are weights).
inline constexpr uint64_t small_file_bytes = 1ull << 20;

struct model_block {
  std::string key;       // pool key
  uint64_t offset = 0;   // in the file
  uint64_t length = 0;   // > 0
  uint64_t checksum = 0; // FNV-1a of the bytes; filled by the fetch (see model_manifest)
  MSGPACK_DEFINE_MAP(key, offset, length, checksum);
};

struct model_file {
  std::string name; // inside the model folder, no '/'
  uint64_t size = 0;
  std::vector<model_block> blocks; // ascending offsets, contiguous, covering [0, size)
  MSGPACK_DEFINE_MAP(name, size, blocks);
};

inline constexpr const char* model_manifest_format = "supernode.model_manifest/1";

struct model_manifest {
  std::string format = model_manifest_format;
  std::string model_id;
  std::string version;
  uint64_t block_bytes = default_model_block_bytes;
  // A plan reads only metadata, so its checksums are 0 and this is false; the instance that
  // fetches the model from object storage computes them before registering the manifest.
  bool has_checksums = false;
  std::vector<model_file> files; // sorted by name
  MSGPACK_DEFINE_MAP(format, model_id, version, block_bytes, has_checksums, files);

  std::string key() const; // model_key(model_id, version)
  uint64_t total_bytes() const;
  size_t block_count() const;
  std::vector<std::string> block_keys() const; // file order, then block order
};

// "id@version". Throws std::invalid_argument when either is empty or the id holds '@'.
std::string model_key(const std::string& model_id, const std::string& version);
// Where the fetching instance stores the registered manifest, next to the blocks.
std::string model_manifest_key(const std::string& model_key);
// The model key of a pool key model_manifest_key gave; nullopt for any other key.
std::optional<std::string> model_key_of_manifest_key(const std::string& pool_key);
// The pool key of block `index` of `part` (a tensor, a file, "<file>#header", ...).
std::string model_block_key(const std::string& model_key, const std::string& part, size_t index);

// Cuts the folder `folder` of `store` ("" = the store's root) into blocks, reading only the
// safetensors headers and the small files (as object_store metadata reads). Throws
// std::invalid_argument for block_bytes == 0 or a bad model id, and std::runtime_error naming the
// file (and tensor) for an empty folder, a malformed safetensors header, a tensor outside its
// file, overlapping tensors or two parts with the same name.
model_manifest plan_model_blocks(object_store& store, const std::string& folder,
                                 const std::string& model_id,
                                 size_t block_bytes = default_model_block_bytes);
// The same for a local folder, read without a cap.
model_manifest plan_model_blocks(const std::filesystem::path& folder, const std::string& model_id,
                                 size_t block_bytes = default_model_block_bytes);
// Just the version of the folder (a plan's version).
std::string model_version(object_store& store, const std::string& folder);

// A model block's checksum in the manifest (the bytes alone: the key is checked by the pool).
uint64_t model_block_checksum(std::span<const std::byte> data);

std::vector<std::byte> serialize_manifest(const model_manifest& manifest);
// Throws std::runtime_error "malformed model manifest: ..." for bytes that do not decode, or a
// manifest that breaks validate_manifest.
model_manifest parse_manifest(std::span<const std::byte> bytes);
// Throws std::runtime_error naming the model, file and block when the manifest is not
// well-formed: wrong format tag, empty id or version, bad or duplicate file names, blocks that
// do not cover their file exactly once in order, empty or duplicate keys.
void validate_manifest(const model_manifest& manifest);

} // namespace supernode::services::ems
