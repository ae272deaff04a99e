// Audit records of sandboxed executions (see audit-log.h).
#include "moxi/sandbox/audit-log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>

#include "moxi/base/error.h"

namespace moxi::sandbox {
namespace {

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

nlohmann::json stream_record(const captured_stream& s, size_t head_bytes) {
  return {{"bytes", s.bytes},
          {"captured", s.data.size()},
          {"truncated", s.truncated},
          {"xxh3", hex64(s.xxh3)},
          {"head", s.data.substr(0, head_bytes)}};
}

}  // namespace

nlohmann::json audit_record(const run_spec& spec, const run_result& r, size_t head_bytes) {
  using namespace std::chrono;
  const auto& l = spec.limits;
  nlohmann::json hit = nlohmann::json::array();
  for (auto k : r.hit) hit.push_back(to_string(k));
  nlohmann::json rec = {
      {"ts", duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count() / 1000.0},
      {"id", spec.id},
      {"command", spec.argv},
      {"workspace", r.workspace},
      {"uid", r.uid},
      {"limits",
       {{"timeout_s", l.timeout_s},
        {"cpu_s", l.cpu_s},
        {"memory_bytes", l.memory_bytes},
        {"pids", l.pids},
        {"file_size_bytes", l.file_size_bytes},
        {"output_bytes", l.output_bytes},
        {"tmp_bytes", l.tmp_bytes},
        {"shm_bytes", l.shm_bytes},
        {"workspace_bytes", l.workspace_bytes},
        {"workspace_inodes", l.workspace_inodes}}},
      {"mechanisms",
       {{"memory", r.mechanisms.memory},
        {"pids", r.mechanisms.pids},
        {"cpu", r.mechanisms.cpu},
        {"disk", r.mechanisms.disk}}},
      {"policy", {{"allow_inet", spec.policy.allow_inet}, {"shared_workspace", spec.shared_workspace}}},
      {"started", r.started},
      {"exit_code", r.exit_code},
      {"signal", r.signal},
      {"duration_s", r.duration_s},
      {"cpu_s", r.cpu_s},
      {"peak_memory_bytes", r.peak_memory_bytes},
      {"stdout", stream_record(r.out, head_bytes)},
      {"stderr", stream_record(r.err, head_bytes)},
      {"limit_fired", to_string(r.fired)},
      {"limits_hit", hit},
  };
  if (!r.error.empty()) rec["error"] = r.error;
  return rec;
}

void append_audit(const std::string& path, const nlohmann::json& record) {
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) throw io_error("open audit log", path, errno);
  ssize_t n = ::write(fd, line.data(), line.size());
  int e = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(line.size())) throw io_error("append to audit log", path, n < 0 ? e : EIO);
}

}  // namespace moxi::sandbox
