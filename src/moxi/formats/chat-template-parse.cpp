// Chat template lexer and parser: Jinja2 syntax (with transformers' trim_blocks and lstrip_blocks) into the
// tree of chat-template-ast.h. Precedence and whitespace rules follow Jinja2's own lexer and parser so that
// templates written against Python render the same here.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>
#include <utility>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/formats/chat-template-ast.h"

namespace moxi::formats::chat_template_detail {
namespace {

enum class tk : uint8_t {
  TEXT,
  VAR_BEGIN,
  VAR_END,
  BLOCK_BEGIN,
  BLOCK_END,
  NAME,
  STRING,
  INT,
  FLOAT,
  OP,
  END
};

struct token {
  tk kind;
  std::string text;
  int line;
};

class lexer {
 public:
  lexer(const std::string& src, const std::string& source) : src_(src), source_(source) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src.size(); ++i) {
      if (src[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<token> run() {
    // Jinja drops one trailing newline of the template (keep_trailing_newline=False).
    std::string_view s = src_;
    if (!s.empty() && s.back() == '\n') s.remove_suffix(1);
    size_t pos = 0;
    bool strip_next = false;  // the previous tag ended with '-'
    while (pos < s.size()) {
      size_t open = find_open(s, pos);
      std::string text(s.substr(pos, open - pos));
      if (strip_next) {
        size_t first = text.find_first_not_of(" \t\r\n\f\v");
        text.erase(0, first == std::string::npos ? text.size() : first);
      }
      strip_next = false;
      if (open == s.size()) {
        push_text(std::move(text), pos);
        break;
      }
      char type = s[open + 1];
      bool minus = open + 2 < s.size() && s[open + 2] == '-';
      bool plus = open + 2 < s.size() && s[open + 2] == '+';
      if (minus) {
        size_t end = text.find_last_not_of(" \t\r\n\f\v");
        text.erase(end == std::string::npos ? 0 : end + 1);
      } else if ((type == '%' || type == '#') && !plus) {
        lstrip_block(text, pos);
      }
      push_text(std::move(text), pos);
      size_t body = open + 2 + (minus || plus ? 1 : 0);
      int line = line_of(open);
      if (type == '#') {
        size_t close = s.find("#}", body);
        if (close == std::string_view::npos) fail(line, "unterminated comment");
        strip_next = close > body && s[close - 1] == '-';
        pos = close + 2;
        if (!strip_next && pos < s.size() && s[pos] == '\n') ++pos;  // trim_blocks
        continue;
      }
      tokens_.push_back({type == '{' ? tk::VAR_BEGIN : tk::BLOCK_BEGIN, "", line});
      pos = lex_tag(s, body, type == '{' ? '}' : '%', strip_next);
      tokens_.push_back({type == '{' ? tk::VAR_END : tk::BLOCK_END, "", line_of(pos - 1)});
      if (type == '%' && !strip_next && pos < s.size() && s[pos] == '\n') ++pos;  // trim_blocks
    }
    tokens_.push_back({tk::END, "", line_of(s.size())});
    return std::move(tokens_);
  }

 private:
  static size_t find_open(std::string_view s, size_t pos) {
    for (size_t i = pos; i + 1 < s.size(); ++i) {
      if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')) return i;
    }
    return s.size();
  }

  // lstrip_blocks, as Jinja's lexer does it: whitespace between the last line start and a block or
  // comment tag goes, when nothing else is on that line before the tag.
  void lstrip_block(std::string& text, size_t text_pos) const {
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    bool line_starting = text_pos == 0 || src_[text_pos - 1] == '\n';
    if (l_pos == 0 && !line_starting) return;
    for (size_t i = l_pos; i < text.size(); ++i) {
      if (!std::isspace(static_cast<unsigned char>(text[i]))) return;
    }
    text.erase(l_pos);
  }

  void push_text(std::string text, size_t pos) {
    if (!text.empty()) tokens_.push_back({tk::TEXT, std::move(text), line_of(pos)});
  }

  // Line numbers by binary search over the line starts: counting newlines per token would make a large
  // hostile template quadratic.
  int line_of(size_t pos) const {
    return static_cast<int>(std::upper_bound(line_starts_.begin(), line_starts_.end(), pos) -
                            line_starts_.begin());
  }

  [[noreturn]] void fail(int line, const std::string& msg) const {
    throw error("chat template " + source_ + ":" + std::to_string(line) + ": " + msg);
  }

  // Lexes the inside of {{ }} or {% %} from `pos`; returns the position after the closing delimiter.
  size_t lex_tag(std::string_view s, size_t pos, char closer, bool& strip_after) {
    int depth = 0;  // brackets: a '}' that closes a dict literal is not the tag's end
    while (true) {
      while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
      if (pos >= s.size()) fail(line_of(pos), "unterminated tag");
      int line = line_of(pos);
      char c = s[pos];
      if (depth == 0 && c == '-' && pos + 2 < s.size() && s[pos + 1] == closer && s[pos + 2] == '}') {
        strip_after = true;
        return pos + 3;
      }
      if (depth == 0 && c == closer && pos + 1 < s.size() && s[pos + 1] == '}') {
        strip_after = false;
        return pos + 2;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos;
        while (e < s.size() && (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
        tokens_.push_back({tk::NAME, std::string(s.substr(pos, e - pos)), line});
        pos = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t e = pos;
        bool is_float = false;
        while (e < s.size() && (std::isdigit(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
        if (e + 1 < s.size() && s[e] == '.' && std::isdigit(static_cast<unsigned char>(s[e + 1]))) {
          is_float = true;
          ++e;
          while (e < s.size() && std::isdigit(static_cast<unsigned char>(s[e]))) ++e;
        }
        if (e < s.size() && (s[e] == 'e' || s[e] == 'E')) {
          size_t f = e + 1;
          if (f < s.size() && (s[f] == '+' || s[f] == '-')) ++f;
          if (f < s.size() && std::isdigit(static_cast<unsigned char>(s[f]))) {
            is_float = true;
            e = f;
            while (e < s.size() && std::isdigit(static_cast<unsigned char>(s[e]))) ++e;
          }
        }
        std::string num(s.substr(pos, e - pos));
        num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
        tokens_.push_back({is_float ? tk::FLOAT : tk::INT, num, line});
        pos = e;
      } else if (c == '\'' || c == '"') {
        pos = lex_string(s, pos, line);
      } else {
        static const char* const kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                           "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                           "]",  "{",  "}",  ",",  ".",  ":",  "|"};
        const char* op = nullptr;
        for (const char* o : kOps) {
          if (s.substr(pos, std::char_traits<char>::length(o)) == o) {
            op = o;
            break;
          }
        }
        if (!op) fail(line, std::string("unexpected character '") + c + "'");
        std::string o(op);
        if (o == "(" || o == "[" || o == "{") ++depth;
        if (o == ")" || o == "]" || o == "}") --depth;
        if (depth < 0) fail(line, "unbalanced '" + o + "'");
        tokens_.push_back({tk::OP, o, line});
        pos += o.size();
      }
    }
  }

  size_t lex_string(std::string_view s, size_t pos, int line) {
    char q = s[pos++];
    std::string out;
    while (true) {
      if (pos >= s.size()) fail(line, "unterminated string");
      char c = s[pos++];
      if (c == q) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos >= s.size()) fail(line, "unterminated string");
      char e = s[pos++];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case '0':
          out += '\0';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case '\n':
          break;
        case 'u':
        case 'x': {
          size_t n = e == 'u' ? 4 : 2;
          if (pos + n > s.size()) fail(line, "bad escape in string");
          uint32_t cp = 0;
          auto r = std::from_chars(s.data() + pos, s.data() + pos + n, cp, 16);
          if (r.ptr != s.data() + pos + n) fail(line, "bad escape in string");
          pos += n;
          append_utf8(out, cp);
          break;
        }
        default:  // Python keeps unknown escapes as written
          out += '\\';
          out += e;
      }
    }
    tokens_.push_back({tk::STRING, std::move(out), line});
    return pos;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  const std::string& src_;
  const std::string& source_;
  std::vector<size_t> line_starts_;
  std::vector<token> tokens_;
};

class parser {
 public:
  parser(std::vector<token> toks, const std::string& source, const chat_template_limits& limits)
      : t_(std::move(toks)), source_(source), limits_(limits) {}

  block parse_all() {
    std::vector<std::string> ends;
    block b = parse_block({}, ends);
    if (peek().kind != tk::END) fail("unexpected '" + peek().text + "'");
    return b;
  }

 private:
  const token& peek(size_t ahead = 0) const { return t_[std::min(p_ + ahead, t_.size() - 1)]; }
  const token& next() {
    const token& tok = t_[p_];
    if (p_ + 1 < t_.size()) ++p_;
    return tok;
  }
  bool at_op(const char* op) const { return peek().kind == tk::OP && peek().text == op; }
  bool at_name(const char* n) const { return peek().kind == tk::NAME && peek().text == n; }
  bool accept_op(const char* op) {
    if (!at_op(op)) return false;
    next();
    return true;
  }
  bool accept_name(const char* n) {
    if (!at_name(n)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(std::string("expected '") + op + "', got " + describe(peek()));
  }
  std::string expect_name() {
    if (peek().kind != tk::NAME) fail("expected a name, got " + describe(peek()));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != tk::BLOCK_END) fail("expected end of block tag, got " + describe(peek()));
    next();
  }
  static std::string describe(const token& tok) {
    switch (tok.kind) {
      case tk::END:
        return "end of template";
      case tk::BLOCK_END:
        return "'%}'";
      case tk::VAR_END:
        return "'}}'";
      case tk::TEXT:
        return "text";
      default:
        return "'" + tok.text + "'";
    }
  }
  [[noreturn]] void fail(const std::string& msg) const {
    throw error("chat template " + source_ + ":" + std::to_string(peek().line) + ": " + msg);
  }

  struct depth_guard {
    parser& p;
    explicit depth_guard(parser& pp) : p(pp) {
      if (++p.depth_ > p.limits_.max_nesting) p.fail("template nests too deeply");
    }
    ~depth_guard() { --p.depth_; }
  };

  // Parses statements until a block tag whose keyword is in `stop`; leaves that keyword as the next
  // token (after BLOCK_BEGIN) and reports it in `ended`.
  block parse_block(const std::vector<std::string>& stop, std::vector<std::string>& ended) {
    depth_guard g(*this);
    block out;
    while (true) {
      const token& tok = peek();
      if (tok.kind == tk::END) {
        if (!stop.empty()) fail("missing '{% " + stop.front() + " %}'");
        return out;
      }
      if (tok.kind == tk::TEXT) {
        auto s = std::make_unique<stmt>();
        s->kind = st::TEXT;
        s->line = tok.line;
        s->text = next().text;
        out.push_back(std::move(s));
      } else if (tok.kind == tk::VAR_BEGIN) {
        auto s = std::make_unique<stmt>();
        s->kind = st::OUTPUT;
        s->line = next().line;
        s->exprs.push_back(parse_expr());
        if (peek().kind != tk::VAR_END) fail("expected '}}', got " + describe(peek()));
        next();
        out.push_back(std::move(s));
      } else if (tok.kind == tk::BLOCK_BEGIN) {
        const token& kw = peek(1);
        if (kw.kind == tk::NAME && std::find(stop.begin(), stop.end(), kw.text) != stop.end()) {
          next();
          ended.push_back(kw.text);
          return out;
        }
        next();
        out.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(tok));
      }
    }
  }

  stmt_ptr parse_statement() {
    int line = peek().line;
    std::string kw = expect_name();
    auto s = std::make_unique<stmt>();
    s->line = line;
    std::vector<std::string> ended;
    if (kw == "if") {
      s->kind = st::IF;
      s->exprs.push_back(parse_expr());
      expect_block_end();
      while (true) {
        ended.clear();
        s->bodies.push_back(parse_block({"elif", "else", "endif"}, ended));
        next();  // the keyword
        if (ended[0] == "elif") {
          s->exprs.push_back(parse_expr());
          expect_block_end();
        } else if (ended[0] == "else") {
          expect_block_end();
          ended.clear();
          s->bodies.push_back(parse_block({"endif"}, ended));
          next();
          expect_block_end();
          break;
        } else {
          expect_block_end();
          break;
        }
      }
    } else if (kw == "for") {
      s->kind = st::FOR;
      s->targets.push_back(expect_name());
      while (accept_op(",")) s->targets.push_back(expect_name());
      if (!accept_name("in")) fail("expected 'in' in for loop");
      s->exprs.push_back(parse_expr(/*no_cond=*/true));
      if (accept_name("if")) s->exprs.push_back(parse_expr(true));
      if (accept_name("recursive")) fail("recursive loops are not supported");
      expect_block_end();
      s->bodies.push_back(parse_block({"else", "endfor"}, ended));
      next();
      if (ended[0] == "else") {
        expect_block_end();
        ended.clear();
        s->bodies.push_back(parse_block({"endfor"}, ended));
        next();
      }
      expect_block_end();
    } else if (kw == "set") {
      s->targets.push_back(expect_name());
      if (accept_op(".")) {
        s->attr_target = true;
        s->targets.push_back(expect_name());
      } else {
        while (accept_op(",")) s->targets.push_back(expect_name());
      }
      if (accept_op("=")) {
        s->kind = st::SET;
        s->exprs.push_back(parse_tuple_expr());
        expect_block_end();
      } else {
        if (s->targets.size() != 1 || s->attr_target) fail("a set block assigns one name");
        s->kind = st::SET_BLOCK;
        expect_block_end();
        s->bodies.push_back(parse_block({"endset"}, ended));
        next();
        expect_block_end();
      }
    } else if (kw == "macro") {
      s->kind = st::MACRO;
      s->name = expect_name();
      expect_op("(");
      while (!at_op(")")) {
        s->targets.push_back(expect_name());
        s->exprs.push_back(accept_op("=") ? parse_expr() : nullptr);
        if (!accept_op(",")) break;
      }
      expect_op(")");
      expect_block_end();
      s->bodies.push_back(parse_block({"endmacro"}, ended));
      next();
      expect_block_end();
    } else if (kw == "break" || kw == "continue") {
      s->kind = kw == "break" ? st::BREAK : st::CONTINUE;
      expect_block_end();
    } else if (kw == "generation" || kw == "filter_none") {
      // transformers' AssistantTracker marks assistant text with {% generation %}; rendering keeps it.
      s->kind = st::BLOCK;
      expect_block_end();
      s->bodies.push_back(parse_block({"endgeneration"}, ended));
      next();
      expect_block_end();
    } else {
      fail("unsupported statement '" + kw + "'");
    }
    return s;
  }

  // ---- expressions (Jinja2 precedence) ----

  expr_ptr make(ex k, int line) {
    auto e = std::make_unique<expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // `a, b` without brackets is a tuple in {% set %}.
  expr_ptr parse_tuple_expr() {
    int line = peek().line;
    expr_ptr first = parse_expr();
    if (!at_op(",")) return first;
    auto t = make(ex::TUPLE, line);
    t->args.push_back(std::move(first));
    while (accept_op(",")) {
      if (peek().kind == tk::BLOCK_END) break;
      t->args.push_back(parse_expr());
    }
    return t;
  }

  expr_ptr parse_expr(bool no_cond = false) {
    depth_guard g(*this);
    int line = peek().line;
    expr_ptr e = parse_or();
    if (no_cond) return e;
    while (at_name("if")) {
      next();
      auto c = make(ex::COND, line);
      c->args.push_back(std::move(e));
      c->args.push_back(parse_or());
      if (accept_name("else")) c->args.push_back(parse_expr());
      e = std::move(c);
    }
    return e;
  }

  expr_ptr parse_or() {
    expr_ptr l = parse_and();
    while (at_name("or")) {
      int line = next().line;
      auto e = make(ex::OR, line);
      e->args.push_back(std::move(l));
      e->args.push_back(parse_and());
      l = std::move(e);
    }
    return l;
  }

  expr_ptr parse_and() {
    expr_ptr l = parse_not();
    while (at_name("and")) {
      int line = next().line;
      auto e = make(ex::AND, line);
      e->args.push_back(std::move(l));
      e->args.push_back(parse_not());
      l = std::move(e);
    }
    return l;
  }

  expr_ptr parse_not() {
    if (at_name("not")) {
      depth_guard g(*this);
      int line = next().line;
      auto e = make(ex::NOT, line);
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  expr_ptr parse_compare() {
    int line = peek().line;
    expr_ptr l = parse_math1();
    while (true) {
      std::string op;
      if (peek().kind == tk::OP && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                    peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (at_name("in")) {
        next();
        op = "in";
      } else if (at_name("not") && peek(1).kind == tk::NAME && peek(1).text == "in") {
        next();
        next();
        op = "not in";
      } else {
        return l;
      }
      auto e = make(ex::COMPARE, line);
      e->name = op;
      e->args.push_back(std::move(l));
      e->args.push_back(parse_math1());
      l = std::move(e);
    }
  }

  expr_ptr binary(std::string op, expr_ptr l, expr_ptr r, int line) {
    auto e = make(ex::BINARY, line);
    e->name = std::move(op);
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  expr_ptr parse_math1() {
    expr_ptr l = parse_concat();
    while (at_op("+") || at_op("-")) {
      const token& op = next();
      l = binary(op.text, std::move(l), parse_concat(), op.line);
    }
    return l;
  }

  expr_ptr parse_concat() {
    expr_ptr l = parse_math2();
    while (at_op("~")) {
      int line = next().line;
      l = binary("~", std::move(l), parse_math2(), line);
    }
    return l;
  }

  expr_ptr parse_math2() {
    expr_ptr l = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const token& op = next();
      l = binary(op.text, std::move(l), parse_pow(), op.line);
    }
    return l;
  }

  expr_ptr parse_pow() {
    expr_ptr l = parse_unary(true);
    while (at_op("**")) {
      int line = next().line;
      l = binary("**", std::move(l), parse_unary(true), line);
    }
    return l;
  }

  expr_ptr parse_unary(bool with_filter) {
    depth_guard g(*this);
    int line = peek().line;
    expr_ptr e;
    if (at_op("-") || at_op("+")) {
      bool neg = next().text == "-";
      e = make(neg ? ex::NEG : ex::POS, line);
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_postfix(parse_primary());
    }
    if (with_filter) e = parse_filters(std::move(e));
    return e;
  }

  expr_ptr parse_primary() {
    const token& tok = peek();
    int line = tok.line;
    if (tok.kind == tk::NAME) {
      std::string n = next().text;
      if (n == "true" || n == "True") return literal(value::boolean(true), line);
      if (n == "false" || n == "False") return literal(value::boolean(false), line);
      if (n == "none" || n == "None") return literal(value::none(), line);
      auto e = make(ex::NAME, line);
      e->name = n;
      return e;
    }
    if (tok.kind == tk::STRING) {
      std::string sv = next().text;
      while (peek().kind == tk::STRING) sv += next().text;  // adjacent literals concatenate
      return literal(value::string(std::move(sv)), line);
    }
    if (tok.kind == tk::INT) {
      int64_t v = 0;
      const std::string& txt = next().text;
      auto r = std::from_chars(txt.data(), txt.data() + txt.size(), v);
      if (r.ec != std::errc()) fail("integer literal out of range");
      return literal(value::integer(v), line);
    }
    if (tok.kind == tk::FLOAT) return literal(value::floating(std::stod(next().text)), line);
    if (accept_op("(")) {
      if (accept_op(")")) return make(ex::TUPLE, line);
      expr_ptr first = parse_expr();
      if (accept_op(")")) return first;
      auto t = make(ex::TUPLE, line);
      t->args.push_back(std::move(first));
      while (accept_op(",")) {
        if (at_op(")")) break;
        t->args.push_back(parse_expr());
      }
      expect_op(")");
      return t;
    }
    if (accept_op("[")) {
      auto l = make(ex::LIST, line);
      while (!at_op("]")) {
        l->args.push_back(parse_expr());
        if (!accept_op(",")) break;
      }
      expect_op("]");
      return l;
    }
    if (accept_op("{")) {
      auto d = make(ex::DICT, line);
      while (!at_op("}")) {
        d->args.push_back(parse_expr());
        expect_op(":");
        d->args.push_back(parse_expr());
        if (!accept_op(",")) break;
      }
      expect_op("}");
      return d;
    }
    fail("unexpected " + describe(tok));
  }

  expr_ptr literal(value v, int line) {
    auto e = make(ex::LITERAL, line);
    e->lit = std::move(v);
    return e;
  }

  expr_ptr parse_postfix(expr_ptr e) {
    while (true) {
      int line = peek().line;
      if (accept_op(".")) {
        auto g = make(ex::GETATTR, line);
        if (peek().kind == tk::INT) {  // x.0 is x[0] in Jinja
          g->kind = ex::GETITEM;
          g->args.push_back(std::move(e));
          g->args.push_back(literal(value::integer(std::stoll(next().text)), line));
        } else {
          g->name = expect_name();
          g->args.push_back(std::move(e));
        }
        e = std::move(g);
      } else if (accept_op("[")) {
        e = parse_subscript(std::move(e), line);
      } else if (at_op("(")) {
        e = parse_call(std::move(e), ex::CALL, "");
      } else {
        return e;
      }
    }
  }

  expr_ptr parse_subscript(expr_ptr obj, int line) {
    expr_ptr parts[3];
    int n = 0;
    bool is_slice = false;
    while (true) {
      if (at_op(":")) {
        next();
        is_slice = true;
        if (++n > 2) fail("bad slice");
        continue;
      }
      if (at_op("]")) break;
      if (parts[n]) fail("bad subscript");
      parts[n] = parse_expr();
    }
    expect_op("]");
    if (!is_slice) {
      if (!parts[0]) fail("empty subscript");
      auto g = make(ex::GETITEM, line);
      g->args.push_back(std::move(obj));
      g->args.push_back(std::move(parts[0]));
      return g;
    }
    auto s = make(ex::SLICE, line);
    s->args.push_back(std::move(obj));
    for (auto& p : parts) s->args.push_back(std::move(p));
    return s;
  }

  // Call arguments; positional first, then keyword (name=value).
  void parse_args(expr& e) {
    expect_op("(");
    std::vector<expr_ptr> kw;
    while (!at_op(")")) {
      if (peek().kind == tk::NAME && peek(1).kind == tk::OP && peek(1).text == "=") {
        e.kwarg_names.push_back(next().text);
        next();
        kw.push_back(parse_expr());
      } else {
        if (!kw.empty()) fail("positional argument after keyword argument");
        e.args.push_back(parse_expr());
      }
      if (!accept_op(",")) break;
    }
    expect_op(")");
    for (auto& k : kw) e.args.push_back(std::move(k));
  }

  expr_ptr parse_call(expr_ptr callee, ex k, std::string name) {
    depth_guard g(*this);
    auto c = make(k, peek().line);
    c->name = std::move(name);
    c->args.push_back(std::move(callee));
    parse_args(*c);
    return c;
  }

  // Unknown filters and tests fail when the template is loaded, as Jinja's compiler makes them fail,
  // rather than only on the conversation that happens to reach them.
  static bool known_filter(const std::string& n) {
    static const char* const kFilters[] = {
        "safe",  "e",      "escape", "forceescape", "default",    "d",          "trim",     "length",
        "count", "tojson", "string", "upper",       "lower",      "capitalize", "title",    "replace",
        "join",  "first",  "last",   "list",        "reverse",    "sort",       "unique",   "items",
        "int",   "float",  "abs",    "round",       "indent",     "sum",        "min",      "max",
        "map",   "select", "reject", "selectattr",  "rejectattr", "dictsort",   "wordcount"};
    return std::find(std::begin(kFilters), std::end(kFilters), n) != std::end(kFilters);
  }
  static bool known_test(const std::string& n) {
    static const char* const kTests[] = {
        "defined",     "undefined", "none",    "boolean",  "true",        "false",    "integer", "float",
        "number",      "string",    "mapping", "iterable", "sequence",    "callable", "odd",     "even",
        "divisibleby", "eq",        "equalto", "==",       "ne",          "!=",       "lt",      "lessthan",
        "<",           "le",        "<=",      "gt",       "greaterthan", ">",        "ge",      ">=",
        "in",          "sameas",    "lower",   "upper"};
    return std::find(std::begin(kTests), std::end(kTests), n) != std::end(kTests);
  }

  expr_ptr parse_filters(expr_ptr e) {
    while (true) {
      int line = peek().line;
      if (accept_op("|")) {
        std::string n = expect_name();
        while (accept_op(".")) n += "." + expect_name();
        if (!known_filter(n)) fail("unknown filter '" + n + "'");
        if (at_op("(")) {
          e = parse_call(std::move(e), ex::FILTER, n);
        } else {
          auto f = make(ex::FILTER, line);
          f->name = n;
          f->args.push_back(std::move(e));
          e = std::move(f);
        }
      } else if (at_name("is")) {
        next();
        bool neg = accept_name("not");
        auto t = make(ex::TEST, line);
        t->negated = neg;
        if (peek().kind == tk::NAME) {
          t->name = next().text;
        } else if (peek().kind == tk::OP &&
                   (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
                    peek().text == "<=" || peek().text == ">=")) {
          t->name = next().text;
        } else {
          fail("expected a test name after 'is'");
        }
        if (!known_test(t->name)) fail("unknown test '" + t->name + "'");
        t->args.push_back(std::move(e));
        if (at_op("(")) {
          parse_args(*t);
        } else if (peek().kind == tk::STRING || peek().kind == tk::INT || peek().kind == tk::FLOAT ||
                   (peek().kind == tk::NAME && !at_name("and") && !at_name("or") && !at_name("else") &&
                    !at_name("if") && !at_name("in") && !at_name("is") && !at_name("not"))) {
          // `x is divisibleby 3`, `x is sameas none`: one argument without brackets
          t->args.push_back(parse_primary());
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<token> t_;
  size_t p_ = 0;
  const std::string& source_;
  const chat_template_limits& limits_;
  int depth_ = 0;
};

}  // namespace

std::unique_ptr<program> parse_template(const std::string& text, const std::string& source,
                                        const chat_template_limits& limits) {
  if (text.size() > limits.max_template_bytes) {
    throw error("chat template " + source + ": template is " + std::to_string(text.size()) +
                " bytes, over the limit of " + std::to_string(limits.max_template_bytes));
  }
  auto prog = std::make_unique<program>();
  prog->source = source;
  lexer lx(text, source);
  parser ps(lx.run(), source, limits);
  prog->body = ps.parse_all();
  return prog;
}

}  // namespace moxi::formats::chat_template_detail
