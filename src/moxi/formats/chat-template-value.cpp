// Chat template values: conversion from JSON and the Python behaviours templates depend on (truthiness,
// str()/repr(), equality, json.dumps as transformers' tojson calls it, code-point indexing of UTF-8).
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <system_error>

#include "moxi/base/error.h"
#include "moxi/formats/chat-template-ast.h"

namespace moxi::formats::chat_template_detail {

const value* dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

value* dict::find(std::string_view key) {
  for (auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void dict::set(const std::string& key, value v) {
  if (value* cur = find(key)) {
    *cur = std::move(v);
  } else {
    items.emplace_back(key, std::move(v));
  }
}

value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return value::floating(static_cast<double>(u));
      return value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return value::floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      value r = value::list();
      r.l->reserve(j.size());
      for (const auto& e : j) r.l->push_back(from_json(e));
      return r;
    }
    case nlohmann::ordered_json::value_t::object: {
      value r = value::new_dict();
      r.d->items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) r.d->items.emplace_back(it.key(), from_json(it.value()));
      return r;
    }
    default:
      throw error("chat template: unsupported JSON value (binary)");
  }
}

bool truthy(const value& v) {
  switch (v.k) {
    case kind::UNDEFINED:
    case kind::NONE:
      return false;
    case kind::BOOL:
      return v.b;
    case kind::INT:
      return v.i != 0;
    case kind::FLOAT:
      return v.f != 0;
    case kind::STRING:
      return !v.s.empty();
    case kind::LIST:
      return !v.l->empty();
    case kind::DICT:
      return !v.d->items.empty();
    case kind::NAMESPACE:
    case kind::FUNCTION:
      return true;
  }
  return false;
}

namespace {

// Python's float repr: the shortest round-trip digits, fixed notation for exponents in [-4, 16).
std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  int exp = std::stoi(sci.substr(e + 1));
  bool neg = !mant.empty() && mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  std::string out;
  if (exp >= -4 && exp < 16) {
    int point = exp + 1;  // digits before the decimal point
    if (point <= 0) {
      out = "0." + std::string(static_cast<size_t>(-point), '0') + digits;
    } else if (static_cast<size_t>(point) >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(point) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(point)) + "." + digits.substr(static_cast<size_t>(point));
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return neg ? "-" + out : out;
}

std::string string_repr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == static_cast<unsigned char>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

// JSON string escaping as json.dumps(ensure_ascii=False) and JSON.stringify do it.
void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void json_into(std::string& out, const value& v, int indent, bool sort_keys, int depth) {
  if (depth > 512) throw error("chat template: tojson nests too deeply");
  std::string pad = indent > 0 ? "\n" + std::string(static_cast<size_t>(indent * (depth + 1)), ' ') : "";
  std::string end_pad = indent > 0 ? "\n" + std::string(static_cast<size_t>(indent * depth), ' ') : "";
  const char* item_sep = indent > 0 ? "," : ", ";
  switch (v.k) {
    case kind::UNDEFINED:
    case kind::NONE:
      out += "null";
      return;
    case kind::BOOL:
      out += v.b ? "true" : "false";
      return;
    case kind::INT:
      out += std::to_string(v.i);
      return;
    case kind::FLOAT:
      if (!std::isfinite(v.f)) {
        out += std::isnan(v.f) ? "NaN" : (v.f < 0 ? "-Infinity" : "Infinity");
      } else {
        out += float_repr(v.f);
      }
      return;
    case kind::STRING:
      json_string(out, v.s);
      return;
    case kind::LIST: {
      if (v.l->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.l->size(); ++i) {
        if (i) out += item_sep;
        out += pad;
        json_into(out, (*v.l)[i], indent, sort_keys, depth + 1);
      }
      out += end_pad;
      out += ']';
      return;
    }
    case kind::DICT:
    case kind::NAMESPACE: {
      if (v.d->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, value>*> items;
      for (const auto& it : v.d->items) items.push_back(&it);
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        out += pad;
        json_string(out, items[i]->first);
        out += ": ";
        json_into(out, items[i]->second, indent, sort_keys, depth + 1);
      }
      out += end_pad;
      out += '}';
      return;
    }
    case kind::FUNCTION:
      throw error("chat template: tojson cannot serialize a function");
  }
}

}  // namespace

std::string to_str(const value& v) {
  switch (v.k) {
    case kind::UNDEFINED:
      return "";
    case kind::STRING:
      return v.s;
    default:
      return to_repr(v);
  }
}

std::string to_repr(const value& v) {
  switch (v.k) {
    case kind::UNDEFINED:
      return "";
    case kind::NONE:
      return "None";
    case kind::BOOL:
      return v.b ? "True" : "False";
    case kind::INT:
      return std::to_string(v.i);
    case kind::FLOAT:
      return float_repr(v.f);
    case kind::STRING:
      return string_repr(v.s);
    case kind::LIST: {
      std::string out = "[";
      for (size_t i = 0; i < v.l->size(); ++i) {
        if (i) out += ", ";
        out += to_repr((*v.l)[i]);
      }
      return out + "]";
    }
    case kind::DICT: {
      std::string out = "{";
      for (size_t i = 0; i < v.d->items.size(); ++i) {
        if (i) out += ", ";
        out += string_repr(v.d->items[i].first) + ": " + to_repr(v.d->items[i].second);
      }
      return out + "}";
    }
    case kind::NAMESPACE:
      return "<Namespace>";
    case kind::FUNCTION:
      return "<function>";
  }
  return "";
}

std::string to_json(const value& v, int indent, bool sort_keys, int depth) {
  std::string out;
  json_into(out, v, indent, sort_keys, depth);
  return out;
}

bool equals(const value& a, const value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.k == kind::FLOAT || b.k == kind::FLOAT) {
      double x = a.k == kind::FLOAT ? a.f : static_cast<double>(a.k == kind::BOOL ? a.b : a.i);
      double y = b.k == kind::FLOAT ? b.f : static_cast<double>(b.k == kind::BOOL ? b.b : b.i);
      return x == y;
    }
    int64_t x = a.k == kind::BOOL ? a.b : a.i;
    int64_t y = b.k == kind::BOOL ? b.b : b.i;
    return x == y;
  }
  if (a.k != b.k) return false;
  switch (a.k) {
    case kind::UNDEFINED:
    case kind::NONE:
      return true;
    case kind::STRING:
      return a.s == b.s;
    case kind::LIST: {
      if (a.l->size() != b.l->size()) return false;
      for (size_t i = 0; i < a.l->size(); ++i) {
        if (!equals((*a.l)[i], (*b.l)[i])) return false;
      }
      return true;
    }
    case kind::DICT: {
      if (a.d->items.size() != b.d->items.size()) return false;
      for (const auto& [k, v] : a.d->items) {
        const value* o = b.d->find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case kind::NAMESPACE:
      return a.d == b.d;
    case kind::FUNCTION:
      return a.fn == b.fn && a.macro == b.macro;
    default:
      return false;
  }
}

const char* kind_name(kind k) {
  switch (k) {
    case kind::UNDEFINED:
      return "undefined";
    case kind::NONE:
      return "none";
    case kind::BOOL:
      return "bool";
    case kind::INT:
      return "int";
    case kind::FLOAT:
      return "float";
    case kind::STRING:
      return "string";
    case kind::LIST:
      return "list";
    case kind::DICT:
      return "dict";
    case kind::NAMESPACE:
      return "namespace";
    case kind::FUNCTION:
      return "function";
  }
  return "?";
}

std::vector<std::string_view> code_points(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    if (i + n > s.size()) n = 1;  // a truncated sequence counts byte by byte rather than reading past the end
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace moxi::formats::chat_template_detail
