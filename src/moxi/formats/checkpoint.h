// Checkpoints: one safetensors file or a directory of shards resolved through model.safetensors.index.json,
// and the streaming, sharded, atomic writer that produces them. Rules and protocol: docs/checkpoints.md.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moxi/formats/safetensors.h"

namespace moxi::formats {

// A read-only checkpoint. Every shard is opened (mapped and validated) at open(); views stay valid while
// the checkpoint lives, including after it is moved.
class checkpoint {
 public:
  static constexpr const char* kIndexName = "model.safetensors.index.json";
  static constexpr const char* kSingleName = "model.safetensors";

  // path is a .safetensors file, or a directory holding model.safetensors.index.json (preferred) or
  // model.safetensors. Throws moxi::error naming the file, shard and tensor at fault.
  static checkpoint open(const std::string& path);

  checkpoint(checkpoint&&) noexcept;
  checkpoint& operator=(checkpoint&&) noexcept;
  ~checkpoint();

  std::vector<std::string> names() const;  // all tensor names, sorted
  bool contains(std::string_view name) const;
  // Throw moxi::error naming the tensor (and the checkpoint) when absent.
  tensor_view view(std::string_view name) const;
  const tensor_entry& entry(std::string_view name) const;
  // Full path of the shard file holding the tensor (as in shard_paths()).
  const std::string& shard_of(std::string_view name) const;
  // Full paths of all shard files, sorted.
  std::vector<std::string> shard_paths() const;
  // safetensors_file::release_pages over every shard.
  void release_pages() const;
  // The checkpoint directory (the parent of a single file), where config.json and friends live.
  const std::string& dir() const { return dir_; }
  // The "__metadata__" of the first shard's header (checkpoint_writer puts the same map in every shard).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  checkpoint() = default;
  struct location {
    size_t shard;
    const tensor_entry* entry;  // owned by shards_[shard], stable across moves
  };
  const location& locate(std::string_view name) const;

  std::string dir_;
  std::string source_;                                     // what open() was given, for error messages
  std::vector<std::unique_ptr<safetensors_file>> shards_;  // sorted by path
  std::map<std::string, location, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

// What a writer is told up front about one tensor.
struct tensor_spec {
  std::string name;
  dtype type = dtype::U8;
  std::vector<int64_t> shape;
};

// Streams a sharded checkpoint to disk. The layout is planned from the specs at construction, so write()
// goes straight to its final offset with pwrite: memory stays bounded by the caller's buffers, whatever the
// checkpoint size. Nothing appears at out_dir until commit() renames the finished temp directory there.
class checkpoint_writer {
 public:
  // Splits specs (in the given order) into num_shards contiguous groups balanced by bytes; each shard is
  // non-empty (num_shards is clamped to the tensor count; it must be >= 1). Within a shard, tensors are
  // laid out by descending element size, then name, so every tensor is naturally aligned. Files go to
  // out_dir + ".tmp-<pid>", named model-00001-of-0000N.safetensors. Throws moxi::error for duplicate or
  // empty names, bad shapes, no tensors, an existing out_dir, or a failing mkdir/open.
  checkpoint_writer(std::string out_dir, std::vector<tensor_spec> specs, int num_shards,
                    std::map<std::string, std::string> metadata = {});
  ~checkpoint_writer();  // without commit(): removes the temp directory
  checkpoint_writer(const checkpoint_writer&) = delete;
  checkpoint_writer& operator=(const checkpoint_writer&) = delete;

  // Writes one tensor's bytes (dense, row-major, little-endian); any order, each tensor exactly once.
  // nbytes must equal numel x dtype size. Throws moxi::interrupted first when SIGINT/SIGTERM asked the
  // process to stop (base/interrupt.h); destroying the writer then removes the temp directory.
  void write(std::string_view name, const void* data, size_t nbytes);
  // Writes an extra small file (config.json, tokenizer.json...) into the temp directory now. The name must
  // be a plain file name, distinct from the shards, the index and earlier extra files.
  void add_file(const std::string& relative_name, const std::string& contents);
  // Checks every tensor was written, fsyncs every file, writes model.safetensors.index.json
  // (metadata.total_size = sum of tensor bytes, weight_map), fsyncs the temp dir, renames it to out_dir
  // (refusing if out_dir exists) and fsyncs the parent directory.
  void commit();

  const std::string& out_dir() const { return out_dir_; }
  const std::string& temp_dir() const { return temp_dir_; }
  int num_shards() const { return static_cast<int>(shards_.size()); }
  // The file name of the shard a tensor was planned into.
  const std::string& shard_name_of(std::string_view name) const;

 private:
  struct planned {
    tensor_spec spec;
    size_t shard = 0;
    uint64_t offset = 0;  // file offset (data section start + begin)
    uint64_t nbytes = 0;
    bool written = false;
  };
  struct shard {
    std::string name;  // file name
    int fd = -1;
    std::vector<size_t> tensors;  // indices into tensors_, in layout order
  };

  std::string out_dir_, temp_dir_;
  std::vector<planned> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
  std::vector<shard> shards_;
  std::vector<std::string> extra_files_;
  std::map<std::string, std::string> metadata_;
  uint64_t total_bytes_ = 0;
  bool committed_ = false;
  bool temp_created_ = false;
};

// Single-file convenience for tests and tools: writes path.tmp-<pid>, fsyncs, renames over path (replacing
// an existing file atomically). Same layout rules as checkpoint_writer. Each pointer must hold
// numel x dtype size bytes.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<tensor_spec, const void*>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace moxi::formats
