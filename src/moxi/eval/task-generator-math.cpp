// Math tasks: worked digit-by-digit references, held-out operand combinations and phrasing families (see
// task-generator-detail.h and docs/tasks.md).
#include <algorithm>
#include <map>
#include <set>

#include "moxi/base/error.h"
#include "moxi/eval/task-generator-detail.h"

namespace moxi::eval::detail {
// ---------------------------------------------------------------------------------------------------------
// math

constexpr const char* kMathHoldout =
    "operand combinations (template, a, b, c) with hash % 100 < 15 test only (same 1-3 digit sizes); "
    "phrasing families marked test only";

const std::vector<template_info>& math_templates() {
  static const std::vector<template_info> t = {
      {"add", false, kMathHoldout},
      {"sub", false, kMathHoldout},
      {"mul", false, kMathHoldout},
      {"mixed", false, kMathHoldout},
      {"shop", false, kMathHoldout},
      {"travel", false, kMathHoldout},
      {"wallet", false, kMathHoldout},
      {"share", false, kMathHoldout},
      {"div", true, "test only (train operand sizes)"},
      {"ages", true, "test only (train operand sizes)"},
      {"story", false, "train only: a word problem made from a grammar of sentence parts", true},
      {"story_share", false, "train only: a division word problem made from sentence parts", true},
  };
  return t;
}

// FNV-1a, for the held-out operand rule (portable, unlike std::hash).
uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
  return h;
}

// The held-out operand rule: about 15 % of the (template, a, b, c) combinations belong to test only.
bool math_combo_is_test(const std::string& tmpl, int64_t a, int64_t b, int64_t c) {
  const uint64_t h = mix(mix(mix(fnv1a(tmpl), uint64_t(a)), uint64_t(b)), uint64_t(c));
  return h % 100 < 15;
}

// Operand sizes. train/test: 1-3 digits (1: 20 %, 2: 40 %, 3: 40 %); multipliers (b of mul and travel, the
// divisor b of share and div, whose quotient is a) 1-2 digits (2/3, 1/3), with a two-digit multiplier only
// times a 1-2 digit number; the multiplier of shop and mixed 1 digit. length: the operands 4-5 digits,
// multipliers as in train.
int64_t with_digits(rng& r, int64_t d) {
  int64_t lo = 1;
  for (int64_t i = 1; i < d; ++i) lo *= 10;
  return r.range(std::max<int64_t>(2, lo), lo * 10 - 1);
}
int64_t draw_operand(rng& r, bool length) {
  if (length) return with_digits(r, r.range(4, 5));
  const int64_t k = r.range(0, 4);
  return with_digits(r, k == 0 ? 1 : k <= 2 ? 2 : 3);
}
int64_t draw_multiplier(rng& r) {
  return with_digits(r, r.range(0, 2) < 2 ? 1 : 2);
}
// The multiplicand beside multiplier b: a two-digit b multiplies only a 1-2 digit number (the worked form of
// larger products would cost long replies), so a 3-digit a is drawn again with 1-2 digits.
int64_t fit_to_multiplier(rng& r, int64_t a, int64_t b) {
  if (b < 10 || a < 100) return a;
  const int64_t digits = r.range(1, 2);
  return with_digits(r, digits);
}

// Digits of v >= 0, least significant first.
std::vector<int64_t> digits_of(int64_t v) {
  std::vector<int64_t> d;
  do {
    d.push_back(v % 10);
    v /= 10;
  } while (v > 0);
  return d;
}

// Column addition, right to left: "7 + 5 = 12, write 2 carry 1"; a final carry is written on its own line.
int64_t add_columns(int64_t x, int64_t y, std::vector<std::string>& out) {
  const auto dx = digits_of(x), dy = digits_of(y);
  int64_t carry = 0;
  for (size_t i = 0; i < std::max(dx.size(), dy.size()); ++i) {
    const int64_t a = i < dx.size() ? dx[i] : 0, b = i < dy.size() ? dy[i] : 0, s = a + b + carry;
    out.push_back(S(a) + " + " + S(b) + (carry ? " + " + S(carry) : "") + " = " + S(s) + ", write " +
                  S(s % 10) + (s >= 10 ? " carry " + S(s / 10) : ""));
    carry = s / 10;
  }
  if (carry) out.push_back("write " + S(carry));
  return x + y;
}

// Column subtraction of y <= x, right to left: "3 - 1 = 2" or, borrowing, "15 - 7 = 8, borrow 1".
int64_t sub_columns(int64_t x, int64_t y, std::vector<std::string>& out) {
  const auto dx = digits_of(x), dy = digits_of(y);
  int64_t borrow = 0;
  for (size_t i = 0; i < dx.size(); ++i) {
    const int64_t a = dx[i], b = i < dy.size() ? dy[i] : 0, v = a - b - borrow;
    const std::string rest = " - " + S(b) + (borrow ? " - 1" : "") + " = ";
    if (v < 0) {
      out.push_back(S(a + 10) + rest + S(v + 10) + ", borrow 1");
    } else {
      out.push_back(S(a) + rest + S(v));
    }
    borrow = v < 0;
  }
  return x - y;
}

// x times one digit d, right to left: "7 * 6 = 42, write 2 carry 4", "4 * 6 + 4 = 28, write 8 carry 2".
int64_t mul_digit_columns(int64_t x, int64_t d, std::vector<std::string>& out) {
  int64_t carry = 0;
  for (int64_t a : digits_of(x)) {
    const int64_t p = a * d + carry;
    out.push_back(S(a) + " * " + S(d) + (carry ? " + " + S(carry) : "") + " = " + S(p) + ", write " +
                  S(p % 10) + (p >= 10 ? " carry " + S(p / 10) : ""));
    carry = p / 10;
  }
  if (carry) out.push_back("write " + S(carry));
  return x * d;
}

// Long division of x by y > 0, left to right, one quotient digit per line: the part (the leading digits of x
// that reach y, then the remainder with the next digit brought down) divided by y, that digit times y, the
// remainder, and the digits of x still to bring down: "11 / 4 = 2, 2 * 4 = 8, 11 - 8 = 3, left 40". Each
// line is a one-digit quotient and one subtraction, so nothing is guessed; the next part is the remainder
// followed by the first digit left. Returns x / y (the remainder of the last line is x % y).
int64_t long_division(int64_t x, int64_t y, std::vector<std::string>& out) {
  MOXI_ASSERT(x >= 0 && y > 0, "long division needs x >= 0 and y > 0");
  const std::string d = S(x);
  size_t used = 1;
  int64_t part = d[0] - '0';
  while (part < y && used < d.size()) part = part * 10 + (d[used++] - '0');
  int64_t quotient = 0;
  for (;;) {
    const int64_t q = part / y, p = q * y, rest = part - p;
    quotient = quotient * 10 + q;
    std::string line = S(part) + " / " + S(y) + " = " + S(q) + ", " + S(q) + " * " + S(y) + " = " + S(p) +
                       ", " + S(part) + " - " + S(p) + " = " + S(rest);
    if (used == d.size()) {
      out.push_back(line);
      return quotient;
    }
    out.push_back(line + ", left " + d.substr(used));
    part = rest * 10 + (d[used++] - '0');
  }
}

// One binary operation worked out: a header line "x op y", then the column lines; a multiplication by a
// multi-digit number is one partial product per digit ("= p" after each) and then their column sum.
int64_t worked_op(int64_t x, char op, int64_t y, std::vector<std::string>& out) {
  MOXI_ASSERT(x >= 0 && y >= 0, "worked arithmetic on negative operands");
  if (op == '+') {
    out.push_back(S(x) + " + " + S(y));
    return add_columns(x, y, out);
  }
  if (op == '-') {
    if (x >= y) {
      out.push_back(S(x) + " - " + S(y));
      return sub_columns(x, y, out);
    }
    out.push_back(S(x) + " - " + S(y));
    out.push_back("= -(" + S(y) + " - " + S(x) + ")");
    return -sub_columns(y, x, out);
  }
  MOXI_ASSERT(op == '*', "unknown operator");
  if (digits_of(y).size() > digits_of(x).size()) std::swap(x, y);  // the shorter number is the multiplier
  out.push_back(S(x) + " * " + S(y));
  const auto dy = digits_of(y);
  if (dy.size() == 1) return mul_digit_columns(x, y, out);
  int64_t sum = 0, shift = 1;
  for (size_t i = 0; i < dy.size(); ++i, shift *= 10) {
    int64_t part = 0;
    if (dy[i] == 0) {
      out.push_back(S(x) + " * 0 = 0");
    } else {
      out.push_back(S(x) + " * " + S(dy[i]));
      part = mul_digit_columns(x, dy[i], out);
      out.push_back("= " + S(part));
    }
    if (i == 0) {
      sum = part;
    } else if (part != 0) {
      out.push_back(S(sum) + " + " + S(part * shift));
      sum = add_columns(sum, part * shift, out);
      if (i + 1 < dy.size()) out.push_back("= " + S(sum));
    }
  }
  return sum;
}

struct math_step {
  int64_t x;
  char op;
  int64_t y;
};

// The worked reply: the expression, each operation worked out ("= r" after all but the last), then
// "Answer: N". A header equal to the line before it is not repeated.
std::string worked_reply(const std::string& expression, const std::vector<math_step>& steps, int64_t answer) {
  std::vector<std::string> lines = {expression};
  int64_t v = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    std::vector<std::string> op;
    v = worked_op(steps[i].x, steps[i].op, steps[i].y, op);
    for (size_t k = 0; k < op.size(); ++k) {
      if (k == 0 && op[0] == lines.back()) continue;
      lines.push_back(op[k]);
    }
    if (i + 1 < steps.size()) lines.push_back("= " + S(v));
  }
  MOXI_ASSERT(steps.empty() || v == answer, "worked steps disagree with the answer");
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out + "Answer: " + S(answer);
}

const std::map<std::string, std::vector<family>>& math_families() {
  static const std::map<std::string, std::vector<family>> f = {
      {"add",
       {{"what_is", false, true, {"What is {a} + {b}?", "what is {a}+{b}", "What's {a} + {b}?"}},
        {"plus", false, false, {"{a} plus {b}?", "What is {a} plus {b}?", "{a} plus {b} equals?"}},
        {"add_verb", false, true, {"Add {a} and {b}.", "add {a} and {b}", "Please add {a} and {b}."}},
        {"compute", false, false, {"Compute {a} + {b}.", "compute {a} + {b} pls", "Calculate {a} + {b}."}},
        {"sum_of", true, false, {"What is the sum of {a} and {b}?", "Find the sum of {a} and {b}."}},
        {"bare", true, true, {"{a}+{b}=?", "{a} + {b} = ?"}}}},
      {"sub",
       {{"what_is", false, true, {"What is {a} - {b}?", "what is {a}-{b}", "What's {a} - {b}?"}},
        {"minus", false, false, {"{a} minus {b}?", "What is {a} minus {b}?", "{a} minus {b} equals?"}},
        {"subtract_verb",
         false,
         true,
         {"Subtract {b} from {a}.", "subtract {b} from {a}", "Take {b} from {a}."}},
        {"compute", false, false, {"Compute {a} - {b}.", "compute {a} - {b} pls", "Calculate {a} - {b}."}},
        {"difference", true, false, {"What is {a} take away {b}?", "Find {a} less {b}."}},
        {"bare", true, true, {"{a}-{b}=?", "{a} - {b} = ?"}}}},
      {"mul",
       {{"what_is", false, true, {"What is {a} * {b}?", "what is {a}*{b}", "What's {a} * {b}?"}},
        {"times", false, false, {"{a} times {b}?", "What is {a} times {b}?", "{a} times {b} equals?"}},
        {"multiply_verb",
         false,
         true,
         {"Multiply {a} by {b}.", "multiply {a} by {b}", "Please multiply {a} by {b}."}},
        {"compute", false, false, {"Compute {a} * {b}.", "compute {a} * {b} pls", "Calculate {a} * {b}."}},
        {"product_of",
         true,
         false,
         {"What is the product of {a} and {b}?", "Find the product of {a} and {b}."}},
        {"bare", true, true, {"{a}*{b}=?", "{a} * {b} = ?"}}}},
      {"mixed",
       {{"what_is", false, true, {"What is {e}?", "what is {e}"}},
        {"compute", false, false, {"Compute {e}.", "compute {e} pls", "Calculate {e}."}},
        {"evaluate", true, false, {"Evaluate {e}.", "Work out {e}."}}}},
      {"shop",
       {{"sells",
         false,
         true,
         {"A shop has {a} boxes with {b} {item} in each box. It sells {c} {item}. How many {item} are "
          "left?"}},
        {"store",
         false,
         false,
         {"A store gets {a} boxes of {b} {item}. Then {c} {item} are sold. How many {item} does it still "
          "have?"}},
        {"gives",
         true,
         false,
         {"A shop had {a} crates holding {b} {item} each and gave away {c} {item}. How many {item} "
          "remain?"}}}},
      {"travel",
       {{"speed",
         false,
         true,
         {"A {v} travels at {a} km per hour for {b} hours. How many kilometres does it travel?"}},
        {"distance", false, false, {"How far does a {v} go in {b} hours at {a} km per hour?"}},
        {"trip",
         true,
         false,
         {"A {v} moves {a} km every hour. How many kilometres does it cover in {b} hours?"}}}},
      {"wallet",
       {{"spends",
         false,
         true,
         {"{n} has {a} dollars, spends {b} dollars and then earns {c} dollars. How many dollars does {n} "
          "have now?"}},
        {"buys",
         false,
         false,
         {"{n} had {a} dollars, paid {b} dollars for lunch and was given {c} dollars. How many dollars does "
          "{n} have?"}},
        {"bank",
         true,
         false,
         {"{n} starts with {a} dollars, takes out {b} dollars and puts in {c} dollars. How many dollars are "
          "there now?"}}}},
      {"share",
       {{"friends",
         false,
         true,
         {"{p} {item} are shared equally among {b} friends. How many {item} does each friend get?"}},
        {"boxes",
         false,
         false,
         {"{p} {item} are packed into {b} equal boxes. How many {item} go in each box?"}},
        {"groups",
         true,
         false,
         {"{n} puts {p} {item} into {b} groups of the same size. How many {item} are in each group?"}}}},
      {"div",
       {{"divided", true, true, {"What is {p} divided by {b}?", "Compute {p} / {b}."}},
        {"split", true, false, {"{p} split into {b} equal parts is how much each?"}}}},
      {"ages",
       {{"older",
         true,
         true,
         {"{n} is {a} years old. {m} is {b} years older than {n}. How old will {m} be in {c} years?"}}}},
  };
  return f;
}

// Train only, for a share of train items: requests typed the way people type them. No word here is one
// that only a held-out family uses (task-generator-test.cpp checks).
const std::map<std::string, std::vector<std::string>>& math_casual_phrasings() {
  static const std::map<std::string, std::vector<std::string>> p = {
      {"add",
       {"whats {a} plus {b}", "{a} plus {b} pls", "how much is {a} + {b}", "can you add {a} and {b}",
        "add {a} to {b} for me", "{a}+{b}?", "need {a} plus {b}", "how much is {a} and {b} together"}},
      {"sub",
       {"whats {a} minus {b}", "{a} minus {b} pls", "how much is {a} - {b}", "{a}-{b}?",
        "subtract {b} from {a} for me", "what do i get if i subtract {b} from {a}",
        "{a} minus {b}, how much"}},
      {"mul",
       {"whats {a} times {b}", "{a} times {b} pls", "how much is {a} * {b}", "{a}*{b}?", "{a} x {b}?",
        "multiply {a} by {b} for me", "what do i get for {a} times {b}"}},
      {"mixed", {"whats {e}", "{et}?", "how much is {et}", "what is {et}", "compute {et}", "{e} pls"}},
      {"shop",
       {"i have {a} boxes of {b} {item}. i sell {c}, how many {item} are left",
        "{a} boxes with {b} {item} in each, {c} {item} sold. how many left?"}},
      {"travel",
       {"a {v} goes {a} km an hour for {b} hours. how many km is that",
        "if a {v} does {a} km per hour, how far does it get in {b} hours"}},
      {"wallet",
       {"{n} had {a} dollars, spent {b} and then got {c}. how much does {n} have now",
        "i have {a} dollars, spend {b} and earn {c}. how much do i have"}},
      {"share",
       {"{p} {item} shared equally by {b} friends, how many each?",
        "{b} friends share {p} {item} equally. how many does each get",
        "if {p} {item} go into {b} equal boxes how many per box"}},
  };
  return p;
}

// Math stories, train only: a start (someone's count, or groups of equal size), then up to two events or a
// comparison with someone else, then the question. The parts use no word that only a held-out family
// uses (TaskGenerator.CasualWordsAreNoHeldOutFamilysOwn), so the held-out families stay unseen ways of
// asking; what the stories teach is reading the operations out of sentences that change from item to item.
// Fields: {n} the first person, {m} the second, {a} the start, {b} the group count or the comparison's
// number, {x} whom an event or the question is about, {v} an event's number, {item}, {box}, {boxes}.
const std::map<std::string, std::vector<std::string>>& math_story_parts() {
  static const std::map<std::string, std::vector<std::string>> p = {
      {"start",
       {"{n} has {a} {item}.", "{n} keeps {a} {item} in a {box}.", "{n} owns {a} {item}.",
        "{n} collected {a} {item}.", "There are {a} {item} in {n}'s {box}.",
        "{n} counted {a} {item} at home.", "{n} has a {box} with {a} {item} in it."}},
      {"groups",
       {"{n} has {b} {boxes} with {a} {item} in each.", "{n} fills {b} {boxes} with {a} {item} each.",
        "{n} buys {b} packs of {a} {item}.", "There are {b} rows of {a} {item} on {n}'s desk.",
        "{n} has {b} {boxes}, and each {box} has {a} {item}."}},
      {"gain",
       {"{x} gets {v} more.", "{x} finds {v} more {item}.", "{x} buys {v} more {item}.",
        "Then {x} picks up {v} more.", "A friend hands {x} {v} {item}.", "{x} wins {v} {item}.",
        "Later {x} is given {v} more {item}.", "Next, {v} more {item} go on {x}'s pile."}},
      {"loss",
       {"{x} loses {v} of them.", "{x} uses {v} {item}.", "Then {v} of {x}'s {item} break.",
        "{x} sells {v} {item}.", "{x} hands {v} {item} to a friend.", "{v} of {x}'s {item} go missing.",
        "Later {x} throws out {v} {item}."}},
      {"more",
       {"{m} has {b} more {item} than {n}.", "{m} owns {b} more {item} than {n} does.",
        "{m} has {b} {item} more than {n}."}},
      {"fewer",
       {"{m} has {b} fewer {item} than {n}.", "{m} owns {b} fewer {item} than {n} does.",
        "{m} has {b} {item} fewer than {n}."}},
      {"times",
       {"{m} has {b} times as many {item} as {n}.", "{m} owns {b} times as many {item} as {n} does."}},
      {"ask",
       {"How many {item} does {x} have now?", "How many {item} does {x} have?", "How many does {x} have now?",
        "What is the number of {item} {x} has now?", "So how many {item} does {x} have?"}},
      {"ask_after",
       {"How many {item} does {x} have after that?", "After that, how many {item} does {x} have?",
        "How many {item} does {x} end up with?"}},
      // story_share: a start with {a} the whole, then the whole handed out to {b} people ({g}, one of them
      // {g1}), packed into {b} containers, or paid for {b} things; each way has its own questions.
      {"share",
       {"{x} shares them equally among {b} {g}.", "{x} gives them out to {b} {g}, the same number to each.",
        "{x} hands them out equally to {b} {g}.", "{b} {g} get an equal share of them.",
        "{x} wants each of {b} {g} to get as many as the others."}},
      {"ask_share",
       {"How many {item} does each {g1} get?", "How many does each {g1} get?",
        "How many is that for each {g1}?", "How many {item} is that per {g1}?", "What does each {g1} get?"}},
      {"pack",
       {"{x} packs them into {b} {boxes}, the same number in each.",
        "{x} places them into {b} {boxes} with an equal number in each.",
        "{x} sorts them into {b} equal {boxes}.",
        "They go into {b} {boxes}, each with as many as the others."}},
      {"ask_pack",
       {"How many {item} go in each {box}?", "How many are in each {box}?",
        "How many {item} does one {box} hold?", "How many {item} per {box}?"}},
      {"cost",
       {"{n} pays {a} dollars for {b} {item}.", "{b} {item} cost {a} dollars in all.",
        "{n} spent {a} dollars on {b} {item}, all the same price.", "{n} buys {b} {item} for {a} dollars."}},
      {"ask_cost",
       {"What does one cost?", "How many dollars is one of them?", "What is the price of each?",
        "How many dollars does each one cost?", "How many dollars does one cost?"}},
  };
  return p;
}

namespace {

// The people the templates' problems name; stories name eight more.
const std::vector<std::string> kMathNames = {"Sam", "Ana", "Lee", "Mia", "Tom", "Eva", "Raj", "Kim"};

// The stories' people (the templates' and eight more), things and containers.
const std::vector<std::string>& math_story_people() {
  static const std::vector<std::string> people = [] {
    auto v = kMathNames;
    for (const char* n : {"Ben", "Zoe", "Ali", "Max", "Ivy", "Noor", "Leo", "Jin"}) v.push_back(n);
    return v;
  }();
  return people;
}
const std::vector<std::string>& math_story_items() {
  static const std::vector<std::string> items = {"pencils",  "apples",  "eggs",    "cards",   "cups",
                                                 "marbles",  "stamps",  "coins",   "books",   "shells",
                                                 "stickers", "beads",   "buttons", "bottles", "plates",
                                                 "rocks",    "tickets", "cookies", "toys",    "keys"};
  return items;
}
const std::vector<std::pair<std::string, std::string>>& math_story_boxes() {
  static const std::vector<std::pair<std::string, std::string>> boxes = {
      {"bag", "bags"},       {"jar", "jars"},   {"box", "boxes"},
      {"basket", "baskets"}, {"tray", "trays"}, {"tin", "tins"}};
  return boxes;
}

// A chain of operations applied left to right, as an expression ("12 * 2 + 92": each step's x is the
// value so far, so only the first one is written).
std::string chain_expression(const std::vector<math_step>& steps) {
  std::string e = S(steps.front().x);
  for (const auto& st : steps) e += std::string(" ") + st.op + " " + S(st.y);
  return e;
}

// One story item (see math_story_parts): the expression is worked left to right like the other templates.
task make_math_story(rng& r) {
  const auto& parts = math_story_parts();
  const auto& people = math_story_people();
  const std::string n = r.pick(people);
  std::string m = r.pick(people);
  while (m == n) m = r.pick(people);
  const auto& box = r.pick(math_story_boxes());
  std::map<std::string, std::string> vars = {
      {"n", n}, {"m", m}, {"item", r.pick(math_story_items())}, {"box", box.first}, {"boxes", box.second}};
  auto say = [&](const std::string& kind, const std::string& who, int64_t v) {
    auto with = vars;
    with["x"] = who;
    with["v"] = S(v);
    return fill(r.pick(parts.at(kind)), with);
  };
  // The start: a count, or groups (a * b, b a multiplier as in mul).
  const bool groups = r.range(0, 3) == 0;
  int64_t a = draw_operand(r, false), b = 0;
  std::vector<math_step> steps;
  std::string text;
  int64_t v = a;
  if (groups) {
    b = draw_multiplier(r);
    a = fit_to_multiplier(r, a, b);
    vars["a"] = S(a);
    vars["b"] = S(b);
    text = fill(r.pick(parts.at("groups")), vars);
    steps.push_back({a, '*', b});
    v = a * b;
  } else {
    vars["a"] = S(a);
    text = fill(r.pick(parts.at("start")), vars);
  }
  // Then a comparison (half the counts; the rest is about the second person, who has an event two times in
  // three) or one event, and maybe one more event.
  std::string who = n;
  size_t events = size_t(r.range(1, 2));
  if (!groups && r.range(0, 1) == 0) {
    int64_t kind = r.range(0, 2);  // more, fewer, times
    if (kind == 1 && a < 2) kind = 0;
    if (kind == 2) {
      b = draw_multiplier(r);
      if (b >= 10 && a >= 100) b = with_digits(r, 1);
    } else {
      b = draw_operand(r, false);
      if (kind == 1 && b >= a) b = r.range(1, a - 1);
    }
    const std::string rel = kind == 0 ? "more" : kind == 1 ? "fewer" : "times";
    vars["b"] = S(b);
    text += " " + fill(r.pick(parts.at(rel)), vars);
    const char op = rel == "more" ? '+' : rel == "fewer" ? '-' : '*';
    steps.push_back({a, op, b});
    v = op == '+' ? a + b : op == '-' ? a - b : a * b;
    who = m;
    events = r.range(0, 2) == 0 ? 0 : 1;
  }
  for (size_t e = 0; e < events; ++e) {
    const bool gain = v == 0 || r.range(0, 1) == 0;
    int64_t c = draw_operand(r, false);
    if (!gain && c > v) c = r.range(1, v);
    text += " " + say(gain ? "gain" : "loss", who, c);
    const char op = gain ? '+' : '-';
    steps.push_back({v, op, c});
    v = gain ? v + c : v - c;
  }
  const bool after = steps.size() > 1 && r.range(0, 2) == 0;
  auto ask_vars = vars;
  ask_vars["x"] = who;
  text += " " + fill(r.pick(parts.at(after ? "ask_after" : "ask")), ask_vars);
  if (r.range(0, 1) == 0) text += " Answer with a number.";
  task t;
  t.prompt = text;
  t.expression = chain_expression(steps);
  t.answer = S(v);
  t.params = {{"a", a}, {"b", b}, {"family", "story"}};
  t.reference = worked_reply(t.expression, steps, v);
  return t;
}

// Exact division a / b worked as long division (share and div, story_share): the expression, one line per
// quotient digit, the answer.
std::string long_division_reply(int64_t a, int64_t b, division_format division) {
  std::vector<std::string> lines = {S(a) + " / " + S(b)};
  if (division == division_format::multiples) {
    // "1 * b = b, 2 * b = 2b, ..., 9 * b = 9b", written as each step's "q * b = p" writes its product, so a
    // step copies its digit and product from this line instead of dividing in its head.
    std::string table;
    for (int64_t k = 1; k <= 9; ++k) table += (k > 1 ? ", " : "") + S(k) + " * " + S(b) + " = " + S(k * b);
    lines.push_back(table);
  }
  const int64_t quotient = long_division(a, b, lines);
  MOXI_ASSERT(quotient * b == a, "long division of an exact quotient left a remainder");
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out + "Answer: " + S(quotient);
}

// One division story (see math_story_parts): a whole handed out, packed or paid for, and the question per
// one. The quotient and divisor are sized as share's and keep share's held-out rule, so no held-out share
// combination (quotient, divisor) is taught here.
task make_math_story_share(rng& r, division_format division) {
  static const std::vector<std::pair<std::string, std::string>> groups = {
      {"friends", "friend"}, {"kids", "kid"},         {"children", "child"},
      {"players", "player"}, {"students", "student"}, {"neighbors", "neighbor"}};
  const auto& parts = math_story_parts();
  int64_t q = 0, b = 0;
  do {
    q = draw_operand(r, false);
    b = draw_multiplier(r);
    q = fit_to_multiplier(r, q, b);
  } while (math_combo_is_test("share", q, b, 0));
  const auto& box = r.pick(math_story_boxes());
  const auto* first_box = &r.pick(math_story_boxes());  // where the start keeps them, not what they go into
  while (first_box == &box) first_box = &r.pick(math_story_boxes());
  const auto& g = r.pick(groups);
  std::map<std::string, std::string> vars = {{"n", r.pick(math_story_people())},
                                             {"item", r.pick(math_story_items())},
                                             {"box", box.first},
                                             {"boxes", box.second},
                                             {"g", g.first},
                                             {"g1", g.second},
                                             {"a", S(q * b)},
                                             {"b", S(b)}};
  vars["x"] = vars["n"];
  const int64_t way = r.range(0, 2);  // share, pack, cost
  std::string text;
  if (way == 2) {
    text = fill(r.pick(parts.at("cost")), vars) + " " + fill(r.pick(parts.at("ask_cost")), vars);
  } else {
    const std::string kind = way == 0 ? "share" : "pack";
    auto start = vars;
    start["box"] = first_box->first;
    text = fill(r.pick(parts.at("start")), start) + " " + fill(r.pick(parts.at(kind)), vars) + " " +
           fill(r.pick(parts.at("ask_" + kind)), vars);
  }
  if (r.range(0, 1) == 0) text += " Answer with a number.";
  task t;
  t.prompt = text;
  t.expression = S(q * b) + " / " + S(b);
  t.answer = S(q);
  t.params = {{"a", q}, {"b", b}, {"family", "story_share"}};
  t.reference = long_division_reply(q * b, b, division);
  return t;
}

}  // namespace

std::vector<std::string> math_family_names(const std::string& tmpl, bool test_only) {
  std::vector<std::string> v;
  for (const auto& f : math_families().at(tmpl)) {
    if (f.test_only == test_only) v.push_back(f.name);
  }
  return v;
}

// s decides the operand rule: train draws only combinations the held-out rule leaves to train, test only
// the held-out ones (test-only templates: any), length draws 4-5 digit operands.
task make_math(rng& r, const std::string& tmpl, split s, bool test_only_template, division_format division) {
  const bool length = s == split::length;
  if (tmpl == "story") return make_math_story(r);
  if (tmpl == "story_share") return make_math_story_share(r, division);
  const auto& names = kMathNames;
  int64_t a = 0, b = 0, c = 0, answer = 0;
  int form = 0;  // mixed: which expression
  for (;;) {
    a = draw_operand(r, length);
    b = draw_operand(r, length);
    c = draw_operand(r, length);
    // A two-digit multiplier only for single products of at most two digits (mul, travel, share, div); the
    // worked form of larger products would cost long replies.
    if (tmpl == "mul" || tmpl == "travel" || tmpl == "div" || tmpl == "share") {
      b = draw_multiplier(r);
      if (!length) a = fit_to_multiplier(r, a, b);
    }
    if (tmpl == "shop") b = with_digits(r, 1);
    if (tmpl == "mixed") {
      form = int(r.range(0, 2));
      if (form == 1) {
        b = with_digits(r, 1);  // a * b - c
      } else {
        c = with_digits(r, 1);  // (a + b) * c, a + b * c
      }
    }
    if (tmpl == "shop" && c > a * b) c = r.range(1, a * b);  // never sells more than there is
    if (tmpl == "wallet") b = r.range(1, a);                 // never spends more than there is
    const bool has_c = tmpl == "mixed" || tmpl == "shop" || tmpl == "wallet" || tmpl == "ages";
    if (!has_c) c = 0;  // not part of the problem, so not of the combination
    if (length || test_only_template) break;
    if (math_combo_is_test(tmpl, a, b, c) == (s == split::test)) break;
  }
  // Phrasing: train uses the train families; test any family; length the train families.
  std::vector<std::string> fams = math_family_names(tmpl, false);
  if (s == split::test) {
    for (const auto& n : math_family_names(tmpl, true)) fams.push_back(n);
  }
  const std::string fam = r.pick(fams);
  const family* F = nullptr;
  for (const auto& f : math_families().at(tmpl)) {
    if (f.name == fam) F = &f;
  }
  std::vector<math_step> steps;
  std::string expr;
  json params = {{"a", a}, {"b", b}};
  if (tmpl == "add" || tmpl == "sub" || tmpl == "mul" || tmpl == "travel") {
    const char op = tmpl == "add" ? '+' : tmpl == "sub" ? '-' : '*';
    expr = S(a) + " " + op + " " + S(b);
    steps = {{a, op, b}};
    answer = op == '+' ? a + b : op == '-' ? a - b : a * b;
  } else if (tmpl == "mixed") {
    params["c"] = c;
    if (form == 0) {
      expr = "(" + S(a) + " + " + S(b) + ") * " + S(c);
      steps = {{a, '+', b}, {a + b, '*', c}};
      answer = (a + b) * c;
    } else if (form == 1) {
      expr = S(a) + " * " + S(b) + " - " + S(c);
      steps = {{a, '*', b}, {a * b, '-', c}};
      answer = a * b - c;
    } else {
      expr = S(a) + " + " + S(b) + " * " + S(c);
      steps = {{b, '*', c}, {a, '+', b * c}};
      answer = a + b * c;
    }
  } else if (tmpl == "shop") {
    params["c"] = c;
    expr = S(a) + " * " + S(b) + " - " + S(c);
    steps = {{a, '*', b}, {a * b, '-', c}};
    answer = a * b - c;
  } else if (tmpl == "wallet") {
    params["c"] = c;
    expr = S(a) + " - " + S(b) + " + " + S(c);
    steps = {{a, '-', b}, {a - b, '+', c}};
    answer = a - b + c;
  } else if (tmpl == "div" || tmpl == "share") {
    expr = S(a * b) + " / " + S(b);
    answer = a;
  } else if (tmpl == "ages") {
    params["c"] = c;
    expr = S(a) + " + " + S(b) + " + " + S(c);
    steps = {{a, '+', b}, {a + b, '+', c}};
    answer = a + b + c;
  } else {
    MOXI_ASSERT(false, "unknown math template");
  }
  params["family"] = fam;
  const std::string n1 = r.pick(names);
  std::string n2 = r.pick(names);
  while (n2 == n1) n2 = r.pick(names);
  const std::map<std::string, std::string> vars = {
      {"a", S(a)},
      {"b", S(b)},
      {"c", S(c)},
      {"p", S(a * b)},
      {"e", expr},
      {"n", n1},
      {"m", n2},
      {"item", r.pick(std::vector<std::string>{"pencils", "apples", "eggs", "cards", "cups"})},
      {"v", r.pick(std::vector<std::string>{"train", "car", "bus", "boat"})}};
  task t;
  // One train item in five is asked casually instead (its family stays recorded: the operands and the
  // reference are the family's); two in five left the family phrasings too little (docs/tasks.md).
  const auto casual = math_casual_phrasings().find(tmpl);
  const bool asked_casually =
      s == split::train && casual != math_casual_phrasings().end() && r.range(0, 4) < 1;
  if (asked_casually) {
    std::string tight;
    for (char ch : expr) {
      if (ch != ' ') tight += ch;
    }
    auto with_tight = vars;
    with_tight["et"] = tight;
    t.prompt = fill(r.pick(casual->second), with_tight);
    params["casual"] = true;
  } else {
    t.prompt = fill(r.pick(F->phrasings), vars);
  }
  if (F->suffix && !asked_casually) {
    if (std::string(".?!").find(t.prompt.back()) == std::string::npos) t.prompt += '.';
    t.prompt += " Answer with a number.";
  }
  t.expression = expr;
  t.answer = S(answer);
  t.params = params;
  if (tmpl == "div" || tmpl == "share") {
    // Exact division worked as long division (share teaches it; div asks the same operation in words train
    // never uses).
    t.reference = long_division_reply(a * b, b, division);
  } else {
    t.reference = worked_reply(expr, steps, answer);
  }
  return t;
}

}  // namespace moxi::eval::detail
