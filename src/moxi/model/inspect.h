// `moxi inspect`: what a checkpoint holds (tensors, dtypes, shapes, shards, parameters, bytes per dtype),
// and, when a config.json sits next to it, whether the tensors are exactly the ones the config declares.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace moxi::model {

struct inspect_report {
  std::string path;
  struct tensor_row {
    std::string name, dtype, shard;
    std::vector<int64_t> shape;
    uint64_t bytes = 0;
  };
  std::vector<tensor_row> tensors;                             // in name order
  std::map<std::string, std::pair<int64_t, uint64_t>> shards;  // file -> (tensors, bytes)
  std::map<std::string, uint64_t> bytes_by_dtype;
  int64_t params = 0;  // MXFP4 *_blocks count 2 parameters per byte; scales are not parameters
  uint64_t total_bytes = 0;
  // Against config.json, when present.
  bool has_config = false;
  std::string model_type;
  std::vector<std::string> missing, unexpected, mismatched;
  bool config_ok() const { return missing.empty() && mismatched.empty(); }
};

// Opens (and fully validates) the checkpoint at path; throws moxi::error on any bad file.
inspect_report inspect_checkpoint(const std::string& path);
nlohmann::json inspect_to_json(const inspect_report& r);
std::string inspect_to_text(const inspect_report& r, size_t max_rows);

}  // namespace moxi::model
