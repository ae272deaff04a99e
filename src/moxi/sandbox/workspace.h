// Workspace handling of the sandbox (internal to src/moxi/sandbox): resolving the caller's directory
// once without following links, the rules a workspace must meet, the size- and inode-limited tmpfs the
// sandbox writes into, and tree walks (copy, hand-over, removal) that work on descriptors and never
// follow a link, so that nothing a sandboxed process plants can steer them outside the tree
// (docs/security.md#sandbox).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>

namespace moxi::sandbox::detail {

class unique_fd {
 public:
  explicit unique_fd(int fd = -1) : fd_(fd) {}
  ~unique_fd() { reset(); }
  unique_fd(unique_fd&& o) noexcept : fd_(o.release()) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    reset(o.release());
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_;
};

// Host directories a workspace must never be or lie in (the lexical, link-free absolute path).
bool is_system_path(const std::string& path);

// Opens the directory `path` (made absolute against the working directory and normalised; ".." is
// refused) one component at a time with O_NOFOLLOW, so that a link anywhere in the path is refused
// rather than followed. Missing components are created (mode 0755, the last one 0700) when `create`.
// Every directory above the last must belong to root or the caller and, if others may write it, be
// sticky. Throws moxi::error naming the offending component.
unique_fd open_dir_nofollow(const std::string& path, bool create, std::string* absolute);

// Checks the rules for a caller-given workspace on the opened directory: not a system directory, owned
// by the caller (or, for a root caller, by a uid for which `sandbox_uid` is true: an earlier run may have
// handed it the tree), and not a shared directory (world-writable or sticky). Throws moxi::error.
void check_workspace_rules(int dirfd, const std::string& path, const std::function<bool(uid_t)>& sandbox_uid);

// Takes flock(LOCK_EX, or LOCK_SH when `shared`) on the directory; false when another run still holds a
// conflicting lock after 300 ms. The short wait is for a lock that only looks held: a descriptor a
// thread closed can live on in another thread's freshly cloned launcher child until that child closes its
// descriptors and execs (milliseconds), so a caller reusing a workspace while other threads start runs
// (an agent episode's next command) would otherwise be refused at random.
bool lock_workspace(int dirfd, bool shared);

// Hands every entry of the tree below and including `dirfd` to uid:gid. Directories are opened with
// O_NOFOLLOW relative to their parent's descriptor, links are changed themselves (never their
// targets), other file systems (mounts below the tree) and files with more than one hard link are left
// alone. Depth is capped at kMaxDepth. Returns false when something was skipped for depth.
bool chown_tree(int dirfd, uid_t uid, gid_t gid);

// Removes everything inside `dirfd` (not the directory itself), descriptor-relative, never following a
// link and never crossing into another file system. Returns false when something could not be removed.
bool remove_contents(int dirfd);
// Removes `path` and its contents (the temporary workspace).
void remove_tree(const std::string& path);

struct copy_limits {
  uint64_t max_bytes = UINT64_MAX;  // regular-file bytes; the copy stops (returns false) beyond this
  bool chown = false;               // give created entries to uid:gid (otherwise the caller's identity)
  uid_t uid = 0;
  gid_t gid = 0;
};
// Copies the tree inside `src` into `dst` (directories, regular files, links as links, FIFOs; other
// kinds are skipped). Set-id bits are dropped, links are never followed on either side, an existing
// entry of the same name in `dst` is replaced. Returns false when the byte cap or the depth cap was
// reached or an entry could not be written (errno-style detail in *why).
bool copy_tree(int src, int dst, const copy_limits& lim, std::string* why);

// A fresh, detached tmpfs (fsopen/fsmount) of `bytes` and `inodes`, root owned by uid:gid, nosuid and
// nodev; -1 with errno set when the caller may not mount (needs CAP_SYS_ADMIN).
int make_tmpfs(uint64_t bytes, uint64_t inodes, uid_t uid, gid_t gid);

constexpr int kMaxDepth = 128;

}  // namespace moxi::sandbox::detail
