// Multi-dimensional rewards for reinforcement learning (docs/rl.md "Rewards"): each sampled reply is scored
// on several named components, each logged on its own and combined with the recipe's weights:
//   correct     1 when the sandboxed checker passes the reply, else 0;
//   completion  1 when the reply did its job mechanically: the command exited 0 within its limits, the
//               program imported and its function returned (a failed assertion still counts), a final
//               number was given, the chat reply is not empty;
//   format      1 when the reply has the form the task asks for: one shell command and nothing else, a
//               worked answer whose last line is "Answer: N", a program, plain prose for chat;
//   length      DAPO's soft overlong penalty: 0 up to max_tokens - buffer, then falling linearly to -1 at
//               max_tokens; -1 for a reply cut by the limit.
// A reply whose check hit an infrastructure error is dropped (never scored, never punished).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moxi/eval/check.h"
#include "moxi/eval/task.h"

namespace moxi::eval {

struct reward_weights {
  double correct = 1.0, completion = 0.0, format = 0.0, length = 0.0;
};

struct reward_options {
  reward_weights weights;
  int64_t max_tokens = 256;     // the rollout's reply limit
  int64_t overlong_buffer = 0;  // the soft zone before it (0: only a truncated reply is penalized)
};

struct reward {
  bool dropped = false;  // infrastructure error: leave the sample out of the update
  double correct = 0, completion = 0, format = 0, length = 0;
  double total = 0;  // the weighted sum
  std::string detail;
};

// The format rule of a task's domain applied to a reply (see the header comment).
bool follows_format(const task& t, std::string_view reply);

// Scores one reply: the checker's verdict, the reply's token count and whether the length limit cut it.
reward score_reply(const task& t, std::string_view reply, const check_result& check, int64_t reply_tokens,
                   bool truncated, const reward_options& o);

// The component names in a fixed order, and a reward's value for each (for logs).
const std::vector<std::string>& reward_components();
double component(const reward& r, const std::string& name);

}  // namespace moxi::eval
