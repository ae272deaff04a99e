// Workspace handling of the sandbox (see workspace.h).
#include "moxi/sandbox/workspace.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "moxi/base/error.h"

namespace moxi::sandbox::detail {

void unique_fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

bool is_system_path(const std::string& p) {
  if (p == "/") return true;
  // Whole subtrees: the system itself and kernel file systems.
  for (const char* s : {"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot",
                        "/proc", "/sys", "/dev", "/run"}) {
    const std::string root = s;
    if (p == root || p.rfind(root + "/", 0) == 0) return true;
  }
  // Shared or system roots whose subdirectories are ordinary places for a workspace.
  for (const char* s :
       {"/tmp", "/var", "/var/tmp", "/var/lib", "/home", "/root", "/mnt", "/media", "/opt", "/srv", "/work"})
    if (p == s) return true;
  return false;
}

namespace {

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw error("sandbox: refusing workspace '" + path + "': " + why);
}

// One directory entry of `dirfd`, or nullopt-like empty name at the end. Owns a DIR* over a duplicate.
class dir_reader {
 public:
  explicit dir_reader(int dirfd) {
    int d = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d >= 0) {
      dir_ = ::fdopendir(d);
      if (!dir_) ::close(d);
    }
  }
  ~dir_reader() {
    if (dir_) ::closedir(dir_);
  }
  dir_reader(const dir_reader&) = delete;
  dir_reader& operator=(const dir_reader&) = delete;
  bool ok() const { return dir_ != nullptr; }
  // The names first, then the caller works on them: modifying a directory while readdir walks it may
  // skip or repeat entries.
  std::vector<std::string> names() {
    std::vector<std::string> out;
    if (!dir_) return out;
    while (dirent* e = ::readdir(dir_)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      out.emplace_back(e->d_name);
    }
    return out;
  }

 private:
  DIR* dir_ = nullptr;
};

// Opens a subdirectory without following a link; also checks it lies on `dev`.
int open_subdir(int dirfd, const std::string& name, dev_t dev) {
  int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_dev != dev) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool chown_rec(int dirfd, uid_t uid, gid_t gid, dev_t dev, int depth) {
  ::fchown(dirfd, uid, gid);
  if (depth >= kMaxDepth) return false;
  bool complete = true;
  dir_reader reader(dirfd);
  for (const auto& name : reader.names()) {
    // O_PATH|O_NOFOLLOW pins the entry itself (a link stays a link), whatever is renamed afterwards.
    unique_fd e(::openat(dirfd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (e.get() < 0) continue;
    struct stat st;
    if (::fstat(e.get(), &st) != 0 || st.st_dev != dev) continue;
    if (S_ISDIR(st.st_mode)) {
      unique_fd sub(::openat(e.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (sub.get() >= 0) complete &= chown_rec(sub.get(), uid, gid, dev, depth + 1);
    } else if (S_ISLNK(st.st_mode) || st.st_nlink == 1) {
      // A file with several links may be linked from outside the tree: leave it to its owner.
      ::fchownat(e.get(), "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
    }
  }
  return complete;
}

bool remove_rec(int dirfd, dev_t dev, int depth) {
  bool ok = true;
  dir_reader reader(dirfd);
  if (!reader.ok()) return false;
  for (const auto& name : reader.names()) {
    struct stat st;
    if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      if (st.st_dev != dev || depth >= kMaxDepth) {
        ok = false;
        continue;
      }
      unique_fd sub(open_subdir(dirfd, name, dev));
      if (sub.get() < 0) {
        ok = false;
        continue;
      }
      ok &= remove_rec(sub.get(), dev, depth + 1);
      // Swapped for a link meanwhile: AT_REMOVEDIR refuses a non-directory.
      if (::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0) ok = false;
    } else if (::unlinkat(dirfd, name.c_str(), 0) != 0) {
      ok = false;
    }
  }
  return ok;
}

// Makes room for a new entry `name` in dst: removes whatever is there (a directory with its contents).
void clear_entry(int dst, const std::string& name) {
  struct stat st;
  if (::fstatat(dst, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    unique_fd sub(open_subdir(dst, name, st.st_dev));
    if (sub.get() >= 0) remove_rec(sub.get(), st.st_dev, 0);
    ::unlinkat(dst, name.c_str(), AT_REMOVEDIR);
  } else {
    ::unlinkat(dst, name.c_str(), 0);
  }
}

struct copier {
  const copy_limits& lim;
  std::string* why;
  uint64_t bytes = 0;

  bool fail(const std::string& what) {
    if (why && why->empty()) *why = what;
    return false;
  }
  void own(int dst, const std::string& name) {
    if (lim.chown) ::fchownat(dst, name.c_str(), lim.uid, lim.gid, AT_SYMLINK_NOFOLLOW);
  }

  bool file(int src, int dst, const std::string& name, const struct stat& st) {
    unique_fd in(::openat(src, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (in.get() < 0) return fail("open " + name + ": " + std::strerror(errno));
    struct stat ist;
    if (::fstat(in.get(), &ist) != 0 || !S_ISREG(ist.st_mode) || ist.st_ino != st.st_ino) return true;
    clear_entry(dst, name);
    unique_fd out(::openat(dst, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (out.get() < 0) return fail("create " + name + ": " + std::strerror(errno));
    char buf[1 << 16];
    for (;;) {
      ssize_t n = ::read(in.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail("read " + name + ": " + std::strerror(errno));
      if (n == 0) break;
      if (bytes + static_cast<uint64_t>(n) > lim.max_bytes) return fail("more than the byte budget");
      bytes += static_cast<uint64_t>(n);
      for (ssize_t off = 0; off < n;) {
        ssize_t w = ::write(out.get(), buf + off, static_cast<size_t>(n - off));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return fail("write " + name + ": " + std::strerror(errno));
        off += w;
      }
    }
    if (lim.chown) ::fchown(out.get(), lim.uid, lim.gid);
    ::fchmod(out.get(), ist.st_mode & 0777);  // after chown, which may clear bits; never set-id
    return true;
  }

  bool tree(int src, int dst, int depth) {
    if (depth >= kMaxDepth) return fail("deeper than " + std::to_string(kMaxDepth) + " levels");
    dir_reader reader(src);
    if (!reader.ok()) return fail(std::string("read directory: ") + std::strerror(errno));
    bool ok = true;
    for (const auto& name : reader.names()) {
      struct stat st;
      if (::fstatat(src, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (S_ISDIR(st.st_mode)) {
        unique_fd s(open_subdir(src, name, st.st_dev));
        if (s.get() < 0) continue;
        struct stat dst_st;
        if (::fstatat(dst, name.c_str(), &dst_st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(dst_st.st_mode)) {
          clear_entry(dst, name);
          if (::mkdirat(dst, name.c_str(), 0700) != 0) {
            ok = fail("mkdir " + name + ": " + std::strerror(errno));
            if (errno == ENOSPC || errno == EDQUOT) return false;
            continue;
          }
        }
        struct stat made;
        if (::fstatat(dst, name.c_str(), &made, AT_SYMLINK_NOFOLLOW) != 0) continue;
        unique_fd d(open_subdir(dst, name, made.st_dev));
        if (d.get() < 0) continue;
        if (!tree(s.get(), d.get(), depth + 1)) ok = false;
        if (lim.chown) ::fchown(d.get(), lim.uid, lim.gid);
        ::fchmod(d.get(), st.st_mode & 01777);
        if (!ok && why && (why->find("budget") != std::string::npos)) return false;
      } else if (S_ISREG(st.st_mode)) {
        if (!file(src, dst, name, st)) {
          ok = false;
          if (why && (why->find("budget") != std::string::npos || why->find("No space") != std::string::npos))
            return false;
        }
      } else if (S_ISLNK(st.st_mode)) {
        std::vector<char> target(static_cast<size_t>(st.st_size > 0 ? st.st_size : 4095) + 1);
        ssize_t n = ::readlinkat(src, name.c_str(), target.data(), target.size());
        if (n < 0 || static_cast<size_t>(n) >= target.size()) continue;
        clear_entry(dst, name);
        if (::symlinkat(std::string(target.data(), static_cast<size_t>(n)).c_str(), dst, name.c_str()) != 0) {
          ok = fail("symlink " + name + ": " + std::strerror(errno));
          continue;
        }
        own(dst, name);
      } else if (S_ISFIFO(st.st_mode)) {
        clear_entry(dst, name);
        if (::mkfifoat(dst, name.c_str(), st.st_mode & 0777) != 0) {
          ok = fail("mkfifo " + name + ": " + std::strerror(errno));
          continue;
        }
        own(dst, name);
      }
      // Sockets and device nodes have no meaning outside the run: skipped.
    }
    return ok;
  }
};

}  // namespace

unique_fd open_dir_nofollow(const std::string& path, bool create, std::string* absolute) {
  namespace fs = std::filesystem;
  if (path.empty()) refuse(path, "empty path");
  // ".." is refused as written: normalising it away first would resolve it lexically, through
  // whatever the component before it is.
  for (const auto& part : fs::path(path))
    if (part == "..") refuse(path, "'..' in the path");
  fs::path p = fs::path(path).is_absolute() ? fs::path(path) : fs::current_path() / path;
  p = p.lexically_normal();
  std::string abs = p.string();
  if (abs.size() > 1 && abs.back() == '/') abs.pop_back();
  if (is_system_path(abs)) refuse(path, "it is a system or shared directory");
  // Each directory above the workspace must be the caller's or root's, and if others may write it, it
  // must be sticky (then they cannot rename or replace what the caller made in it).
  auto check_ancestor = [&](int fd, const std::string& where) {
    struct stat st;
    if (::fstat(fd, &st) != 0) throw io_error("stat", where, errno);
    if (st.st_uid != 0 && st.st_uid != ::geteuid())
      refuse(path, "'" + where + "' above it is owned by uid " + std::to_string(st.st_uid));
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
      refuse(path, "'" + where + "' above it is writable by others and not sticky");
  };
  unique_fd cur(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  check_ancestor(cur.get(), "/");
  std::vector<std::string> parts;
  for (const auto& part : p.relative_path())
    if (!part.empty() && part != ".") parts.push_back(part.string());
  std::string walked;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& name = parts[i];
    walked += "/" + name;
    const bool last = i + 1 == parts.size();
    if (i > 0) check_ancestor(cur.get(), walked.substr(0, walked.size() - name.size() - 1));
    int fd = ::openat(cur.get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create) {
      if (::mkdirat(cur.get(), name.c_str(), last ? 0700 : 0755) != 0 && errno != EEXIST)
        throw io_error("create workspace", walked, errno);
      fd = ::openat(cur.get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) {
      int e = errno;
      struct stat st;
      if (::fstatat(cur.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
        refuse(path, "'" + walked + "' is a symbolic link (workspace paths are resolved without links)");
      if (e == ENOTDIR) refuse(path, "'" + walked + "' is not a directory");
      throw io_error("open workspace", walked, e);
    }
    cur.reset(fd);
  }
  // The final directory open for reading (flock and readdir need more than O_PATH).
  unique_fd dir(::openat(cur.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) throw io_error("open workspace", abs, errno);
  if (absolute) *absolute = abs;
  return dir;
}

void check_workspace_rules(int dirfd, const std::string& path,
                           const std::function<bool(uid_t)>& sandbox_uid) {
  struct stat st;
  if (::fstat(dirfd, &st) != 0) throw io_error("stat workspace", path, errno);
  const uid_t me = ::geteuid();
  if (st.st_uid != me && !(me == 0 && sandbox_uid(st.st_uid)))
    refuse(path, "it is owned by uid " + std::to_string(st.st_uid) + ", not by the caller (uid " +
                     std::to_string(me) + ")");
  if (st.st_mode & (S_ISVTX | S_IWOTH)) refuse(path, "it is a shared directory (world-writable or sticky)");
}

bool lock_workspace(int dirfd, bool shared) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  for (;;) {
    if (::flock(dirfd, (shared ? LOCK_SH : LOCK_EX) | LOCK_NB) == 0) return true;
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK || std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

bool chown_tree(int dirfd, uid_t uid, gid_t gid) {
  struct stat st;
  if (::fstat(dirfd, &st) != 0) return false;
  return chown_rec(dirfd, uid, gid, st.st_dev, 0);
}

bool remove_contents(int dirfd) {
  struct stat st;
  if (::fstat(dirfd, &st) != 0) return false;
  return remove_rec(dirfd, st.st_dev, 0);
}

void remove_tree(const std::string& path) {
  std::string abs;
  try {
    unique_fd d = open_dir_nofollow(path, false, &abs);
    remove_contents(d.get());
  } catch (const std::exception&) {
    return;
  }
  ::rmdir(abs.c_str());
}

bool copy_tree(int src, int dst, const copy_limits& lim, std::string* why) {
  copier c{lim, why};
  return c.tree(src, dst, 0);
}

int make_tmpfs(uint64_t bytes, uint64_t inodes, uid_t uid, gid_t gid) {
  int fs = ::fsopen("tmpfs", FSOPEN_CLOEXEC);
  if (fs < 0) return -1;
  unique_fd guard(fs);
  auto set = [&](const char* key, const std::string& value) {
    return ::fsconfig(fs, FSCONFIG_SET_STRING, key, value.c_str(), 0) == 0;
  };
  if (!set("size", std::to_string(bytes)) || !set("nr_inodes", std::to_string(inodes)) ||
      !set("mode", "0755") || !set("uid", std::to_string(uid)) || !set("gid", std::to_string(gid)) ||
      ::fsconfig(fs, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0)
    return -1;
  return ::fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
}

}  // namespace moxi::sandbox::detail
