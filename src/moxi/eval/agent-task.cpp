// Terminal-Bench task directories without Docker (agent-task.h, docs/agent-eval.md). Matches the task
// format of Terminal-Bench 1.x (task.yaml fields and defaults, run-tests.sh with TEST_DIR, solution.sh or
// solution.yaml) as its documentation describes it; the Dockerfile is read, never built.
#include "moxi/eval/agent-task.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "moxi/base/error.h"
#include "moxi/eval/task.h"
#include "moxi/sandbox/sandbox.h"

namespace moxi::eval {
namespace fs = std::filesystem;
namespace {

// Files the harness owns: never part of the starting workspace, even under `COPY . /app`.
const std::vector<std::string> kHarnessFiles = {"task.yaml",   "Dockerfile",          "solution.sh",
                                                "solution.yaml", "run-tests.sh",      "tests",
                                                "docker-compose.yaml", "docker-compose.yml", ".dockerignore"};

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw error(p.string() + ": cannot read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string unquote(const std::string& s) {
  if (s.size() >= 2 && (s[0] == '"' || s[0] == '\'') && s.back() == s[0]) return s.substr(1, s.size() - 2);
  return s;
}

// `a/b/../c` -> `a/c`; false when the path climbs above its start.
bool normal_relative(const std::string& p, std::string& out) {
  std::vector<std::string> parts;
  std::stringstream ss(p);
  for (std::string part; std::getline(ss, part, '/');) {
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (parts.empty()) return false;
      parts.pop_back();
      continue;
    }
    parts.push_back(part);
  }
  out.clear();
  for (const auto& part : parts) out += (out.empty() ? "" : "/") + part;
  return true;
}

// An absolute path in normal form (`/app/x/../y` -> `/app/y`).
std::string normal_absolute(const std::string& p) {
  std::string rel;
  if (!normal_relative(p, rel)) return "/";
  return "/" + rel;
}

// The arguments of a COPY/ADD line: JSON array form or words; `--flag=value` options first.
std::vector<std::string> copy_args(const std::string& rest, std::vector<std::string>& flags) {
  std::vector<std::string> args;
  std::string r = trim_space(rest);
  while (r.rfind("--", 0) == 0) {
    const size_t sp = r.find_first_of(" \t");
    flags.push_back(r.substr(0, sp));
    r = sp == std::string::npos ? "" : trim_space(r.substr(sp));
  }
  if (!r.empty() && r[0] == '[') {
    // ["src", "dest"]: strings without escapes, as Terminal-Bench's Dockerfiles write them.
    for (size_t i = 1; i < r.size(); ++i) {
      if (r[i] != '"') continue;
      const size_t end = r.find('"', i + 1);
      if (end == std::string::npos) break;
      args.push_back(r.substr(i + 1, end - i - 1));
      i = end;
    }
    return args;
  }
  std::istringstream in(r);
  for (std::string w; in >> w;) args.push_back(unquote(w));
  return args;
}

struct dockerfile_line {
  size_t line;  // 1-based, where the instruction starts
  std::string instruction, rest;
};

std::vector<dockerfile_line> dockerfile_lines(const std::string& text) {
  std::vector<dockerfile_line> out;
  std::istringstream in(text);
  std::string line, joined;
  size_t n = 0, start = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string t = trim_space(line);
    if (joined.empty() && (t.empty() || t[0] == '#')) continue;
    if (!joined.empty() && !t.empty() && t[0] == '#') continue;  // comments inside a continued line
    if (joined.empty()) start = n;
    if (!t.empty() && t.back() == '\\') {
      joined += t.substr(0, t.size() - 1) + " ";
      continue;
    }
    joined += t;
    const size_t sp = joined.find_first_of(" \t");
    std::string ins = joined.substr(0, sp);
    std::transform(ins.begin(), ins.end(), ins.begin(), [](unsigned char c) { return char(std::toupper(c)); });
    out.push_back({start, ins, sp == std::string::npos ? "" : trim_space(joined.substr(sp))});
    joined.clear();
  }
  if (!joined.empty()) throw error("the last instruction ends with a line continuation");
  return out;
}

bool host_image(std::string image) {
  // The sandbox runs the host's Debian 12 userland, so only a Debian 12 base describes it.
  if (image.rfind("docker.io/", 0) == 0) image = image.substr(10);
  if (image.rfind("library/", 0) == 0) image = image.substr(8);
  for (const char* ok : {"debian:12", "debian:bookworm"}) {
    const std::string p = ok;
    if (image == p || image.rfind(p + "-", 0) == 0 || image.rfind(p + ".", 0) == 0) return true;
  }
  return false;
}

void parse_dockerfile(agent_task& t, const fs::path& file) {
  const std::string where = file.string();
  std::vector<dockerfile_line> lines;
  try {
    lines = dockerfile_lines(read_text(file));
  } catch (const error& e) {
    throw error(where + ": " + e.what());
  }
  auto fail = [&](const dockerfile_line& l, const std::string& why) {
    throw error(where + ":" + std::to_string(l.line) + ": " + l.instruction + " " + l.rest.substr(0, 60) +
                (l.rest.size() > 60 ? "..." : "") + ": " + why);
  };
  bool from = false;
  std::string workdir = "/";
  struct pending {
    std::string src, dest_abs;
    bool into_dir;
  };
  std::vector<pending> copies;
  for (const auto& l : lines) {
    const std::string& ins = l.instruction;
    if (ins == "FROM") {
      if (from) fail(l, "a second FROM (multi-stage builds) needs Docker; the sandbox has one environment");
      std::istringstream in(l.rest);
      std::string image;
      while (in >> image && image.rfind("--", 0) == 0) {
      }
      if (!host_image(image))
        fail(l, "the sandbox runs the host's Debian 12 userland; only FROM debian:bookworm or debian:12 "
                "(any variant) describes it");
      from = true;
    } else if (!from && ins != "ARG") {
      fail(l, "the first instruction must be FROM");
    } else if (ins == "WORKDIR") {
      const std::string w = unquote(trim_space(l.rest));
      if (w.empty()) fail(l, "WORKDIR needs a path");
      workdir = normal_absolute(w[0] == '/' ? w : workdir + "/" + w);
    } else if (ins == "COPY" || ins == "ADD") {
      std::vector<std::string> flags;
      auto args = copy_args(l.rest, flags);
      for (const auto& f : flags) {
        if (f.rfind("--from", 0) == 0) fail(l, "COPY --from copies from another build stage, which needs Docker");
      }
      if (args.size() < 2) fail(l, "needs a source and a destination");
      const std::string dest = args.back();
      args.pop_back();
      const std::string dest_abs = normal_absolute(dest[0] == '/' ? dest : workdir + "/" + dest);
      const bool into_dir = dest.back() == '/' || args.size() > 1;
      for (const auto& src : args) {
        if (src.find("://") != std::string::npos || src.rfind("git@", 0) == 0)
          fail(l, "ADD from a URL needs the network, which the sandbox does not have");
        if (src.find_first_of("*?[") != std::string::npos)
          fail(l, "wildcard sources are not supported; name the files or their directory");
        std::string rel;
        if (src[0] == '/' || !normal_relative(src, rel))
          fail(l, "the source '" + src + "' is outside the task directory");
        const fs::path p = fs::path(t.dir) / rel;
        std::error_code ec;
        if (!fs::exists(fs::symlink_status(p, ec))) fail(l, "the source '" + src + "' does not exist");
        // Through links too: a linked directory on the way (data -> /root) would copy host files into the
        // workspace. The source itself may be a link; it is copied as a link, never followed.
        if (!rel.empty()) {
          const fs::path parent = fs::canonical(p.parent_path(), ec), root = fs::canonical(t.dir, ec);
          const std::string ps = parent.string() + "/", rs = root.string() + "/";
          if (ec || ps.compare(0, rs.size(), rs) != 0)
            fail(l, "the source '" + src + "' leads outside the task directory through a link");
        }
        if (ins == "ADD" && fs::is_regular_file(p)) {
          for (const char* ext : {".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz"}) {
            const std::string e = ext;
            if (rel.size() > e.size() && rel.compare(rel.size() - e.size(), e.size(), e) == 0)
              fail(l, "ADD of a local archive unpacks it, which moxi does not do; COPY the unpacked files");
          }
        }
        copies.push_back({rel, dest_abs, into_dir});
      }
    } else if (ins == "ENV") {
      const std::string r = trim_space(l.rest);
      if (r.find('=') == std::string::npos || r.find_first_of(" \t") < r.find('=')) {
        const size_t sp = r.find_first_of(" \t");
        if (sp == std::string::npos) fail(l, "ENV needs a value");
        t.env[r.substr(0, sp)] = unquote(trim_space(r.substr(sp)));
      } else {
        std::istringstream in(r);
        for (std::string kv; in >> kv;) {
          const size_t eq = kv.find('=');
          if (eq == std::string::npos || eq == 0) fail(l, "expected KEY=value pairs");
          t.env[kv.substr(0, eq)] = unquote(kv.substr(eq + 1));
        }
      }
    } else if (ins == "ARG" || ins == "LABEL" || ins == "MAINTAINER" || ins == "USER" || ins == "STOPSIGNAL" ||
               ins == "SHELL") {
      // No effect here: the sandbox always runs as an unprivileged user with /bin/sh.
    } else if (ins == "RUN") {
      fail(l, "RUN is a build step (package installs, compilers, downloads, setup scripts) that moxi does not "
              "run; the sandbox has the host's packages and no network (docs/agent-eval.md)");
    } else if (ins == "CMD" || ins == "ENTRYPOINT" || ins == "EXPOSE" || ins == "HEALTHCHECK" || ins == "VOLUME") {
      fail(l, "services and volumes need Docker; the sandbox runs one command at a time");
    } else {
      fail(l, "unknown instruction");
    }
  }
  if (!from) throw error(where + ": no FROM line");
  try {
    sandbox::check_workspace_mount(workdir);
  } catch (const error& e) {
    throw error(where + ": WORKDIR " + workdir + " cannot hold the workspace: " + e.what());
  }
  t.workdir = workdir;
  for (const auto& c : copies) {
    // Everything must land in the workspace, the only writable place.
    std::string dest;
    if (c.dest_abs != workdir) {
      if (c.dest_abs.rfind(workdir + "/", 0) != 0)
        throw error(where + ": COPY/ADD to " + c.dest_abs + " is outside WORKDIR " + workdir +
                    ", the only place the sandbox's workspace covers");
      dest = c.dest_abs.substr(workdir.size() + 1);
    }
    const fs::path src = fs::path(t.dir) / c.src;
    if (fs::is_regular_file(src) && (c.into_dir || dest.empty()))
      dest = (dest.empty() ? "" : dest + "/") + src.filename().string();
    t.copies.emplace_back(c.src, dest);
  }
}

std::string yaml_string(const YAML::Node& n, const std::string& key, const std::string& where) {
  try {
    return n[key].as<std::string>();
  } catch (const YAML::Exception&) {
    throw error(where + ": '" + key + "' must be a string");
  }
}

double yaml_seconds(const YAML::Node& n, const std::string& key, double fallback, const std::string& where) {
  if (!n[key] || n[key].IsNull()) return fallback;
  double v = 0;
  try {
    v = n[key].as<double>();
  } catch (const YAML::Exception&) {
    throw error(where + ": '" + key + "' must be a number of seconds");
  }
  if (!(v > 0 && v <= 86400)) throw error(where + ": '" + key + "' must be in (0, 86400] seconds");
  return v;
}

void parse_task_yaml(agent_task& t, const fs::path& file) {
  const std::string where = file.string();
  YAML::Node n;
  try {
    n = YAML::LoadFile(where);
  } catch (const YAML::Exception& e) {
    throw error(where + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (!n.IsMap()) throw error(where + ": expected a mapping of task fields");
  if (!n["instruction"]) throw error(where + ": no 'instruction'");
  t.instruction = yaml_string(n, "instruction", where);
  if (trim_space(t.instruction).empty()) throw error(where + ": 'instruction' is empty");
  if (n["category"]) t.category = yaml_string(n, "category", where);
  if (n["difficulty"]) t.difficulty = yaml_string(n, "difficulty", where);
  if (n["tags"]) {
    if (!n["tags"].IsSequence()) throw error(where + ": 'tags' must be a list");
    for (const auto& tag : n["tags"]) t.tags.push_back(tag.as<std::string>());
  }
  if (n["parser_name"] && yaml_string(n, "parser_name", where) != "pytest")
    throw error(where + ": parser_name '" + n["parser_name"].as<std::string>() +
                "' is not supported; moxi reads pytest's -rA summary only");
  t.max_agent_timeout_s = yaml_seconds(n, "max_agent_timeout_sec", t.max_agent_timeout_s, where);
  t.max_test_timeout_s = yaml_seconds(n, "max_test_timeout_sec", t.max_test_timeout_s, where);
}

void parse_solution(agent_task& t) {
  const fs::path sh = fs::path(t.dir) / "solution.sh", yml = fs::path(t.dir) / "solution.yaml";
  if (fs::is_regular_file(sh)) {
    t.solution.push_back(read_text(sh));
    return;
  }
  if (!fs::is_regular_file(yml)) return;
  YAML::Node n;
  try {
    n = YAML::LoadFile(yml.string());
  } catch (const YAML::Exception& e) {
    throw error(yml.string() + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (!n.IsSequence()) throw error(yml.string() + ": expected a list of {command: ...}");
  for (const auto& step : n) {
    if (!step.IsMap() || !step["command"]) throw error(yml.string() + ": every entry needs a 'command'");
    t.solution.push_back(step["command"].as<std::string>());
  }
}

void copy_tree(const fs::path& from, const fs::path& to) {
  fs::create_directories(to.parent_path());
  if (fs::is_directory(fs::symlink_status(from))) {
    fs::create_directories(to);
    fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::copy_symlinks |
                           fs::copy_options::overwrite_existing);
  } else {
    fs::copy(from, to, fs::copy_options::copy_symlinks | fs::copy_options::overwrite_existing);
  }
}

}  // namespace

agent_task load_agent_task(const std::string& dir) {
  agent_task t;
  const fs::path d = fs::path(dir).lexically_normal();
  t.dir = d.string();
  t.id = (d.filename().empty() ? d.parent_path().filename() : d.filename()).string();
  if (t.id.empty() || !std::all_of(t.id.begin(), t.id.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
      }))
    throw error(dir + ": a task directory's name must be letters, digits, '-', '_' and '.'");
  parse_task_yaml(t, d / "task.yaml");
  for (const char* compose : {"docker-compose.yaml", "docker-compose.yml"}) {
    if (fs::exists(d / compose) && !fs::exists(d / "Dockerfile"))
      throw error((d / compose).string() + ": multi-container tasks (services) need Docker");
  }
  if (!fs::is_regular_file(d / "Dockerfile")) throw error(dir + ": no Dockerfile");
  parse_dockerfile(t, d / "Dockerfile");
  if (!fs::is_regular_file(d / "run-tests.sh")) throw error(dir + ": no run-tests.sh");
  parse_solution(t);
  return t;
}

std::vector<agent_task> load_agent_tasks(const std::string& dir) {
  if (fs::exists(fs::path(dir) / "task.yaml")) return {load_agent_task(dir)};
  if (!fs::is_directory(dir)) throw error(dir + ": not a directory");
  std::vector<std::string> dirs;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && fs::exists(e.path() / "task.yaml")) dirs.push_back(e.path().string());
  }
  std::sort(dirs.begin(), dirs.end());
  if (dirs.empty()) throw error(dir + ": no task directories (subdirectories with a task.yaml)");
  std::vector<agent_task> out;
  for (const auto& d : dirs) out.push_back(load_agent_task(d));
  return out;
}

void stage_workspace(const agent_task& t, const std::string& workspace) {
  for (const auto& [src, dest] : t.copies) {
    const fs::path from = fs::path(t.dir) / src;
    const fs::path to = dest.empty() ? fs::path(workspace) : fs::path(workspace) / dest;
    if (src.empty()) {  // `COPY . /app`: the task directory without the harness's files
      for (const auto& e : fs::directory_iterator(from)) {
        const std::string name = e.path().filename().string();
        if (std::find(kHarnessFiles.begin(), kHarnessFiles.end(), name) != kHarnessFiles.end()) continue;
        copy_tree(e.path(), to / name);
      }
      continue;
    }
    copy_tree(from, to);
  }
}

void stage_tests(const agent_task& t, const std::string& stage) {
  const fs::path tests = fs::path(t.dir) / "tests";
  if (fs::is_directory(tests)) copy_tree(tests, stage);
  copy_tree(fs::path(t.dir) / "run-tests.sh", fs::path(stage) / "run-tests.sh");
}

}  // namespace moxi::eval
