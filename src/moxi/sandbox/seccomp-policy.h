// moxi's seccomp policy, compiled once with libseccomp into classic BPF that bwrap installs (--seccomp FD)
// right before it execs the sandboxed command.
#pragma once

#include <string>

namespace moxi::sandbox {

// The filter as raw `struct sock_filter` bytes, built on first use and cached (one per allow_inet value).
const std::string& seccomp_bpf(bool allow_inet);

// A sealed memfd holding the filter at offset 0, O_CLOEXEC; the caller owns and closes it.
int seccomp_bpf_memfd(bool allow_inet);

}  // namespace moxi::sandbox
