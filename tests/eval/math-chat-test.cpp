// Worked math references and the chat domain: every line of a worked reference that states a value is
// recomputed by an expression evaluator written here (not the generator's), the final line by the task's
// expression; the held-out rules of docs/tasks.md (operand combinations, phrasing families, the length
// split) are restated here and checked on generated items; the chat checker tells prose from commands.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/int-expression.h"
#include "moxi/base/error.h"
#include "moxi/eval/check.h"
#include "moxi/eval/task-generator.h"

namespace {

using namespace moxi::eval;

using moxi::testing::eval_int_expression;

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

int64_t number_after(const std::string& line, const std::string& word) {
  const size_t at = line.find(word);
  return at == std::string::npos ? -1 : std::stoll(line.substr(at + word.size()));
}

// A long division "X / Y" worked one quotient digit per line, "P / Y = q, q * Y = m, P - m = r, left D":
// every clause recomputes, q is one digit and r < Y; the first P is the shortest prefix of X that reaches Y
// (or all of X), each next P is r followed by the first digit of D and its D loses that digit, the last line
// has no D and r = 0 (exact division), and the q digits read in order are the answer.
void expect_long_division(const std::vector<std::string>& lines, int64_t answer) {
  const std::string x = lines.front().substr(0, lines.front().find(" / "));
  const int64_t y = std::stoll(lines.front().substr(x.size() + 3));
  size_t len = 1;
  while (len < x.size() && std::stoll(x.substr(0, len)) < y) ++len;
  int64_t part = std::stoll(x.substr(0, len)), quotient = 0;
  std::string left = x.substr(len);
  ASSERT_GE(lines.size(), 3u);
  for (size_t k = 1; k + 1 < lines.size(); ++k) {
    const std::string& l = lines[k];
    SCOPED_TRACE(l);
    std::istringstream in(l);
    int64_t p = 0, y1 = 0, q = 0, q2 = 0, y2 = 0, m = 0, p2 = 0, m2 = 0, r = 0;
    char slash = 0, eq1 = 0, c1 = 0, star = 0, eq2 = 0, c2 = 0, minus = 0, eq3 = 0;
    in >> p >> slash >> y1 >> eq1 >> q >> c1 >> q2 >> star >> y2 >> eq2 >> m >> c2 >> p2 >> minus >> m2 >>
        eq3 >> r;
    ASSERT_FALSE(in.fail());
    EXPECT_EQ((std::string{slash, eq1, c1, star, eq2, c2, minus, eq3}), "/=,*=,-=");
    EXPECT_EQ(p, part);
    EXPECT_EQ(p2, part);
    EXPECT_EQ(y1, y);
    EXPECT_EQ(y2, y);
    EXPECT_EQ(q, part / y);
    EXPECT_EQ(q2, q);
    EXPECT_EQ(m, q * y);
    EXPECT_EQ(m2, m);
    EXPECT_EQ(r, part - m);
    EXPECT_LT(r, y);
    quotient = quotient * 10 + q;
    std::string rest;
    std::getline(in, rest);
    if (k + 2 == lines.size()) {
      EXPECT_EQ(rest, "");
      EXPECT_TRUE(left.empty());
      EXPECT_EQ(r, 0);
    } else {
      EXPECT_EQ(rest, ", left " + left);
      ASSERT_FALSE(left.empty());
      part = r * 10 + (left[0] - '0');
      left = left.substr(1);
    }
  }
  EXPECT_EQ(quotient, answer);
}

// Checks one worked reference line by line: the first line is the expression, a line "L = R..." has
// eval_int_expression(L) == R, a "write w carry c" after a value v has w = v % 10 and c = v / 10 (carry
// absent when v < 10), a "borrow 1" line has L in 10..19 range of the column, "= r" repeats the value of the
// last header (a line that is only an expression), and the last line is "Answer: <value of the expression>".
void expect_worked(const task& t) {
  SCOPED_TRACE(t.id + " (" + t.template_name + "):\n" + t.reference);
  const auto lines = lines_of(t.reference);
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines.front(), t.expression);
  const auto want = eval_int_expression(t.expression);
  ASSERT_TRUE(want.has_value()) << t.expression;
  EXPECT_EQ(std::to_string(*want), t.answer);
  EXPECT_EQ(lines.back(), "Answer: " + t.answer);
  if (t.expression.find(" / ") != std::string::npos) {
    expect_long_division(lines, std::stoll(t.answer));
    return;
  }
  std::optional<int64_t> header;
  for (size_t k = 0; k + 1 < lines.size(); ++k) {
    const std::string& l = lines[k];
    if (l.rfind("= -(", 0) == 0) {  // x - y with x < y: the value is -(y - x)
      ASSERT_TRUE(header.has_value()) << l;
      const auto inner = eval_int_expression(l.substr(4, l.size() - 5));
      ASSERT_TRUE(inner.has_value()) << l;
      EXPECT_EQ(-*inner, *header) << l;
      continue;
    }
    if (l.rfind("= ", 0) == 0) {
      ASSERT_TRUE(header.has_value()) << l;
      EXPECT_EQ(std::stoll(l.substr(2)), *header) << l;
      continue;
    }
    if (l.rfind("write ", 0) == 0) {  // a final carry: one digit
      EXPECT_GE(std::stoll(l.substr(6)), 1) << l;
      EXPECT_LE(std::stoll(l.substr(6)), 9) << l;
      continue;
    }
    const size_t eq = l.find(" = ");
    if (eq == std::string::npos) {
      header = eval_int_expression(l);
      EXPECT_TRUE(header.has_value()) << "not an expression: " << l;
      continue;
    }
    const auto lhs = eval_int_expression(l.substr(0, eq));
    ASSERT_TRUE(lhs.has_value()) << l;
    const int64_t rhs = std::stoll(l.substr(eq + 3));
    EXPECT_EQ(*lhs, rhs) << l;
    if (l.find(", write ") != std::string::npos) {
      EXPECT_EQ(number_after(l, ", write "), rhs % 10) << l;
      EXPECT_EQ(number_after(l, " carry "), rhs >= 10 ? rhs / 10 : -1) << l;
    }
    if (l.find(", borrow 1") != std::string::npos) {
      EXPECT_GE(std::stoll(l), 10) << l;  // the column's digit plus the borrowed ten
    }
  }
}

const split kMathSplits[] = {split::train, split::test, split::length};

TEST(MathWorked, EveryLineRecomputes) {
  for (auto s : kMathSplits) {
    for (const auto& t : generate_tasks(domain::math, s, 500, 21)) expect_worked(t);
  }
}

TEST(MathWorked, TwoDigitAdditionIsShort) {
  // A 2-digit addition is the header, two or three column lines and the answer.
  for (const auto& t : generate_tasks(domain::math, split::train, 2000, 4)) {
    if (t.template_name != "add") continue;
    if (t.params["a"].get<int64_t>() >= 100 || t.params["b"].get<int64_t>() >= 100) continue;
    EXPECT_LE(lines_of(t.reference).size(), 5u) << t.reference;
    EXPECT_LE(t.reference.size(), 90u) << t.reference;
  }
}

TEST(MathCheck, TheLastLineDecides) {
  for (auto s : kMathSplits) {
    for (const auto& t : generate_tasks(domain::math, s, 300, 8)) {
      SCOPED_TRACE(t.id);
      const int64_t n = std::stoll(t.answer);
      const std::string body = t.reference.substr(0, t.reference.rfind('\n') + 1);
      EXPECT_TRUE(check(t, t.reference).pass);
      EXPECT_TRUE(check(t, t.reference + "\n\n  ").pass);
      EXPECT_TRUE(check(t, body + "= " + t.answer).pass);
      EXPECT_TRUE(check(t, t.answer).pass);  // the old bare-number format
      // The right number earlier, a wrong one last: fails.
      EXPECT_FALSE(check(t, body + "= " + t.answer + "\nAnswer: " + std::to_string(n + 1)).pass);
      EXPECT_FALSE(check(t, t.reference + "\nAnswer: " + std::to_string(n - 1)).pass);
      EXPECT_FALSE(check(t, t.reference + "\nI am not sure.").pass);
    }
  }
  task t;
  t.domain = domain::math;
  t.answer = "12345";
  EXPECT_TRUE(check(t, "steps\nAnswer: 12,345").pass);
  EXPECT_TRUE(check(t, "Answer:12345  \n").pass);
  EXPECT_FALSE(check(t, "Answer: 12,346").pass);
}

// The held-out operand combinations: disjoint between train and test, with the same operand sizes.
TEST(MathSplits, TrainAndTestCombinationsAreDisjoint) {
  using combo = std::tuple<std::string, int64_t, int64_t, int64_t>;
  auto combos = [](split s, uint64_t seed, std::set<size_t>* lengths) {
    std::set<combo> out;
    for (const auto& t : generate_tasks(domain::math, s, 4000, seed)) {
      const auto& p = t.params;
      const int64_t a = p["a"], b = p["b"], c = p.value("c", int64_t(-1));
      out.insert({t.template_name, a, b, c});
      for (int64_t v : {a, b, c}) {
        if (v >= 0) lengths->insert(std::to_string(v).size());
      }
    }
    return out;
  };
  std::set<size_t> train_len, test_len;
  const auto train = combos(split::train, 1, &train_len);
  const auto test = combos(split::test, 2, &test_len);
  size_t shared_template_items = 0;
  for (const auto& c : test) {
    EXPECT_FALSE(train.count(c)) << std::get<0>(c) << " " << std::get<1>(c) << " " << std::get<2>(c);
    shared_template_items += std::get<0>(c) != "div" && std::get<0>(c) != "ages";
  }
  EXPECT_GT(shared_template_items, 1000u);
  // Small operands collide often between two random samples, so disjointness is a real property: two
  // train samples overlap.
  std::set<size_t> unused;
  const auto again = combos(split::train, 3, &unused);
  size_t overlap = 0;
  for (const auto& c : again) overlap += train.count(c);
  EXPECT_GT(overlap, 50u);
  // Lengths overlap: both splits use 1-3 digit operands.
  EXPECT_EQ(train_len, (std::set<size_t>{1, 2, 3}));
  EXPECT_EQ(test_len, (std::set<size_t>{1, 2, 3}));
}

// Division stories (train only): the prompt states the whole and the number of shares, nothing else; the
// answer is their quotient; and no (quotient, divisor) is one the test split's share items hold out.
TEST(MathSplits, DivisionStoriesAskTheirOwnQuotient) {
  std::set<std::pair<int64_t, int64_t>> test_share;
  for (const auto& t : generate_tasks(domain::math, split::test, 6000, 9)) {
    if (t.template_name == "share")
      test_share.insert({t.params["a"].get<int64_t>(), t.params["b"].get<int64_t>()});
  }
  ASSERT_GT(test_share.size(), 300u);
  size_t n = 0, both_orders = 0;
  std::set<std::string> openings;
  for (const auto& t : generate_tasks(domain::math, split::train, 4000, 9, {"story_share"})) {
    SCOPED_TRACE(t.id + ": " + t.prompt);
    ++n;
    std::vector<int64_t> numbers;
    for (size_t i = 0; i < t.prompt.size();) {
      if (!std::isdigit(static_cast<unsigned char>(t.prompt[i]))) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < t.prompt.size() && std::isdigit(static_cast<unsigned char>(t.prompt[j]))) ++j;
      numbers.push_back(std::stoll(t.prompt.substr(i, j - i)));
      i = j;
    }
    ASSERT_EQ(numbers.size(), 2u);
    const int64_t whole = std::max(numbers[0], numbers[1]), parts = std::min(numbers[0], numbers[1]);
    both_orders += numbers[0] < numbers[1];
    ASSERT_GE(parts, 2);
    EXPECT_EQ(whole % parts, 0);
    EXPECT_EQ(t.answer, std::to_string(whole / parts));
    EXPECT_EQ(t.expression, std::to_string(whole) + " / " + std::to_string(parts));
    EXPECT_TRUE(check(t, t.reference).pass);
    EXPECT_FALSE(test_share.count({whole / parts, parts})) << "a held-out share combination";
    openings.insert(t.prompt.substr(0, t.prompt.find(' ', t.prompt.find(' ') + 1)));
  }
  EXPECT_EQ(n, 4000u);
  EXPECT_GT(both_orders, 100u);  // "{b} kids ..." and "{b} things cost ..." put the divisor first
  EXPECT_GT(openings.size(), 50u);
}

// The multiples format (division_format::multiples): the same items as plain (prompt, answer, expression),
// the reference is plain's with one line after the header listing k * b for k = 1..9, and every step's
// "q * b = p" is an entry of that list (q = 0 aside), so each quotient digit is read off it. Other
// templates' references are untouched.
TEST(MathWorked, MultiplesListTheDivisorsMultiplesAndKeepEverythingElse) {
  for (auto s : kMathSplits) {
    const auto plain = generate_tasks(domain::math, s, 1500, 21);
    const auto mult = generate_tasks(domain::math, s, 1500, 21, {}, {.division = division_format::multiples});
    ASSERT_EQ(plain.size(), mult.size());
    size_t divisions = 0;
    for (size_t i = 0; i < plain.size(); ++i) {
      SCOPED_TRACE(mult[i].id + ": " + mult[i].reference);
      EXPECT_EQ(plain[i].prompt, mult[i].prompt);
      EXPECT_EQ(plain[i].answer, mult[i].answer);
      EXPECT_EQ(plain[i].expression, mult[i].expression);
      EXPECT_TRUE(check(mult[i], mult[i].reference).pass);
      const bool division = mult[i].expression.find(" / ") != std::string::npos;
      if (!division) {
        EXPECT_EQ(plain[i].reference, mult[i].reference);
        continue;
      }
      ++divisions;
      const int64_t b = std::stoll(mult[i].expression.substr(mult[i].expression.find(" / ") + 3));
      std::string table;
      std::set<std::string> entries;
      for (int k = 1; k <= 9; ++k) {
        const std::string e = std::to_string(k) + " * " + std::to_string(b) + " = " + std::to_string(k * b);
        table += (k > 1 ? ", " : "") + e;
        entries.insert(e);
      }
      auto lines = lines_of(mult[i].reference);
      ASSERT_GE(lines.size(), 4u);
      EXPECT_EQ(lines[1], table);
      auto without = lines;
      without.erase(without.begin() + 1);
      EXPECT_EQ(without, lines_of(plain[i].reference));
      for (size_t l = 2; l + 1 < lines.size(); ++l) {
        // "part / b = q, q * b = p, part - p = rest[, left ...]": the product clause is a table entry
        const size_t c1 = lines[l].find(", ");
        const size_t c2 = lines[l].find(", ", c1 + 2);
        ASSERT_NE(c2, std::string::npos);
        const std::string product = lines[l].substr(c1 + 2, c2 - c1 - 2);
        if (product.rfind("0 * ", 0) == 0) continue;
        EXPECT_TRUE(entries.count(product)) << product;
      }
    }
    EXPECT_GT(divisions, 50u);
  }
}

// Test-only phrasing families (docs/tasks.md), restated.
const std::map<std::string, std::set<std::string>> kHeldOutMathFamilies = {
    {"add", {"sum_of", "bare"}},
    {"sub", {"difference", "bare"}},
    {"mul", {"product_of", "bare"}},
    {"mixed", {"evaluate"}},
    {"shop", {"gives"}},
    {"travel", {"trip"}},
    {"wallet", {"bank"}},
    {"share", {"groups"}},
};

TEST(MathSplits, HeldOutFamiliesNeverInTrain) {
  std::set<std::string> test_families, train_prompts;
  size_t with_suffix = 0, without = 0;
  for (const auto& t : generate_tasks(domain::math, split::train, 3000, 5)) {
    const std::string f = t.params.at("family");
    const auto held = kHeldOutMathFamilies.find(t.template_name);
    if (held == kHeldOutMathFamilies.end()) {
      // train only, worded from parts (task-generator-test.cpp)
      EXPECT_TRUE(t.template_name == "story" || t.template_name == "story_share") << t.id;
    } else {
      EXPECT_FALSE(held->second.count(f)) << t.id << " uses " << f;
    }
    const bool suffix = t.prompt.find("Answer with a number.") != std::string::npos;
    (suffix ? with_suffix : without) += 1;
  }
  EXPECT_GT(with_suffix, 300u);
  EXPECT_GT(without, 300u);
  for (const auto& t : generate_tasks(domain::math, split::test, 3000, 6)) {
    if (kHeldOutMathFamilies.count(t.template_name) &&
        kHeldOutMathFamilies.at(t.template_name).count(t.params.at("family"))) {
      test_families.insert(t.template_name + "/" + t.params.at("family").get<std::string>());
    }
  }
  size_t total = 0;
  for (const auto& [tmpl, fams] : kHeldOutMathFamilies) total += fams.size();
  EXPECT_EQ(test_families.size(), total) << "every held-out family appears in test";
}

TEST(MathSplits, LengthSplitOperandsAreLongerThanTrain) {
  auto longest = [](const task& t) {
    size_t n = 0;
    for (const char* k : {"a", "b", "c"}) {
      if (t.params.contains(k)) n = std::max(n, std::to_string(t.params[k].get<int64_t>()).size());
    }
    return n;
  };
  size_t train_max = 0;
  for (auto s : {split::train, split::test}) {
    for (const auto& t : generate_tasks(domain::math, s, 3000, 7))
      train_max = std::max(train_max, longest(t));
  }
  EXPECT_EQ(train_max, 3u);
  std::set<std::string> length_templates;
  for (const auto& t : generate_tasks(domain::math, split::length, 1000, 7)) {
    EXPECT_EQ(t.split, split::length);
    EXPECT_GT(longest(t), train_max) << t.id;
    EXPECT_NE(t.template_name, "div");
    EXPECT_NE(t.template_name, "ages");
    EXPECT_NE(t.template_name, "story");
    EXPECT_NE(t.template_name, "story_share");
    EXPECT_FALSE(kHeldOutMathFamilies.at(t.template_name).count(t.params.at("family"))) << t.id;
    length_templates.insert(t.template_name);
  }
  EXPECT_EQ(length_templates.size(), kHeldOutMathFamilies.size());
  EXPECT_THROW(generate_tasks(domain::terminal, split::length, 1, 0), moxi::error);
  EXPECT_EQ(parse_split(to_string(split::length)), split::length);
}

// Chat: references pass, commands and code fail, held-out families stay out of train.
const std::map<std::string, std::set<std::string>> kHeldOutChatFamilies = {
    {"greeting", {"time_of_day"}}, {"capabilities", {"good_at"}}, {"identity", {"name"}},
    {"help", {"stuck"}},           {"usage", {"how_to_ask"}},     {"thanks", {"appreciate"}},
    {"how_are_you", {"doing"}},    {"goodbye", {"later"}},        {"repeat", {"write_back"}},
};

TEST(Chat, DomainRoundTrips) {
  EXPECT_EQ(parse_domain("chat"), domain::chat);
  EXPECT_STREQ(to_string(domain::chat), "chat");
  for (const auto& t : generate_tasks(domain::chat, split::test, 20, 1)) {
    const auto back = task_from_json(to_json(t), "x");
    EXPECT_EQ(to_json(back), to_json(t));
    EXPECT_EQ(back.domain, domain::chat);
  }
}

TEST(Chat, ReferencesPassAndCommandsFail) {
  checker c;
  for (auto s : {split::train, split::test}) {
    for (const auto& t : generate_tasks(domain::chat, s, 400, 3)) {
      SCOPED_TRACE(t.id + ": " + t.prompt + " -> " + t.reference);
      const auto r = c.check(t, t.reference);
      EXPECT_TRUE(r.pass) << r.detail;
      for (const char* bad :
           {"ls -la", "ls", "$ echo hello", "```sh\necho hello\n```", "cat notes.txt | wc -l",
            "def greet():\n    return 'hello'", "import os\nprint('hi')", "echo 'Hello! I can help you.'",
            "wc -l notes.txt", "hello", "Hello there friend", "grep hello notes.txt > out.txt.",
            "python3 solution.py", "mkdir docs && cp *.txt docs/"}) {
        EXPECT_FALSE(c.check(t, bad).pass) << bad;
      }
    }
  }
}

TEST(Chat, TheReplyMustSayTheIntentsPoint) {
  auto tasks = generate_tasks(domain::chat, split::train, 400, 9);
  std::map<std::string, const task*> by_intent;
  for (const auto& t : tasks) by_intent[t.params.at("intent")] = &t;
  ASSERT_EQ(by_intent.size(), kHeldOutChatFamilies.size());
  checker c;
  EXPECT_FALSE(c.check(*by_intent["greeting"], "The weather is nice today.").pass);
  EXPECT_TRUE(c.check(*by_intent["greeting"], "Hey, nice to see you.").pass);
  EXPECT_FALSE(c.check(*by_intent["capabilities"], "I like long walks.").pass);
  EXPECT_TRUE(c.check(*by_intent["capabilities"], "I can fix Python programs.").pass);
  EXPECT_FALSE(c.check(*by_intent["thanks"], "I can fix Python programs.").pass);
  EXPECT_FALSE(c.check(*by_intent["goodbye"], "Hello! How can I help?").pass);
  EXPECT_TRUE(c.check(*by_intent["goodbye"], "Bye, see you soon!").pass);
  EXPECT_FALSE(c.check(*by_intent["help"], "Sure, I can help with that").pass);  // no sentence end
}

TEST(Chat, RepeatWantsTheGivenTextExactly) {
  checker c;
  size_t seen = 0;
  for (auto s : {split::train, split::test}) {
    for (const auto& t : generate_tasks(domain::chat, s, 60, 4, {"repeat"})) {
      SCOPED_TRACE(t.id + ": " + t.prompt);
      ASSERT_EQ(t.template_name, "repeat");
      const std::string text = t.params.at("text");
      // The prompt states the text, and the reference is that text.
      EXPECT_NE(t.prompt.find(text), std::string::npos);
      EXPECT_EQ(t.reference, text);
      EXPECT_TRUE(c.check(t, text).pass);
      EXPECT_TRUE(c.check(t, "  " + text + "\n").pass);  // surrounding white space is not the text
      EXPECT_FALSE(c.check(t, "'" + text + "'").pass);
      EXPECT_FALSE(c.check(t, text + " please").pass);
      EXPECT_FALSE(c.check(t, text.substr(0, text.size() - 1)).pass);
      EXPECT_FALSE(c.check(t, "").pass);
      ++seen;
    }
  }
  EXPECT_EQ(seen, 120u);
  // A text that itself ends in a newline (a pasted program) is matched the same way: white space around
  // it belongs to neither side.
  task t = generate_tasks(domain::chat, split::train, 1, 4, {"repeat"}).front();
  t.params["text"] = "def f(x):\n    return x\n";
  EXPECT_TRUE(c.check(t, "def f(x):\n    return x").pass);
  EXPECT_TRUE(c.check(t, "def f(x):\n    return x\n").pass);
  EXPECT_FALSE(c.check(t, "def f(x):\n    return y").pass);
}

TEST(Chat, HeldOutFamiliesNeverInTrain) {
  std::set<std::string> train_prompts, test_families;
  for (const auto& t : generate_tasks(domain::chat, split::train, 2000, 1)) {
    EXPECT_FALSE(kHeldOutChatFamilies.at(t.template_name).count(t.params.at("family"))) << t.id;
    EXPECT_EQ(t.params.at("intent"), t.template_name);
    train_prompts.insert(t.prompt);
  }
  for (const auto& t : generate_tasks(domain::chat, split::test, 500, 2)) {
    EXPECT_TRUE(kHeldOutChatFamilies.at(t.template_name).count(t.params.at("family"))) << t.id;
    EXPECT_FALSE(train_prompts.count(t.prompt)) << t.id << " repeats a train prompt: " << t.prompt;
    test_families.insert(t.params.at("family"));
  }
  EXPECT_EQ(test_families.size(), kHeldOutChatFamilies.size());
}

}  // namespace
