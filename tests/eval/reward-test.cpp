// RL rewards (src/moxi/eval/reward.h) on crafted replies through the real sandboxed checker: right, wrong,
// malformed, cut by the length limit, and an infrastructure error (dropped, never punished).
#include "moxi/eval/reward.h"

#include <gtest/gtest.h>

#include "moxi/base/error.h"
#include "moxi/eval/task-generator.h"

namespace {

using namespace moxi::eval;

checker& shared_checker() {
  static checker c;
  return c;
}

reward_options all_weights() {
  reward_options o;
  o.weights = {1.0, 0.5, 0.25, 1.0};
  o.max_tokens = 100;
  o.overlong_buffer = 20;
  return o;
}

reward score(const task& t, const std::string& reply, int64_t tokens = 10, bool truncated = false) {
  return score_reply(t, reply, shared_checker().check(t, reply), tokens, truncated, all_weights());
}

task first(domain d, const std::string& tmpl) {
  return generate_tasks(d, split::train, 1, 3, {tmpl})[0];
}

TEST(Reward, TerminalRightWrongMalformed) {
  const task t = first(domain::terminal, "count_lines");
  const auto right = score(t, t.reference);
  EXPECT_FALSE(right.dropped);
  EXPECT_EQ(right.correct, 1);
  EXPECT_EQ(right.completion, 1);
  EXPECT_EQ(right.format, 1);
  EXPECT_EQ(right.length, 0);
  EXPECT_DOUBLE_EQ(right.total, 1 + 0.5 + 0.25);
  // Fenced, still one command.
  EXPECT_EQ(score(t, "```bash\n" + t.reference + "\n```").format, 1);
  // Wrong but it ran: completion without correctness.
  const auto wrong = score(t, "echo 12345");
  EXPECT_EQ(wrong.correct, 0);
  EXPECT_EQ(wrong.completion, 1);
  EXPECT_EQ(wrong.format, 1);
  // A command that fails: neither.
  const auto failing = score(t, "cat no-such-file-here");
  EXPECT_EQ(failing.correct, 0);
  EXPECT_EQ(failing.completion, 0);
  // Prose around the command breaks the format (the checker still runs the whole reply as the command).
  const auto chatty = score(t, "Sure! Run this:\n" + t.reference);
  EXPECT_EQ(chatty.format, 0);
  EXPECT_DOUBLE_EQ(chatty.total, chatty.correct + 0.5 * chatty.completion);
  // Two commands where one was asked for.
  EXPECT_EQ(score(t, t.reference + "\n" + t.reference).format, 0);
}

TEST(Reward, MathWorkedFormat) {
  const task t = first(domain::math, "add");
  const auto right = score(t, t.reference);
  EXPECT_EQ(right.correct, 1);
  EXPECT_EQ(right.format, 1) << t.reference;
  const auto bare = score(t, t.answer);  // the right number but not the worked format
  EXPECT_EQ(bare.correct, 1);
  EXPECT_EQ(bare.completion, 1);
  EXPECT_EQ(bare.format, 0);
  const auto wrong = score(t, "Answer: " + std::to_string(std::stoll(t.answer) + 1));
  EXPECT_EQ(wrong.correct, 0);
  EXPECT_EQ(wrong.format, 1);
  const auto none = score(t, "I do not know");
  EXPECT_EQ(none.completion, 0);
  EXPECT_EQ(none.format, 0);
  EXPECT_DOUBLE_EQ(none.total, 0);
}

TEST(Reward, CodeRanVersusCrashed) {
  const task t = first(domain::code, "sum_to");
  const auto right = score(t, t.reference);
  EXPECT_EQ(right.correct, 1) << right.detail;
  EXPECT_EQ(right.completion, 1);
  EXPECT_EQ(right.format, 1);
  // The unfixed program runs and fails an assertion: it ran.
  const auto unfixed = score(t, "```python\n" + t.program + "```");
  EXPECT_EQ(unfixed.correct, 0);
  EXPECT_EQ(unfixed.completion, 1) << unfixed.detail;
  // A syntax error never runs.
  const auto broken = score(t, "```python\ndef (:\n```");
  EXPECT_EQ(broken.correct, 0);
  EXPECT_EQ(broken.completion, 0) << broken.detail;
  EXPECT_EQ(score(t, "no idea, sorry").format, 0);
}

TEST(Reward, LengthPenaltyIsSoftThenFull) {
  const task t = first(domain::math, "add");
  EXPECT_EQ(score(t, t.reference, 80).length, 0);  // up to max - buffer = 80
  EXPECT_DOUBLE_EQ(score(t, t.reference, 90).length, -0.5);
  EXPECT_DOUBLE_EQ(score(t, t.reference, 100).length, -1);
  EXPECT_DOUBLE_EQ(score(t, t.reference, 100, true).length, -1);  // cut by the limit
  reward_options hard = all_weights();
  hard.overlong_buffer = 0;
  EXPECT_EQ(score_reply(t, t.reference, shared_checker().check(t, t.reference), 99, false, hard).length, 0);
  EXPECT_EQ(score_reply(t, t.reference, shared_checker().check(t, t.reference), 100, true, hard).length, -1);
}

TEST(Reward, InfrastructureErrorIsDroppedNotPunished) {
  task t = first(domain::terminal, "count_lines");
  t.reference = "exit 3";  // the reference itself fails: the checker cannot judge anything
  const auto r = score(t, "wc -l notes.txt");
  EXPECT_TRUE(r.dropped) << r.detail;
  EXPECT_EQ(r.total, 0);
}

TEST(Reward, ChatProseAndComponentsByName) {
  const task t = first(domain::chat, "greeting");
  EXPECT_EQ(score(t, "Hello! How can I help you today?").format, 1);
  EXPECT_EQ(score(t, "```\nls\n```").format, 0);
  const auto r = score(t, t.reference);
  for (const auto& n : reward_components()) EXPECT_NO_THROW(component(r, n));
  EXPECT_THROW(component(r, "style"), moxi::error);
}

}  // namespace
