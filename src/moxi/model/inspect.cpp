// Checkpoint inspection (see inspect.h).
#include "moxi/model/inspect.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>

#include "moxi/base/error.h"
#include "moxi/formats/checkpoint.h"
#include "moxi/formats/model-config-validate.h"
#include "moxi/formats/model-config.h"
#include "moxi/model/config.h"
#include "moxi/model/manifest.h"

namespace moxi::model {
namespace {

bool ends_with(const std::string& s, const char* suffix) {
  const std::string x(suffix);
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

std::string basename(const std::string& p) {
  const auto slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool file_exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

inspect_report inspect_checkpoint(const std::string& path) {
  // The config (when there is one) is read and validated before the checkpoint is opened and before
  // anything is sized from it, so a hostile config.json fails here with the field named.
  struct stat st {};
  const bool is_dir = ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  std::string dir = is_dir ? path : std::string(std::filesystem::path(path).parent_path());
  if (dir.empty()) dir = ".";
  std::optional<formats::model_config> config;
  if (file_exists(dir + "/config.json")) {
    config = load_model_config(dir + "/config.json");
    formats::validate_model_dir(*config, dir);
  }
  const auto ck = formats::checkpoint::open(path);
  inspect_report r;
  r.path = path;
  for (const auto& name : ck.names()) {
    const auto& e = ck.entry(name);
    inspect_report::tensor_row row{name, std::string(dtype_name(e.type)), basename(ck.shard_of(name)),
                                   e.shape, e.end - e.begin};
    int64_t numel = 1;
    for (int64_t d : e.shape) numel *= d;
    if (e.type == dtype::U8 && ends_with(name, "_blocks"))
      r.params += 2 * numel;
    else if (!(ends_with(name, "_scales") && ck.contains(name.substr(0, name.size() - 7) + "_blocks")) &&
             !ends_with(name, "_scale_inv"))
      r.params += numel;
    r.bytes_by_dtype[row.dtype] += row.bytes;
    auto& sh = r.shards[row.shard];
    sh.first += 1;
    sh.second += row.bytes;
    r.total_bytes += row.bytes;
    r.tensors.push_back(std::move(row));
  }

  if (!config) return r;
  r.has_config = true;
  r.model_type = config->model_type;
  // The float type of unquantized tensors is whatever the embedding uses (BF16 or F32 as written).
  dtype float_type = dtype::BF16;
  if (ck.contains("model.embed_tokens.weight")) float_type = ck.entry("model.embed_tokens.weight").type;
  if (float_type != dtype::BF16 && float_type != dtype::F32 && float_type != dtype::F16)
    float_type = dtype::BF16;
  const auto manifest = build_manifest(*config);
  const auto layout = storage_layout(*config, manifest, float_type);
  std::map<std::string, const stored_tensor*, std::less<>> expected;
  for (const auto& s : layout) expected[s.name] = &s;
  for (const auto& s : layout) {
    if (!ck.contains(s.name)) {
      r.missing.push_back(s.name);
      continue;
    }
    const auto& e = ck.entry(s.name);
    const bool float_ok = s.type == e.type || (s.kind == stored_tensor::role::PLAIN &&
                                               dtype_is_float(e.type) && dtype_is_float(s.type));
    if (e.shape != s.shape || !float_ok)
      r.mismatched.push_back(s.name + ": " + std::string(dtype_name(e.type)) + " " + shape_text(e.shape) +
                             ", config expects " + std::string(dtype_name(s.type)) + " " +
                             shape_text(s.shape));
  }
  for (const auto& t : r.tensors)
    if (!expected.count(t.name)) r.unexpected.push_back(t.name);
  return r;
}

nlohmann::json inspect_to_json(const inspect_report& r) {
  nlohmann::json j;
  j["path"] = r.path;
  j["num_tensors"] = r.tensors.size();
  j["params"] = r.params;
  j["total_bytes"] = r.total_bytes;
  j["bytes_by_dtype"] = r.bytes_by_dtype;
  auto& shards = j["shards"] = nlohmann::json::array();
  for (const auto& [file, s] : r.shards)
    shards.push_back({{"file", file}, {"tensors", s.first}, {"bytes", s.second}});
  auto& ts = j["tensors"] = nlohmann::json::array();
  for (const auto& t : r.tensors)
    ts.push_back(
        {{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}, {"shard", t.shard}, {"bytes", t.bytes}});
  if (r.has_config)
    j["config_check"] = {{"model_type", r.model_type},
                         {"ok", r.config_ok()},
                         {"missing", r.missing},
                         {"unexpected", r.unexpected},
                         {"mismatched", r.mismatched}};
  return j;
}

std::string inspect_to_text(const inspect_report& r, size_t max_rows) {
  std::ostringstream out;
  char line[512];
  out << r.path << ": " << r.tensors.size() << " tensors in " << r.shards.size() << " shard"
      << (r.shards.size() == 1 ? "" : "s") << ", " << r.params << " parameters, " << r.total_bytes
      << " bytes\n";
  out << "\nbytes by dtype\n";
  for (const auto& [d, b] : r.bytes_by_dtype) {
    std::snprintf(line, sizeof line, "  %-8s %16llu  (%.1f %%)\n", d.c_str(), (unsigned long long)b,
                  r.total_bytes ? 100.0 * double(b) / double(r.total_bytes) : 0.0);
    out << line;
  }
  out << "\nshards\n";
  for (const auto& [file, s] : r.shards) {
    std::snprintf(line, sizeof line, "  %-40s %8lld tensors %16llu bytes\n", file.c_str(), (long long)s.first,
                  (unsigned long long)s.second);
    out << line;
  }
  out << "\ntensors\n";
  size_t shown = 0;
  for (const auto& t : r.tensors) {
    if (shown++ == max_rows) {
      out << "  ... " << (r.tensors.size() - max_rows) << " more (--all lists every tensor)\n";
      break;
    }
    std::snprintf(line, sizeof line, "  %-64s %-8s %-22s %s\n", t.name.c_str(), t.dtype.c_str(),
                  shape_text(t.shape).c_str(), t.shard.c_str());
    out << line;
  }
  if (r.has_config) {
    out << "\nconfig.json (" << r.model_type << "): ";
    if (r.config_ok() && r.unexpected.empty()) {
      out << "every declared tensor present with the expected dtype and shape\n";
    } else {
      out << r.missing.size() << " missing, " << r.mismatched.size() << " mismatched, " << r.unexpected.size()
          << " not declared\n";
      auto list = [&](const char* what, const std::vector<std::string>& v) {
        for (size_t i = 0; i < v.size() && i < 10; ++i) out << "  " << what << ": " << v[i] << "\n";
        if (v.size() > 10) out << "  ... " << v.size() - 10 << " more " << what << "\n";
      };
      list("missing", r.missing);
      list("mismatched", r.mismatched);
      list("not declared", r.unexpected);
    }
  }
  return out.str();
}

}  // namespace moxi::model
