// Checkpoint reader: resolves shards only through the index's weight_map and cross-checks it against every
// shard's header, so a stale or mixed-up directory fails at open with the tensor and shard named.
#include "moxi/formats/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <set>

#include "moxi/base/error.h"
#include "moxi/formats/safetensors-json.h"

namespace moxi::formats {

namespace {

// An index maps ~1e5 tensors to file names; a few MB. The cap only stops a wrong file from eating memory.
constexpr uint64_t kMaxIndexSize = 256ull << 20;

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string read_small_file(const std::string& path, uint64_t cap) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw io_error("open checkpoint index", path, errno);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw io_error("read checkpoint index", path, err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > cap) {
      ::close(fd);
      throw error("checkpoint index '" + path + "': larger than " + std::to_string(cap) + " bytes");
    }
  }
  ::close(fd);
  return out;
}

// Shard names come from a file we do not control; a path component would let an index read files outside
// the checkpoint directory.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace

checkpoint::checkpoint(checkpoint&&) noexcept = default;
checkpoint& checkpoint::operator=(checkpoint&&) noexcept = default;
checkpoint::~checkpoint() = default;

checkpoint checkpoint::open(const std::string& path) {
  checkpoint ck;
  ck.source_ = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw io_error("open checkpoint", path, errno);

  auto add_shard_tensors = [&ck](size_t shard) {
    for (const auto& e : ck.shards_[shard]->tensors()) ck.tensors_.emplace(e.name, location{shard, &e});
  };

  std::string single;
  if (S_ISREG(st.st_mode)) {
    auto parent = std::filesystem::path(path).parent_path().string();
    ck.dir_ = parent.empty() ? "." : parent;
    single = path;
  } else if (S_ISDIR(st.st_mode)) {
    ck.dir_ = path;
    if (!is_regular_file(join_path(path, kIndexName))) {
      single = join_path(path, kSingleName);
      if (!is_regular_file(single))
        throw error("checkpoint '" + path + "': directory has neither " + kIndexName + " nor " + kSingleName);
    }
  } else {
    throw error("checkpoint '" + path + "': neither a file nor a directory");
  }

  if (!single.empty()) {
    ck.shards_.push_back(safetensors_file::open(single));
    add_shard_tensors(0);
    ck.metadata_ = ck.shards_[0]->metadata();
    return ck;
  }

  const std::string index_path = join_path(path, kIndexName);
  const std::string what = "checkpoint index '" + index_path + "'";
  nlohmann::json index = detail::parse_json_strict(read_small_file(index_path, kMaxIndexSize), what, 8);
  if (!index.is_object()) throw error(what + ": must be a JSON object, got " + index.type_name());
  auto wm = index.find("weight_map");
  if (wm == index.end()) throw error(what + ": missing weight_map");
  if (!wm->is_object())
    throw error(what + ": weight_map must be an object of tensor name -> shard file name, got " +
                wm->type_name());
  if (wm->empty()) throw error(what + ": weight_map is empty");
  auto md = index.find("metadata");
  if (md != index.end() && !md->is_object() && !md->is_null())
    throw error(what + ": metadata must be an object, got " + md->type_name());

  // shard file name -> tensors the weight_map puts there
  std::map<std::string, std::vector<std::string>> by_shard;
  for (auto& [tensor, shard] : wm->items()) {
    if (!shard.is_string())
      throw error(what + ": weight_map entry for tensor '" + tensor +
                  "' must be a shard file name string, got " + shard.type_name());
    const auto& name = shard.get_ref<const std::string&>();
    if (!is_plain_file_name(name))
      throw error(what + ": weight_map entry for tensor '" + tensor + "' names shard '" + name +
                  "', expected a plain file name in the checkpoint directory");
    by_shard[name].push_back(tensor);
  }

  // Shards are opened eagerly: the header check is cheap next to the load and catches a broken shard
  // before any weight is touched. by_shard is a sorted map, so shards_ is sorted by path.
  for (const auto& [shard_name, names] : by_shard) {
    const size_t shard = ck.shards_.size();
    const std::string shard_path = join_path(path, shard_name);
    if (!is_regular_file(shard_path))
      throw error(what + ": shard '" + shard_name + "' (of tensor '" + names.front() +
                  "') is missing: " + shard_path + " is not a file");
    ck.shards_.push_back(safetensors_file::open(shard_path));
    const auto& file = *ck.shards_.back();
    for (const auto& tensor : names) {
      const tensor_entry* e = file.find(tensor);
      if (!e)
        throw error(what + ": tensor '" + tensor + "' is mapped to shard '" + shard_name +
                    "' but that shard has no such tensor");
      ck.tensors_.emplace(tensor, location{shard, e});
    }
    // The reverse direction: a tensor the index does not list would be silently ignored by the loader,
    // which hides a stale or mixed-up shard. Reject it.
    for (const auto& e : file.tensors()) {
      auto it = ck.tensors_.find(e.name);
      if (it == ck.tensors_.end() || it->second.shard != shard) {
        std::string mapped;
        auto w = wm->find(e.name);
        if (w != wm->end()) mapped = w->get<std::string>();
        throw error(what + ": shard '" + shard_name + "' holds tensor '" + e.name +
                    "', which the weight_map " +
                    (mapped.empty() ? std::string("does not list") : "maps to shard '" + mapped + "'"));
      }
    }
  }
  ck.metadata_ = ck.shards_.front()->metadata();
  return ck;
}

const checkpoint::location& checkpoint::locate(std::string_view name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw error("checkpoint '" + source_ + "': no tensor named '" + std::string(name) + "'");
  return it->second;
}

std::vector<std::string> checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, loc] : tensors_) out.push_back(name);
  return out;
}

bool checkpoint::contains(std::string_view name) const {
  return tensors_.find(name) != tensors_.end();
}

tensor_view checkpoint::view(std::string_view name) const {
  const auto& loc = locate(name);
  return shards_[loc.shard]->view(*loc.entry);
}

const tensor_entry& checkpoint::entry(std::string_view name) const {
  return *locate(name).entry;
}

const std::string& checkpoint::shard_of(std::string_view name) const {
  return shards_[locate(name).shard]->path();
}

void checkpoint::release_pages() const {
  for (const auto& f : shards_) f->release_pages();
}

std::vector<std::string> checkpoint::shard_paths() const {
  std::vector<std::string> out;
  for (const auto& s : shards_) out.push_back(s->path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace moxi::formats
