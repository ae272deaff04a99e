// Chat template evaluator: runs the parsed tree with Jinja2 scoping (loop bodies and macros get their own
// scope; `namespace` objects carry state out of loops) and the filters, tests, methods and globals that
// HF chat templates call. Every step is counted and every string and list size checked, so that a hostile
// template ends in a moxi::error instead of a hang or an exhausted machine.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/formats/chat-template-ast.h"

namespace moxi::formats::chat_template_detail {
namespace {

struct scope {
  std::unordered_map<std::string, value> vars;
  const scope* parent = nullptr;

  const value* lookup(const std::string& n) const {
    for (const scope* s = this; s; s = s->parent) {
      auto it = s->vars.find(n);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

enum class flow : uint8_t { NORMAL, BREAK, CONTINUE };

// Positional and keyword arguments of one call, evaluated.
struct call_args {
  std::vector<value> pos;
  std::vector<std::pair<std::string, value>> kw;

  // The argument at position `i` or named `name`, else `fallback`.
  const value& get(size_t i, const char* name, const value& fallback) const {
    for (const auto& [k, v] : kw) {
      if (k == name) return v;
    }
    return i < pos.size() ? pos[i] : fallback;
  }
};

bool is_space(unsigned char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

std::string ascii_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string ascii_upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Python str.strip family: `chars` is a set of code points; none means whitespace.
std::string py_strip(const std::string& s, const value* chars, bool left, bool right) {
  std::vector<std::string_view> cps = code_points(s);
  std::vector<std::string_view> set;
  bool ws = !chars || chars->k == kind::NONE || chars->k == kind::UNDEFINED;
  if (!ws) set = code_points(chars->s);
  auto strip_me = [&](std::string_view cp) {
    if (ws) return cp.size() == 1 && is_space(static_cast<unsigned char>(cp[0]));
    return std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_me(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_me(cps[e - 1])) --e;
  }
  if (b == e) return "";
  const char* start = cps[b].data();
  const char* end = cps[e - 1].data() + cps[e - 1].size();
  return std::string(start, end);
}

// Python str.split / rsplit.
std::vector<std::string> py_split(const std::string& s, const value& sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (sep.k == kind::NONE || sep.k == kind::UNDEFINED) {
    // Runs of whitespace separate; leading and trailing whitespace give no empty strings.
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && is_space(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= s.size()) break;
      size_t j = i;
      while (j < s.size() && !is_space(static_cast<unsigned char>(s[j]))) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= words.size()) {
      for (auto [a, b] : words) out.push_back(s.substr(a, b - a));
      return out;
    }
    size_t m = static_cast<size_t>(maxsplit);
    if (!from_right) {
      for (size_t w = 0; w < m; ++w)
        out.push_back(s.substr(words[w].first, words[w].second - words[w].first));
      std::string rest = s.substr(words[m].first);
      size_t e = rest.size();
      while (e > 0 && is_space(static_cast<unsigned char>(rest[e - 1]))) --e;
      out.push_back(rest.substr(0, e));
    } else {
      size_t first = words.size() - m;
      std::string rest = s.substr(0, words[first - 1].second);
      size_t b = 0;
      while (b < rest.size() && is_space(static_cast<unsigned char>(rest[b]))) ++b;
      out.push_back(rest.substr(b));
      for (size_t w = first; w < words.size(); ++w) {
        out.push_back(s.substr(words[w].first, words[w].second - words[w].first));
      }
    }
    return out;
  }
  if (sep.k != kind::STRING) throw error("split: separator must be a string");
  const std::string& d = sep.s;
  if (d.empty()) throw error("split: empty separator");
  if (!from_right) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t p = s.find(d, start);
      if (p == std::string::npos) break;
      out.push_back(s.substr(start, p - start));
      start = p + d.size();
    }
    out.push_back(s.substr(start));
    return out;
  }
  size_t end = s.size();
  std::vector<std::string> rev;
  while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
    if (end < d.size()) break;
    size_t p = s.rfind(d, end - d.size());
    if (p == std::string::npos) break;
    rev.push_back(s.substr(p + d.size(), end - p - d.size()));
    end = p;
  }
  out.push_back(s.substr(0, end));
  out.insert(out.end(), rev.rbegin(), rev.rend());
  return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every code point (and at both ends).
    std::vector<std::string_view> cps = code_points(s);
    int64_t n = 0;
    for (auto cp : cps) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      out += cp;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t p = s.find(from, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += to;
    start = p + from.size();
    ++n;
  }
  out.append(s, start, std::string::npos);
  return out;
}

class evaluator {
 public:
  evaluator(const program& prog, const chat_template_limits& limits) : prog_(prog), limits_(limits) {}

  std::string run(const dict& globals) {
    scope root;
    root.vars["range"] = value::function(builtin::RANGE);
    root.vars["namespace"] = value::function(builtin::NAMESPACE);
    root.vars["raise_exception"] = value::function(builtin::RAISE_EXCEPTION);
    root.vars["dict"] = value::function(builtin::DICT);
    root.vars["strftime_now"] = value::function(builtin::STRFTIME_NOW);
    for (const auto& [k, v] : globals.items) root.vars[k] = v;
    root_ = &root;
    std::string out;
    exec(prog_.body, root, out);
    return out;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& msg) const {
    throw error("chat template " + prog_.source + ":" + std::to_string(line) + ": " + msg);
  }

  void step(int line, uint64_t n = 1) {
    steps_ += n;
    if (steps_ > limits_.max_steps) {
      fail(line, "rendering took over " + std::to_string(limits_.max_steps) + " steps (a runaway template?)");
    }
    if (steps_ >= next_clock_check_) check_cpu_time(line);
  }

  // The backstop behind the step count: whatever a step costs, a render stops after max_cpu_seconds of
  // its thread's CPU time. Read every kClockEvery steps (a clock read costs about as much as a few steps).
  static constexpr uint64_t kClockEvery = 4096;
  // One loop iteration builds the 11-entry `loop` object and a scope: measured at about as much CPU as a
  // dozen plain steps, so it is charged that (docs/chat-templates.md).
  static constexpr uint64_t kLoopIterationSteps = 12;
  static double thread_cpu_seconds() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  }
  void check_cpu_time(int line) {
    next_clock_check_ = steps_ + kClockEvery;
    if (thread_cpu_seconds() - cpu_start_ > limits_.max_cpu_seconds) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", limits_.max_cpu_seconds);
      fail(line, std::string("rendering took over ") + secs + " s of CPU (a runaway template?)");
    }
  }

  // Every string the template builds goes through here: its size is bounded and its bytes are charged.
  value make_string(std::string s, int line) {
    check_size(s.size(), line);
    step(line, s.size() / 64);
    return value::string(std::move(s));
  }

  void check_size(size_t n, int line) const {
    if (n > limits_.max_output_bytes) {
      fail(line, "a string of " + std::to_string(n) + " bytes is over the output limit of " +
                     std::to_string(limits_.max_output_bytes));
    }
  }

  value make_list(std::vector<value> v, int line) {
    if (v.size() > limits_.max_items) {
      fail(line, "a list of " + std::to_string(v.size()) + " items is over the limit of " +
                     std::to_string(limits_.max_items));
    }
    step(line, v.size());
    return value::list(std::move(v));
  }

  void emit(std::string& out, std::string_view s, int line) {
    if (out.size() + s.size() > limits_.max_output_bytes) {
      fail(line, "output is over the limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
    }
    step(line, s.size() / 64);
    out += s;
  }

  // ---- statements ----

  flow exec(const block& b, scope& sc, std::string& out) {
    for (const stmt_ptr& s : b) {
      flow f = exec_stmt(*s, sc, out);
      if (f != flow::NORMAL) return f;
    }
    return flow::NORMAL;
  }

  flow exec_stmt(const stmt& s, scope& sc, std::string& out) {
    step(s.line);
    switch (s.kind) {
      case st::TEXT:
        emit(out, s.text, s.line);
        return flow::NORMAL;
      case st::OUTPUT: {
        value v = eval(*s.exprs[0], sc);
        emit(out, to_str(v), s.line);
        return flow::NORMAL;
      }
      case st::IF:
        for (size_t i = 0; i < s.exprs.size(); ++i) {
          if (truthy(eval(*s.exprs[i], sc))) return exec(s.bodies[i], sc, out);
        }
        if (s.bodies.size() > s.exprs.size()) return exec(s.bodies.back(), sc, out);
        return flow::NORMAL;
      case st::FOR:
        return exec_for(s, sc, out);
      case st::SET: {
        value v = eval(*s.exprs[0], sc);
        if (s.attr_target) {
          const value* ns = sc.lookup(s.targets[0]);
          if (!ns || ns->k != kind::NAMESPACE)
            fail(s.line, "cannot assign attribute on non-namespace object");
          ns->d->set(s.targets[1], std::move(v));
        } else {
          assign(s.targets, std::move(v), sc, s.line);
        }
        return flow::NORMAL;
      }
      case st::SET_BLOCK: {
        std::string captured;
        exec(s.bodies[0], sc, captured);
        sc.vars[s.targets[0]] = value::string(std::move(captured));
        return flow::NORMAL;
      }
      case st::MACRO:
        sc.vars[s.name] = value::function(builtin::MACRO, &s);
        return flow::NORMAL;
      case st::BREAK:
        return flow::BREAK;
      case st::CONTINUE:
        return flow::CONTINUE;
      case st::BLOCK:
        return exec(s.bodies[0], sc, out);
    }
    return flow::NORMAL;
  }

  void assign(const std::vector<std::string>& targets, value v, scope& sc, int line) {
    if (targets.size() == 1) {
      sc.vars[targets[0]] = std::move(v);
      return;
    }
    std::vector<value> items = iterate(v, line);
    if (items.size() != targets.size()) {
      fail(line, "cannot unpack " + std::to_string(items.size()) + " values into " +
                     std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) sc.vars[targets[i]] = std::move(items[i]);
  }

  flow exec_for(const stmt& s, scope& sc, std::string& out) {
    value seq = eval(*s.exprs[0], sc);
    std::vector<value> items = iterate(seq, s.line);
    if (s.exprs.size() > 1) {  // `for x in xs if cond`: filtered before loop.* is computed, as Jinja does
      std::vector<value> kept;
      for (value& it : items) {
        scope f;
        f.parent = &sc;
        assign(s.targets, it, f, s.line);
        if (truthy(eval(*s.exprs[1], f))) kept.push_back(std::move(it));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (s.bodies.size() > 1) return exec(s.bodies[1], sc, out) == flow::BREAK ? flow::NORMAL : flow::NORMAL;
      return flow::NORMAL;
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      step(s.line, kLoopIterationSteps);
      scope body;
      body.parent = &sc;
      value loop = value::new_dict();
      loop.d->items.reserve(11);
      loop.d->items.emplace_back("index0", value::integer(i));
      loop.d->items.emplace_back("index", value::integer(i + 1));
      loop.d->items.emplace_back("revindex0", value::integer(n - i - 1));
      loop.d->items.emplace_back("revindex", value::integer(n - i));
      loop.d->items.emplace_back("first", value::boolean(i == 0));
      loop.d->items.emplace_back("last", value::boolean(i == n - 1));
      loop.d->items.emplace_back("length", value::integer(n));
      loop.d->items.emplace_back("depth", value::integer(1));
      loop.d->items.emplace_back("depth0", value::integer(0));
      loop.d->items.emplace_back("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : value{});
      loop.d->items.emplace_back("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : value{});
      body.vars["loop"] = std::move(loop);
      assign(s.targets, items[static_cast<size_t>(i)], body, s.line);
      flow f = exec(s.bodies[0], body, out);
      if (f == flow::BREAK) break;
    }
    return flow::NORMAL;
  }

  // The items of v, copied: each is charged a step.
  std::vector<value> iterate(const value& v, int line) {
    switch (v.k) {
      case kind::UNDEFINED:
        return {};  // Jinja's Undefined iterates as empty
      case kind::LIST:
        step(line, v.l->size());
        return *v.l;
      case kind::DICT: {
        step(line, v.d->items.size());
        std::vector<value> keys;
        for (const auto& [k, x] : v.d->items) keys.push_back(value::string(k));
        return keys;
      }
      case kind::STRING: {
        step(line, v.s.size());
        std::vector<value> chars;
        for (auto cp : code_points(v.s)) chars.push_back(value::string(std::string(cp)));
        return chars;
      }
      default:
        fail(line, std::string("'") + kind_name(v.k) + "' object is not iterable");
    }
  }

  // ---- expressions ----

  value eval(const expr& e, const scope& sc) {
    step(e.line);
    switch (e.kind) {
      case ex::LITERAL:
        return e.lit;
      case ex::NAME: {
        const value* v = sc.lookup(e.name);
        if (v) {
          step(e.line, v->s.size() / 64);  // the value is copied, and a string's bytes with it
          return *v;
        }
        value u;
        u.s = e.name;  // remembered for the message when the undefined value is used
        return u;
      }
      case ex::LIST:
      case ex::TUPLE: {
        std::vector<value> items;
        for (const auto& a : e.args) items.push_back(eval(*a, sc));
        return make_list(std::move(items), e.line);
      }
      case ex::DICT: {
        value d = value::new_dict();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          value k = eval(*e.args[i], sc);
          if (k.k != kind::STRING) fail(e.line, "dict keys must be strings");
          d.d->set(k.s, eval(*e.args[i + 1], sc));
        }
        return d;
      }
      case ex::GETATTR:
        return get_attr(eval(*e.args[0], sc), e.name, e.line);
      case ex::GETITEM:
        return get_item(eval(*e.args[0], sc), eval(*e.args[1], sc), e.line);
      case ex::SLICE:
        return slice(e, sc);
      case ex::CALL:
        return call(e, sc);
      case ex::FILTER:
        return filter(e, sc);
      case ex::TEST: {
        bool r = test(e, sc);
        return value::boolean(e.negated ? !r : r);
      }
      case ex::NEG:
      case ex::POS: {
        value v = eval(*e.args[0], sc);
        if (v.k == kind::INT || v.k == kind::BOOL) {
          int64_t x = v.k == kind::BOOL ? v.b : v.i;
          if (e.kind == ex::NEG && x == std::numeric_limits<int64_t>::min()) fail(e.line, "integer overflow");
          return value::integer(e.kind == ex::NEG ? -x : x);
        }
        if (v.k == kind::FLOAT) return value::floating(e.kind == ex::NEG ? -v.f : v.f);
        fail(e.line, std::string("bad operand type for unary -: '") + kind_name(v.k) + "'");
      }
      case ex::NOT:
        return value::boolean(!truthy(eval(*e.args[0], sc)));
      case ex::AND: {
        value l = eval(*e.args[0], sc);
        return truthy(l) ? eval(*e.args[1], sc) : l;
      }
      case ex::OR: {
        value l = eval(*e.args[0], sc);
        return truthy(l) ? l : eval(*e.args[1], sc);
      }
      case ex::COND: {
        if (truthy(eval(*e.args[1], sc))) return eval(*e.args[0], sc);
        if (e.args.size() > 2) return eval(*e.args[2], sc);
        return value{};
      }
      case ex::BINARY:
        return binary(e.name, eval(*e.args[0], sc), eval(*e.args[1], sc), e.line);
      case ex::COMPARE:
        return value::boolean(compare(e.name, eval(*e.args[0], sc), eval(*e.args[1], sc), e.line));
    }
    fail(e.line, "bad expression");
  }

  [[noreturn]] void undefined_use(const value& v, int line) const {
    fail(line, v.s.empty() ? "use of an undefined value" : "'" + v.s + "' is undefined");
  }

  value get_attr(const value& obj, const std::string& name, int line) {
    if (obj.k == kind::UNDEFINED) undefined_use(obj, line);
    if (obj.is_mapping()) {
      const value* v = obj.d->find(name);
      if (v) return *v;
    }
    value u;
    u.s = name;
    return u;
  }

  value get_item(const value& obj, const value& key, int line) {
    if (obj.k == kind::UNDEFINED) undefined_use(obj, line);
    if (obj.is_mapping()) {
      if (key.k == kind::STRING) {
        const value* v = obj.d->find(key.s);
        if (v) return *v;
      }
      value u;
      u.s = to_str(key);
      return u;
    }
    if ((obj.k == kind::LIST || obj.k == kind::STRING) && (key.k == kind::INT || key.k == kind::BOOL)) {
      int64_t i = key.k == kind::BOOL ? key.b : key.i;
      if (obj.k == kind::LIST) {
        int64_t n = static_cast<int64_t>(obj.l->size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return (*obj.l)[static_cast<size_t>(i)];
        return value{};
      }
      std::vector<std::string_view> cps = code_points(obj.s);
      int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return value::string(std::string(cps[static_cast<size_t>(i)]));
      return value{};
    }
    return value{};
  }

  value slice(const expr& e, const scope& sc) {
    value obj = eval(*e.args[0], sc);
    auto bound = [&](size_t i) -> std::optional<int64_t> {
      if (!e.args[i]) return std::nullopt;
      value v = eval(*e.args[i], sc);
      if (v.k == kind::NONE) return std::nullopt;
      if (v.k != kind::INT) fail(e.line, "slice indices must be integers");
      return v.i;
    };
    std::optional<int64_t> start = bound(1), stop = bound(2), stepv = bound(3);
    int64_t stride = stepv.value_or(1);
    if (stride == 0) fail(e.line, "slice step cannot be zero");
    std::vector<std::string_view> cps;
    int64_t n = 0;
    if (obj.k == kind::LIST) {
      n = static_cast<int64_t>(obj.l->size());
    } else if (obj.k == kind::STRING) {
      cps = code_points(obj.s);
      n = static_cast<int64_t>(cps.size());
    } else if (obj.k == kind::UNDEFINED) {
      undefined_use(obj, e.line);
    } else {
      fail(e.line, std::string("'") + kind_name(obj.k) + "' object cannot be sliced");
    }
    // Python's slice.indices()
    auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
      if (!v) return dflt;
      int64_t x = *v;
      if (x < 0) x += n;
      if (stride > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    int64_t b = clamp(start, stride > 0 ? 0 : n - 1);
    int64_t en = clamp(stop, stride > 0 ? n : -1);
    std::vector<size_t> idx;
    for (int64_t i = b; stride > 0 ? i < en : i > en; i += stride) idx.push_back(static_cast<size_t>(i));
    if (obj.k == kind::LIST) {
      std::vector<value> out;
      for (size_t i : idx) out.push_back((*obj.l)[i]);
      return make_list(std::move(out), e.line);
    }
    std::string out;
    for (size_t i : idx) out += cps[i];
    return make_string(std::move(out), e.line);
  }

  call_args eval_args(const expr& e, const scope& sc, size_t first) {
    call_args a;
    size_t nkw = e.kwarg_names.size();
    size_t npos = e.args.size() - first - nkw;
    for (size_t i = 0; i < npos; ++i) a.pos.push_back(eval(*e.args[first + i], sc));
    for (size_t i = 0; i < nkw; ++i) a.kw.emplace_back(e.kwarg_names[i], eval(*e.args[first + npos + i], sc));
    return a;
  }

  static int64_t as_int(const value& v, int64_t dflt) {
    if (v.k == kind::INT) return v.i;
    if (v.k == kind::BOOL) return v.b;
    return dflt;
  }

  value call(const expr& e, const scope& sc) {
    const expr& callee = *e.args[0];
    if (callee.kind == ex::GETATTR) {
      value obj = eval(*callee.args[0], sc);
      bool found = false;
      value r = method(obj, callee.name, e, sc, found);
      if (found) return r;
      value fn = get_attr(obj, callee.name, callee.line);
      return call_value(fn, e, sc);
    }
    return call_value(eval(callee, sc), e, sc);
  }

  value call_value(const value& fn, const expr& e, const scope& sc) {
    if (fn.k == kind::UNDEFINED) {
      fail(e.line, fn.s.empty() ? "call of an undefined value" : "'" + fn.s + "' is undefined");
    }
    if (fn.k != kind::FUNCTION) fail(e.line, std::string("'") + kind_name(fn.k) + "' object is not callable");
    call_args a = eval_args(e, sc, 1);
    switch (fn.fn) {
      case builtin::RANGE: {
        if (a.pos.empty() || a.pos.size() > 3) fail(e.line, "range expects 1 to 3 arguments");
        for (const value& v : a.pos) {
          if (v.k != kind::INT) fail(e.line, "range arguments must be integers");
        }
        int64_t start = a.pos.size() > 1 ? a.pos[0].i : 0;
        int64_t stop = a.pos.size() > 1 ? a.pos[1].i : a.pos[0].i;
        int64_t stride = a.pos.size() > 2 ? a.pos[2].i : 1;
        if (stride == 0) fail(e.line, "range step cannot be zero");
        // The count first, so that range(10**18) fails at once instead of filling memory.
        double count =
            std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(stride));
        if (count > static_cast<double>(limits_.max_items)) {
          fail(e.line, "range of " + std::to_string(static_cast<int64_t>(count)) +
                           " items is over the limit of " + std::to_string(limits_.max_items));
        }
        std::vector<value> out;
        for (int64_t i = start; stride > 0 ? i < stop : i > stop; i += stride)
          out.push_back(value::integer(i));
        return make_list(std::move(out), e.line);
      }
      case builtin::NAMESPACE:
      case builtin::DICT: {
        value d = value::new_dict(fn.fn == builtin::NAMESPACE ? kind::NAMESPACE : kind::DICT);
        for (const value& p : a.pos) {
          if (!p.is_mapping()) fail(e.line, "namespace()/dict() take a mapping or keyword arguments");
          for (const auto& [k, v] : p.d->items) d.d->set(k, v);
        }
        for (auto& [k, v] : a.kw) d.d->set(k, std::move(v));
        return d;
      }
      case builtin::RAISE_EXCEPTION:
        throw error("chat template " + prog_.source + ":" + std::to_string(e.line) +
                    ": raise_exception: " + (a.pos.empty() ? std::string() : to_str(a.pos[0])));
      case builtin::STRFTIME_NOW: {
        if (a.pos.empty() || a.pos[0].k != kind::STRING) fail(e.line, "strftime_now expects a format string");
        std::time_t t = std::time(nullptr);
        std::tm tm{};
        localtime_r(&t, &tm);
        char buf[256];
        size_t n = std::strftime(buf, sizeof(buf), a.pos[0].s.c_str(), &tm);
        return value::string(std::string(buf, n));
      }
      case builtin::MACRO:
        return call_macro(*fn.macro, std::move(a), e.line);
      case builtin::NONE:
        break;
    }
    fail(e.line, "bad function");
  }

  value call_macro(const stmt& m, call_args a, int line) {
    if (++call_depth_ > limits_.max_call_depth) {
      fail(line, "macro calls nest deeper than " + std::to_string(limits_.max_call_depth) + " (recursion?)");
    }
    scope local;
    local.parent = root_;
    if (a.pos.size() > m.targets.size())
      fail(line, "macro '" + m.name + "' takes " + std::to_string(m.targets.size()) + " arguments");
    for (size_t i = 0; i < m.targets.size(); ++i) {
      const value* kwv = nullptr;
      for (const auto& [k, v] : a.kw) {
        if (k == m.targets[i]) kwv = &v;
      }
      if (i < a.pos.size()) {
        local.vars[m.targets[i]] = a.pos[i];
      } else if (kwv) {
        local.vars[m.targets[i]] = *kwv;
      } else if (m.exprs[i]) {
        local.vars[m.targets[i]] = eval(*m.exprs[i], local);
      } else {
        value u;
        u.s = m.targets[i];
        local.vars[m.targets[i]] = u;
      }
    }
    for (const auto& [k, v] : a.kw) {
      if (std::find(m.targets.begin(), m.targets.end(), k) == m.targets.end()) {
        fail(line, "macro '" + m.name + "' takes no keyword argument '" + k + "'");
      }
    }
    std::string out;
    exec(m.bodies[0], local, out);
    --call_depth_;
    return value::string(std::move(out));
  }

  // Methods of strings, dicts and lists that templates call (Python's names and behaviour).
  value method(const value& obj, const std::string& name, const expr& e, const scope& sc, bool& found) {
    found = true;
    int line = e.line;
    if (obj.k == kind::STRING) {
      const std::string& s = obj.s;
      if (name == "startswith" || name == "endswith") {
        call_args a = eval_args(e, sc, 1);
        if (a.pos.empty()) fail(line, name + " expects an argument");
        std::vector<value> cands = a.pos[0].k == kind::LIST ? *a.pos[0].l : std::vector<value>{a.pos[0]};
        for (const value& c : cands) {
          if (c.k != kind::STRING) fail(line, name + " expects strings");
          bool hit = name == "startswith"
                         ? s.compare(0, c.s.size(), c.s) == 0 && s.size() >= c.s.size()
                         : s.size() >= c.s.size() && s.compare(s.size() - c.s.size(), c.s.size(), c.s) == 0;
          if (hit) return value::boolean(true);
        }
        return value::boolean(false);
      }
      if (name == "strip" || name == "lstrip" || name == "rstrip") {
        call_args a = eval_args(e, sc, 1);
        const value* chars = a.pos.empty() ? nullptr : &a.pos[0];
        if (chars && chars->k != kind::STRING && chars->k != kind::NONE)
          fail(line, name + " expects a string");
        return make_string(py_strip(s, chars, name != "rstrip", name != "lstrip"), line);
      }
      if (name == "split" || name == "rsplit") {
        call_args a = eval_args(e, sc, 1);
        value none = value::none();
        value dflt_max = value::integer(-1);
        std::vector<value> parts;
        for (auto& p : py_split(s, a.get(0, "sep", none), as_int(a.get(1, "maxsplit", dflt_max), -1),
                                name == "rsplit")) {
          parts.push_back(value::string(std::move(p)));
        }
        return make_list(std::move(parts), line);
      }
      if (name == "upper") return value::string(ascii_upper(s));
      if (name == "lower") return value::string(ascii_lower(s));
      if (name == "title" || name == "capitalize") return apply_filter(name, obj, {}, line);
      if (name == "replace") {
        call_args a = eval_args(e, sc, 1);
        if (a.pos.size() < 2 || a.pos[0].k != kind::STRING || a.pos[1].k != kind::STRING) {
          fail(line, "replace expects two strings");
        }
        return make_string(
            py_replace(s, a.pos[0].s, a.pos[1].s, a.pos.size() > 2 ? as_int(a.pos[2], -1) : -1), line);
      }
      if (name == "find" || name == "count") {
        call_args a = eval_args(e, sc, 1);
        if (a.pos.empty() || a.pos[0].k != kind::STRING) fail(line, name + " expects a string");
        if (name == "find") {
          size_t p = s.find(a.pos[0].s);
          if (p == std::string::npos) return value::integer(-1);
          return value::integer(static_cast<int64_t>(code_points(s.substr(0, p)).size()));
        }
        if (a.pos[0].s.empty()) return value::integer(static_cast<int64_t>(code_points(s).size()) + 1);
        int64_t n = 0;
        for (size_t p = s.find(a.pos[0].s); p != std::string::npos;
             p = s.find(a.pos[0].s, p + a.pos[0].s.size()))
          ++n;
        return value::integer(n);
      }
      if (name == "join") {
        call_args a = eval_args(e, sc, 1);
        if (a.pos.empty()) fail(line, "join expects an iterable");
        std::string out;
        std::vector<value> items = iterate(a.pos[0], line);
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += s;
          if (items[i].k != kind::STRING) fail(line, "str.join expects strings");
          out += items[i].s;
          check_size(out.size(), line);
        }
        return make_string(std::move(out), line);
      }
      if (name == "isdigit" || name == "isspace" || name == "isalpha") {
        if (s.empty()) return value::boolean(false);
        for (unsigned char c : s) {
          bool ok = name == "isdigit" ? std::isdigit(c) : name == "isspace" ? is_space(c) : std::isalpha(c);
          if (!ok) return value::boolean(false);
        }
        return value::boolean(true);
      }
    } else if (obj.is_mapping()) {
      if (name == "items" || name == "keys" || name == "values") {
        std::vector<value> out;
        for (const auto& [k, v] : obj.d->items) {
          if (name == "items") {
            out.push_back(value::list({value::string(k), v}));
          } else {
            out.push_back(name == "keys" ? value::string(k) : v);
          }
        }
        return make_list(std::move(out), line);
      }
      if (name == "get") {
        call_args a = eval_args(e, sc, 1);
        if (a.pos.empty()) fail(line, "get expects a key");
        if (a.pos[0].k == kind::STRING) {
          if (const value* v = obj.d->find(a.pos[0].s)) return *v;
        }
        return a.pos.size() > 1 ? a.pos[1] : value::none();
      }
    } else if (obj.k == kind::LIST) {
      if (name == "append" || name == "pop" || name == "extend" || name == "insert" || name == "remove") {
        fail(line,
             "list." + name + " is not allowed: templates run in an immutable sandbox, as in transformers");
      }
    }
    found = false;
    return value{};
  }

  // ---- operators ----

  static bool int_like(const value& v) { return v.k == kind::INT || v.k == kind::BOOL; }
  static int64_t ival(const value& v) { return v.k == kind::BOOL ? v.b : v.i; }
  static double fval(const value& v) { return v.k == kind::FLOAT ? v.f : static_cast<double>(ival(v)); }

  value binary(const std::string& op, const value& a, const value& b, int line) {
    if (op == "~") return make_string(to_str(a) + to_str(b), line);
    if (a.k == kind::UNDEFINED) undefined_use(a, line);
    if (b.k == kind::UNDEFINED) undefined_use(b, line);
    if (op == "+") {
      if (a.k == kind::STRING && b.k == kind::STRING) {
        check_size(a.s.size() + b.s.size(), line);
        return make_string(a.s + b.s, line);
      }
      if (a.k == kind::LIST && b.k == kind::LIST) {
        if (a.l->size() + b.l->size() > limits_.max_items) fail(line, "list over the item limit");
        std::vector<value> out(*a.l);
        out.insert(out.end(), b.l->begin(), b.l->end());
        return make_list(std::move(out), line);
      }
    }
    if (op == "*" && ((a.k == kind::STRING || a.k == kind::LIST) && int_like(b)))
      return repeat(a, ival(b), line);
    if (op == "*" && ((b.k == kind::STRING || b.k == kind::LIST) && int_like(a)))
      return repeat(b, ival(a), line);
    if (a.is_number() && b.is_number()) {
      if (int_like(a) && int_like(b) && op != "/" && op != "**") {
        int64_t x = ival(a), y = ival(b), r = 0;
        if (op == "+") {
          if (__builtin_add_overflow(x, y, &r)) fail(line, "integer overflow");
        } else if (op == "-") {
          if (__builtin_sub_overflow(x, y, &r)) fail(line, "integer overflow");
        } else if (op == "*") {
          if (__builtin_mul_overflow(x, y, &r)) fail(line, "integer overflow");
        } else if (op == "//" || op == "%") {
          if (y == 0) fail(line, "integer division or modulo by zero");
          if (x == std::numeric_limits<int64_t>::min() && y == -1) fail(line, "integer overflow");
          int64_t q = x / y, m = x % y;
          if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors
            --q;
            m += y;
          }
          r = op == "//" ? q : m;
        }
        return value::integer(r);
      }
      if (op == "**" && int_like(a) && int_like(b) && ival(b) >= 0) {
        int64_t base = ival(a), ex = ival(b), r = 1;
        for (int64_t i = 0; i < ex; ++i) {
          if (__builtin_mul_overflow(r, base, &r)) fail(line, "integer overflow");
          if (r == 0 || r == 1) break;
          if (r == -1) {
            r = ((ex - i - 1) % 2 == 0) ? -1 : 1;
            break;
          }
        }
        return value::integer(r);
      }
      double x = fval(a), y = fval(b);
      if (op == "+") return value::floating(x + y);
      if (op == "-") return value::floating(x - y);
      if (op == "*") return value::floating(x * y);
      if (op == "/") {
        if (y == 0) fail(line, "division by zero");
        return value::floating(x / y);
      }
      if (op == "//") {
        if (y == 0) fail(line, "division by zero");
        return value::floating(std::floor(x / y));
      }
      if (op == "%") {
        if (y == 0) fail(line, "modulo by zero");
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return value::floating(m);
      }
      if (op == "**") return value::floating(std::pow(x, y));
    }
    fail(line,
         "unsupported operand types for " + op + ": '" + kind_name(a.k) + "' and '" + kind_name(b.k) + "'");
  }

  value repeat(const value& v, int64_t n, int line) {
    if (n <= 0) return v.k == kind::STRING ? value::string("") : value::list();
    if (v.k == kind::STRING) {
      if (!v.s.empty() && static_cast<uint64_t>(n) > limits_.max_output_bytes / v.s.size()) {
        fail(line, "string repetition is over the output limit");
      }
      std::string out;
      out.reserve(v.s.size() * static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) out += v.s;
      return make_string(std::move(out), line);
    }
    if (!v.l->empty() && static_cast<uint64_t>(n) > limits_.max_items / v.l->size()) {
      fail(line, "list repetition is over the item limit");
    }
    std::vector<value> out;
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), v.l->begin(), v.l->end());
    return make_list(std::move(out), line);
  }

  bool contains(const value& hay, const value& needle, int line) {
    switch (hay.k) {
      case kind::STRING:
        if (needle.k != kind::STRING) fail(line, "'in <string>' requires a string on the left");
        return hay.s.find(needle.s) != std::string::npos;
      case kind::LIST:
        step(line, hay.l->size());
        for (const value& v : *hay.l) {
          if (equals(v, needle)) return true;
        }
        return false;
      case kind::DICT:
      case kind::NAMESPACE:
        return needle.k == kind::STRING && hay.d->find(needle.s) != nullptr;
      case kind::UNDEFINED:
        undefined_use(hay, line);
      default:
        fail(line, std::string("argument of type '") + kind_name(hay.k) + "' is not iterable");
    }
  }

  bool compare(const std::string& op, const value& a, const value& b, int line) {
    step(line, (a.s.size() + b.s.size()) / 64);  // comparing or searching strings reads their bytes
    if (op == "==") return equals(a, b);
    if (op == "!=") return !equals(a, b);
    if (op == "in") return contains(b, a, line);
    if (op == "not in") return !contains(b, a, line);
    int c = 0;
    if (a.is_number() && b.is_number()) {
      double x = fval(a), y = fval(b);
      if (int_like(a) && int_like(b)) {
        c = ival(a) < ival(b) ? -1 : ival(a) > ival(b) ? 1 : 0;
      } else {
        c = x < y ? -1 : x > y ? 1 : 0;
      }
    } else if (a.k == kind::STRING && b.k == kind::STRING) {
      c = a.s.compare(b.s);
    } else {
      fail(line, "'" + op + "' not supported between '" + kind_name(a.k) + "' and '" + kind_name(b.k) + "'");
    }
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
  }

  // ---- tests and filters ----

  bool test(const expr& e, const scope& sc) {
    value v = eval(*e.args[0], sc);
    call_args a = eval_args(e, sc, 1);
    return apply_test(e.name, v, a, e.line);
  }

  bool apply_test(const std::string& n, const value& v, const call_args& a, int line) {
    value none = value::none();
    const value& arg = a.get(0, "", none);
    if (n == "defined") return v.k != kind::UNDEFINED;
    if (n == "undefined") return v.k == kind::UNDEFINED;
    if (n == "none") return v.k == kind::NONE;
    if (n == "boolean") return v.k == kind::BOOL;
    if (n == "true") return v.k == kind::BOOL && v.b;
    if (n == "false") return v.k == kind::BOOL && !v.b;
    if (n == "integer") return v.k == kind::INT;
    if (n == "float") return v.k == kind::FLOAT;
    if (n == "number") return v.is_number();
    if (n == "string") return v.k == kind::STRING;
    if (n == "mapping") return v.is_mapping();
    if (n == "iterable") return v.k == kind::LIST || v.k == kind::STRING || v.k == kind::DICT;
    if (n == "sequence") return v.k == kind::LIST || v.k == kind::STRING || v.k == kind::DICT;
    if (n == "callable") return v.k == kind::FUNCTION;
    if (n == "odd" || n == "even") {
      if (!int_like(v)) fail(line, "odd/even test needs an integer");
      return (ival(v) % 2 != 0) == (n == "odd");
    }
    if (n == "divisibleby") {
      if (!int_like(v) || !int_like(arg) || ival(arg) == 0) fail(line, "divisibleby needs non-zero integers");
      return ival(v) % ival(arg) == 0;
    }
    if (n == "eq" || n == "equalto" || n == "==") return equals(v, arg);
    if (n == "ne" || n == "!=") return !equals(v, arg);
    if (n == "lt" || n == "lessthan" || n == "<") return compare("<", v, arg, line);
    if (n == "le" || n == "<=") return compare("<=", v, arg, line);
    if (n == "gt" || n == "greaterthan" || n == ">") return compare(">", v, arg, line);
    if (n == "ge" || n == ">=") return compare(">=", v, arg, line);
    if (n == "in") return contains(arg, v, line);
    if (n == "sameas") {
      if (v.k != arg.k) return false;
      if (v.k == kind::LIST) return v.l == arg.l;
      if (v.is_mapping()) return v.d == arg.d;
      return equals(v, arg);
    }
    if (n == "lower") return v.k == kind::STRING && ascii_lower(v.s) == v.s;
    if (n == "upper") return v.k == kind::STRING && ascii_upper(v.s) == v.s;
    fail(line, "unknown test '" + n + "'");
  }

  value filter(const expr& e, const scope& sc) {
    value v = eval(*e.args[0], sc);
    call_args a = eval_args(e, sc, 1);
    return apply_filter(e.name, v, a, e.line);
  }

  value apply_filter(const std::string& n, const value& v, const call_args& a, int line);
  value select_filter(const std::string& n, const value& v, const call_args& a, int line);

  const program& prog_;
  const chat_template_limits& limits_;
  double cpu_start_ = thread_cpu_seconds();
  uint64_t next_clock_check_ = kClockEvery;
  const scope* root_ = nullptr;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
};

value evaluator::apply_filter(const std::string& n, const value& v, const call_args& a, int line) {
  value none = value::none();
  if (n == "safe" || n == "e" || n == "escape" || n == "forceescape") {
    // transformers renders without autoescape, so |safe is a no-op; |e escapes HTML as Jinja does.
    if (n == "safe") return v;
    std::string s = to_str(v), out;
    for (char c : s) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&#34;";
          break;
        case '\'':
          out += "&#39;";
          break;
        default:
          out += c;
      }
    }
    return make_string(std::move(out), line);
  }
  if (n == "default" || n == "d") {
    value empty = value::string("");
    value f = value::boolean(false);
    const value& dflt = a.get(0, "default_value", empty);
    bool boolean = truthy(a.get(1, "boolean", f));
    if (v.k == kind::UNDEFINED || (boolean && !truthy(v))) return dflt;
    return v;
  }
  if (v.k == kind::UNDEFINED && n != "length" && n != "count" && n != "list" && n != "string" &&
      n != "tojson") {
    undefined_use(v, line);
  }
  if (n == "trim") {
    const value& chars = a.get(0, "chars", none);
    return make_string(py_strip(to_str(v), &chars, true, true), line);
  }
  if (n == "length" || n == "count") {
    switch (v.k) {
      case kind::UNDEFINED:
        return value::integer(0);
      case kind::STRING:
        return value::integer(static_cast<int64_t>(code_points(v.s).size()));
      case kind::LIST:
        return value::integer(static_cast<int64_t>(v.l->size()));
      case kind::DICT:
      case kind::NAMESPACE:
        return value::integer(static_cast<int64_t>(v.d->items.size()));
      default:
        fail(line, std::string("object of type '") + kind_name(v.k) + "' has no len()");
    }
  }
  if (n == "tojson") {
    value zero = value::none();
    value f = value::boolean(false);
    const value& indent = a.get(0, "indent", zero);
    if (indent.k != kind::NONE && indent.k != kind::INT) fail(line, "tojson: indent must be an integer");
    std::string s =
        to_json(v, indent.k == kind::INT ? static_cast<int>(std::clamp<int64_t>(indent.i, 0, 64)) : 0,
                truthy(a.get(99, "sort_keys", f)));
    return make_string(std::move(s), line);
  }
  if (n == "string") return make_string(to_str(v), line);
  if (n == "upper") return value::string(ascii_upper(to_str(v)));
  if (n == "lower") return value::string(ascii_lower(to_str(v)));
  if (n == "capitalize") {
    std::string s = ascii_lower(to_str(v));
    if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    return value::string(std::move(s));
  }
  if (n == "title") {
    std::string s = to_str(v);
    bool start = true;
    for (char& c : s) {
      unsigned char u = static_cast<unsigned char>(c);
      c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
      start = !std::isalnum(u);
    }
    return value::string(std::move(s));
  }
  if (n == "replace") {
    if (a.pos.size() < 2) fail(line, "replace expects two arguments");
    value minus = value::integer(-1);
    return make_string(
        py_replace(to_str(v), to_str(a.pos[0]), to_str(a.pos[1]), as_int(a.get(2, "count", minus), -1)),
        line);
  }
  if (n == "join") {
    value empty = value::string("");
    std::string sep = to_str(a.get(0, "d", empty));
    const value& attr = a.get(1, "attribute", none);
    std::string out;
    std::vector<value> items = iterate(v, line);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += sep;
      out += to_str(attr.k == kind::STRING ? get_attr(items[i], attr.s, line) : items[i]);
      check_size(out.size(), line);
    }
    return make_string(std::move(out), line);
  }
  if (n == "first" || n == "last") {
    std::vector<value> items = iterate(v, line);
    if (items.empty()) return value{};
    return n == "first" ? items.front() : items.back();
  }
  if (n == "list") return make_list(iterate(v, line), line);
  if (n == "reverse") {
    if (v.k == kind::STRING) {
      std::vector<std::string_view> cps = code_points(v.s);
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
      return value::string(std::move(out));
    }
    std::vector<value> items = iterate(v, line);
    std::reverse(items.begin(), items.end());
    return make_list(std::move(items), line);
  }
  if (n == "sort") {
    value f = value::boolean(false);
    bool rev = truthy(a.get(0, "reverse", f));
    const value& attr = a.get(2, "attribute", none);
    std::vector<value> items = iterate(v, line);
    step(line, items.size() * 8);
    auto key = [&](const value& x) { return attr.k == kind::STRING ? get_attr(x, attr.s, line) : x; };
    std::stable_sort(items.begin(), items.end(), [&](const value& x, const value& y) {
      return rev ? compare("<", key(y), key(x), line) : compare("<", key(x), key(y), line);
    });
    return make_list(std::move(items), line);
  }
  if (n == "unique") {
    std::vector<value> out;
    for (const value& x : iterate(v, line)) {
      step(line, out.size());
      if (std::none_of(out.begin(), out.end(), [&](const value& y) { return equals(x, y); }))
        out.push_back(x);
    }
    return make_list(std::move(out), line);
  }
  if (n == "items") {
    if (!v.is_mapping()) fail(line, "items filter expects a mapping");
    std::vector<value> out;
    for (const auto& [k, x] : v.d->items) out.push_back(value::list({value::string(k), x}));
    return make_list(std::move(out), line);
  }
  if (n == "int") {
    value zero = value::integer(0);
    const value& dflt = a.get(0, "default", zero);
    if (v.k == kind::INT) return v;
    if (v.k == kind::BOOL) return value::integer(v.b);
    if (v.k == kind::FLOAT) {
      if (!std::isfinite(v.f) || std::fabs(v.f) > 9.2e18) return dflt;
      return value::integer(static_cast<int64_t>(v.f));
    }
    if (v.k == kind::STRING) {
      try {
        size_t used = 0;
        std::string t = py_strip(v.s, nullptr, true, true);
        int64_t r = std::stoll(t, &used);
        if (used == t.size()) return value::integer(r);
      } catch (const std::exception&) {
      }
    }
    return dflt;
  }
  if (n == "float") {
    value zero = value::floating(0);
    if (v.is_number()) return value::floating(fval(v));
    if (v.k == kind::STRING) {
      try {
        size_t used = 0;
        std::string t = py_strip(v.s, nullptr, true, true);
        double r = std::stod(t, &used);
        if (used == t.size()) return value::floating(r);
      } catch (const std::exception&) {
      }
    }
    return a.get(0, "default", zero);
  }
  if (n == "abs") {
    if (v.k == kind::FLOAT) return value::floating(std::fabs(v.f));
    if (int_like(v)) {
      if (ival(v) == std::numeric_limits<int64_t>::min()) fail(line, "integer overflow");
      return value::integer(ival(v) < 0 ? -ival(v) : ival(v));
    }
    fail(line, "abs expects a number");
  }
  if (n == "round") {
    value zero = value::integer(0);
    value common = value::string("common");
    if (!v.is_number()) fail(line, "round expects a number");
    double p = std::pow(
        10.0, static_cast<double>(std::clamp<int64_t>(as_int(a.get(0, "precision", zero), 0), -300, 300)));
    std::string method = to_str(a.get(1, "method", common));
    double x = fval(v) * p;
    x = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
    return value::floating(x / p);
  }
  if (n == "indent") {
    value four = value::integer(4);
    value f = value::boolean(false);
    const value& w = a.get(0, "width", four);
    std::string pad = w.k == kind::STRING
                          ? w.s
                          : std::string(static_cast<size_t>(std::clamp<int64_t>(as_int(w, 4), 0, 256)), ' ');
    bool first = truthy(a.get(1, "first", f));
    bool blank = truthy(a.get(2, "blank", f));
    std::string s = to_str(v), out;
    size_t start = 0;
    bool is_first = true;
    while (start <= s.size()) {
      size_t nl = s.find('\n', start);
      std::string_view lineTxt(s.data() + start, (nl == std::string::npos ? s.size() : nl) - start);
      if ((!is_first || first) && (blank || !lineTxt.empty())) out += pad;
      out += lineTxt;
      if (nl == std::string::npos) break;
      out += '\n';
      start = nl + 1;
      is_first = false;
      check_size(out.size(), line);
    }
    return make_string(std::move(out), line);
  }
  if (n == "sum") {
    value total = value::integer(0);
    for (const value& x : iterate(v, line)) total = binary("+", total, x, line);
    return total;
  }
  if (n == "min" || n == "max") {
    std::vector<value> items = iterate(v, line);
    if (items.empty()) return value{};
    value best = items[0];
    for (const value& x : items) {
      if (compare(n == "min" ? "<" : ">", x, best, line)) best = x;
    }
    return best;
  }
  if (n == "map" || n == "select" || n == "reject" || n == "selectattr" || n == "rejectattr") {
    return select_filter(n, v, a, line);
  }
  if (n == "dictsort") {
    if (!v.is_mapping()) fail(line, "dictsort expects a mapping");
    std::vector<value> out;
    for (const auto& [k, x] : v.d->items) out.push_back(value::list({value::string(k), x}));
    std::stable_sort(out.begin(), out.end(), [](const value& x, const value& y) {
      return ascii_lower((*x.l)[0].s) < ascii_lower((*y.l)[0].s);
    });
    return make_list(std::move(out), line);
  }
  if (n == "wordcount")
    return value::integer(static_cast<int64_t>(py_split(to_str(v), none, -1, false).size()));
  fail(line, "unknown filter '" + n + "'");
}

// map(attribute=...) / map('filter'), select/reject('test', args...), selectattr/rejectattr('attr', 'test',
// ...)
value evaluator::select_filter(const std::string& n, const value& v, const call_args& a, int line) {
  std::vector<value> items = iterate(v, line);
  std::vector<value> out;
  if (n == "map") {
    value none = value::none();
    const value& attr = a.get(99, "attribute", none);
    for (const value& x : items) {
      step(line);
      if (attr.k == kind::STRING) {
        value r = get_attr(x, attr.s, line);
        if (r.k == kind::UNDEFINED) {
          for (const auto& [k, d] : a.kw) {
            if (k == "default") r = d;
          }
        }
        out.push_back(r);
      } else {
        if (a.pos.empty() || a.pos[0].k != kind::STRING)
          fail(line, "map expects a filter name or attribute=");
        call_args rest;
        rest.pos.assign(a.pos.begin() + 1, a.pos.end());
        out.push_back(apply_filter(a.pos[0].s, x, rest, line));
      }
    }
    return make_list(std::move(out), line);
  }
  bool by_attr = n == "selectattr" || n == "rejectattr";
  bool keep_if = n == "select" || n == "selectattr";
  size_t first = by_attr ? 1 : 0;
  if (by_attr && (a.pos.empty() || a.pos[0].k != kind::STRING)) fail(line, n + " expects an attribute name");
  std::string test_name = a.pos.size() > first ? to_str(a.pos[first]) : "";
  call_args rest;
  if (a.pos.size() > first + 1)
    rest.pos.assign(a.pos.begin() + static_cast<ptrdiff_t>(first + 1), a.pos.end());
  for (const value& x : items) {
    step(line);
    value subject = by_attr ? get_attr(x, a.pos[0].s, line) : x;
    bool r = test_name.empty() ? truthy(subject) : apply_test(test_name, subject, rest, line);
    if (r == keep_if) out.push_back(x);
  }
  return make_list(std::move(out), line);
}

}  // namespace

std::string render_program(const program& prog, const dict& globals, const chat_template_limits& limits) {
  evaluator ev(prog, limits);
  return ev.run(globals);
}

}  // namespace moxi::formats::chat_template_detail
