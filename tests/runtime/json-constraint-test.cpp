// The JSON automaton against independent references: nlohmann::json's parser decides which of thousands of
// generated and mutated texts are JSON (the automaton must accept exactly those), every prefix of a valid
// text must be accepted, and every prefix the automaton accepts must be completable (a completion it leads
// to is checked by nlohmann). Schema mode: values generated from a schema by the test are accepted, and
// mutated ones are accepted iff a JSON Schema checker written here (integers, code-point lengths, exact
// enum membership; no floating point in the decisions) says they are valid. Token masks are compared with
// feeding each token alone.
#include "moxi/runtime/json-constraint.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>

#include "moxi/base/error.h"
#include "moxi/runtime/sampler.h"

namespace {

using moxi::runtime::json_matcher;
using nlohmann::json;
using nlohmann::ordered_json;

bool matches(const std::shared_ptr<const moxi::runtime::json_grammar>& g, const std::string& s) {
  json_matcher m(g);
  return m.feed(s) && m.accepting();
}

// ---- random JSON text ----

struct text_gen {
  std::mt19937_64 rng;
  explicit text_gen(uint64_t seed) : rng(seed) {}
  int pick(int n) { return int(rng() % uint64_t(n)); }

  std::string ws() {
    static const char* kWs[] = {"", "", "", " ", "\n", "\t", "\r\n  ", "  "};
    return kWs[pick(8)];
  }
  std::string string_body() {
    std::string s;
    const int n = pick(8);
    for (int i = 0; i < n; ++i) {
      switch (pick(9)) {
        case 0:
          s += "\\n";
          break;
        case 1:
          s += "\\\"";
          break;
        case 2: {
          static const char* kU[] = {"\\u0041", "\\u00e9", "\\ud83d\\ude00", "\\u0000", "\\uFFFF", "\\u20AC"};
          s += kU[pick(6)];
          break;
        }
        case 3:
          s += "\xc3\xa9";  // é
          break;
        case 4:
          s += "\xe2\x82\xac";  // €
          break;
        case 5:
          s += "\xf0\x9f\x98\x80";  // 😀
          break;
        case 6:
          s += "\\/\\\\\\b\\f\\r\\t";
          break;
        default:
          s += char('a' + pick(26));
      }
    }
    return s;
  }
  std::string number() {
    std::string s;
    if (pick(3) == 0) s += '-';
    if (pick(4) == 0) {
      s += '0';
    } else {
      s += char('1' + pick(9));
      for (int i = pick(6); i > 0; --i) s += char('0' + pick(10));
    }
    if (pick(3) == 0) {
      s += '.';
      for (int i = pick(4) + 1; i > 0; --i) s += char('0' + pick(10));
    }
    if (pick(4) == 0) {
      s += "eE"[pick(2)];
      if (pick(2)) s += "+-"[pick(2)];
      s += char('0' + pick(10));
      if (pick(2)) s += char('0' + pick(10));
    }
    return s;
  }
  std::string value(int depth) {
    const int k = pick(depth > 4 ? 5 : 7);
    switch (k) {
      case 0:
        return "\"" + string_body() + "\"";
      case 1:
        return number();
      case 2:
        return std::string(kLit[pick(3)]);
      case 3:
      case 4:
        return pick(2) ? "\"" + string_body() + "\"" : number();
      case 5: {
        std::string s = "[" + ws();
        const int n = pick(4);
        for (int i = 0; i < n; ++i) s += (i ? "," + ws() : "") + value(depth + 1) + ws();
        return s + "]";
      }
      default:
        return object(depth);
    }
  }
  std::string object(int depth) {
    std::string s = "{" + ws();
    const int n = pick(4);
    for (int i = 0; i < n; ++i)
      s += (i ? "," + ws() : "") + "\"" + string_body() + "\"" + ws() + ":" + ws() + value(depth + 1) + ws();
    return s + "}";
  }
  std::string mutate(std::string s) {
    static const std::string kBytes =
        std::string("{}[],:\"\\ 0-.eE+tfnu\x01\x7f") + "\xc3\xa9\x80\xff\xed\xa0";
    const int ops = 1 + pick(2);
    for (int i = 0; i < ops; ++i) {
      const size_t at = s.empty() ? 0 : size_t(pick(int(s.size())));
      switch (pick(4)) {
        case 0:
          if (!s.empty()) s.erase(at, 1);
          break;
        case 1:
          s.insert(at, 1, kBytes[size_t(pick(int(kBytes.size())))]);
          break;
        case 2:
          if (!s.empty()) s[at] = kBytes[size_t(pick(int(kBytes.size())))];
          break;
        default:
          s.resize(at);
      }
    }
    return s;
  }
  static constexpr const char* kLit[] = {"true", "false", "null"};
};

// An exponent of 3+ digits can overflow a double, which nlohmann::json refuses as a number out of range:
// a range check, not grammar. Mutations that make one are left out of the comparison.
bool has_long_exponent(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != 'e' && s[i] != 'E') continue;
    size_t j = i + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    size_t d = 0;
    while (j + d < s.size() && s[j + d] >= '0' && s[j + d] <= '9') ++d;
    if (d >= 3) return true;
  }
  return false;
}

// A completion of an accepted prefix: bytes tried in a fixed order (closers first), the first one the
// automaton takes is appended, until it accepts. The result is judged by nlohmann, not by the automaton.
std::optional<std::string> complete(const std::shared_ptr<const moxi::runtime::json_grammar>& g,
                                    const std::string& prefix) {
  json_matcher m(g);
  if (!m.feed(prefix)) return std::nullopt;
  static const std::string kOrder = std::string("\"}]0:\\uDCnlreas") + "\x80\x90\xa0\xbf";
  std::string out = prefix;
  for (int i = 0; i < 400 && !m.accepting(); ++i) {
    bool moved = false;
    for (char ch : kOrder) {
      if (m.feed(std::string(1, ch))) {
        out += ch;
        moved = true;
        break;
      }
    }
    if (!moved) return std::nullopt;
  }
  if (!m.accepting()) return std::nullopt;
  return out;
}

TEST(json_constraint, AcceptsExactlyWhatNlohmannAccepts) {
  const auto any = moxi::runtime::json_any_grammar();
  const auto obj = moxi::runtime::json_object_grammar();
  text_gen gen(1);
  int valid = 0, invalid = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s = gen.ws() + gen.value(0) + gen.ws();
    if (i % 2) s = gen.mutate(s);
    if (has_long_exponent(s)) continue;
    const bool ref = json::accept(s);
    ASSERT_EQ(matches(any, s), ref) << "text: " << s;
    const bool ref_obj = ref && json::parse(s).is_object();
    ASSERT_EQ(matches(obj, s), ref_obj) << "text: " << s;
    (ref ? valid : invalid) += 1;
  }
  // Both sides of the comparison are exercised.
  EXPECT_GT(valid, 8000);
  EXPECT_GT(invalid, 3000);
}

TEST(json_constraint, HandPickedEdgeCases) {
  const auto any = moxi::runtime::json_any_grammar();
  for (const std::string s : {"0",
                              "-0",
                              "01",
                              "1.",
                              ".5",
                              "1e",
                              "1e+",
                              "-",
                              "--1",
                              "1.5e-3",
                              "\"\\ud800\"",
                              "\"\\udc00\"",
                              "\"\\ud800\\udc00\"",
                              "\"\\ud800\\u0041\"",
                              "\"\xc0\xaf\"",
                              "\"\xed\xa0\x80\"",
                              "\"\xf4\x90\x80\x80\"",
                              "\"\xf0\x90\x80\x80\"",
                              "\"\x7f\"",
                              "\"\x1f\"",
                              "[1,]",
                              "{\"a\":1,}",
                              "{\"a\"}",
                              "{,}",
                              "[,1]",
                              "tru",
                              "nul",
                              "true false",
                              "[] []",
                              "",
                              " ",
                              "{\"a\":[{\"b\":null}]}",
                              "\"\\x\"",
                              "\"\\u12G4\"",
                              "1 2"}) {
    if (has_long_exponent(s)) continue;
    EXPECT_EQ(matches(any, s), json::accept(s)) << "text: " << s;
  }
}

TEST(json_constraint, PrefixesOfValidTextAreAcceptedAndAcceptedPrefixesComplete) {
  const auto any = moxi::runtime::json_any_grammar();
  text_gen gen(2);
  int rejected_prefixes = 0;
  for (int i = 0; i < 1500; ++i) {
    const std::string s = gen.value(0);
    ASSERT_TRUE(json::accept(s)) << s;
    json_matcher m(any);
    for (size_t k = 0; k < s.size(); ++k) ASSERT_TRUE(m.feed(s.substr(k, 1))) << s << " at byte " << k;
    // A mutated text: its longest accepted prefix must be completable to JSON nlohmann accepts.
    const std::string bad = gen.mutate(s);
    json_matcher p(any);
    size_t k = 0;
    while (k < bad.size() && p.feed(bad.substr(k, 1))) ++k;
    if (k < bad.size()) ++rejected_prefixes;
    const auto done = complete(any, bad.substr(0, k));
    ASSERT_TRUE(done.has_value()) << "no completion found for accepted prefix: " << bad.substr(0, k);
    if (!has_long_exponent(*done)) {
      ASSERT_TRUE(json::accept(*done)) << "completion: " << *done;
    }
  }
  EXPECT_GT(rejected_prefixes, 300);
}

TEST(json_constraint, DecodingBoundsKeepEveryPrefixCompletable) {
  // Bounded whitespace and numbers: a number at its length limit must still end validly.
  const auto g = moxi::runtime::json_any_grammar(moxi::runtime::json_grammar_options::decoding());
  EXPECT_TRUE(matches(g, "123456789012345678"));
  EXPECT_FALSE(matches(g, "1234567890123456789"));
  EXPECT_FALSE(matches(g, "1e100"));  // at most 2 exponent digits
  EXPECT_FALSE(matches(g, "{} "));    // nothing after the value
  json_matcher m(g);
  ASSERT_TRUE(m.feed("[12345678901234567"));
  EXPECT_FALSE(m.can_feed("."));  // no room left for a fraction digit
  EXPECT_TRUE(m.can_feed("]"));
  json_matcher w(g);
  EXPECT_TRUE(w.feed(std::string(size_t(moxi::runtime::json_grammar_options::decoding().max_ws_run), ' ')));
  EXPECT_FALSE(w.can_feed(" "));
  json_matcher d(g);
  ASSERT_TRUE(d.feed("{}"));
  EXPECT_TRUE(d.done());
  json_matcher n(g);
  ASSERT_TRUE(n.feed("12"));
  EXPECT_TRUE(n.accepting());
  EXPECT_FALSE(n.done());  // more digits may follow
}

// ---- schema mode ----

// A JSON Schema checker for the supported subset, written from the JSON Schema 2020-12 validation spec.
size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool valid(const ordered_json& v, const ordered_json& s) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("const")) return json(v) == json(s["const"]);
  if (s.contains("enum")) {
    bool any = false;
    for (const auto& e : s["enum"]) any = any || json(v) == json(e);
    if (!any) return false;
  }
  if (s.contains("type")) {
    const auto types = s["type"].is_array() ? s["type"] : ordered_json::array({s["type"]});
    bool ok = false;
    for (const auto& t : types) {
      const std::string n = t;
      ok = ok || (n == "object" && v.is_object()) || (n == "array" && v.is_array()) ||
           (n == "string" && v.is_string()) || (n == "number" && v.is_number()) ||
           (n == "integer" && (v.is_number_integer() || v.is_number_unsigned())) ||
           (n == "boolean" && v.is_boolean()) || (n == "null" && v.is_null());
    }
    if (!ok) return false;
  }
  if (v.is_string()) {
    const size_t n = code_points(v.get<std::string>());
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return false;
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    if (s.contains("items"))
      for (const auto& x : v)
        if (!valid(x, s["items"])) return false;
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const auto& r : s["required"])
        if (!v.contains(r.get<std::string>())) return false;
    for (const auto& [k, x] : v.items()) {
      if (s.contains("properties") && s["properties"].contains(k)) {
        if (!valid(x, s["properties"][k])) return false;
      } else if (s.contains("additionalProperties") && s["additionalProperties"] == false) {
        return false;
      }
    }
  }
  return true;
}

// Values of a schema, generated from the schema alone.
struct value_gen {
  std::mt19937_64 rng;
  int pick(int n) { return int(rng() % uint64_t(n)); }
  std::string str(size_t lo, size_t hi) {
    static const char* kChars[] = {"a", "b", "Z", " ", "\"", "\\", "\n", "\xc3\xa9", "\xf0\x9f\x98\x80", "/"};
    std::string s;
    const size_t n = lo + size_t(pick(int(hi - lo + 1)));
    for (size_t i = 0; i < n; ++i) s += kChars[pick(10)];
    return s;
  }
  ordered_json any(int depth) {
    switch (pick(depth > 2 ? 5 : 7)) {
      case 0:
        return str(0, 5);
      case 1:
        return int64_t(pick(2000)) - 1000;
      case 2:
        return double(pick(1000)) + 0.25;
      case 3:
        return pick(2) == 1;
      case 4:
        return nullptr;
      case 5: {
        ordered_json a = ordered_json::array();
        for (int i = pick(3); i > 0; --i) a.push_back(any(depth + 1));
        return a;
      }
      default: {
        ordered_json o = ordered_json::object();
        for (int i = pick(3); i > 0; --i) o[str(1, 3)] = any(depth + 1);
        return o;
      }
    }
  }
  ordered_json of(const ordered_json& s) {
    if (s.is_boolean()) return any(0);
    if (s.contains("const")) return s["const"];
    if (s.contains("enum")) return s["enum"][size_t(pick(int(s["enum"].size())))];
    std::vector<std::string> types;
    if (s.contains("type")) {
      for (const auto& t : s["type"].is_array() ? s["type"] : ordered_json::array({s["type"]}))
        types.push_back(t);
    } else {
      return any(0);
    }
    const std::string t = types[size_t(pick(int(types.size())))];
    if (t == "string") {
      const size_t lo = s.value("minLength", size_t(0));
      return str(lo, s.value("maxLength", lo + 6));
    }
    if (t == "integer") return int64_t(rng() % 2000001) - 1000000;
    if (t == "number")
      return pick(2) ? ordered_json(double(pick(100000)) / 8.0 - 100) : ordered_json(pick(50));
    if (t == "boolean") return pick(2) == 1;
    if (t == "null") return nullptr;
    if (t == "array") {
      const size_t lo = s.value("minItems", size_t(0));
      const size_t n = lo + size_t(pick(int(s.value("maxItems", lo + 3) - lo + 1)));
      ordered_json a = ordered_json::array();
      for (size_t i = 0; i < n; ++i) a.push_back(s.contains("items") ? of(s["items"]) : any(1));
      return a;
    }
    ordered_json o = ordered_json::object();
    if (!s.contains("properties")) {
      if (!(s.contains("additionalProperties") && s["additionalProperties"] == false))
        for (int i = pick(3); i > 0; --i) o[str(1, 3)] = any(1);
      return o;
    }
    std::set<std::string> req;
    if (s.contains("required"))
      for (const auto& r : s["required"]) req.insert(r.get<std::string>());
    for (const auto& [k, sub] : s["properties"].items())
      if (req.count(k) || pick(2)) o[k] = of(sub);
    return o;
  }
  // A random change somewhere in v: a value replaced, a property removed or added, an element added or
  // removed.
  void mutate(ordered_json& v) {
    if ((v.is_object() || v.is_array()) && !v.empty() && pick(3) != 0) {
      const size_t i = size_t(pick(int(v.size())));
      if (v.is_object()) {
        auto it = v.begin();
        std::advance(it, std::ptrdiff_t(i));
        return mutate(*it);
      }
      return mutate(v[i]);
    }
    switch (pick(4)) {
      case 0:
        if (v.is_object() && !v.empty()) {
          v.erase(v.begin().key());
          return;
        }
        break;
      case 1:
        if (v.is_object()) {
          v["extra" + std::to_string(pick(3))] = any(1);
          return;
        }
        if (v.is_array()) {
          v.push_back(any(1));
          return;
        }
        break;
      case 2:
        if (v.is_string()) {
          v = v.get<std::string>() + str(1, 4);
          return;
        }
        break;
      default:
        break;
    }
    v = any(1);
  }
};

const char* kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer"},
        "tags":{"type":"array","items":{"type":"string","minLength":1,"maxLength":3},"maxItems":3},
        "kind":{"enum":["cat","dog",3,null,{"x":[1,2]}]},"ok":{"type":"boolean"}},
        "required":["name","kind"],"additionalProperties":false})",
    R"({"type":"array","items":{"type":["number","null"]},"minItems":1,"maxItems":4})",
    R"({"type":"object","properties":{"a":{"type":"object","properties":{"b":{"const":"x\"y"},
        "c":{"type":"array","items":{"type":"object","properties":{"d":{"type":"null"}},"required":["d"],
        "additionalProperties":false}}},"required":["c"],"additionalProperties":false},
        "z":{"type":"string","minLength":2}},"required":["a","z"],"additionalProperties":false})",
    R"({"type":"object","properties":{"p1":{"type":"integer"},"p2":{"type":"integer"},"p3":{"type":"string"}},
        "required":["p2"],"additionalProperties":false})",
    R"({"type":"object","properties":{"free":{"type":"object"},"any":{},"s":{"type":"string"}},
        "required":["free","any"],"additionalProperties":false})",
    R"({"enum":[1,12,123,"a",true]})",
    R"({"type":"string","minLength":1,"maxLength":2})",
};

TEST(json_constraint, SchemaGeneratedValuesAcceptedMutatedOnesJudgedByChecker) {
  value_gen gen{std::mt19937_64(3)};
  int rejected = 0, accepted_mutants = 0;
  for (const char* text : kSchemas) {
    const auto schema = ordered_json::parse(text);
    const auto g = moxi::runtime::json_schema_grammar(schema, "schema");
    for (int i = 0; i < 600; ++i) {
      ordered_json v = gen.of(schema);
      ASSERT_TRUE(valid(v, schema)) << "generator: " << v.dump();
      ASSERT_TRUE(matches(g, v.dump())) << "schema " << text << "\nvalue " << v.dump();
      gen.mutate(v);
      // Mutants keep their property order (ordered_json), so the checker's verdict is the automaton's.
      const bool ref = valid(v, schema);
      ASSERT_EQ(matches(g, v.dump()), ref) << "schema " << text << "\nmutant " << v.dump();
      (ref ? accepted_mutants : rejected) += 1;
    }
  }
  EXPECT_GT(rejected, 1500);
  EXPECT_GT(accepted_mutants, 100);
}

TEST(json_constraint, SchemaPrefixesAreCompletableToValidValues) {
  value_gen gen{std::mt19937_64(4)};
  for (const char* text : kSchemas) {
    const auto schema = ordered_json::parse(text);
    // Decoding bounds: numbers end, so the completion below does too.
    const auto g =
        moxi::runtime::json_schema_grammar(schema, "schema", moxi::runtime::json_grammar_options::decoding());
    for (int i = 0; i < 100; ++i) {
      const std::string s = gen.of(schema).dump();
      for (size_t k = 0; k <= s.size(); k += 1 + size_t(gen.pick(3))) {
        // The automaton's own byte-by-byte completion, judged by the checker.
        json_matcher m(g);
        ASSERT_TRUE(m.feed(s.substr(0, k)));
        std::string out = s.substr(0, k);
        for (int step = 0; step < 300 && !m.accepting(); ++step) {
          bool moved = false;
          for (char ch : std::string("\"}]0:,aA\\u\x80")) {
            if (m.feed(std::string(1, ch))) {
              out += ch, moved = true;
              break;
            }
          }
          // Keys and literals need their own bytes: try every byte but whitespace (always allowed
          // between tokens, it would never end).
          for (int b = 1; b < 256 && !moved; ++b)
            if (b != ' ' && b != '\t' && b != '\n' && b != '\r' && m.feed(std::string(1, char(b))))
              out += char(b), moved = true;
          ASSERT_TRUE(moved) << "dead end after " << out;
        }
        ASSERT_TRUE(m.accepting()) << out;
        const json v = json::parse(out, nullptr, false);
        ASSERT_FALSE(v.is_discarded()) << out;
        ASSERT_TRUE(valid(ordered_json::parse(out), schema)) << "schema " << text << "\ncompletion " << out;
      }
    }
  }
}

TEST(json_constraint, UnsupportedOrHostileSchemasNameTheKeyword) {
  auto msg = [](const std::string& text) -> std::string {
    try {
      moxi::runtime::json_schema_grammar(ordered_json::parse(text), "response_format.json_schema.schema");
    } catch (const moxi::error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(msg(R"({"type":"string","pattern":"a+"})").find("'pattern' is not supported"), std::string::npos);
  EXPECT_NE(msg(R"({"properties":{"a":{"anyOf":[]}}})").find("schema.properties.a: 'anyOf'"),
            std::string::npos);
  EXPECT_NE(msg(R"({"type":"strin"})").find("'strin'"), std::string::npos);
  EXPECT_NE(msg(R"({"required":["x"],"properties":{}})").find("'x'"), std::string::npos);
  EXPECT_NE(msg(R"({"additionalProperties":{"type":"string"}})").find("additionalProperties"),
            std::string::npos);
  EXPECT_NE(msg(R"([1])").find("must be an object"), std::string::npos);
  EXPECT_NE(msg(R"({"enum":[1],"maxLength":3})").find("'maxLength' together with"), std::string::npos);
  EXPECT_NE(msg(R"({"type":"string","enum":[1,2]})").find("no 'enum'"), std::string::npos);
  std::string deep = R"({"type":"string"})";
  for (int i = 0; i < 40; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  EXPECT_NE(msg(deep).find("deeper than"), std::string::npos);
  ordered_json many = {{"type", "object"}, {"properties", ordered_json::object()}};
  for (int i = 0; i < 65; ++i) many["properties"]["p" + std::to_string(i)] = {{"type", "null"}};
  EXPECT_NE(msg(many.dump()).find("more than 64 properties"), std::string::npos);
  ordered_json big_enum = {{"enum", ordered_json::array()}};
  for (int i = 0; i < 300; ++i) big_enum["enum"].push_back(i);
  EXPECT_NE(msg(big_enum.dump()).find("more than 256 values"), std::string::npos);
}

// ---- token masks ----

TEST(json_constraint, TokenMaskEqualsFeedingEachTokenAlone) {
  // A synthetic vocabulary: every byte, plus multi-byte pieces of JSON and text.
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(std::string(1, char(b)));
  for (const char* t :
       {"{\"",    "\":",  "\",\"",  "\"}",   "true",    "false", "null", "12", "0.5",  "e+",   "hello",
        " world", "\xc3", "\xa9\"", "\\u00", "\\ud83d", "[{",    "}]",   "],", "\"\n", "name", "\"name\""})
    vocab.push_back(t);
  vocab.push_back("");  // an unused id
  const moxi::runtime::token_table table(vocab);
  const auto schema = ordered_json::parse(kSchemas[0]);
  const auto g = moxi::runtime::json_schema_grammar(schema, "schema");
  value_gen gen{std::mt19937_64(5)};
  for (int i = 0; i < 50; ++i) {
    const std::string s = gen.of(schema).dump();
    json_matcher m(g);
    for (size_t k = 0; k <= s.size(); ++k) {
      std::vector<uint8_t> allowed;
      const size_t n = m.allowed_tokens(table, allowed);
      size_t count = 0;
      for (size_t t = 0; t < vocab.size(); ++t) {
        json_matcher alone = m;
        const bool ok = !vocab[t].empty() && alone.feed(vocab[t]);
        ASSERT_EQ(bool(allowed[t]), ok) << "prefix " << s.substr(0, k) << " token " << vocab[t];
        count += ok;
      }
      ASSERT_EQ(n, count);
      if (k < s.size()) {
        ASSERT_TRUE(m.feed(s.substr(k, 1)));
      }
    }
  }
}

TEST(json_constraint, ConstrainedSamplerProducesValidJsonFromRandomLogits) {
  // Random logits (an adversarial "model"): every sampled output must be JSON of the schema or stop only
  // when complete; end token id = vocab size.
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(std::string(1, char(b)));
  vocab.push_back("");  // id 256: the end token (special, no bytes)
  auto table = std::make_shared<moxi::runtime::token_table>(vocab);
  const auto schema = ordered_json::parse(kSchemas[0]);
  const auto g =
      moxi::runtime::json_schema_grammar(schema, "schema", moxi::runtime::json_grammar_options::decoding());
  std::mt19937_64 rng(6);
  std::normal_distribution<float> noise(0, 3);
  int complete = 0;
  for (uint64_t seed = 0; seed < 30; ++seed) {
    moxi::runtime::sampling_params p;
    p.seed = seed;
    moxi::runtime::sampler smp(p, {}, moxi::runtime::json_constraint(g, table, {256}));
    std::string out;
    bool ended = false;
    for (int step = 0; step < 3000 && !ended; ++step) {
      std::vector<float> logits(vocab.size());
      for (auto& l : logits) l = noise(rng);
      logits['"'] += 4;  // strings end now and then
      const auto t = smp.sample(logits);
      smp.accept(t);
      if (t == 256)
        ended = true;
      else
        out += vocab[size_t(t)];
      if (smp.constraint_done()) ended = true;
    }
    if (!ended) continue;
    ++complete;
    const auto v = ordered_json::parse(out, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << out;
    ASSERT_TRUE(valid(v, schema)) << out;
  }
  EXPECT_GT(complete, 20);
}

}  // namespace
