// Chat template tests. The reference suite renders real templates (DeepSeek-V3, DeepSeek-V3.1, Qwen3 from
// their tokenizer configs, moxi-tiny's from configs/chat-templates and a Kimi-format one from
// tests/chat-template-ref/templates) over a set of conversations and compares byte for byte with what
// @huggingface/jinja, Hugging Face's own port of the chat template engine, rendered (tests/chat-template-ref,
// scripts/setup-chat-template-test-deps.sh). The unit tests pin Jinja semantics worked out from Jinja2's
// documentation, and the hostile-template tests check that limits end runaway templates with a moxi::error
// naming the template and line.
#include "moxi/formats/chat-template.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "moxi/base/error.h"

namespace {

using moxi::formats::chat_template;
using moxi::formats::chat_template_limits;
using moxi::formats::render_options;
using ojson = nlohmann::ordered_json;

const std::filesystem::path kRefDir =
    std::filesystem::path(MOXI_SOURCE_DIR) / "tests/chat-template-ref/generated";

std::string render(const std::string& tpl, const std::string& messages_json = "[]", render_options opt = {}) {
  return chat_template(tpl, "test").render(ojson::parse(messages_json), opt);
}

// The error message of rendering (or parsing) `tpl`, or "" when it succeeded.
std::string error_of(const std::string& tpl, chat_template_limits limits = {},
                     const std::string& messages = "[]") {
  try {
    chat_template(tpl, "hostile.jinja", limits).render(ojson::parse(messages));
  } catch (const moxi::error& e) {
    return e.what();
  }
  return "";
}

// ---- reference: byte-for-byte against @huggingface/jinja ----

// Where the JavaScript port is more lenient than Python's Jinja, which transformers runs and moxi follows:
// it concatenates a string with a list (DeepSeek given content parts) and reads an attribute of an
// undefined value (Qwen3's messages[0].role with no messages); Python raises TypeError / UndefinedError.
const std::set<std::string> kPythonRaises = {"deepseek_v3 / content_parts",
                                             "deepseek_v3 / content_parts / generation prompt",
                                             "deepseek_v3_1 / content_parts",
                                             "deepseek_v3_1 / content_parts / generation prompt",
                                             "qwen3 / empty",
                                             "qwen3 / empty / generation prompt"};

TEST(chat_template_reference, matches_huggingface_jinja) {
  const auto cases_path = kRefDir / "cases.json";
  ASSERT_TRUE(std::filesystem::exists(cases_path))
      << "reference data missing: " << cases_path << "\nrun scripts/setup-chat-template-test-deps.sh";
  std::ifstream in(cases_path);
  const ojson cases = ojson::parse(in);
  ASSERT_GE(cases.size(), 100u);
  std::map<std::string, chat_template> templates;
  std::map<std::string, int> checked;
  for (const ojson& c : cases) {
    const std::string name = c["template"].get<std::string>();
    if (!templates.count(name)) {
      templates.emplace(name, chat_template::from_tokenizer_config(
                                  (kRefDir / "templates" / name / "tokenizer_config.json").string()));
    }
    const chat_template& t = templates.at(name);
    render_options opt;
    opt.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    if (!c["tools"].is_null()) opt.tools = c["tools"];
    opt.extra = c["extra"];
    const std::string label = name + " / " + c["conversation"].get<std::string>() +
                              (opt.add_generation_prompt ? " / generation prompt" : "");
    if (c.contains("error") || kPythonRaises.count(label)) {
      // The reference raised (raise_exception, or a template that cannot handle this conversation):
      // so must we, with a moxi::error rather than a crash.
      EXPECT_THROW(t.render(c["messages"], opt), moxi::error) << label;
    } else {
      std::string got;
      try {
        got = t.render(c["messages"], opt);
      } catch (const moxi::error& e) {
        ADD_FAILURE() << label << ": " << e.what();
        continue;
      }
      EXPECT_EQ(got, c["expected"].get<std::string>()) << label;
    }
    ++checked[name];
  }
  for (const char* want : {"deepseek_v3", "deepseek_v3_1", "qwen3", "moxi_tiny", "kimi_style"}) {
    EXPECT_GT(checked[want], 0) << "no reference cases for " << want;
  }
}

// The compiled-in moxi-tiny template renders what @huggingface/jinja rendered from the file.
TEST(chat_template_reference, builtin_moxi_tiny_matches_huggingface_jinja) {
  const auto cases_path = kRefDir / "cases.json";
  ASSERT_TRUE(std::filesystem::exists(cases_path)) << "run scripts/setup-chat-template-test-deps.sh";
  std::ifstream in(cases_path);
  const ojson cases = ojson::parse(in);
  const chat_template t(std::string(moxi::formats::moxi_tiny_chat_template()), "moxi-tiny");
  int checked = 0;
  for (const ojson& c : cases) {
    if (c["template"] != "moxi_tiny" || c.contains("error")) continue;
    render_options opt;
    opt.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    if (!c["tools"].is_null()) opt.tools = c["tools"];
    opt.extra = c["extra"];
    opt.bos_token = "<|bos|>";  // what the generator's tokenizer config for moxi_tiny declares
    opt.eos_token = "<|eos|>";
    EXPECT_EQ(t.render(c["messages"], opt), c["expected"].get<std::string>()) << c["conversation"];
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

TEST(chat_template_config, load_from_a_model_directory) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("moxi-chat-template-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& text) { std::ofstream(dir / "tokenizer_config.json") << text; };
  EXPECT_FALSE(moxi::formats::load_chat_template(dir.string()).has_value());  // no tokenizer_config.json
  write(R"({"bos_token": "<s>"})");
  EXPECT_FALSE(moxi::formats::load_chat_template(dir.string()).has_value());  // a base model: no template
  write(R"({"bos_token": "<s>", "chat_template": "{{ bos_token }}{{ messages[0].content }}"})");
  const auto t = moxi::formats::load_chat_template(dir.string());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->render(ojson::parse(R"([{"role": "user", "content": "hi"}])")), "<s>hi");
  write(R"({"chat_template": )");
  try {
    moxi::formats::load_chat_template(dir.string());
    ADD_FAILURE() << "broken JSON must throw";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json: invalid JSON"), std::string::npos)
        << e.what();
  }
  write(R"({"chat_template": "{% if %}"})");
  EXPECT_THROW(moxi::formats::load_chat_template(dir.string()), moxi::error);
  std::filesystem::remove_all(dir);
}

TEST(chat_template_reference, raise_exception_names_template_and_line) {
  const auto path = kRefDir / "templates/moxi_tiny/tokenizer_config.json";
  ASSERT_TRUE(std::filesystem::exists(path)) << "run scripts/setup-chat-template-test-deps.sh";
  chat_template t = chat_template::from_tokenizer_config(path.string());
  EXPECT_EQ(t.bos_token(), "<|bos|>");
  try {
    t.render(ojson::parse(R"([{"role": "narrator", "content": "x"}])"));
    FAIL() << "expected raise_exception";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(":15: raise_exception: moxi-tiny: unknown role narrator"),
              std::string::npos)
        << e.what();
  }
}

// ---- loading ----

TEST(chat_template_config, string_or_named_list_and_added_tokens) {
  ojson cfg = ojson::parse(R"({
    "bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>",
    "chat_template": [{"name": "default", "template": "{{ bos_token }}A{{ eos_token }}"},
                      {"name": "tool_use", "template": "T"}]})");
  chat_template d = chat_template::from_tokenizer_config_json(cfg, "cfg.json");
  EXPECT_EQ(d.render(ojson::array()), "<s>A</s>");
  render_options opt;
  opt.bos_token = "[B]";
  EXPECT_EQ(d.render(ojson::array(), opt), "[B]A</s>");
  EXPECT_EQ(chat_template::from_tokenizer_config_json(cfg, "cfg.json", "tool_use").render(ojson::array()),
            "T");
  EXPECT_THROW(chat_template::from_tokenizer_config_json(cfg, "cfg.json", "rag"), moxi::error);
  EXPECT_THROW(chat_template::from_tokenizer_config_json(ojson::parse("{}"), "cfg.json"), moxi::error);
  EXPECT_THROW(chat_template::from_tokenizer_config("/nonexistent/tokenizer_config.json"), moxi::error);
}

TEST(chat_template_config, plain_json_overload_sees_sorted_keys) {
  chat_template t("{{ messages[0] | tojson }}", "t");
  nlohmann::json m = nlohmann::json::parse(R"([{"role": "user", "content": "x"}])");
  EXPECT_EQ(t.render(m), R"({"content": "x", "role": "user"})");
  EXPECT_EQ(t.render(ojson::parse(R"([{"role": "user", "content": "x"}])")),
            R"({"role": "user", "content": "x"})");
}

// ---- Jinja semantics ----

TEST(chat_template_semantics, whitespace_control_and_hf_block_trimming) {
  // trim_blocks eats the newline after a block tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(render("{% if true %}\n  yes\n{% endif %}\nend"), "  yes\nend");
  EXPECT_EQ(render("a\n    {% if true %}b{% endif %}\nc"), "a\nbc");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif %}"), "ab");
  EXPECT_EQ(render("x {{- ' y ' -}} z"), "x y z");
  EXPECT_EQ(render("a {# note #}b\n  {# line #}\nc"), "a b\nc");
  EXPECT_EQ(render("{{ 'v' }}\nnext"), "v\nnext");  // expression tags keep their newline
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("trailing\n"), "trailing");  // one trailing newline dropped, as Jinja does
}

TEST(chat_template_semantics, expressions) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }}"),
            "7 3 -4 2 3.5 1024");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 'x' if false else 'y' }}"),
            "a1None ababab [1, 2] y");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 2 not in [1, 2] }} {{ 'k' in {'k': 1} }} {{ not 0 and 1 or 2 }}"),
            "True False True 1");
  EXPECT_EQ(render("{{ {'a': 1, 'b': [true, none, 'q']} }}"), "{'a': 1, 'b': [True, None, 'q']}");
  EXPECT_EQ(render("{{ 'héllo'[1] }}{{ 'héllo'[-2:] }}{{ [1,2,3,4][::-1] }}{{ 'abcdef'[1:5:2] }}"),
            "élo[4, 3, 2, 1]bd");
  EXPECT_EQ(render("{{ 0.1 + 0.2 }} {{ 1.0 }} {{ 1e20 }} {{ 1.5e-7 }}"),
            "0.30000000000000004 1.0 1e+20 1.5e-07");
  EXPECT_EQ(render("{{ x }}|{{ x is defined }}|{{ none is none }}|{{ 3 is odd }}|{{ 'a' is string }}"),
            "|False|True|True|True");
}

TEST(chat_template_semantics, filters_and_methods) {
  EXPECT_EQ(render("{{ '  hi  ' | trim }}|{{ [1, 2] | length }}|{{ 'añb' | length }}|{{ 'Ab' | upper }}"),
            "hi|2|3|AB");
  EXPECT_EQ(render("{{ 'a-b-c' | replace('-', '+') }}|{{ ['x', 'y'] | join(', ') }}|{{ u | default('d') }}"),
            "a+b+c|x, y|d");
  EXPECT_EQ(render("{{ {'a': [1, 'é\"']} | tojson }}|{{ {'b': 1} | tojson(indent=2) }}"),
            "{\"a\": [1, \"é\\\"\"]}|{\n  \"b\": 1\n}");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }}|{{ ' x y '.split() }}|{{ 'xxhixx'.strip('x') }}|{{ "
                   "'ab'.startswith('a') }}"),
            "['a', 'b', '', 'c']|['x', 'y']|hi|True");
  EXPECT_EQ(
      render(
          "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}{{ {'a': 1}.get('z', 9) }}"),
      "a=1;b=2;9");
  EXPECT_EQ(render("{{ [3, 1, 2] | sort | list }}|{{ [{'r': 'a'}, {'r': 'b'}] | selectattr('r', 'equalto', "
                   "'b') | list }}"),
            "[1, 2, 3]|[{'r': 'b'}]");
  EXPECT_EQ(
      render("{{ [{'n': 1}, {'n': 2}] | map(attribute='n') | join('+') }}|{{ 'a\nb' | indent(2, true) }}"),
      "1+2|  a\n  b");
}

TEST(chat_template_semantics, loops_scopes_namespaces_macros) {
  EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.index0 }}{{ x }}{% if loop.first %}F{% endif %}"
                   "{% if loop.last %}L{{ loop.length }}{% endif %}{% endfor %}"),
            "0aF1b2cL3");
  // `set` inside a loop stays in the loop; a namespace carries state out.
  EXPECT_EQ(render("{% set n = 0 %}{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set n = n + 1 %}"
                   "{% set ns.n = ns.n + i %}{% endfor %}{{ n }} {{ ns.n }}"),
            "0 3");
  EXPECT_EQ(
      render("{% for i in range(10) %}{% if i == 4 %}{% break %}{% endif %}{% if i is odd %}{% continue %}"
             "{% endif %}{{ i }}{% endfor %}"),
      "02");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}|{% for x in [1, 2, 3] if x != 2 %}"
                   "{{ x }}/{{ loop.length }} {% endfor %}"),
            "empty|1/2 3/2 ");
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('a') }} {{ greet('b', punct='?') }}"),
            "hi a! hi b?");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ b }}{{ a }}{% set s %}block {{ a }}{% endset %}|{{ s }}"),
            "21|block 1");
  EXPECT_EQ(render("{{ messages[0].role }}:{{ messages[0]['content'] }}:{{ messages[1] is defined }}",
                   R"([{"role": "user", "content": "hey"}])"),
            "user:hey:False");
  render_options opt;
  opt.extra = ojson::parse(R"({"enable_thinking": false})");
  EXPECT_EQ(render("{{ enable_thinking is false }}{{ tools is none }}{{ add_generation_prompt }}", "[]", opt),
            "TrueTrueFalse");
}

// ---- hostile templates: limits and clear errors ----

TEST(chat_template_hostile, errors_name_source_and_line) {
  EXPECT_NE(error_of("line one\n{% if x %}\nno end").find("hostile.jinja:"), std::string::npos);
  EXPECT_NE(error_of("a\nb\n{{ 1 + }}").find("hostile.jinja:3: "), std::string::npos)
      << error_of("a\nb\n{{ 1 + }}");
  EXPECT_NE(error_of("\n{{ x | nosuchfilter }}").find(":2: unknown filter 'nosuchfilter'"),
            std::string::npos);
  EXPECT_NE(error_of("{{ x.y }}").find("'x' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{% include 'other.jinja' %}").find("unsupported statement 'include'"),
            std::string::npos);
  EXPECT_NE(error_of("{{ raise_exception('nope') }}").find("hostile.jinja:1: raise_exception: nope"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'abc").find("unterminated"), std::string::npos);
  EXPECT_NE(error_of("{{ [1].append(2) }}").find("immutable sandbox"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 // 0 }}").find("division"), std::string::npos);
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("overflow"), std::string::npos);
}

TEST(chat_template_hostile, limits_stop_runaway_templates_quickly) {
  const auto start = std::chrono::steady_clock::now();
  // Nested loops: 10^18 iterations if nothing stopped them.
  EXPECT_NE(error_of("{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}"
                     "{% endfor %}{% endfor %}{% endfor %}")
                .find("steps"),
            std::string::npos);
  EXPECT_NE(error_of("{{ range(10 ** 15) | length }}").find("over the limit"), std::string::npos);
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("nest deeper"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
                     "{% endfor %}")
                .find("over the output limit"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 1000000000000 }}").find("output limit"), std::string::npos);
  EXPECT_NE(error_of("{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}").find("output is over"),
            std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}")
                .find("nests too deeply"),
            std::string::npos);
  std::string deep_blocks;
  for (int i = 0; i < 5000; ++i) deep_blocks += "{% if true %}";
  EXPECT_NE(error_of(deep_blocks).find("nests too deeply"), std::string::npos);
  chat_template_limits small;
  small.max_template_bytes = 10;
  EXPECT_NE(error_of("{{ 'a long template' }}", small).find("over the limit"), std::string::npos);
  small = {};
  small.max_steps = 1000;
  EXPECT_NE(error_of("{% for i in range(2000) %}{% endfor %}", small).find("steps"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

// Issue 14: a runaway loop ran 7.3 s before the step limit stopped it, where the docs promise about 2 s.
// Steps are now weighted by what they cost (a loop iteration builds its 11-entry `loop` object; iterating
// copies the items; reading a variable copies its string), and a CPU-time limit backs the count for any
// step whose cost it still misses. Every variant here must end in moxi::error naming one of the two.
std::vector<std::string> runaway_variants() {
  return {
      // Nested loops, the probe's shape.
      "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}"
      "{% endfor %}{% endfor %}{% endfor %}",
      // The same, reading loop.* and calling a macro in the body.
      "{% macro f() %}{% endmacro %}{% for a in range(100000) %}{% for b in range(100000) %}{{ f() }}"
      "{{ loop.index }}{% endfor %}{% endfor %}",
      // Iterating one big list again and again (each iteration copies it).
      "{% set xs = range(100000) | list %}{% for a in xs %}{% for b in xs %}{% endfor %}{% endfor %}",
      // A big string read in every iteration (each read copies it).
      "{% set s = 'x' * 8000000 %}{% for a in range(100000) %}{% for b in range(100000) %}{% if s %}"
      "{% endif %}{% endfor %}{% endfor %}",
      // A scan of a big string in every iteration: cheap in steps, expensive in bytes.
      "{% set s = 'x' * 8000000 %}{% for a in range(100000) %}{% for b in range(100000) %}"
      "{% if 'y' in s %}{% endif %}{% endfor %}{% endfor %}",
      "{% set s = 'x' * 8000000 %}{% for a in range(100000) %}{% for b in range(100000) %}"
      "{{ s.count('y') }}{{ s.startswith('y') }}{% endfor %}{% endfor %}",
      // Comparing big strings.
      "{% set s = 'x' * 8000000 %}{% set t = 'x' * 8000000 %}{% for a in range(100000) %}"
      "{% for b in range(100000) %}{% if s == t %}{% endif %}{% endfor %}{% endfor %}",
  };
}

TEST(chat_template_hostile, runaway_variants_end_in_a_limit) {
  for (const auto& tpl : runaway_variants()) {
    SCOPED_TRACE(tpl);
    const std::string msg = error_of(tpl);
    EXPECT_TRUE(msg.find("steps") != std::string::npos || msg.find("s of CPU") != std::string::npos) << msg;
    EXPECT_NE(msg.find("hostile.jinja:"), std::string::npos) << msg;
  }
}

TEST(chat_template_hostile, cpu_time_limit_backs_the_step_count) {
  chat_template_limits l;
  l.max_steps = std::numeric_limits<uint64_t>::max();
  l.max_cpu_seconds = 0.05;
  const std::string msg = error_of(runaway_variants()[0], l);
  EXPECT_NE(msg.find("rendering took over 0.05 s of CPU"), std::string::npos) << msg;
  // A real template stays far inside both limits.
  l.max_cpu_seconds = 2.0;
  EXPECT_EQ(error_of("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}", l,
                     R"([{"role": "user", "content": "hi"}])"),
            "");
}

TEST(chat_template_hostile, garbage_never_crashes) {
  // Every prefix of a real template, and byte soup: each must parse or fail with moxi::error.
  const std::string tpl =
      "{%- set ns = namespace(a=1) -%}{% for m in messages if m.role != 'x' %}{{ m['content'] | trim ~ '!' }}"
      "{% if loop.last %}{{ ns.a }}{% endif %}{% endfor %}{# c #}{{ {'k': [1, 2][0:1]} | tojson }}";
  const std::string msgs = R"([{"role": "user", "content": " hi "}])";
  for (size_t n = 0; n <= tpl.size(); ++n) {
    try {
      chat_template(tpl.substr(0, n), "prefix").render(ojson::parse(msgs));
    } catch (const moxi::error&) {
    }
  }
  uint32_t seed = 12345;
  const std::string alphabet = "{}%#-+()[]'\"|.,:~*/ abxif01=<>\n";
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s;
    for (int i = 0; i < 40; ++i) {
      seed = seed * 1103515245 + 12345;
      s += alphabet[(seed >> 16) % alphabet.size()];
    }
    try {
      chat_template(s, "soup").render(ojson::parse(msgs));
    } catch (const moxi::error&) {
    }
  }
  EXPECT_EQ(chat_template(tpl, "full").render(ojson::parse(msgs)), "hi!1{\"k\": [1]}");
}

}  // namespace
