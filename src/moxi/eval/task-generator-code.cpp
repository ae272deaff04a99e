// The code domain's generators: twenty fixed buggy functions (and three held out for the test split), and
// the train-only composed functions; see docs/tasks.md "Templates" and "Composed code items".
#include <algorithm>
#include <functional>
#include <set>

#include "moxi/base/error.h"
#include "moxi/eval/task-generator-detail.h"

namespace moxi::eval::detail {
namespace {

std::string py_list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + S(v[i]);
  return s + "]";
}

// The fixed program: the buggy one with its one wrong piece replaced.
void fix(code_parts& c, const std::string& from, const std::string& to) {
  const size_t at = c.buggy.find(from);
  MOXI_ASSERT(at != std::string::npos, "fix target not in the program");
  c.fixed = c.buggy;
  c.fixed.replace(at, from.size(), to);
}

// ---------------------------------------------------------------------------------------------------------
// composed: train-only functions built from a grammar (docs/tasks.md "Composed code items")
//
// The twenty fixed templates teach twenty fixes by heart; a held-out function is a new program. A composed
// item draws a shape (count by a condition, sum over a range, a formula, an index, ...), its names (the
// function, its parameters, the loop and accumulator variables) and one bug of the kinds a small function
// has: a comparison one step off, a range end, an accumulator's start, `//` for `/`, a swapped operator or
// operand, missing parentheses, a wrong index or slice, a character missing from a literal, a return one
// level too deep, characters iterated where words were meant. The program is written once with a slot
// (`@`) that takes the wrong piece in the buggy program and the right one in the fix. Expected values are
// computed here in C++, independently of Python; the checker test runs both programs.
//
// Held out by construction: no composed function is one of the test split's templates (vowels, Fahrenheit,
// second largest: no vowel sets, no Fahrenheit formula, no sorted-index shapes) or one of the hand-written
// user prompts (string reversal and palindromes (no step slices), Fibonacci, sums of even numbers, word
// lengths, `split(" ")`, membership by equality, safe division).

struct composed_names {
  std::string list, limit, text, loop, acc;
};

const std::vector<std::string> kListNames = {"xs",   "nums",   "values",  "items", "data",  "scores",
                                             "ages", "prices", "numbers", "vals",  "marks", "readings"};
const std::vector<std::string> kLimitNames = {"t",     "limit", "k",     "cutoff",
                                              "bound", "m",     "level", "threshold"};
const std::vector<std::string> kTextNames = {"text", "s", "line", "sentence", "msg", "phrase", "note"};
const std::vector<std::string> kLetterNames = {"letter", "ch", "initial", "first"};
const std::vector<std::string> kLoopNames = {"x", "v", "item", "num", "e", "y", "value"};
const std::vector<std::string> kAccNames = {"count", "total", "acc", "result", "res", "out", "tally", "n"};

std::string capitalized(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = char(s[0] - 'a' + 'A');
  return s;
}

// Replaces every {key} of `text`; `@` is the bug slot (filled last).
code_parts program(const std::string& fn, const std::string& args, const std::string& describe,
                   const std::string& body, const std::string& good, const std::string& bad) {
  code_parts c;
  c.fn = fn;
  c.describe = describe;
  const std::string head = "def " + fn + "(" + args + "):\n    \"\"\"" + capitalized(describe) + ".\"\"\"\n";
  const size_t at = body.find('@');
  MOXI_ASSERT(at != std::string::npos && body.find('@', at + 1) == std::string::npos, "one bug slot");
  c.buggy = head + body.substr(0, at) + bad + body.substr(at + 1);
  c.fixed = head + body.substr(0, at) + good + body.substr(at + 1);
  MOXI_ASSERT(c.buggy != c.fixed, "the bug changes the program");
  return c;
}

std::string call(const std::string& fn, const std::vector<std::string>& args) {
  std::string s = fn + "(";
  for (size_t i = 0; i < args.size(); ++i) s += (i ? ", " : "") + args[i];
  return s + ")";
}

std::string py_bool(bool b) {
  return b ? "True" : "False";
}

std::string py_str(const std::string& s) {
  return "\"" + s + "\"";
}

// num / den as Python prints it, for den a power of two up to 4 (exact in binary).
std::string py_quotient(int64_t num, int64_t den) {
  if (num % den == 0) return S(num / den);
  const bool neg = (num < 0) != (den < 0);
  const int64_t n = num < 0 ? -num : num, d = den < 0 ? -den : den;
  const int64_t frac = (n % d) * 100 / d;  // .25 .5 .75
  std::string f = frac % 10 == 0 ? S(frac / 10) : S(frac);
  return (neg ? "-" : "") + S(n / d) + "." + f;
}

std::vector<int64_t> distinct_values(rng& r, size_t n, int64_t lo, int64_t hi) {
  std::set<int64_t> seen;
  std::vector<int64_t> v;
  while (v.size() < n) {
    const int64_t x = r.range(lo, hi);
    if (seen.insert(x).second) v.push_back(x);
  }
  return v;
}

struct relation {
  std::string op, words, near;  // near: the comparison one step off
  bool (*holds)(int64_t, int64_t);
};

const std::vector<relation>& relations() {
  static const std::vector<relation> v = {
      {">", "strictly greater than", ">=", [](int64_t x, int64_t t) { return x > t; }},
      {">=", "at least", ">", [](int64_t x, int64_t t) { return x >= t; }},
      {"<", "strictly less than", "<=", [](int64_t x, int64_t t) { return x < t; }},
      {"<=", "at most", "<", [](int64_t x, int64_t t) { return x <= t; }},
  };
  return v;
}

// A list around t that holds t itself (so a comparison one step off counts differently), values on both
// sides, in random order.
std::vector<int64_t> around(rng& r, int64_t t) {
  std::vector<int64_t> xs = {t, t + r.range(1, 9), t - r.range(1, 9), t + r.range(10, 30)};
  for (int64_t extra = r.range(0, 3); extra > 0; --extra) xs.push_back(t + r.range(-20, 20));
  r.shuffle(xs);
  return xs;
}

// count or sum the numbers that meet a condition
code_parts composed_filter(rng& r, const composed_names& n) {
  const bool sum = r.range(0, 1) == 1;
  const int64_t kind = r.range(0, 4);  // 0-3: a relation to a limit; 4: divisibility
  std::string cond_good, cond_bad, what, fn, args = n.list;
  std::function<bool(int64_t)> keep, keep_bad;
  std::vector<int64_t> xs;
  int64_t lim = 0;
  if (kind < 4) {
    const relation& rel = relations()[size_t(kind)];
    lim = r.range(-10, 150);
    if (lim == 0) lim = 1;  // a sum cannot tell x > 0 from x >= 0
    args += ", " + n.limit;
    cond_good = n.loop + " " + rel.op + " " + n.limit;
    cond_bad = n.loop + " " + rel.near + " " + n.limit;
    what = "that are " + rel.words + " " + n.limit;
    const bool up = rel.op[0] == '>';
    fn = r.pick(std::vector<std::string>{up ? "above" : "below", up ? "over" : "under", up ? "big" : "small",
                                         up ? "high" : "low"});
    auto h = rel.holds;
    keep = [h, lim](int64_t x) { return h(x, lim); };
    const relation& near = *std::find_if(relations().begin(), relations().end(),
                                         [&](const relation& q) { return q.op == rel.near; });
    auto hb = near.holds;
    keep_bad = [hb, lim](int64_t x) { return hb(x, lim); };
    xs = around(r, lim);
  } else {
    const int64_t d = r.range(3, 9);
    cond_good = n.loop + " % " + S(d) + " == 0";
    const bool truthy = r.range(0, 1) == 0;
    cond_bad = truthy ? n.loop + " % " + S(d) : n.loop + " % " + S(d) + " == 1";
    what = "that are divisible by " + S(d);
    fn = r.pick(std::vector<std::string>{"multiples", "divisible", "by_" + S(d)});
    keep = [d](int64_t x) { return x % d == 0; };
    keep_bad = [d, truthy](int64_t x) { return truthy ? x % d != 0 : x % d == 1; };
    for (int64_t i = r.range(4, 7); i > 0; --i) xs.push_back(r.range(1, 60));
    xs.push_back(d * r.range(1, 9));
    xs.push_back(d * r.range(1, 9) + 1);
    r.shuffle(xs);
  }
  fn = (sum ? r.pick(std::vector<std::string>{"sum_", "total_", "add_"})
            : r.pick(std::vector<std::string>{"count_", "num_", "how_many_"})) +
       fn;
  const std::string describe =
      (sum ? "add up the numbers in " : "count the numbers in ") + n.list + " " + what;
  std::string body;
  switch (r.range(0, 1)) {
    case 0:
      body = "    " + n.acc + " = 0\n    for " + n.loop + " in " + n.list + ":\n        if @:\n            " +
             n.acc + " += " + (sum ? n.loop : "1") + "\n    return " + n.acc + "\n";
      break;
    default:
      body = "    return sum(" + (sum ? n.loop : std::string("1")) + " for " + n.loop + " in " + n.list +
             " if @)\n";
  }
  code_parts c = program(fn, args, describe, body, cond_good, cond_bad);
  auto value = [&](const std::vector<int64_t>& v, const std::function<bool(int64_t)>& k) {
    int64_t out = 0;
    for (auto x : v) out += k(x) ? (sum ? x : 1) : 0;
    return out;
  };
  // Make sure the example tells the bug apart (it always does for a limit in the list; divisibility by
  // chance): add a value only the right condition keeps until it does.
  for (int tries = 0; value(xs, keep) == value(xs, keep_bad); ++tries) {
    MOXI_ASSERT(tries < 40, "a filter example that shows its bug");
    xs.push_back(xs.back() + 1);
  }
  std::vector<std::string> a = {py_list(xs)};
  if (kind < 4) a.push_back(S(lim));
  c.asserts = {{call(fn, a), S(value(xs, keep))}};
  std::vector<std::string> empty = {"[]"};
  if (kind < 4) empty.push_back(S(lim));
  c.asserts.push_back({call(fn, empty), "0"});
  c.params = {{"shape", "filter"}};
  return c;
}

// a sum or product over a range of whole numbers, both ends included
code_parts composed_range(rng& r, const composed_names& n) {
  const std::string i = r.pick(std::vector<std::string>{"i", "j", "k"});
  struct term {
    std::string expr, words;
    int64_t (*f)(int64_t);
  };
  static const std::vector<term> terms = {
      {"{i}", "the numbers", [](int64_t x) { return x; }},
      {"{i} * {i} * {i}", "the cubes", [](int64_t x) { return x * x * x; }},
      {"2 * {i}", "twice the numbers", [](int64_t x) { return 2 * x; }},
      {"{i} + 1", "one more than each of the numbers", [](int64_t x) { return x + 1; }},
      {"3 * {i}", "three times the numbers", [](int64_t x) { return 3 * x; }},
  };
  const bool product = r.range(0, 3) == 0;
  const term& tm = product ? terms[0] : r.pick(terms);
  const std::string expr = fill(tm.expr, {{"i", i}});
  const std::string lo = r.pick(std::vector<std::string>{"a", "lo", "start", "first"});
  const std::string hi = lo == "a" ? "b" : lo == "lo" ? "hi" : lo == "start" ? "stop" : "last";
  const std::string fn =
      product ? r.pick(std::vector<std::string>{"product_between", "multiply_range", "range_product"})
              : r.pick(std::vector<std::string>{"sum_between", "add_range", "range_total", "series_sum"});
  const std::string describe = std::string(product ? "multiply " : "add up ") + tm.words + " from " + lo +
                               " to " + hi + ", both included";
  // The bug: the range stops one short, or (a product) the accumulator starts at 0.
  const bool init_bug = product && r.range(0, 1) == 0;
  const std::string range_good = "range(" + lo + ", " + hi + " + 1)",
                    range_bad = "range(" + lo + ", " + hi + ")";
  const std::string start = product ? "1" : "0";
  std::string body;
  if (init_bug) {
    body = "    " + n.acc + " = @\n    for " + i + " in " + range_good + ":\n        " + n.acc +
           " *= " + expr + "\n    return " + n.acc + "\n";
  } else {
    body = "    " + n.acc + " = " + start + "\n    for " + i + " in @:\n        " + n.acc +
           (product ? " *= " : " += ") + expr + "\n    return " + n.acc + "\n";
  }
  code_parts c = init_bug ? program(fn, lo + ", " + hi, describe, body, "1", "0")
                          : program(fn, lo + ", " + hi, describe, body, range_good, range_bad);
  auto value = [&](int64_t a, int64_t b) {
    int64_t v = product ? 1 : 0;
    for (int64_t x = a; x <= b; ++x) v = product ? v * tm.f(x) : v + tm.f(x);
    return v;
  };
  // A sum whose last term is 0 (b = 0 for i, 2i, 3i, i³; b = -1 for i + 1) is the same without it: redraw.
  int64_t a = 0, b = 0;
  do {
    a = r.range(product ? 1 : -5, 10), b = a + r.range(1, product ? 5 : 12);
  } while (!product && tm.f(b) == 0);
  c.asserts = {{call(fn, {S(a), S(b)}), S(value(a, b))}, {call(fn, {S(b), S(b)}), S(value(b, b))}};
  c.params = {{"shape", "range"}};
  return c;
}

// the largest or smallest of a list or of a few numbers
code_parts composed_extreme(rng& r, const composed_names& n) {
  const bool largest = r.range(0, 1) == 0;
  const std::string word = largest ? r.pick(std::vector<std::string>{"largest", "biggest", "highest"})
                                   : r.pick(std::vector<std::string>{"smallest", "lowest", "least"});
  const std::string best = r.pick(std::vector<std::string>{"best", "top", "cur", "found"});
  switch (r.range(0, 2)) {
    case 0: {  // a loop whose running best starts at 0
      const std::string fn = r.pick(std::vector<std::string>{"find_", "get_", "pick_"}) + word;
      const std::string cmp = largest ? " > " : " < ";
      const std::string body = "    " + best + " = @\n    for " + n.loop + " in " + n.list +
                               ":\n        if " + n.loop + cmp + best + ":\n            " + best + " = " +
                               n.loop + "\n    return " + best + "\n";
      code_parts c = program(fn, n.list, "return the " + word + " number in the non-empty list " + n.list,
                             body, n.list + "[0]", "0");
      // All below zero for the largest, all above for the smallest: a start at 0 wins every comparison.
      std::vector<int64_t> xs = distinct_values(r, size_t(r.range(3, 6)), 1, 200);
      if (largest)
        for (auto& x : xs) x = -x;
      const int64_t want =
          largest ? *std::max_element(xs.begin(), xs.end()) : *std::min_element(xs.begin(), xs.end());
      c.asserts = {{call(fn, {py_list(xs)}), S(want)}, {call(fn, {"[" + S(want) + "]"}), S(want)}};
      c.params = {{"shape", "extreme-loop"}};
      return c;
    }
    case 1: {  // the builtin of the other direction
      const std::string fn = word + "_of";
      code_parts c =
          program(fn, n.list, "return the " + word + " number in the non-empty list " + n.list,
                  "    return @(" + n.list + ")\n", largest ? "max" : "min", largest ? "min" : "max");
      const std::vector<int64_t> xs = distinct_values(r, size_t(r.range(3, 6)), -50, 200);
      const int64_t want =
          largest ? *std::max_element(xs.begin(), xs.end()) : *std::min_element(xs.begin(), xs.end());
      c.asserts = {{call(fn, {py_list(xs)}), S(want)}};
      c.params = {{"shape", "extreme-builtin"}};
      return c;
    }
    default: {  // three numbers, one left out of the call
      const std::string fn = word + "_of_three";
      const std::string builtin = largest ? "max" : "min";
      code_parts c = program(fn, "a, b, c", "return the " + word + " of a, b and c",
                             "    return " + builtin + "(@)\n", "a, b, c", "a, b");
      std::vector<int64_t> v = distinct_values(r, 3, -40, 200);
      std::sort(v.begin(), v.end());
      // c is the answer, so leaving it out shows.
      const int64_t want = largest ? v[2] : v[0];
      const int64_t other1 = largest ? v[0] : v[1], other2 = largest ? v[1] : v[2];
      c.asserts = {{call(fn, {S(other1), S(other2), S(want)}), S(want)},
                   {call(fn, {S(want), S(other1), S(other2)}), S(want)}};
      c.params = {{"shape", "extreme-args"}};
      return c;
    }
  }
}

// a formula of one to three numbers with one operator, operand or parenthesis wrong
code_parts composed_formula(rng& r, const composed_names&) {
  struct formula {
    std::vector<std::string> names;
    std::string args, describe, good;
    std::vector<std::string> bad;
    // Draws arguments that make the right value exact; returns {args..., numerator, denominator}.
    std::vector<int64_t> (*draw)(rng&);
    std::vector<std::string> (*value)(const std::vector<int64_t>&);  // {right, one per bad}
  };
  static const std::vector<formula> table = {
      {{"total_cost", "order_price", "bill_for"},
       "price, qty",
       "return what qty items cost at price each",
       "price * qty",
       {"price + qty", "price - qty"},
       [](rng& g) {
         return std::vector<int64_t>{g.range(3, 90), g.range(3, 12)};
       },
       [](const std::vector<int64_t>& a) {
         return std::vector<std::string>{S(a[0] * a[1]), S(a[0] + a[1]), S(a[0] - a[1])};
       }},
      {{"change_due", "money_back"},
       "paid, cost",
       "return the change from paying paid for something that costs cost",
       "paid - cost",
       {"cost - paid", "paid + cost"},
       [](rng& g) {
         const int64_t c = g.range(5, 80);
         return std::vector<int64_t>{c + g.range(1, 50), c};
       },
       [](const std::vector<int64_t>& a) {
         return std::vector<std::string>{S(a[0] - a[1]), S(a[1] - a[0]), S(a[0] + a[1])};
       }},
      {{"mean_of_two", "midpoint", "avg2"},
       "a, b",
       "return the average of a and b",
       "(a + b) / 2",
       {"a + b / 2", "a + b // 2"},
       [](rng& g) {
         const int64_t a = g.range(2, 99);
         return std::vector<int64_t>{a, a + 2 * g.range(1, 40)};
       },
       [](const std::vector<int64_t>& a) {
         return std::vector<std::string>{S((a[0] + a[1]) / 2), py_quotient(2 * a[0] + a[1], 2),
                                         S(a[0] + a[1] / 2)};
       }},
      {{"mean_of_three", "avg3"},
       "a, b, c",
       "return the average of a, b and c",
       "(a + b + c) / 3",
       {"a + b + c / 3"},
       [](rng& g) {
         // c a multiple of 3 (so the buggy c / 3 is exact too) and a + b + c as well.
         const int64_t b = g.range(1, 60), c = 3 * g.range(1, 20);
         int64_t a = g.range(1, 60);
         a += (3 - (a + b) % 3) % 3;
         return std::vector<int64_t>{a, b, c};
       },
       [](const std::vector<int64_t>& a) {
         return std::vector<std::string>{S((a[0] + a[1] + a[2]) / 3), S(a[0] + a[1] + a[2] / 3)};
       }},
      {{"minutes_to_seconds", "to_seconds"},
       "minutes",
       "convert minutes to seconds",
       "minutes * 60",
       {"minutes + 60", "minutes * 100"},
       [](rng& g) { return std::vector<int64_t>{g.range(2, 90)}; },
       [](const std::vector<int64_t>& a) {
         return std::vector<std::string>{S(a[0] * 60), S(a[0] + 60), S(a[0] * 100)};
       }},
      {{"weeks_to_days", "days_in_weeks"},
       "weeks",
       "convert weeks to days",
       "weeks * 7",
       {"weeks + 7", "weeks * 5"},
       [](rng& g) { return std::vector<int64_t>{g.range(2, 60)}; },
       [](const std::vector<int64_t>& a) {
         return std::vector<std::string>{S(a[0] * 7), S(a[0] + 7), S(a[0] * 5)};
       }},
      {{"km_to_meters", "to_meters"},
       "km",
       "convert kilometres to metres",
       "km * 1000",
       {"km * 100", "km + 1000"},
       [](rng& g) { return std::vector<int64_t>{g.range(2, 90)}; },
       [](const std::vector<int64_t>& a) {
         return std::vector<std::string>{S(a[0] * 1000), S(a[0] * 100), S(a[0] + 1000)};
       }},
      {{"celsius_to_kelvin", "to_kelvin"},
       "c",
       "convert degrees Celsius to kelvin",
       "c + 273",
       {"c - 273", "c * 273"},
       [](rng& g) { return std::vector<int64_t>{g.range(-40, 120)}; },
       [](const std::vector<int64_t>& a) {
         return std::vector<std::string>{S(a[0] + 273), S(a[0] - 273), S(a[0] * 273)};
       }},
      {{"kelvin_to_celsius", "from_kelvin"},
       "k",
       "convert kelvin to degrees Celsius",
       "k - 273",
       {"k + 273", "273 - k"},
       [](rng& g) { return std::vector<int64_t>{g.range(200, 400)}; },
       [](const std::vector<int64_t>& a) {
         return std::vector<std::string>{S(a[0] - 273), S(a[0] + 273), S(273 - a[0])};
       }},
      {{"triangle_area", "tri_area"},
       "base, height",
       "return the area of a triangle with this base and height",
       "base * height / 2",
       {"base * height * 2", "base + height / 2"},
       [](rng& g) {
         return std::vector<int64_t>{2 * g.range(1, 30), g.range(3, 20)};
       },
       [](const std::vector<int64_t>& a) {
         return std::vector<std::string>{S(a[0] * a[1] / 2), S(a[0] * a[1] * 2),
                                         py_quotient(2 * a[0] + a[1], 2)};
       }},
      {{"price_each", "unit_price", "share_of"},
       "total, count",
       "return total divided evenly into count parts",
       "total / count",
       {"total // count", "count / total"},
       [](rng& g) {
         const int64_t c = g.range(0, 1) ? 2 : 4;
         int64_t t = g.range(5, 200);
         if (t % c == 0) ++t;
         return std::vector<int64_t>{t, c};
       },
       [](const std::vector<int64_t>& a) {
         return std::vector<std::string>{py_quotient(a[0], a[1]), S(a[0] / a[1]), "0"};
       }},
      {{"leftover", "remainder_of"},
       "a, b",
       "return what is left over when a is divided by b",
       "a % b",
       {"a // b", "b % a"},
       [](rng& g) {
         const int64_t b = g.range(3, 12);
         int64_t a = b * g.range(2, 15) + g.range(1, b - 1);
         if (a / b == a % b) a += b;
         return std::vector<int64_t>{a, b};
       },
       [](const std::vector<int64_t>& a) {
         return std::vector<std::string>{S(a[0] % a[1]), S(a[0] / a[1]), S(a[1] % a[0])};
       }},
      {{"cube_volume", "box_volume"},
       "side",
       "return the volume of a cube with this side",
       "side * side * side",
       {"side * side", "side * 3"},
       [](rng& g) { return std::vector<int64_t>{g.range(2, 30)}; },
       [](const std::vector<int64_t>& a) {
         return std::vector<std::string>{S(a[0] * a[0] * a[0]), S(a[0] * a[0]), S(a[0] * 3)};
       }},
      {{"square_perimeter", "fence_length"},
       "side",
       "return the perimeter of a square with this side",
       "4 * side",
       {"side * side", "4 + side"},
       [](rng& g) {
         int64_t s = g.range(5, 90);
         return std::vector<int64_t>{s};
       },
       [](const std::vector<int64_t>& a) {
         return std::vector<std::string>{S(4 * a[0]), S(a[0] * a[0]), S(4 + a[0])};
       }},
      {{"profit", "earnings"},
       "revenue, cost",
       "return the profit: revenue minus cost",
       "revenue - cost",
       {"revenue + cost", "cost - revenue"},
       [](rng& g) {
         const int64_t c = g.range(10, 300);
         return std::vector<int64_t>{c + g.range(1, 300), c};
       },
       [](const std::vector<int64_t>& a) {
         return std::vector<std::string>{S(a[0] - a[1]), S(a[0] + a[1]), S(a[1] - a[0])};
       }},
      {{"age_in", "years_old"},
       "born, year",
       "return how old someone born in born is in year",
       "year - born",
       {"born - year", "year + born"},
       [](rng& g) {
         const int64_t b = g.range(1930, 2015);
         return std::vector<int64_t>{b, b + g.range(1, 60)};
       },
       [](const std::vector<int64_t>& a) {
         return std::vector<std::string>{S(a[1] - a[0]), S(a[0] - a[1]), S(a[1] + a[0])};
       }},
      {{"percent_of", "as_percent"},
       "part, whole",
       "return part as a percentage of whole",
       "part * 100 / whole",
       {"whole * 100 / part", "part * 10 / whole"},
       [](rng& g) {
         const int64_t w = g.pick(std::vector<int64_t>{4, 5, 10, 20, 25, 50});
         int64_t p = g.range(1, w - 1);
         return std::vector<int64_t>{p, w};
       },
       [](const std::vector<int64_t>& a) {
         // Bad values need not be exact: any value but the right one fails; "x" marks "not this".
         return std::vector<std::string>{S(a[0] * 100 / a[1]), "x", "x"};
       }},
      {{"speed", "pace"},
       "distance, time",
       "return the speed when distance is covered in time",
       "distance / time",
       {"distance * time", "time / distance"},
       [](rng& g) {
         const int64_t t = g.range(2, 9);
         return std::vector<int64_t>{t * g.range(3, 40), t};
       },
       [](const std::vector<int64_t>& a) {
         return std::vector<std::string>{S(a[0] / a[1]), S(a[0] * a[1]), "x"};
       }},
  };
  const formula& f = r.pick(table);
  const size_t which = size_t(r.range(0, int64_t(f.bad.size()) - 1));
  const std::string fn = r.pick(f.names);
  code_parts c = program(fn, f.args, f.describe, "    return @\n", f.good, f.bad[which]);
  // Two draws; the first whose buggy value differs from the right one leads (its call is the prompt's
  // example). A draw where they agree is redrawn.
  for (int tries = 0; c.asserts.size() < 2 && tries < 50; ++tries) {
    const auto a = f.draw(r);
    const auto v = f.value(a);
    if (c.asserts.empty() && v[0] == v[1 + which]) continue;
    std::vector<std::string> args;
    for (auto x : a) args.push_back(S(x));
    c.asserts.push_back({call(fn, args), v[0]});
  }
  MOXI_ASSERT(!c.asserts.empty(), "a formula example that shows its bug");
  c.params = {{"shape", "formula"}};
  return c;
}

// one item of a list by position
code_parts composed_index(rng& r, const composed_names& n) {
  struct pick_rule {
    std::string words, good, bad;
    size_t (*index)(size_t);
  };
  static const std::vector<pick_rule> rules = {
      {"return the first item of {l}", "{l}[0]", "{l}[1]", [](size_t) { return size_t(0); }},
      {"return the last item of {l}", "{l}[-1]", "{l}[0]", [](size_t len) { return len - 1; }},
      {"return the second item of {l}", "{l}[1]", "{l}[2]", [](size_t) { return size_t(1); }},
      {"return the item before the last one of {l}", "{l}[-2]", "{l}[-1]",
       [](size_t len) { return len - 2; }},
      {"return the middle item of {l} (its length is odd)", "{l}[len({l}) // 2]", "{l}[len({l}) // 2 + 1]",
       [](size_t len) { return len / 2; }},
  };
  const pick_rule& rule = r.pick(rules);
  const std::string fn = r.pick(std::vector<std::string>{"get_", "pick_", "take_"}) +
                         (rule.words.find("first") != std::string::npos    ? "first"
                          : rule.words.find("before") != std::string::npos ? "penultimate"
                          : rule.words.find("last") != std::string::npos   ? "last"
                          : rule.words.find("second") != std::string::npos ? "second"
                                                                           : "middle");
  code_parts c = program(fn, n.list, fill(rule.words, {{"l", n.list}}), "    return @\n",
                         fill(rule.good, {{"l", n.list}}), fill(rule.bad, {{"l", n.list}}));
  for (int k = 0; k < 2; ++k) {
    const size_t len =
        size_t(rule.words.find("odd") != std::string::npos ? 3 + 2 * r.range(0, 2) : r.range(3, 7));
    const auto xs = distinct_values(r, len, -30, 300);
    c.asserts.push_back({call(fn, {py_list(xs)}), S(xs[rule.index(len)])});
  }
  c.params = {{"shape", "index"}};
  return c;
}

// count the characters of a string that belong to a set written out in a literal
code_parts composed_charset(rng& r, const composed_names& n) {
  struct charset {
    std::string chars, words, filler;
  };
  static const std::vector<charset> sets = {
      {".,!?", "the punctuation marks '.', ',', '!' and '?'", "abcdehlmnorstw "},
      {"xyz", "the letters x, y and z", "abcdefghmnorst "},
      {"abcdef", "the letters a, b, c, d, e and f", "ghklmnoprstuw "},
      {"+-*/", "the signs '+', '-', '*' and '/'", "0123456789 "},
      {"13579", "the odd digits 1, 3, 5, 7 and 9", "02468abcxyz "},
      {"()[]", "the brackets '(', ')', '[' and ']'", "abcdefxyz12 "},
      {"qwerty", "the letters q, w, e, r, t and y", "abcdfghijklmnop "},
      {"mnp", "the letters m, n and p", "abcdefghijkl "},
  };
  const charset& cs = r.pick(sets);
  const size_t drop = size_t(r.range(0, int64_t(cs.chars.size()) - 1));
  std::string short_set = cs.chars;
  short_set.erase(drop, 1);
  const std::string ch = r.pick(std::vector<std::string>{"ch", "c", "char", "letter"});
  const std::string fn = r.pick(std::vector<std::string>{"count_", "num_", "tally_"}) +
                         r.pick(std::vector<std::string>{"marks", "special", "picked", "chosen", "listed"});
  const std::string body =
      r.range(0, 1) == 0 ? "    return sum(1 for " + ch + " in " + n.text + " if " + ch + " in @)\n"
                         : "    " + n.acc + " = 0\n    for " + ch + " in " + n.text + ":\n        if " + ch +
                               " in @:\n            " + n.acc + " += 1\n    return " + n.acc + "\n";
  code_parts c = program(fn, n.text, "count the characters of " + n.text + " that are " + cs.words, body,
                         py_str(cs.chars), py_str(short_set));
  // A string of filler and set characters that holds the dropped one.
  std::string s;
  for (int64_t i = r.range(6, 14); i > 0; --i) {
    s += r.range(0, 2) == 0 ? cs.chars[size_t(r.range(0, int64_t(cs.chars.size()) - 1))]
                            : cs.filler[size_t(r.range(0, int64_t(cs.filler.size()) - 1))];
  }
  s.insert(size_t(r.range(0, int64_t(s.size()))), 1, cs.chars[drop]);
  int64_t want = 0;
  for (char x : s) want += cs.chars.find(x) != std::string::npos;
  std::string none;
  for (int64_t i = r.range(3, 8); i > 0; --i)
    none += cs.filler[size_t(r.range(0, int64_t(cs.filler.size()) - 1))];
  c.asserts = {{call(fn, {py_str(s)}), S(want)}, {call(fn, {py_str(none)}), "0"}};
  c.params = {{"shape", "charset"}};
  return c;
}

// "is there one?" / "are all?" with the final return one level too deep (inside the loop)
code_parts composed_early_return(rng& r, const composed_names& n) {
  const bool any = r.range(0, 1) == 0;
  const int64_t kind = r.range(0, 2);
  std::string cond, words, fn;
  std::function<bool(int64_t)> holds;
  int64_t d = 0;
  if (kind == 0) {
    cond = n.loop + " < 0", words = "negative", holds = [](int64_t x) { return x < 0; };
    fn = any ? "has_negative" : "all_negative";
  } else if (kind == 1) {
    d = r.range(3, 9);
    cond = n.loop + " % " + S(d) + " == 0", words = "divisible by " + S(d);
    holds = [d](int64_t x) { return x % d == 0; };
    fn = any ? "any_multiple" : "all_multiples";
  } else {
    d = r.range(10, 90);
    cond = n.loop + " > " + S(d), words = "greater than " + S(d);
    holds = [d](int64_t x) { return x > d; };
    fn = any ? "any_above" : "all_above";
  }
  // any: return True at the first that holds; all: return False at the first that does not.
  const std::string hit = any ? "True" : "False", miss = any ? "False" : "True";
  const std::string body = "    for " + n.loop + " in " + n.list + ":\n        if " +
                           (any ? cond : "not (" + cond + ")") + ":\n            return " + hit + "\n@";
  code_parts c = program(fn, n.list,
                         any ? "return True when some number in " + n.list + " is " + words
                             : "return True when every number in " + n.list + " is " + words,
                         body, "    return " + miss + "\n", "        return " + miss + "\n");
  // The first item decides nothing (any: it fails the test; all: it passes), a later one does.
  auto draw_value = [&](bool want_holds) {
    for (;;) {
      const int64_t x = kind == 0 ? r.range(-60, 60) : r.range(1, 150);
      if (holds(x) == want_holds) return x;
    }
  };
  std::vector<int64_t> xs = {draw_value(!any)};
  for (int64_t i = r.range(1, 3); i > 0; --i) xs.push_back(draw_value(!any));
  xs.insert(xs.begin() + r.range(1, int64_t(xs.size())), draw_value(any));
  std::vector<int64_t> plain;
  for (int64_t i = r.range(2, 4); i > 0; --i) plain.push_back(draw_value(!any));
  c.asserts = {{call(fn, {py_list(xs)}), py_bool(any)}, {call(fn, {py_list(plain)}), py_bool(!any)}};
  c.params = {{"shape", "early-return"}};
  return c;
}

// words of a text, where the bug walks the characters (or picks the wrong word)
code_parts composed_words(rng& r, const composed_names& n) {
  std::vector<std::string> ws;
  for (int64_t i = r.range(3, 6); i > 0; --i) {
    std::string w = r.pick(english_words());
    ws.push_back(w);
  }
  std::string text;
  for (const auto& w : ws) text += (text.empty() ? "" : " ") + w;
  const std::string w = r.pick(std::vector<std::string>{"w", "word", "token"});
  const std::string split = n.text + ".split()";
  code_parts c;
  switch (r.range(0, 3)) {
    case 0: {  // words longer than k letters
      const int64_t k = r.range(3, 6);
      const std::string fn = r.pick(std::vector<std::string>{"count_long_words", "long_words", "num_long"});
      c = program(fn, n.text + ", " + n.limit,
                  "count the words in " + n.text + " that are longer than " + n.limit + " letters",
                  "    return sum(1 for " + w + " in @ if len(" + w + ") > " + n.limit + ")\n", split,
                  n.text);
      auto count = [&](const std::vector<std::string>& v) {
        int64_t m = 0;
        for (const auto& x : v) m += int64_t(x.size()) > k;
        return m;
      };
      // Make sure some word is long enough (a character is never longer than k).
      if (count(ws) == 0) ws.push_back("understanding"), text += " understanding";
      c.asserts = {{call(fn, {py_str(text), S(k)}), S(count(ws))}};
      break;
    }
    case 1: {  // the longest word's length
      const std::string fn =
          r.pick(std::vector<std::string>{"longest_word_length", "max_word_len", "widest"});
      c = program(fn, n.text, "return the length of the longest word in " + n.text,
                  "    return max(len(" + w + ") for " + w + " in @)\n", split, n.text);
      size_t m = 0;
      for (const auto& x : ws) m = std::max(m, x.size());
      if (m < 2) ws.push_back("between"), text += " between", m = 7;
      c.asserts = {{call(fn, {py_str(text)}), S(int64_t(m))}};
      break;
    }
    case 2: {  // the first or last word
      const bool last = r.range(0, 1) == 0;
      const std::string fn = last ? "last_word" : "first_word";
      c = program(fn, n.text, std::string("return the ") + (last ? "last" : "first") + " word of " + n.text,
                  "    return @\n", split + (last ? "[-1]" : "[0]"), last ? split + "[0]" : n.text + "[0]");
      if (ws.front() == ws.back()) ws.push_back("other"), text += " other";
      c.asserts = {{call(fn, {py_str(text)}), py_str(last ? ws.back() : ws.front())}};
      break;
    }
    default: {  // the number of words starting with a letter
      const std::string letter(1, ws[size_t(r.range(0, int64_t(ws.size()) - 1))][0]);
      // The letter also inside a word, so walking characters counts differently.
      ws.push_back("x" + letter + "x");
      text += " x" + letter + "x";
      const std::string fn =
          r.pick(std::vector<std::string>{"count_starting", "words_starting", "initial_count"});
      const std::string l = r.pick(kLetterNames);
      c = program(fn, n.text + ", " + l, "count the words in " + n.text + " that start with " + l,
                  "    return sum(1 for " + w + " in @ if " + w + ".startswith(" + l + "))\n", split, n.text);
      int64_t m = 0;
      for (const auto& x : ws) m += x[0] == letter[0];
      c.asserts = {{call(fn, {py_str(text), py_str(letter)}), S(m)}};
    }
  }
  c.params = {{"shape", "words"}};
  return c;
}

// a slice of a string
code_parts composed_slice(rng& r, const composed_names& n) {
  const int64_t kind = r.range(0, 3);
  std::string s;
  for (int64_t i = r.range(2, 3); i > 0; --i) s += (s.empty() ? "" : " ") + r.pick(english_words());
  const int64_t k = r.range(2, 4);
  const std::string t = n.text;
  std::string fn, describe, good, bad, want, args = t;
  if (kind == 0) {
    fn = "first_chars", describe = "return the first " + n.limit + " characters of " + t;
    good = t + "[:" + n.limit + "]", bad = t + "[" + n.limit + ":]", want = s.substr(0, size_t(k));
    args += ", " + n.limit;
  } else if (kind == 1) {
    fn = "last_chars", describe = "return the last " + n.limit + " characters of " + t;
    good = t + "[-" + n.limit + ":]", bad = t + "[:-" + n.limit + "]", want = s.substr(s.size() - size_t(k));
    args += ", " + n.limit;
  } else if (kind == 2) {
    fn = "drop_first", describe = "return " + t + " without its first character";
    good = t + "[1:]", bad = t + "[:1]", want = s.substr(1);
  } else {
    fn = "drop_last", describe = "return " + t + " without its last character";
    good = t + "[:-1]", bad = t + "[-1:]", want = s.substr(0, s.size() - 1);
  }
  code_parts c = program(fn, args, describe, "    return @\n", good, bad);
  std::vector<std::string> a = {py_str(s)};
  if (kind < 2) a.push_back(S(k));
  c.asserts = {{call(fn, a), py_str(want)}};
  c.params = {{"shape", "slice"}};
  return c;
}

// whether a number is divisible, odd, ... (a remainder test written wrong)
code_parts composed_parity(rng& r, const composed_names&) {
  const std::string v = r.pick(std::vector<std::string>{"n", "x", "num", "value"});
  if (r.range(0, 1) == 0) {
    const std::string fn = r.pick(std::vector<std::string>{"is_odd", "odd"});
    code_parts c =
        program(fn, v, "tell whether " + v + " is odd", "    return @\n", v + " % 2 == 1", v + " % 2 == 0");
    const int64_t k = r.range(2, 400);
    c.asserts = {{call(fn, {S(2 * k + 1)}), "True"}, {call(fn, {S(2 * k)}), "False"}};
    c.params = {{"shape", "parity"}};
    return c;
  }
  const std::string d = r.pick(std::vector<std::string>{"d", "by", "divisor", "m"});
  const std::string fn = r.pick(std::vector<std::string>{"divides", "is_multiple", "divisible"});
  const std::vector<std::string> bads = {v + " % " + d + " == 1", v + " // " + d + " == 0",
                                         d + " % " + v + " == 0"};
  code_parts c = program(fn, v + ", " + d, "tell whether " + v + " is divisible by " + d, "    return @\n",
                         v + " % " + d + " == 0", r.pick(bads));
  const int64_t dv = r.range(3, 12), q = r.range(2, 30);
  c.asserts = {{call(fn, {S(dv * q), S(dv)}), "True"},
               {call(fn, {S(dv * q + 1 + (dv > 2)), S(dv)}), "False"}};
  c.params = {{"shape", "parity"}};
  return c;
}

// sorted numbers or words in an order
code_parts composed_order(rng& r, const composed_names& n) {
  const int64_t kind = r.range(0, 2);
  if (kind < 2) {
    const bool down = kind == 0;
    const std::string fn = down ? r.pick(std::vector<std::string>{"sort_desc", "largest_first", "ranked"})
                                : r.pick(std::vector<std::string>{"sort_asc", "smallest_first", "ordered"});
    code_parts c =
        program(fn, n.list,
                "return the numbers of " + n.list + " sorted from " +
                    (down ? "largest to smallest" : "smallest to largest"),
                "    return @\n", down ? "sorted(" + n.list + ", reverse=True)" : "sorted(" + n.list + ")",
                down ? "sorted(" + n.list + ")" : "sorted(" + n.list + ", reverse=True)");
    auto xs = distinct_values(r, size_t(r.range(3, 6)), -20, 200);
    auto want = xs;
    std::sort(want.begin(), want.end());
    if (down) std::reverse(want.begin(), want.end());
    c.asserts = {{call(fn, {py_list(xs)}), py_list(want)}};
    c.params = {{"shape", "order"}};
    return c;
  }
  std::vector<std::string> ws;
  std::set<std::string> seen;
  while (ws.size() < size_t(3)) {
    const std::string w = r.pick(english_words());
    if (seen.insert(w).second) ws.push_back(w);
  }
  std::string text;
  for (const auto& w : ws) text += (text.empty() ? "" : " ") + w;
  const std::string fn = r.pick(std::vector<std::string>{"sorted_words", "alphabetical", "word_order"});
  code_parts c = program(fn, n.text, "return the words of " + n.text + " in alphabetical order",
                         "    return @\n", "sorted(" + n.text + ".split())", "sorted(" + n.text + ")");
  std::sort(ws.begin(), ws.end());
  std::string want = "[";
  for (size_t i = 0; i < ws.size(); ++i) want += (i ? ", " : "") + std::string("'") + ws[i] + "'";
  c.asserts = {{call(fn, {py_str(text)}), want + "]"}};
  c.params = {{"shape", "order"}};
  return c;
}

// A made-up Python name (`tavoku`, `shemblor2`): a made-up word that is no keyword or builtin, no name a
// shape writes itself, not in `taken`, and holds no piece of a held-out function (a `fib` or `revers` inside
// a made-up word would teach a held-out name's spelling).
std::string made_up_name(rng& r, const std::set<std::string>& taken) {
  static const std::set<std::string> reserved = {
      // Python keywords and the builtins a program might call
      "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del", "elif", "else",
      "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal", "not",
      "or", "pass", "raise", "return", "try", "while", "with", "yield", "abs", "all", "any", "bin", "bool",
      "chr", "dict", "dir", "divmod", "enumerate", "eval", "exec", "filter", "float", "format", "hash",
      "help", "hex", "input", "int", "iter", "len", "list", "map", "max", "min", "next", "object", "oct",
      "open", "ord", "pow", "print", "range", "repr", "reversed", "round", "set", "slice", "sorted", "str",
      "sum", "super", "tuple", "type", "vars", "zip", "match", "case", "self",
      // names the shapes write themselves (loop indices, range ends, running bests, characters, words)
      "start", "stop", "first", "last", "best", "top", "cur", "found", "char", "letter", "word", "token",
      "item", "value", "divisor", "split", "sort", "reverse", "startswith"};
  static const std::vector<std::string> held_out_pieces = {"fib",     "target", "aeio",   "vowel",   "fahren",
                                                           "celsius", "palin",  "revers", "contain", "none"};
  for (;;) {
    std::string w = made_up_word(r);
    if (r.range(0, 7) == 0) w += S(r.range(1, 9));
    bool ok = !reserved.count(w) && !taken.count(w);
    for (const auto& p : held_out_pieces) ok = ok && w.find(p) == std::string::npos;
    if (ok) return w;
  }
}

// Half of a composed function's names are made up, so the reply has to copy the names the program was given
// (a model trained on a few dozen names per shape wrote `def last_chars(xs)` for an unseen `last_item`):
// each parameter, loop and accumulator name from its list or made up; the function keeps the shape's name
// (a third), keeps its first word before a made-up one (`count_blorvat`, a third) or is made up whole.
code_parts make_composed(rng& r) {
  std::set<std::string> taken;
  auto name = [&](const std::vector<std::string>& list) {
    std::string w;
    do {
      w = r.range(0, 1) == 0 ? r.pick(list) : made_up_name(r, taken);
    } while (taken.count(w));
    taken.insert(w);
    return w;
  };
  composed_names n;
  n.list = name(kListNames);
  n.limit = name(kLimitNames);
  n.text = name(kTextNames);
  n.loop = name(kLoopNames);
  n.acc = name(kAccNames);
  static const std::vector<code_parts (*)(rng&, const composed_names&)> shapes = {
      composed_filter, composed_range,   composed_extreme,      composed_formula,
      composed_index,  composed_charset, composed_early_return, composed_words,
      composed_slice,  composed_parity,  composed_order,
  };
  code_parts c = r.pick(shapes)(r, n);
  const int64_t form = r.range(0, 2);
  if (form == 0) return c;
  const size_t cut = c.fn.find('_');
  std::string fn = form == 1 && cut != std::string::npos ? c.fn.substr(0, cut + 1) + made_up_name(r, taken)
                                                         : made_up_name(r, taken);
  if (form == 2 && r.range(0, 2) == 0) fn += "_" + made_up_name(r, taken);
  // The shapes name the function only in its def line and in the tested calls.
  auto rename = [&](std::string& text, const std::string& from, const std::string& to) {
    MOXI_ASSERT(text.rfind(from, 0) == 0, "the function's name starts the text");
    text.replace(0, from.size(), to);
  };
  rename(c.buggy, "def " + c.fn + "(", "def " + fn + "(");
  rename(c.fixed, "def " + c.fn + "(", "def " + fn + "(");
  for (auto& a : c.asserts) rename(a.first, c.fn + "(", fn + "(");
  c.fn = fn;
  return c;
}

}  // namespace

const std::vector<template_info>& code_templates() {
  static const std::vector<template_info> t = {
      {"sum_to", false, "tested n: train 2..30 and 101..200, test 31..100"},
      {"count_above", false, "threshold t: train 2..50 and 201..500, test 51..200"},
      {"max_of", false, "magnitude k of the tested values: train 2..50 and 201..500, test 51..200"},
      {"factorial", false, "tested n: train 2..8 and 13..15, test 9..12"},
      {"average", false, "first tested value k: train 2..50 and 201..500, test 51..200"},
      {"clamp", false, "lower bound lo: train 2..50 and 201..500, test 51..200"},
      {"to_celsius", false, "k: train 2..50 and 201..500, test 51..200"},
      {"rect_area", false, "k: train 2..50 and 201..500, test 51..200"},
      {"perimeter", false, "k: train 2..50 and 201..500, test 51..200"},
      {"abs_diff", false, "k: train 2..50 and 201..500, test 51..200"},
      {"sum_squares", false, "k: train 2..50 and 201..500, test 51..200"},
      {"count_below", false, "k: train 2..50 and 201..500, test 51..200"},
      {"is_even", false, "k: train 2..50 and 201..500, test 51..200"},
      {"min_of", false, "k: train 2..50 and 201..500, test 51..200"},
      {"product", false, "k: train 2..50 and 201..500, test 51..200"},
      {"last_item", false, "k: train 2..50 and 201..500, test 51..200"},
      {"smallest", false, "k: train 2..50 and 201..500, test 51..200"},
      {"count_digits", false, "k: train 2..50 and 201..500, test 51..200"},
      {"half", false, "k: train 2..50 and 201..500, test 51..200"},
      {"countdown", false, "k: train 2..50 and 201..500, test 51..200"},
      {"count_vowels", true, "test only"},
      {"to_fahrenheit", true, "test only"},
      {"second_largest", true, "test only"},
      {"composed", false, "train only: a function made from a grammar of shapes and names", true},
  };
  return t;
}

code_parts make_code(rng& r, bool test_range, const std::string& tmpl) {
  const ranges wide_train = {{2, 50}, {201, 500}}, wide_test = {{51, 200}};
  auto wide = [&] { return draw(r, test_range ? wide_test : wide_train); };
  code_parts c;
  if (tmpl == "sum_to") {
    const ranges train = {{2, 30}, {101, 200}}, test = {{31, 100}};
    const int64_t n1 = draw(r, test_range ? test : train), n2 = draw(r, test_range ? test : train);
    c.describe = "return the sum 1 + 2 + ... + n";
    c.buggy =
        "def sum_to(n):\n    \"\"\"Return 1 + 2 + ... + n.\"\"\"\n    total = 0\n    for i in range(1, n):\n"
        "        total += i\n    return total\n";
    fix(c, "range(1, n)", "range(1, n + 1)");
    c.asserts = {{"sum_to(" + S(n1) + ")", S(n1 * (n1 + 1) / 2)},
                 {"sum_to(" + S(n2) + ")", S(n2 * (n2 + 1) / 2)}};
    c.params = {{"n", {n1, n2}}};
  } else if (tmpl == "count_above") {
    const int64_t t = wide();
    std::vector<int64_t> xs = {t, t + r.range(1, 9), t - r.range(1, 2), t + r.range(1, 9), t};
    r.shuffle(xs);
    int64_t want = 0;
    for (auto x : xs) want += x > t;
    c.describe = "count the numbers in xs that are strictly greater than t";
    c.buggy =
        "def count_above(xs, t):\n    \"\"\"Count the numbers in xs that are strictly greater than t.\"\"\"\n"
        "    n = 0\n    for x in xs:\n        if x >= t:\n            n += 1\n    return n\n";
    fix(c, "x >= t", "x > t");
    c.asserts = {{"count_above(" + py_list(xs) + ", " + S(t) + ")", S(want)},
                 {"count_above([], " + S(t) + ")", "0"}};
    c.params = {{"t", t}};
  } else if (tmpl == "max_of") {
    const int64_t k = wide();
    std::vector<int64_t> neg = {-k, -k - r.range(1, 9), -k - r.range(10, 20)};
    r.shuffle(neg);
    std::vector<int64_t> pos = {k, k + 3, 1};
    r.shuffle(pos);
    c.describe = "return the largest number of a non-empty list";
    c.buggy =
        "def max_of(xs):\n    \"\"\"Return the largest number of the non-empty list xs.\"\"\"\n    best = 0\n"
        "    for x in xs:\n        if x > best:\n            best = x\n    return best\n";
    fix(c, "best = 0", "best = xs[0]");
    c.asserts = {{"max_of(" + py_list(neg) + ")", S(-k)}, {"max_of(" + py_list(pos) + ")", S(k + 3)}};
    c.params = {{"k", k}};
  } else if (tmpl == "factorial") {
    const int64_t n = draw(r, test_range ? ranges{{9, 12}} : ranges{{2, 8}, {13, 15}});
    int64_t f = 1;
    for (int64_t i = 2; i <= n; ++i) f *= i;
    c.describe = "return n! (the product 1 * 2 * ... * n)";
    c.buggy =
        "def factorial(n):\n    \"\"\"Return n! = 1 * 2 * ... * n.\"\"\"\n    result = 0\n"
        "    for i in range(2, n + 1):\n        result *= i\n    return result\n";
    fix(c, "result = 0", "result = 1");
    c.asserts = {{"factorial(" + S(n) + ")", S(f)}, {"factorial(1)", "1"}};
    c.params = {{"n", n}};
  } else if (tmpl == "average") {
    const int64_t k = wide();
    c.describe = "return the arithmetic mean of a non-empty list";
    c.buggy =
        "def average(xs):\n    \"\"\"Return the arithmetic mean of the non-empty list xs.\"\"\"\n"
        "    return sum(xs) // len(xs)\n";
    fix(c, "//", "/");
    c.asserts = {{"average([" + S(k) + ", " + S(k + 1) + "])", S(k) + ".5"},
                 {"average([" + S(k) + ", " + S(k) + ", " + S(k + 3) + "])", S(k + 1)}};
    c.params = {{"k", k}};
  } else if (tmpl == "clamp") {
    const int64_t lo = wide(), hi = lo + r.range(5, 40);
    c.describe = "limit x to the range [lo, hi]";
    c.buggy =
        "def clamp(x, lo, hi):\n    \"\"\"Return x limited to the range [lo, hi].\"\"\"\n"
        "    return min(lo, max(x, hi))\n";
    fix(c, "min(lo, max(x, hi))", "max(lo, min(x, hi))");
    c.asserts = {{"clamp(" + S(lo - 1) + ", " + S(lo) + ", " + S(hi) + ")", S(lo)},
                 {"clamp(" + S(hi + 7) + ", " + S(lo) + ", " + S(hi) + ")", S(hi)},
                 {"clamp(" + S(lo + 2) + ", " + S(lo) + ", " + S(hi) + ")", S(lo + 2)}};
    c.params = {{"lo", lo}};
  } else if (tmpl == "to_celsius") {
    const int64_t m = wide();
    c.describe = "convert degrees Fahrenheit to degrees Celsius";
    c.buggy =
        "def to_celsius(f):\n    \"\"\"Convert degrees Fahrenheit to degrees Celsius.\"\"\"\n"
        "    return (f + 32) * 5 / 9\n";
    fix(c, "f + 32", "f - 32");
    c.asserts = {{"to_celsius(" + S(32 + 9 * m) + ")", S(5 * m)}, {"to_celsius(32)", "0"}};
    c.params = {{"k", m}};
  } else if (tmpl == "rect_area") {
    const int64_t w = wide(), h = r.range(2, 9);
    c.describe = "return the area of a w by h rectangle";
    c.buggy =
        "def rect_area(w, h):\n    \"\"\"Return the area of a w by h rectangle.\"\"\"\n    return w + h\n";
    fix(c, "w + h", "w * h");
    c.asserts = {{"rect_area(" + S(w) + ", " + S(h) + ")", S(w * h)}, {"rect_area(2, 2)", "4"}};
    c.params = {{"k", w}};
  } else if (tmpl == "perimeter") {
    const int64_t w = wide(), h = r.range(2, 9);
    c.describe = "return the perimeter of a w by h rectangle";
    c.buggy =
        "def perimeter(w, h):\n    \"\"\"Return the perimeter of a w by h rectangle.\"\"\"\n"
        "    return 2 * w + h\n";
    fix(c, "2 * w + h", "2 * (w + h)");
    c.asserts = {{"perimeter(" + S(w) + ", " + S(h) + ")", S(2 * (w + h))}, {"perimeter(1, 1)", "4"}};
    c.params = {{"k", w}};
  } else if (tmpl == "abs_diff") {
    const int64_t a = wide(), d = r.range(1, 9);
    c.describe = "return the distance between a and b (never negative)";
    c.buggy =
        "def abs_diff(a, b):\n    \"\"\"Return the distance between a and b, which is never negative.\"\"\"\n"
        "    return a - b\n";
    fix(c, "a - b", "abs(a - b)");
    c.asserts = {{"abs_diff(" + S(a) + ", " + S(a + d) + ")", S(d)},
                 {"abs_diff(" + S(a + d) + ", " + S(a) + ")", S(d)}};
    c.params = {{"k", a}};
  } else if (tmpl == "sum_squares") {
    const int64_t n = wide();
    c.describe = "return 1*1 + 2*2 + ... + n*n";
    c.buggy =
        "def sum_squares(n):\n    \"\"\"Return 1*1 + 2*2 + ... + n*n.\"\"\"\n    total = 0\n"
        "    for i in range(1, n):\n        total += i * i\n    return total\n";
    fix(c, "range(1, n)", "range(1, n + 1)");
    c.asserts = {{"sum_squares(" + S(n) + ")", S(n * (n + 1) * (2 * n + 1) / 6)}, {"sum_squares(1)", "1"}};
    c.params = {{"k", n}};
  } else if (tmpl == "count_below") {
    const int64_t t = wide();
    std::vector<int64_t> xs = {t, t - r.range(1, 9), t + r.range(1, 2), t - r.range(1, 9), t};
    r.shuffle(xs);
    int64_t want = 0;
    for (auto x : xs) want += x < t;
    c.describe = "count the numbers in xs that are strictly less than t";
    c.buggy =
        "def count_below(xs, t):\n    \"\"\"Count the numbers in xs that are strictly less than t.\"\"\"\n"
        "    return len([x for x in xs if x <= t])\n";
    fix(c, "x <= t", "x < t");
    c.asserts = {{"count_below(" + py_list(xs) + ", " + S(t) + ")", S(want)}, {"count_below([], 1)", "0"}};
    c.params = {{"k", t}};
  } else if (tmpl == "is_even") {
    const int64_t n = wide();
    c.describe = "tell whether n is even";
    c.buggy = "def is_even(n):\n    \"\"\"Return True when n is even.\"\"\"\n    return n % 2 == 1\n";
    fix(c, "n % 2 == 1", "n % 2 == 0");
    c.asserts = {{"is_even(" + S(2 * n) + ")", "True"}, {"is_even(" + S(2 * n + 1) + ")", "False"}};
    c.params = {{"k", n}};
  } else if (tmpl == "min_of") {
    const int64_t k = wide();
    std::vector<int64_t> xs = {k, k + r.range(1, 9), k + r.range(10, 20)};
    r.shuffle(xs);
    c.describe = "return the smallest number of a non-empty list";
    c.buggy =
        "def min_of(xs):\n    \"\"\"Return the smallest number of the non-empty list xs.\"\"\"\n    best = "
        "0\n"
        "    for x in xs:\n        if x < best:\n            best = x\n    return best\n";
    fix(c, "best = 0", "best = xs[0]");
    c.asserts = {{"min_of(" + py_list(xs) + ")", S(k)}, {"min_of([-3, 5])", "-3"}};
    c.params = {{"k", k}};
  } else if (tmpl == "product") {
    const int64_t k = wide(), m = r.range(2, 9);
    c.describe = "return the product of the numbers in a list";
    c.buggy =
        "def product(xs):\n    \"\"\"Return the product of the numbers in xs.\"\"\"\n    result = 0\n"
        "    for x in xs:\n        result *= x\n    return result\n";
    fix(c, "result = 0", "result = 1");
    c.asserts = {{"product([" + S(k) + ", " + S(m) + "])", S(k * m)}, {"product([])", "1"}};
    c.params = {{"k", k}};
  } else if (tmpl == "last_item") {
    const int64_t k = wide();
    const std::vector<int64_t> xs = {k + 4, k + 1, k};
    c.describe = "return the last element of a non-empty list";
    c.buggy =
        "def last_item(xs):\n    \"\"\"Return the last element of the non-empty list xs.\"\"\"\n"
        "    return xs[len(xs)]\n";
    fix(c, "xs[len(xs)]", "xs[-1]");
    c.asserts = {{"last_item(" + py_list(xs) + ")", S(k)}, {"last_item([7])", "7"}};
    c.params = {{"k", k}};
  } else if (tmpl == "smallest") {
    const int64_t k = wide();
    std::vector<int64_t> xs = {k, k + r.range(1, 5), k + r.range(6, 9), k + r.range(10, 20)};
    r.shuffle(xs);
    c.describe = "return the smallest of a list of distinct numbers";
    c.buggy =
        "def smallest(xs):\n    \"\"\"Return the smallest number of xs (distinct numbers).\"\"\"\n"
        "    return sorted(xs)[-1]\n";
    fix(c, "[-1]", "[0]");
    c.asserts = {{"smallest(" + py_list(xs) + ")", S(k)}};
    c.params = {{"k", k}};
  } else if (tmpl == "count_digits") {
    const int64_t k = wide();
    const std::string text = "ab" + S(k) + "x9";
    int64_t digits = 0;
    for (char ch : text) digits += ch >= '0' && ch <= '9';
    c.describe = "count the digits 0-9 in a string";
    c.buggy =
        "def count_digits(text):\n    \"\"\"Count the digits 0, 1, ..., 9 in text.\"\"\"\n"
        "    return sum(1 for ch in text if ch in \"012345678\")\n";
    fix(c, "\"012345678\"", "\"0123456789\"");
    c.asserts = {{"count_digits(\"" + text + "\")", S(digits)}, {"count_digits(\"abc\")", "0"}};
    c.params = {{"k", k}};
  } else if (tmpl == "half") {
    const int64_t k = wide();
    c.describe = "return half of x";
    c.buggy = "def half(x):\n    \"\"\"Return half of x.\"\"\"\n    return x // 2\n";
    fix(c, "x // 2", "x / 2");
    c.asserts = {{"half(" + S(2 * k + 1) + ")", S(k) + ".5"}, {"half(4)", "2"}};
    c.params = {{"k", k}};
  } else if (tmpl == "countdown") {
    const int64_t k = wide();
    c.describe = "return the list n, n - 1, ..., 1";
    c.buggy =
        "def countdown(n):\n    \"\"\"Return the list n, n - 1, ..., 1.\"\"\"\n    return list(range(n, 0, "
        "1))\n";
    fix(c, "range(n, 0, 1)", "range(n, 0, -1)");
    c.asserts = {{"countdown(" + S(k) + ")[:3]", py_list({k, k - 1, k - 2})},
                 {"len(countdown(" + S(k) + "))", S(k)}};
    c.params = {{"k", k}};
  } else if (tmpl == "count_vowels") {
    static const std::vector<std::string> words = {"sun", "cup", "music", "autumn", "future", "umbrella"};
    const std::string w = r.pick(words);
    int64_t v = 0;
    for (char ch : w) v += std::string("aeiou").find(ch) != std::string::npos;
    c.describe = "count the vowels (a, e, i, o, u) in a lowercase word";
    c.buggy =
        "def count_vowels(word):\n    \"\"\"Count the vowels a, e, i, o, u in the lowercase word.\"\"\"\n"
        "    return sum(1 for ch in word if ch in \"aeio\")\n";
    fix(c, "\"aeio\"", "\"aeiou\"");
    c.asserts = {{"count_vowels(\"" + w + "\")", S(v)}, {"count_vowels(\"xyz\")", "0"}};
    c.params = {{"word", w}};
  } else if (tmpl == "to_fahrenheit") {
    const int64_t k = 5 * r.range(0, 20);
    c.describe = "convert degrees Celsius to degrees Fahrenheit";
    c.buggy =
        "def to_fahrenheit(c):\n    \"\"\"Convert degrees Celsius to degrees Fahrenheit.\"\"\"\n"
        "    return c * 9 / 5 - 32\n";
    fix(c, "- 32", "+ 32");
    c.asserts = {{"to_fahrenheit(" + S(k) + ")", S(k * 9 / 5 + 32)}, {"to_fahrenheit(100)", "212"}};
    c.params = {{"c", k}};
  } else if (tmpl == "second_largest") {
    std::vector<int64_t> xs;
    std::set<int64_t> seen;
    while (xs.size() < 5) {
      const int64_t x = r.range(2, 99);
      if (seen.insert(x).second) xs.push_back(x);
    }
    c.describe = "return the second largest of a list of distinct numbers";
    c.buggy =
        "def second_largest(xs):\n    \"\"\"Return the second largest number of xs (distinct "
        "numbers).\"\"\"\n"
        "    return sorted(xs)[1]\n";
    fix(c, "[1]", "[-2]");
    c.asserts = {{"second_largest(" + py_list(xs) + ")", S(*std::next(seen.rbegin()))}};
    c.params = {{"values", xs}};
  } else if (tmpl == "composed") {
    return make_composed(r);
  } else {
    MOXI_ASSERT(false, "unknown code template");
  }
  c.fn = tmpl;
  return c;
}

// The test reads a one-line nonce from stdin before importing the candidate and prints it after every
// assertion held: an exit status of 0 alone would also reward a solution that exits early on import.
std::string python_test(const code_parts& c) {
  std::string t =
      "import sys\n"
      "_nonce = sys.stdin.readline().strip()\n"
      "from solution import " +
      c.fn + "\n\n";
  for (const auto& [expr, want] : c.asserts) {
    t += "_got = " + expr + "\n";
    std::string msg = expr + " returned %r, expected " + want;
    std::string quoted = "\"";
    for (char ch : msg) quoted += ch == '"' || ch == '\\' ? std::string("\\") + ch : std::string(1, ch);
    t += "assert _got == " + want + ", " + quoted + "\" % (_got,)\n";
  }
  t += "print(\"MOXI-TESTS-PASSED \" + _nonce)\n";
  return t;
}

}  // namespace moxi::eval::detail
