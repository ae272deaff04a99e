// Internals of the chat template interpreter (chat-template.h): the runtime value model (Python/Jinja
// semantics over JSON-like data), the syntax tree the parser builds and the evaluator walks.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moxi/formats/chat-template.h"

namespace moxi::formats::chat_template_detail {

struct value;
struct stmt;
using list_ptr = std::shared_ptr<std::vector<value>>;

// Dicts keep insertion order, as Python's do (tojson and items() show it); keys are strings, as in JSON.
struct dict {
  std::vector<std::pair<std::string, value>> items;
  const value* find(std::string_view key) const;
  value* find(std::string_view key);
  void set(const std::string& key, value v);
};
using dict_ptr = std::shared_ptr<dict>;

enum class builtin : uint8_t { NONE, RANGE, NAMESPACE, RAISE_EXCEPTION, DICT, STRFTIME_NOW, MACRO };

enum class kind : uint8_t { UNDEFINED, NONE, BOOL, INT, FLOAT, STRING, LIST, DICT, NAMESPACE, FUNCTION };

struct value {
  kind k = kind::UNDEFINED;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  list_ptr l;  // LIST (tuples too)
  dict_ptr d;  // DICT and NAMESPACE (a namespace is a dict whose attributes `set` may assign)
  builtin fn = builtin::NONE;
  const stmt* macro = nullptr;  // FUNCTION with fn == MACRO

  static value none() { return value{kind::NONE}; }
  static value boolean(bool v) {
    value r{kind::BOOL};
    r.b = v;
    return r;
  }
  static value integer(int64_t v) {
    value r{kind::INT};
    r.i = v;
    return r;
  }
  static value floating(double v) {
    value r{kind::FLOAT};
    r.f = v;
    return r;
  }
  static value string(std::string v) {
    value r{kind::STRING};
    r.s = std::move(v);
    return r;
  }
  static value list(std::vector<value> v = {}) {
    value r{kind::LIST};
    r.l = std::make_shared<std::vector<value>>(std::move(v));
    return r;
  }
  static value new_dict(kind k = kind::DICT) {
    value r{k};
    r.d = std::make_shared<dict>();
    return r;
  }
  static value function(builtin f, const stmt* m = nullptr) {
    value r{kind::FUNCTION};
    r.fn = f;
    r.macro = m;
    return r;
  }
  bool is_number() const { return k == kind::INT || k == kind::FLOAT || k == kind::BOOL; }
  bool is_mapping() const { return k == kind::DICT || k == kind::NAMESPACE; }
};

value from_json(const nlohmann::ordered_json& j);
bool truthy(const value& v);
// Python's str(): what {{ }} prints (undefined prints nothing).
std::string to_str(const value& v);
// Python's repr(), used inside str() of lists and dicts.
std::string to_repr(const value& v);
// transformers' tojson: json.dumps(ensure_ascii=False) separators, optional indent and sort_keys.
std::string to_json(const value& v, int indent, bool sort_keys, int depth = 0);
bool equals(const value& a, const value& b);
const char* kind_name(kind k);
// UTF-8 helpers: Python strings index and measure code points, not bytes.
std::vector<std::string_view> code_points(std::string_view s);

// ---- syntax tree ----

enum class ex : uint8_t {
  LITERAL,
  NAME,
  LIST,
  TUPLE,
  DICT,
  GETATTR,
  GETITEM,
  SLICE,
  CALL,
  FILTER,
  TEST,
  NEG,
  POS,
  NOT,
  AND,
  OR,
  BINARY,
  COMPARE,
  COND,
};

struct expr {
  ex kind = ex::LITERAL;
  int line = 0;
  std::string name;      // NAME, GETATTR attribute, FILTER/TEST name, BINARY/COMPARE operator
  value lit;             // LITERAL
  bool negated = false;  // TEST: `is not`
  // Operands: GETATTR [obj]; GETITEM [obj, idx]; SLICE [obj, start?, stop?, step?] (null when absent);
  // CALL [callee, args...]; FILTER/TEST [operand, args...]; DICT [k0, v0, k1, v1, ...];
  // COND [then, cond, else?].
  std::vector<std::unique_ptr<expr>> args;
  std::vector<std::string> kwarg_names;  // CALL/FILTER/TEST: the last kwarg_names.size() args are keyword
};
using expr_ptr = std::unique_ptr<expr>;

enum class st : uint8_t { TEXT, OUTPUT, IF, FOR, SET, SET_BLOCK, MACRO, BREAK, CONTINUE, BLOCK };

struct stmt {
  st kind = st::TEXT;
  int line = 0;
  std::string text;  // TEXT
  std::vector<std::string>
      targets;                  // FOR loop variables; SET names (or [namespace, attribute]); MACRO params
  bool attr_target = false;     // SET ns.attr = ...
  std::vector<expr_ptr> exprs;  // OUTPUT [e]; IF conditions; FOR [iter, filter?]; SET [value]; MACRO defaults
  std::vector<std::vector<std::unique_ptr<stmt>>> bodies;  // IF: one per condition (+ else); FOR: body, else
  std::string name;                                        // MACRO name
};
using stmt_ptr = std::unique_ptr<stmt>;
using block = std::vector<stmt_ptr>;

struct program {
  block body;
  std::string source;  // for error messages
};

// Parses the template text into a program; errors name `source` and the line.
std::unique_ptr<program> parse_template(const std::string& text, const std::string& source,
                                        const chat_template_limits& limits);

// Runs a program over the given variables.
std::string render_program(const program& prog, const dict& globals, const chat_template_limits& limits);

}  // namespace moxi::formats::chat_template_detail
