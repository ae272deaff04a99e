// Task records <-> JSON lines, and the atomic file write the generator and the tokenizer trainer use.
#include "moxi/eval/task.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "moxi/base/base64.h"
#include "moxi/base/error.h"

namespace moxi::eval {

const char* to_string(domain d) {
  switch (d) {
    case domain::math:
      return "math";
    case domain::terminal:
      return "terminal";
    case domain::code:
      return "code";
    case domain::chat:
      return "chat";
    case domain::vision:
      return "vision";
  }
  return "?";
}

const char* to_string(split s) {
  switch (s) {
    case split::train:
      return "train";
    case split::test:
      return "test";
    case split::length:
      return "length";
  }
  return "?";
}

domain parse_domain(std::string_view s) {
  if (s == "math") return domain::math;
  if (s == "terminal") return domain::terminal;
  if (s == "code") return domain::code;
  if (s == "chat") return domain::chat;
  if (s == "vision") return domain::vision;
  throw error("unknown domain '" + std::string(s) + "' (math, terminal, code, chat or vision)");
}

split parse_split(std::string_view s) {
  if (s == "train") return split::train;
  if (s == "test") return split::test;
  if (s == "length") return split::length;
  throw error("unknown split '" + std::string(s) + "' (train, test or length)");
}

const char* to_string(compare_mode m) {
  switch (m) {
    case compare_mode::stdout_text:
      return "stdout";
    case compare_mode::lines:
      return "lines";
    case compare_mode::count:
      return "count";
    case compare_mode::files:
      return "files";
  }
  return "?";
}

compare_mode parse_compare_mode(std::string_view s) {
  if (s == "stdout") return compare_mode::stdout_text;
  if (s == "lines") return compare_mode::lines;
  if (s == "count") return compare_mode::count;
  if (s == "files") return compare_mode::files;
  throw error("unknown compare mode '" + std::string(s) + "' (stdout, lines, count or files)");
}

nlohmann::json to_json(const task& t) {
  nlohmann::json check;
  switch (t.domain) {
    case domain::math:
      check = {{"kind", "numeric"}, {"answer", t.answer}, {"expression", t.expression}};
      break;
    case domain::terminal: {
      nlohmann::json files = nlohmann::json::array();
      for (const auto& f : t.files) files.push_back({{"path", f.path}, {"content", f.content}});
      check = {{"kind", "terminal"}, {"compare", to_string(t.compare)}, {"files", files}};
      break;
    }
    case domain::code:
      check = {{"kind", "python-test"}, {"program", t.program}, {"test", t.test}};
      break;
    case domain::chat:
      check = {{"kind", "prose"}};  // the intent is params.intent
      break;
    case domain::vision:
      check = {{"kind", "exact"}, {"answer", t.answer}};
      break;
  }
  nlohmann::json j = {{"id", t.id},
                      {"domain", to_string(t.domain)},
                      {"split", to_string(t.split)},
                      {"template", t.template_name},
                      {"params", t.params},
                      {"prompt", t.prompt},
                      {"reference", t.reference},
                      {"check", check}};
  if (!t.images.empty()) {
    nlohmann::json im = nlohmann::json::array();
    for (const auto& png : t.images) im.push_back(base64_encode(png));
    j["images"] = im;
  }
  if (!t.history.empty()) {
    nlohmann::json h = nlohmann::json::array();
    for (const auto& m : t.history) h.push_back({{"role", m.role}, {"content", m.content}});
    j["history"] = h;
  }
  return j;
}

namespace {

std::string str(const nlohmann::json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) throw error(where + ": field '" + key + "' missing or not a string");
  return it->get<std::string>();
}

// "history": [{"role": "user", "content": ...}, {"role": "assistant", ...}, ...]: alternating, starting with
// a user turn and ending with an assistant turn (the task's prompt is the next user turn).
std::vector<message> history_from_json(const nlohmann::json& h, const std::string& where) {
  const std::string hw = where + ": history";
  if (!h.is_array()) throw error(hw + " is not an array");
  std::vector<message> out;
  for (size_t i = 0; i < h.size(); ++i) {
    const std::string mw = hw + "[" + std::to_string(i) + "]";
    if (!h[i].is_object()) throw error(mw + " is not an object");
    message m{str(h[i], "role", mw), str(h[i], "content", mw)};
    const char* want = i % 2 == 0 ? "user" : "assistant";
    if (m.role != want)
      throw error(mw + ".role: '" + m.role + "' where '" + want +
                  "' is expected (turns alternate user, assistant, starting with user)");
    out.push_back(std::move(m));
  }
  if (out.size() % 2 != 0)
    throw error(hw + " must end with an assistant turn (the prompt is the next user turn)");
  return out;
}

}  // namespace

task task_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw error(where + ": expected a JSON object");
  task t;
  t.id = str(j, "id", where);
  try {
    t.domain = parse_domain(str(j, "domain", where));
    t.split = parse_split(str(j, "split", where));
  } catch (const error& e) {
    throw error(where + ": " + e.what());
  }
  t.template_name = str(j, "template", where);
  t.params = j.value("params", nlohmann::json::object());
  if (auto h = j.find("history"); h != j.end()) t.history = history_from_json(*h, where);
  t.prompt = str(j, "prompt", where);
  t.reference = str(j, "reference", where);
  auto it = j.find("check");
  if (it == j.end() || !it->is_object()) throw error(where + ": field 'check' missing or not an object");
  const auto& c = *it;
  const std::string cw = where + ": check";
  switch (t.domain) {
    case domain::math:
      t.answer = str(c, "answer", cw);
      t.expression = c.contains("expression") ? str(c, "expression", cw) : "";
      break;
    case domain::terminal: {
      try {
        t.compare = parse_compare_mode(str(c, "compare", cw));
      } catch (const error& e) {
        throw error(cw + ": " + e.what());
      }
      auto f = c.find("files");
      if (f == c.end() || !f->is_array()) throw error(cw + ": field 'files' missing or not an array");
      for (size_t i = 0; i < f->size(); ++i) {
        const std::string fw = cw + ".files[" + std::to_string(i) + "]";
        file_entry e{str((*f)[i], "path", fw), str((*f)[i], "content", fw)};
        const std::filesystem::path p(e.path);
        bool ok = !e.path.empty() && p.is_relative();
        for (const auto& part : p) ok = ok && part != ".." && part != ".";
        if (!ok) throw error(fw + ".path: '" + e.path + "' is not a plain relative path");
        t.files.push_back(std::move(e));
      }
      break;
    }
    case domain::code:
      t.program = str(c, "program", cw);
      t.test = str(c, "test", cw);
      break;
    case domain::chat:
      break;
    case domain::vision:
      t.answer = str(c, "answer", cw);
      break;
  }
  if (auto im = j.find("images"); im != j.end()) {
    if (!im->is_array()) throw error(where + ": field 'images' is not an array");
    for (size_t i = 0; i < im->size(); ++i) {
      const auto& e = (*im)[i];
      auto bytes = e.is_string() ? base64_decode(e.get<std::string>()) : std::nullopt;
      if (!bytes) throw error(where + ": images[" + std::to_string(i) + "] is not base64 data");
      t.images.push_back(std::move(*bytes));
    }
  }
  if (t.domain == domain::vision && t.images.empty()) throw error(where + ": a vision task needs 'images'");
  return t;
}

std::string to_jsonl(const std::vector<task>& tasks) {
  std::string out;
  for (const auto& t : tasks) {
    // Fixed key order for people reading the file: id and prompt first, the bulky check last.
    const auto j = to_json(t);
    nlohmann::ordered_json o;
    for (const char* key :
         {"id", "domain", "split", "template", "params", "history", "prompt", "reference", "check", "images"}) {
      if (j.contains(key)) o[key] = j[key];
    }
    out += o.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
    out += '\n';
  }
  return out;
}

std::vector<task> read_jsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw io_error("open", path, errno);
  std::vector<task> out;
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw error(where + ": invalid JSON: " + e.what());
    }
    out.push_back(task_from_json(j, where));
  }
  return out;
}

void write_file_atomic(const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw io_error("create", tmp, errno);
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw io_error("write", tmp, e);
    }
    done += size_t(n);
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw io_error("fsync", tmp, e);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw io_error("rename to " + path, tmp, e);
  }
  // The rename itself is durable only once the directory is synced.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string trim_space(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

}  // namespace moxi::eval
