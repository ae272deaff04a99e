// safetensors files: an mmap'ed, fully validated reader and the header encoder the writers share.
// Format and validation rules: docs/checkpoints.md §1.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "moxi/tensor/dtype.h"
#include "moxi/tensor/tensor-view.h"

namespace moxi::formats {

// One tensor of a safetensors header. begin/end are byte offsets relative to the start of the data section
// (file offset 8 + header length); end is exclusive.
struct tensor_entry {
  std::string name;
  dtype type = dtype::U8;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

class safetensors_file {
 public:
  // The safetensors reference implementation's MAX_HEADER_SIZE.
  static constexpr uint64_t kMaxHeaderSize = 100'000'000;

  // Maps the file read-only and validates the whole header before returning: every tensor lies in the file,
  // the tensors tile the data section exactly, dtype x shape matches the byte length. Throws moxi::error
  // naming the file (and the tensor or field) on any violation; never returns a file that views could read
  // past. The file must not be truncated by someone else while it is open (that would SIGBUS, as with any
  // mmap reader).
  static std::unique_ptr<safetensors_file> open(const std::string& path);

  ~safetensors_file();
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;

  const std::string& path() const { return path_; }
  // Sorted by data offset (ties, which only zero-byte tensors can have, by name).
  const std::vector<tensor_entry>& tensors() const { return tensors_; }
  // nullptr when absent.
  const tensor_entry* find(std::string_view name) const;
  // Zero-copy view into the mapping; valid while this object lives. The entry must come from this file.
  tensor_view view(const tensor_entry& entry) const;
  // The header's "__metadata__" map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t file_size() const { return file_size_; }
  // Drops this process's resident pages of the mapping (madvise MADV_DONTNEED); views stay valid and fault
  // their pages back from the file (or the page cache) when read again.
  void release_pages() const;
  // File offset of the data section: 8 + header length. Writers here make it a multiple of 8.
  uint64_t data_offset() const { return data_offset_; }

 private:
  safetensors_file() = default;
  void parse_header();
  // One top-level member of the header ("__metadata__" or a tensor), checked; errors start with `what`.
  void add_entry(const std::string& name, const nlohmann::json& value, const std::string& what);
  // The checks across tensors (they tile the data section) and the name index.
  void finish_header();

  std::string path_;
  const std::byte* base_ = nullptr;  // the mapping, file_size_ bytes
  uint64_t file_size_ = 0;
  uint64_t data_offset_ = 0;
  std::vector<tensor_entry> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;  // name -> index into tensors_
  std::map<std::string, std::string> metadata_;
};

// The bytes before the data section for these tensors: the 8-byte little-endian length, then the JSON
// header padded with spaces so that the data section starts at a multiple of 8 (as the reference writer
// does). Entries are written with their offsets as given; metadata goes under "__metadata__" when non-empty.
// Throws moxi::error if a name or metadata string is not valid UTF-8.
std::string encode_safetensors_header(const std::vector<tensor_entry>& entries,
                                      const std::map<std::string, std::string>& metadata);

}  // namespace moxi::formats
