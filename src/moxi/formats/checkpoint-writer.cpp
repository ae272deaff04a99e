// Checkpoint writers: plan every byte offset from the specs, pwrite tensors into place, and publish the
// result with fsync + rename so a crash leaves either nothing or a complete checkpoint at the target.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "moxi/base/error.h"
#include "moxi/base/interrupt.h"
#include "moxi/formats/checkpoint.h"
#include "moxi/formats/shard-plan.h"

namespace moxi::formats {

namespace {

struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

std::string join_path(const std::string& dir, const std::string& name) {
  return dir + "/" + name;
}

std::string parent_of(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

void pwrite_all(int fd, const void* data, size_t n, uint64_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // Linux writes at most ~2 GiB per call; large tensors need the loop anyway.
    ssize_t w = ::pwrite(fd, p, std::min<size_t>(n, size_t(1) << 30), static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw io_error("write", path, errno);
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

void fsync_path(const std::string& path, bool directory) {
  fd_guard fd{::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_WRONLY) | O_CLOEXEC)};
  if (fd.fd < 0) throw io_error("open for fsync", path, errno);
  if (::fsync(fd.fd) != 0) throw io_error("fsync", path, errno);
}

void write_new_file(const std::string& path, const std::string& contents) {
  fd_guard fd{::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)};
  if (fd.fd < 0) throw io_error("create", path, errno);
  pwrite_all(fd.fd, contents.data(), contents.size(), 0, path);
  if (::fsync(fd.fd) != 0) throw io_error("fsync", path, errno);
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

// Checks one spec and returns its byte size; `what` prefixes errors.
uint64_t spec_bytes(const tensor_spec& s, const std::string& what) {
  if (s.name.empty()) throw error(what + ": a tensor has an empty name");
  if (s.name == "__metadata__") throw error(what + ": '__metadata__' is reserved and cannot name a tensor");
  uint64_t numel = 1;
  bool has_zero = false;
  for (int64_t d : s.shape) {
    if (d < 0) throw error(what + ": tensor '" + s.name + "' has a negative dimension");
    has_zero |= d == 0;
  }
  if (has_zero) return 0;
  uint64_t bytes = 0;
  for (int64_t d : s.shape)
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel))
      throw error(what + ": tensor '" + s.name + "' has more elements than fit in 64 bits");
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(s.type)), &bytes) ||
      numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw error(what + ": tensor '" + s.name + "' is more bytes than fit in 64 bits");
  return bytes;
}

// The safetensors reference writer's order: larger elements first, then by name. With the data section
// 8-aligned, every tensor then starts at a multiple of its element size.
bool layout_before(const tensor_spec& a, const tensor_spec& b) {
  size_t sa = dtype_size(a.type), sb = dtype_size(b.type);
  if (sa != sb) return sa > sb;
  return a.name < b.name;
}

std::string shard_file_name(size_t index, size_t count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return buf;
}

// Strips trailing slashes so that "out/" + ".tmp-1" does not land inside out/.
std::string normalize_dir(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

}  // namespace

checkpoint_writer::checkpoint_writer(std::string out_dir, std::vector<tensor_spec> specs, int num_shards,
                                     std::map<std::string, std::string> metadata)
    : out_dir_(normalize_dir(std::move(out_dir))), metadata_(std::move(metadata)) {
  const std::string what = "writing checkpoint '" + out_dir_ + "'";
  if (out_dir_.empty()) throw error("writing a checkpoint: empty output directory");
  if (specs.empty()) throw error(what + ": no tensors to write");
  if (num_shards < 1) throw error(what + ": num_shards must be >= 1, got " + std::to_string(num_shards));
  if (path_exists(out_dir_))
    throw error(what + ": output '" + out_dir_ + "' already exists; refusing to replace it");

  const size_t n = specs.size();
  for (size_t i = 0; i < n; ++i) {
    uint64_t b = spec_bytes(specs[i], what);
    if (!by_name_.emplace(specs[i].name, i).second)
      throw error(what + ": tensor '" + specs[i].name + "' is specified twice");
    if (__builtin_add_overflow(total_bytes_, b, &total_bytes_))
      throw error(what + ": total size overflows 64 bits");
    tensors_.push_back({std::move(specs[i]), 0, 0, b, false});
  }

  // The same split `moxi plan` reports (formats/shard-plan.h): contiguous runs in spec order, balanced by
  // bytes, every shard non-empty.
  std::vector<uint64_t> sizes(n);
  for (size_t i = 0; i < n; ++i) sizes[i] = tensors_[i].nbytes;
  const std::vector<int> plan = plan_shards(sizes, num_shards);
  const size_t shards = static_cast<size_t>(plan.back()) + 1;
  shards_.resize(shards);
  for (size_t s = 0; s < shards; ++s) shards_[s].name = shard_file_name(s, shards);
  for (size_t i = 0; i < n; ++i) {
    tensors_[i].shard = static_cast<size_t>(plan[i]);
    shards_[tensors_[i].shard].tensors.push_back(i);
  }
  for (auto& sh : shards_) {
    MOXI_ASSERT(!sh.tensors.empty(), "plan_shards left a shard empty");
    std::sort(sh.tensors.begin(), sh.tensors.end(),
              [this](size_t a, size_t b) { return layout_before(tensors_[a].spec, tensors_[b].spec); });
  }

  temp_dir_ = out_dir_ + ".tmp-" + std::to_string(::getpid());
  // Like `mkdir -p` for the parent: users name a new output path and expect it to appear.
  const auto parent = std::filesystem::path(out_dir_).parent_path();
  std::error_code mkdir_error;
  if (!parent.empty()) std::filesystem::create_directories(parent, mkdir_error);
  if (mkdir_error) throw io_error("create directory", parent.string(), mkdir_error.value());
  if (::mkdir(temp_dir_.c_str(), 0755) != 0) {
    if (errno == EEXIST)
      throw error(what + ": temp directory '" + temp_dir_ +
                  "' already exists (left by an interrupted write? remove it)");
    throw io_error("create temp directory", temp_dir_, errno);
  }
  temp_created_ = true;
  // From here on a throw must not leak the temp dir; the destructor does not run for a throwing constructor.
  try {
    for (auto& sh : shards_) {
      std::vector<tensor_entry> entries;
      uint64_t begin = 0;
      for (size_t i : sh.tensors) {
        auto& t = tensors_[i];
        entries.push_back({t.spec.name, t.spec.type, t.spec.shape, begin, begin + t.nbytes});
        begin += t.nbytes;
      }
      const std::string header = encode_safetensors_header(entries, metadata_);
      uint64_t at = header.size();
      for (size_t i : sh.tensors) {
        tensors_[i].offset = at;
        at += tensors_[i].nbytes;
      }
      const std::string path = join_path(temp_dir_, sh.name);
      fd_guard fd{::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)};
      if (fd.fd < 0) throw io_error("create shard", path, errno);
      pwrite_all(fd.fd, header.data(), header.size(), 0, path);
      // Full size now, so tensors can be written in any order; unwritten ranges read as zeros and commit()
      // refuses to publish while any remain.
      if (::ftruncate(fd.fd, static_cast<off_t>(at)) != 0) throw io_error("resize shard", path, errno);
    }
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove_all(temp_dir_, ec);
    throw;
  }
}

checkpoint_writer::~checkpoint_writer() {
  if (temp_created_ && !committed_) {
    std::error_code ec;  // a destructor must not throw; a leftover temp dir is reported by the next writer
    std::filesystem::remove_all(temp_dir_, ec);
  }
}

const std::string& checkpoint_writer::shard_name_of(std::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end())
    throw error("writing checkpoint '" + out_dir_ + "': no tensor named '" + std::string(name) +
                "' was specified");
  return shards_[tensors_[it->second].shard].name;
}

void checkpoint_writer::write(std::string_view name, const void* data, size_t nbytes) {
  // Writers are fed tensor by tensor, so this is where a long `moxi init`/`quantize` stops when asked;
  // the unwinding destroys the writer, which removes the temp directory.
  check_interrupt();
  const std::string what = "writing checkpoint '" + out_dir_ + "'";
  if (committed_) throw error(what + ": write of tensor '" + std::string(name) + "' after commit");
  auto it = by_name_.find(name);
  if (it == by_name_.end())
    throw error(what + ": tensor '" + std::string(name) + "' was not in the specs given to the writer");
  auto& t = tensors_[it->second];
  if (t.written) throw error(what + ": tensor '" + t.spec.name + "' written twice");
  if (nbytes != t.nbytes)
    throw error(what + ": tensor '" + t.spec.name + "' got " + std::to_string(nbytes) + " bytes, expected " +
                std::to_string(t.nbytes) + " (" + std::string(dtype_name(t.spec.type)) + " x shape)");
  if (nbytes > 0 && data == nullptr) throw error(what + ": tensor '" + t.spec.name + "' data is null");
  if (nbytes > 0) {
    // Opened per write, not held: a checkpoint may have more shards than the process may hold open fds.
    const std::string path = join_path(temp_dir_, shards_[t.shard].name);
    fd_guard fd{::open(path.c_str(), O_WRONLY | O_CLOEXEC)};
    if (fd.fd < 0) throw io_error("open shard", path, errno);
    pwrite_all(fd.fd, data, nbytes, t.offset, path);
  }
  t.written = true;
}

void checkpoint_writer::add_file(const std::string& relative_name, const std::string& contents) {
  const std::string what = "writing checkpoint '" + out_dir_ + "'";
  if (committed_) throw error(what + ": add_file '" + relative_name + "' after commit");
  bool plain = !relative_name.empty() && relative_name != "." && relative_name != ".." &&
               relative_name.find('/') == std::string::npos && relative_name.find('\0') == std::string::npos;
  if (!plain) throw error(what + ": extra file name '" + relative_name + "' must be a plain file name");
  bool clash =
      relative_name == checkpoint::kIndexName ||
      std::any_of(shards_.begin(), shards_.end(), [&](const shard& s) { return s.name == relative_name; }) ||
      std::find(extra_files_.begin(), extra_files_.end(), relative_name) != extra_files_.end();
  if (clash)
    throw error(what + ": extra file '" + relative_name +
                "' clashes with a shard, the index or an earlier file");
  write_new_file(join_path(temp_dir_, relative_name), contents);
  extra_files_.push_back(relative_name);
}

void checkpoint_writer::commit() {
  const std::string what = "writing checkpoint '" + out_dir_ + "'";
  if (committed_) throw error(what + ": commit called twice");
  std::vector<std::string> missing;
  for (const auto& t : tensors_)
    if (!t.written) missing.push_back(t.spec.name);
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 5; ++i) list += (i ? ", '" : "'") + missing[i] + "'";
    if (missing.size() > 5) list += ", ...";
    throw error(what + ": " + std::to_string(missing.size()) + " tensor(s) were never written: " + list);
  }

  for (const auto& sh : shards_) fsync_path(join_path(temp_dir_, sh.name), false);

  nlohmann::json weight_map = nlohmann::json::object();
  for (const auto& t : tensors_) weight_map[t.spec.name] = shards_[t.shard].name;
  nlohmann::json index = {{"metadata", {{"total_size", total_bytes_}}},
                          {"weight_map", std::move(weight_map)}};
  write_new_file(join_path(temp_dir_, checkpoint::kIndexName), index.dump(2) + "\n");
  fsync_path(temp_dir_, true);

  // RENAME_NOREPLACE makes "refuse an existing out_dir" atomic (plain rename would replace an empty dir).
  if (::renameat2(AT_FDCWD, temp_dir_.c_str(), AT_FDCWD, out_dir_.c_str(), RENAME_NOREPLACE) != 0) {
    int err = errno;
    if (err == EEXIST || err == ENOTEMPTY)
      throw error(what + ": output '" + out_dir_ + "' already exists; refusing to replace it");
    if (err != EINVAL && err != ENOSYS) throw io_error("rename " + temp_dir_ + " to", out_dir_, err);
    // The filesystem lacks RENAME_NOREPLACE: check, then rename (a small race we accept there).
    if (path_exists(out_dir_))
      throw error(what + ": output '" + out_dir_ + "' already exists; refusing to replace it");
    if (::rename(temp_dir_.c_str(), out_dir_.c_str()) != 0)
      throw io_error("rename " + temp_dir_ + " to", out_dir_, errno);
  }
  committed_ = true;
  fsync_path(parent_of(out_dir_), true);
}

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<tensor_spec, const void*>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string what = "writing '" + path + "'";
  std::vector<size_t> order(tensors.size());
  std::vector<uint64_t> bytes(tensors.size());
  std::set<std::string_view> seen;
  for (size_t i = 0; i < tensors.size(); ++i) {
    order[i] = i;
    bytes[i] = spec_bytes(tensors[i].first, what);
    if (!seen.insert(tensors[i].first.name).second)
      throw error(what + ": tensor '" + tensors[i].first.name + "' given twice");
    if (bytes[i] > 0 && tensors[i].second == nullptr)
      throw error(what + ": tensor '" + tensors[i].first.name + "' data is null");
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return layout_before(tensors[a].first, tensors[b].first); });
  std::vector<tensor_entry> entries;
  uint64_t begin = 0;
  for (size_t i : order) {
    const auto& s = tensors[i].first;
    entries.push_back({s.name, s.type, s.shape, begin, begin + bytes[i]});
    begin += bytes[i];
  }
  const std::string header = encode_safetensors_header(entries, metadata);

  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  try {
    fd_guard fd{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    if (fd.fd < 0) throw io_error("create", tmp, errno);
    pwrite_all(fd.fd, header.data(), header.size(), 0, tmp);
    uint64_t at = header.size();
    for (size_t i : order) {
      pwrite_all(fd.fd, tensors[i].second, bytes[i], at, tmp);
      at += bytes[i];
    }
    if (::fsync(fd.fd) != 0) throw io_error("fsync", tmp, errno);
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw io_error("rename " + tmp + " to", path, errno);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_path(parent_of(path), true);
}

}  // namespace moxi::formats
