// json-constraint: the byte-level pushdown automaton (RFC 8259 grammar; strings checked as UTF-8 and
// surrogate pairs as nlohmann::json's lexer does), the JSON Schema subset compiled onto it, and the token
// mask. Every state the automaton accepts can still be completed: a byte is refused as soon as no valid
// value starts with the bytes so far (a lone low surrogate at its second hex digit, a string's character
// beyond maxLength at its first byte, a number's '.' when no room is left for a digit).
#include "moxi/runtime/json-constraint.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>

#include "moxi/base/error.h"

namespace moxi::runtime {

namespace {

enum type_bit : uint8_t {
  t_object = 1,
  t_array = 2,
  t_string = 4,
  t_number = 8,
  t_integer = 16,
  t_boolean = 32,
  t_null = 64,
  t_all = 127,
};

struct property {
  std::string key;  // the name as JSON text, quotes included: the bytes generated
  int32_t node = 0;
  bool required = false;
};

struct schema_node {
  uint8_t types = t_all;
  bool open_object = true;  // any keys, any values (no properties declared, additionalProperties not false)
  std::vector<property> props;
  int32_t items = 0;  // node of array elements (0: any value)
  int64_t min_items = 0, max_items = -1, min_len = 0, max_len = -1;
  bool literal = false;               // enum / const: the value is one of `literals`
  std::vector<std::string> literals;  // serialized, sorted, unique
};

}  // namespace

struct json_grammar {
  json_grammar_options opt;
  std::vector<schema_node> nodes;  // nodes[0]: any value
  int32_t root = 0;
};

namespace {

enum kind : uint8_t { k_root, k_value, k_object, k_array, k_string, k_number, k_literal, k_word, k_key };
// Object states.
enum : uint8_t { os_start, os_key, os_colon, os_after };
// Array states.
enum : uint8_t { as_start, as_after };
// String states.
enum : uint8_t { ss_normal, ss_escape, ss_hex, ss_low_backslash, ss_low_u, ss_low_hex, ss_utf8 };
// Number states; the ones marked (end) may end the number.
enum : uint8_t {
  ns_start,
  ns_minus,
  ns_zero,  // (end)
  ns_int,   // (end)
  ns_dot,
  ns_frac,  // (end)
  ns_e,
  ns_esign,
  ns_exp,  // (end)
};

constexpr const char* kWords[] = {"true", "false", "null"};

bool is_ws(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
bool is_digit(uint8_t c) {
  return c >= '0' && c <= '9';
}
int hex_value(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
bool number_can_end(uint8_t st) {
  return st == ns_zero || st == ns_int || st == ns_frac || st == ns_exp;
}

}  // namespace

namespace {

using frame = json_matcher::frame;

// The stack as a walk sees it: frames [0, base_n) of the committed stack, untouched, under `local`
// (copies of frames it changed and frames it pushed). A rejected walk leaves the committed stack as it
// was; no frame is copied but the ones a token actually reaches.
struct cursor {
  const frame* base;
  size_t base_n;
  std::vector<frame>& local;
  int depth;
  bool empty() const { return base_n == 0 && local.empty(); }
  frame& top() {
    if (local.empty()) local.push_back(base[--base_n]);
    return local.back();
  }
  void push(const frame& f) { local.push_back(f); }
  void pop() {
    if (local.empty())
      --base_n;
    else
      local.pop_back();
  }
};

enum class num_step { consumed, rejected, ended };

// One byte of a number: consumed, rejected, or the number ended before it (the byte goes to the parent).
num_step number_step(frame& f, uint8_t c, const json_grammar_options& o) {
  const bool int_only = f.flags & 1;
  const bool bounded = o.max_number_len >= 0;
  // Room for this byte, and for one more when the byte leads to a state that cannot end.
  auto room = [&](bool needs_more) { return !bounded || f.n + 1 + (needs_more ? 1 : 0) <= o.max_number_len; };
  auto go = [&](uint8_t st, bool needs_more) {
    if (!room(needs_more)) return num_step::rejected;
    f.st = st;
    ++f.n;
    return num_step::consumed;
  };
  switch (f.st) {
    case ns_start:
      if (c == '-') return go(ns_minus, true);
      if (c == '0') return go(ns_zero, false);
      if (c >= '1' && c <= '9') return go(ns_int, false);
      return num_step::rejected;
    case ns_minus:
      if (c == '0') return go(ns_zero, false);
      if (c >= '1' && c <= '9') return go(ns_int, false);
      return num_step::rejected;
    case ns_zero:
    case ns_int:
      if (f.st == ns_int && is_digit(c)) return room(false) ? go(ns_int, false) : num_step::ended;
      if (!int_only && c == '.' && room(true)) return go(ns_dot, true);
      if (!int_only && (c == 'e' || c == 'E') && room(true)) return go(ns_e, true);
      return num_step::ended;
    case ns_dot:
      return is_digit(c) ? go(ns_frac, false) : num_step::rejected;
    case ns_frac:
      if (is_digit(c) && room(false)) return go(ns_frac, false);
      if ((c == 'e' || c == 'E') && room(true)) return go(ns_e, true);
      return num_step::ended;
    case ns_e:
      f.a = 0;  // exponent digits
      if (c == '+' || c == '-') return go(ns_esign, true);
      if (is_digit(c)) return f.a = 1, go(ns_exp, false);
      return num_step::rejected;
    case ns_esign:
      if (is_digit(c)) return f.a = 1, go(ns_exp, false);
      return num_step::rejected;
    case ns_exp:
      // Bounded numbers keep at most 2 exponent digits: |exponent| <= 99 with an 18-byte number stays a
      // finite double (nlohmann::json refuses numbers that overflow).
      if (is_digit(c) && room(false) && (!bounded || f.a < 2)) return ++f.a, go(ns_exp, false);
      return num_step::ended;
  }
  return num_step::rejected;
}

bool number_extendable(const frame& f, const json_grammar_options& o) {
  for (uint8_t c : {'0', '.', 'e'}) {
    frame t = f;
    if (number_step(t, c, o) == num_step::consumed) return true;
  }
  return false;
}

uint64_t key_candidates(const schema_node& nd, int32_t from) {
  uint64_t m = 0;
  for (size_t j = size_t(from); j < nd.props.size(); ++j) {
    m |= uint64_t(1) << j;
    if (nd.props[j].required) break;  // a required property cannot be skipped
  }
  return m;
}

bool can_close(const schema_node& nd, int32_t from) {
  for (size_t j = size_t(from); j < nd.props.size(); ++j)
    if (nd.props[j].required) return false;
  return true;
}

frame make(uint8_t kind, int32_t node) {
  frame f;
  f.kind = kind;
  f.node = node;
  return f;
}

struct walker {
  const json_grammar& g;
  cursor& c;

  bool take_ws(frame& f) const {
    if (g.opt.max_ws_run < 0) return true;
    if (f.ws >= g.opt.max_ws_run) return false;
    ++f.ws;
    return true;
  }

  void close_container() {
    c.pop();
    --c.depth;
  }

  bool step(uint8_t ch) {
    for (;;) {
      if (c.empty()) return false;
      frame& f = c.top();
      switch (f.kind) {
        case k_root:
          if (f.st == 0) {
            if (is_ws(ch)) return take_ws(f);
            f.st = 1;
            f.ws = 0;
            c.push(make(k_value, g.root));
            continue;
          }
          return is_ws(ch) && g.opt.trailing_ws && take_ws(f);

        case k_value: {
          if (is_ws(ch)) return take_ws(f);
          const schema_node& nd = g.nodes[size_t(f.node)];
          f.ws = 0;
          if (nd.literal) {
            f.kind = k_literal;
            f.a = 0;
            f.b = int32_t(nd.literals.size());
            f.n = 0;
            continue;
          }
          if (ch == '{' || ch == '[') {
            if (!(nd.types & (ch == '{' ? t_object : t_array)) || c.depth >= g.opt.max_depth) return false;
            f.kind = ch == '{' ? k_object : k_array;
            f.st = 0;
            f.a = 0;
            f.b = -1;
            f.n = 0;
            ++c.depth;
            return true;
          }
          if (ch == '"') {
            if (!(nd.types & t_string)) return false;
            f.kind = k_string;
            f.st = ss_normal;
            f.n = 0;
            return true;
          }
          if (ch == '-' || is_digit(ch)) {
            if (!(nd.types & (t_number | t_integer))) return false;
            f.kind = k_number;
            f.st = ns_start;
            f.flags = (nd.types & t_number) ? 0 : 1;
            f.n = 0;
            continue;
          }
          const int w = ch == 't' ? 0 : ch == 'f' ? 1 : ch == 'n' ? 2 : -1;
          if (w < 0 || !(nd.types & (w == 2 ? t_null : t_boolean))) return false;
          f.kind = k_word;
          f.a = w;
          f.n = 0;
          continue;
        }

        case k_object: {
          if (is_ws(ch)) return take_ws(f);
          f.ws = 0;
          const schema_node& nd = g.nodes[size_t(f.node)];
          switch (f.st) {
            case os_start:
            case os_after:
              if (ch == '}') {
                if (!nd.open_object && !can_close(nd, f.a)) return false;
                close_container();
                return true;
              }
              if (f.st == os_after) {
                if (ch != ',' || (!nd.open_object && key_candidates(nd, f.a) == 0)) return false;
                f.st = os_key;
                return true;
              }
              [[fallthrough]];
            case os_key: {
              if (ch != '"') return false;
              f.st = os_colon;
              if (nd.open_object) {
                frame s = make(k_string, -1);
                s.st = ss_normal;
                c.push(s);
                return true;
              }
              const uint64_t m = key_candidates(nd, f.a);
              if (m == 0) return false;
              frame k = make(k_key, f.node);
              k.mask = m;
              k.n = 1;  // the opening quote
              c.push(k);
              return true;
            }
            case os_colon: {
              if (ch != ':') return false;
              f.st = os_after;
              const int32_t value_node = nd.open_object ? 0 : nd.props[size_t(f.b)].node;
              c.push(make(k_value, value_node));
              return true;
            }
          }
          return false;
        }

        case k_array: {
          if (is_ws(ch)) return take_ws(f);
          f.ws = 0;
          const schema_node& nd = g.nodes[size_t(f.node)];
          if (ch == ']') {
            if (f.n < nd.min_items) return false;
            close_container();
            return true;
          }
          if (f.st == as_start) {
            if (nd.max_items == 0) return false;
            f.st = as_after;
            f.n = 1;
            const int32_t items = nd.items;
            c.push(make(k_value, items));
            continue;  // the byte starts the first element
          }
          if (ch != ',' || (nd.max_items >= 0 && f.n >= nd.max_items)) return false;
          ++f.n;
          const int32_t items = nd.items;
          c.push(make(k_value, items));
          return true;
        }

        case k_string:
          return string_step(f, ch);

        case k_number:
          switch (number_step(f, ch, g.opt)) {
            case num_step::consumed:
              return true;
            case num_step::rejected:
              return false;
            case num_step::ended:
              c.pop();
              continue;
          }
          return false;

        case k_literal: {
          const auto& lits = g.nodes[size_t(f.node)].literals;
          const auto pos = size_t(f.n);
          const bool exact = lits[size_t(f.a)].size() == pos;
          // [a, b) share the prefix [0, pos); sorted, so the ones going on with `ch` are contiguous.
          const auto lo = std::partition_point(lits.begin() + f.a + (exact ? 1 : 0), lits.begin() + f.b,
                                               [&](const std::string& s) { return uint8_t(s[pos]) < ch; });
          const auto hi = std::partition_point(lo, lits.begin() + f.b,
                                               [&](const std::string& s) { return uint8_t(s[pos]) <= ch; });
          if (lo == hi) {
            if (!exact) return false;
            c.pop();  // a complete literal another one extends (1 and 12): the byte is the parent's
            continue;
          }
          f.a = int32_t(lo - lits.begin());
          f.b = int32_t(hi - lits.begin());
          ++f.n;
          if (f.b - f.a == 1 && lits[size_t(f.a)].size() == size_t(f.n)) c.pop();
          return true;
        }

        case k_word: {
          const char* w = kWords[f.a];
          if (uint8_t(w[f.n]) != ch) return false;
          if (w[++f.n] == '\0') c.pop();
          return true;
        }

        case k_key: {
          const auto& props = g.nodes[size_t(f.node)].props;
          const auto pos = size_t(f.n);
          uint64_t m = 0;
          for (uint64_t r = f.mask; r; r &= r - 1) {
            const int j = std::countr_zero(r);
            const std::string& k = props[size_t(j)].key;
            if (k.size() > pos && uint8_t(k[pos]) == ch) m |= uint64_t(1) << j;
          }
          if (m == 0) return false;
          f.mask = m;
          ++f.n;
          // Keys end with their only unescaped quote, so a complete one is the only candidate left.
          const int j = std::countr_zero(m);
          if (props[size_t(j)].key.size() == pos + 1) {
            c.pop();
            frame& obj = c.top();
            obj.b = j;
            obj.a = j + 1;
          }
          return true;
        }
      }
      return false;
    }
  }

  bool string_step(frame& f, uint8_t ch) {
    const schema_node* nd = f.node >= 0 ? &g.nodes[size_t(f.node)] : nullptr;
    switch (f.st) {
      case ss_normal: {
        if (ch == '"') {
          if (nd && f.n < nd->min_len) return false;
          c.pop();
          return true;
        }
        if (ch < 0x20) return false;
        // A character starts; it will count as one whatever its length.
        if (nd && nd->max_len >= 0 && f.n >= nd->max_len) return false;
        if (ch == '\\') {
          f.st = ss_escape;
        } else if (ch >= 0x80) {
          // UTF-8 lead byte: continuation count and the range of the next byte (RFC 3629 table 3-7).
          int rem;
          uint8_t lo = 0x80, hi = 0xBF;
          if (ch >= 0xC2 && ch <= 0xDF) {
            rem = 1;
          } else if (ch >= 0xE0 && ch <= 0xEF) {
            rem = 2;
            if (ch == 0xE0) lo = 0xA0;
            if (ch == 0xED) hi = 0x9F;
          } else if (ch >= 0xF0 && ch <= 0xF4) {
            rem = 3;
            if (ch == 0xF0) lo = 0x90;
            if (ch == 0xF4) hi = 0x8F;
          } else {
            return false;
          }
          f.st = ss_utf8;
          f.a = rem;
          f.b = lo | (hi << 8);
        }
        ++f.n;
        return true;
      }
      case ss_utf8: {
        const int lo = f.b & 0xFF, hi = f.b >> 8;
        if (ch < lo || ch > hi) return false;
        if (--f.a == 0) f.st = ss_normal;
        f.b = 0x80 | (0xBF << 8);
        return true;
      }
      case ss_escape:
        if (ch == 'u') {
          f.st = ss_hex;
          f.a = f.b = 0;
          return true;
        }
        if (ch == '"' || ch == '\\' || ch == '/' || ch == 'b' || ch == 'f' || ch == 'n' || ch == 'r' ||
            ch == 't') {
          f.st = ss_normal;
          return true;
        }
        return false;
      case ss_hex:
      case ss_low_hex: {
        const int d = hex_value(ch);
        if (d < 0) return false;
        f.b = f.b * 16 + d;
        ++f.a;
        if (f.st == ss_hex) {
          if (f.a == 2 && f.b >= 0xDC && f.b <= 0xDF) return false;  // a low surrogate without a high one
          if (f.a == 4) f.st = (f.b >= 0xD800 && f.b <= 0xDBFF) ? ss_low_backslash : ss_normal;
        } else {
          if (f.a == 1 && d != 0xD) return false;
          if (f.a == 2 && (f.b < 0xDC || f.b > 0xDF)) return false;  // must be a low surrogate
          if (f.a == 4) f.st = ss_normal;
        }
        return true;
      }
      case ss_low_backslash:
        if (ch != '\\') return false;
        f.st = ss_low_u;
        return true;
      case ss_low_u:
        if (ch != 'u') return false;
        f.st = ss_low_hex;
        f.a = f.b = 0;
        return true;
    }
    return false;
  }
};

// ---- schema compilation ----

struct schema_compiler {
  const json_schema_limits& lim;
  json_grammar& g;
  size_t bytes = 0;

  [[noreturn]] static void fail(const std::string& path, const std::string& what) {
    throw error(path + ": " + what);
  }

  int64_t count(const nlohmann::ordered_json& v, const std::string& path, const char* key) {
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      fail(path, std::string("'") + key + "' must be a non-negative integer");
    const uint64_t x = v.get<uint64_t>();
    if (x > (uint64_t(1) << 30)) fail(path, std::string("'") + key + "' is too large");
    return int64_t(x);
  }

  void charge(size_t n, const std::string& path) {
    bytes += n;
    if (bytes > lim.max_total_bytes)
      fail(path, "the schema's names and values exceed " + std::to_string(lim.max_total_bytes) + " bytes");
  }

  static bool literal_has_type(const nlohmann::ordered_json& v, uint8_t types) {
    if (v.is_object()) return types & t_object;
    if (v.is_array()) return types & t_array;
    if (v.is_string()) return types & t_string;
    if (v.is_boolean()) return types & t_boolean;
    if (v.is_null()) return types & t_null;
    if (v.is_number_integer() || v.is_number_unsigned()) return types & (t_integer | t_number);
    if (v.is_number_float()) {
      const double d = v.get<double>();
      return (types & t_number) || ((types & t_integer) && std::isfinite(d) && d == std::floor(d));
    }
    return false;
  }

  int32_t compile(const nlohmann::ordered_json& s, const std::string& path, int depth) {
    if (depth > lim.max_depth)
      fail(path, "schemas nest deeper than " + std::to_string(lim.max_depth) + " levels");
    if (int(g.nodes.size()) >= lim.max_nodes)
      fail(path, "the schema has more than " + std::to_string(lim.max_nodes) + " subschemas");
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(path, "the schema false allows no value");
      g.nodes.emplace_back();
      return int32_t(g.nodes.size() - 1);
    }
    if (!s.is_object()) fail(path, "a schema must be an object");
    schema_node nd;
    bool has_additional = false, additional = true;
    const nlohmann::ordered_json* props = nullptr;
    const nlohmann::ordered_json* required = nullptr;
    const nlohmann::ordered_json* items = nullptr;
    std::vector<std::string> constraining;  // keywords that a literal (enum / const) cannot combine with
    for (const auto& [k, v] : s.items()) {
      if (k == "title" || k == "description" || k == "$schema" || k == "$id" || k == "$comment" ||
          k == "default" || k == "examples")
        continue;  // annotations: they do not constrain the value
      if (k == "type") {
        nd.types = 0;
        const auto names = v.is_array() ? v : nlohmann::ordered_json::array({v});
        if (names.empty()) fail(path, "'type' must name at least one type");
        for (const auto& t : names) {
          if (!t.is_string()) fail(path, "'type' must be a type name or a list of them");
          const std::string name = t.get<std::string>();
          if (name == "object")
            nd.types |= t_object;
          else if (name == "array")
            nd.types |= t_array;
          else if (name == "string")
            nd.types |= t_string;
          else if (name == "number")
            nd.types |= t_number;
          else if (name == "integer")
            nd.types |= t_integer;
          else if (name == "boolean")
            nd.types |= t_boolean;
          else if (name == "null")
            nd.types |= t_null;
          else
            fail(path, "'type' '" + name + "' is not a JSON Schema type");
        }
      } else if (k == "properties") {
        if (!v.is_object()) fail(path, "'properties' must be an object");
        props = &v;
        constraining.push_back(k);
      } else if (k == "required") {
        if (!v.is_array()) fail(path, "'required' must be an array of property names");
        required = &v;
        constraining.push_back(k);
      } else if (k == "additionalProperties") {
        if (!v.is_boolean())
          fail(path, "'additionalProperties' is supported as true or false only, not as a schema");
        has_additional = true;
        additional = v.get<bool>();
        constraining.push_back(k);
      } else if (k == "items") {
        if (!v.is_object() && !v.is_boolean())
          fail(path, "'items' must be a schema (tuple items are not supported)");
        items = &v;
        constraining.push_back(k);
      } else if (k == "minItems") {
        nd.min_items = count(v, path, "minItems");
        constraining.push_back(k);
      } else if (k == "maxItems") {
        nd.max_items = count(v, path, "maxItems");
        constraining.push_back(k);
      } else if (k == "minLength") {
        nd.min_len = count(v, path, "minLength");
        constraining.push_back(k);
      } else if (k == "maxLength") {
        nd.max_len = count(v, path, "maxLength");
        constraining.push_back(k);
      } else if (k == "enum" || k == "const") {
        if (nd.literal) fail(path, "'enum' and 'const' together are not supported");
        nd.literal = true;
        const auto values = k == "enum" ? v : nlohmann::ordered_json::array({v});
        if (!values.is_array() || values.empty()) fail(path, "'enum' must be a non-empty array");
        if (int(values.size()) > lim.max_enum)
          fail(path, "'enum' has more than " + std::to_string(lim.max_enum) + " values");
        for (const auto& x : values) {
          std::string text = x.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::strict);
          if (text.size() > lim.max_literal_bytes)
            fail(path,
                 "an '" + k + "' value is longer than " + std::to_string(lim.max_literal_bytes) + " bytes");
          charge(text.size(), path);
          nd.literals.push_back(std::move(text));
        }
      } else {
        fail(path, "'" + k + "' is not supported");
      }
    }
    if (nd.min_items > nd.max_items && nd.max_items >= 0) fail(path, "'minItems' exceeds 'maxItems'");
    if (nd.min_len > nd.max_len && nd.max_len >= 0) fail(path, "'minLength' exceeds 'maxLength'");
    if (nd.literal) {
      if (!constraining.empty())
        fail(path, "'" + constraining.front() + "' together with 'enum' or 'const' is not supported");
      // The values the type admits, serialized; the output is one of them byte for byte.
      std::vector<std::string> kept;
      const auto values = s.contains("enum") ? s["enum"] : nlohmann::ordered_json::array({s["const"]});
      for (size_t i = 0; i < values.size(); ++i)
        if (literal_has_type(values[i], nd.types)) kept.push_back(nd.literals[i]);
      if (kept.empty()) fail(path, "no 'enum' or 'const' value has the schema's 'type'");
      std::sort(kept.begin(), kept.end());
      kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
      nd.literals = std::move(kept);
      nd.types = t_all;
    }
    if (nd.types & t_number) nd.types &= uint8_t(~t_integer);
    const int32_t self = int32_t(g.nodes.size());
    g.nodes.push_back(nd);  // reserved; children are appended after it
    if (props) {
      if (int(props->size()) > lim.max_properties)
        fail(path, "'properties' has more than " + std::to_string(lim.max_properties) + " properties");
      std::vector<property> list;
      for (const auto& [name, sub] : props->items()) {
        property p;
        p.key = nlohmann::ordered_json(name).dump(-1, ' ', false,
                                                  nlohmann::ordered_json::error_handler_t::strict);
        charge(p.key.size(), path);
        p.node = compile(sub, path + ".properties." + name, depth + 1);
        list.push_back(std::move(p));
      }
      g.nodes[size_t(self)].props = std::move(list);
    }
    if (required) {
      auto& list = g.nodes[size_t(self)].props;
      for (const auto& r : *required) {
        if (!r.is_string()) fail(path, "'required' must be an array of property names");
        const std::string name = r.get<std::string>();
        const std::string key = nlohmann::ordered_json(name).dump();
        auto it = std::find_if(list.begin(), list.end(), [&](const property& p) { return p.key == key; });
        if (it == list.end()) fail(path, "required property '" + name + "' is not in 'properties'");
        it->required = true;
      }
    }
    // Declared properties are the only ones generated (valid whether or not others are allowed); an
    // object without declared properties is open unless additionalProperties is false.
    g.nodes[size_t(self)].open_object = !props && !(has_additional && !additional);
    if (items) {
      const int32_t it = compile(*items, path + ".items", depth + 1);
      g.nodes[size_t(self)].items = it;
    }
    return self;
  }
};

}  // namespace

std::shared_ptr<const json_grammar> json_any_grammar(const json_grammar_options& o) {
  auto g = std::make_shared<json_grammar>();
  g->opt = o;
  g->nodes.emplace_back();
  g->root = 0;
  return g;
}

std::shared_ptr<const json_grammar> json_object_grammar(const json_grammar_options& o) {
  auto g = std::make_shared<json_grammar>();
  g->opt = o;
  g->nodes.emplace_back();
  schema_node obj;
  obj.types = t_object;
  g->nodes.push_back(obj);
  g->root = 1;
  return g;
}

std::shared_ptr<const json_grammar> json_schema_grammar(const nlohmann::ordered_json& schema,
                                                        const std::string& where,
                                                        const json_grammar_options& o,
                                                        const json_schema_limits& limits) {
  auto g = std::make_shared<json_grammar>();
  g->opt = o;
  // A schema may force objects nested as deep as itself; the output's depth bound must not cut them.
  g->opt.max_depth = std::max(o.max_depth, limits.max_depth + 2);
  g->nodes.emplace_back();  // nodes[0]: any value
  schema_compiler sc{limits, *g};
  g->root = sc.compile(schema, where, 0);
  return g;
}

// ---- tokens ----

token_table::token_table(const formats::tokenizer& tok, int64_t vocab_size) {
  std::vector<std::string> bytes(size_t(std::max<int64_t>(vocab_size, 0)));
  const int64_t n = std::min<int64_t>(vocab_size, tok.vocab_size());
  for (int64_t i = 0; i < n; ++i)
    if (!tok.is_special(token_id(i))) bytes[size_t(i)] = std::string(tok.token_bytes(token_id(i)));
  index(bytes);
}

token_table::token_table(std::vector<std::string> bytes) {
  index(bytes);
}

void token_table::index(const std::vector<std::string>& bytes) {
  offset_.assign(1, 0);
  plain_.assign(bytes.size(), -1);
  for (size_t i = 0; i < bytes.size(); ++i) {
    const std::string& b = bytes[i];
    data_ += b;
    if (data_.size() > UINT32_MAX) throw error("token table: the vocabulary's bytes exceed 4 GiB");
    offset_.push_back(uint32_t(data_.size()));
    if (b.empty()) continue;
    by_first_[uint8_t(b[0])].push_back(token_id(i));
    int32_t chars = 0;
    bool plain = formats::utf8_valid(b);
    for (unsigned char ch : b) {
      if (ch < 0x20 || ch == '"' || ch == '\\') {
        plain = false;
        break;
      }
      if ((ch & 0xC0) != 0x80) ++chars;
    }
    if (plain)
      plain_[i] = chars;
    else
      not_plain_.push_back(token_id(i));
  }
}

// ---- matcher ----

json_matcher::json_matcher(std::shared_ptr<const json_grammar> g) : g_(std::move(g)) {
  MOXI_ASSERT(g_, "json_matcher without a grammar");
  stack_.push_back(make(k_root, 0));
  scratch_.reserve(64);
}

bool json_matcher::feed(std::string_view bytes) {
  scratch_.clear();
  cursor c{stack_.data(), stack_.size(), scratch_, depth_};
  walker w{*g_, c};
  for (unsigned char ch : bytes)
    if (!w.step(ch)) return false;
  stack_.resize(c.base_n);
  stack_.insert(stack_.end(), scratch_.begin(), scratch_.end());
  depth_ = c.depth;
  return true;
}

bool json_matcher::can_feed(std::string_view bytes) const {
  scratch_.clear();
  cursor c{stack_.data(), stack_.size(), scratch_, depth_};
  walker w{*g_, c};
  for (unsigned char ch : bytes)
    if (!w.step(ch)) return false;
  return true;
}

bool json_matcher::accepting() const {
  if (stack_.empty() || stack_[0].st != 1) return false;
  if (stack_.size() == 1) return true;
  if (stack_.size() != 2) return false;
  const frame& f = stack_[1];
  if (f.kind == k_number) return number_can_end(f.st);
  if (f.kind == k_literal) return g_->nodes[size_t(f.node)].literals[size_t(f.a)].size() == size_t(f.n);
  return false;
}

bool json_matcher::done() const {
  if (!accepting()) return false;
  if (stack_.size() == 1) return !g_->opt.trailing_ws;
  const frame& f = stack_[1];
  return f.kind == k_number && !number_extendable(f, g_->opt);
}

size_t json_matcher::allowed_tokens(const token_table& table, std::vector<uint8_t>& allowed) const {
  allowed.assign(table.size(), 0);
  const frame& top = stack_.back();
  if (top.kind == k_string && top.st == ss_normal) {
    // Inside a string with no escape or UTF-8 sequence pending, a token of plain characters is allowed iff
    // the length bound leaves room for them: only the other tokens are walked.
    int64_t room = std::numeric_limits<int64_t>::max();
    if (top.node >= 0 && g_->nodes[size_t(top.node)].max_len >= 0)
      room = g_->nodes[size_t(top.node)].max_len - top.n;
    const auto plain = table.plain();
    for (size_t i = 0; i < plain.size(); ++i) allowed[i] = plain[i] >= 0 && plain[i] <= room;
    for (token_id id : table.not_plain()) allowed[size_t(id)] = can_feed(table.bytes(size_t(id)));
  } else {
    // Elsewhere few bytes may come next: tokens are walked only under a first byte the state takes, from
    // the state after that byte, and in large groups only under a second byte that state takes too.
    for (int b = 0; b < 256; ++b) {
      const auto ids = table.first_byte(uint8_t(b));
      const char ch = char(b);
      if (ids.empty() || !can_feed(std::string_view(&ch, 1))) continue;
      json_matcher next = *this;
      next.feed(std::string_view(&ch, 1));
      std::array<uint8_t, 256> second;
      const bool filter = ids.size() > 256;
      if (filter)
        for (int c = 0; c < 256; ++c) {
          const char c2 = char(c);
          second[size_t(c)] = next.can_feed(std::string_view(&c2, 1));
        }
      for (token_id id : ids) {
        const std::string_view bytes = table.bytes(size_t(id));
        allowed[size_t(id)] =
            bytes.size() == 1 || ((!filter || second[uint8_t(bytes[1])]) && next.can_feed(bytes.substr(1)));
      }
    }
  }
  size_t count = 0;
  for (uint8_t a : allowed) count += a;
  return count;
}

// ---- constraint ----

json_constraint::json_constraint(std::shared_ptr<const json_grammar> g,
                                 std::shared_ptr<const token_table> table, std::vector<token_id> end_tokens)
    : m_(std::move(g)), table_(std::move(table)), end_(std::move(end_tokens)) {
  MOXI_ASSERT(table_, "json_constraint without a token table");
}

void json_constraint::mask(std::span<float> logits) {
  size_t n = m_.allowed_tokens(*table_, allowed_);
  const bool end_ok = m_.accepting();
  for (token_id e : end_)
    if (end_ok && e >= 0 && size_t(e) < allowed_.size() && !allowed_[size_t(e)]) allowed_[size_t(e)] = 1, ++n;
  if (n == 0) throw error("json constraint: no token of the vocabulary can continue the output");
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < logits.size(); ++i)
    if (i >= allowed_.size() || !allowed_[i]) logits[i] = kMasked;
}

void json_constraint::accept(token_id id) {
  if (std::find(end_.begin(), end_.end(), id) != end_.end()) return;
  if (id < 0 || size_t(id) >= table_->size() || table_->bytes(size_t(id)).empty() ||
      !m_.feed(table_->bytes(size_t(id))))
    throw error("json constraint: token " + std::to_string(id) + " does not continue the output");
}

}  // namespace moxi::runtime
