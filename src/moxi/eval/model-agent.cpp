// A chat model as an episode agent (episode.h, docs/agent-eval.md "The model agent").
#include <algorithm>
#include <cctype>

#include "moxi/base/error.h"
#include "moxi/base/interrupt.h"
#include "moxi/eval/episode.h"
#include "moxi/eval/task.h"
#include "moxi/eval/evaluate.h"
#include "moxi/runtime/local-model.h"

namespace moxi::eval {
namespace {

// What the model is told besides the task (the first user message ends with it).
constexpr const char* kProtocol =
    "\n\nWork in the terminal: reply with one shell command at a time and you will see its output. "
    "Reply DONE when the task is complete.";

class model_session final : public agent_session {
 public:
  model_session(const eval_model& m, const model_agent_options& o, const agent_task& t) : m_(m), o_(o) {
    messages_.push_back({{"role", "user"}, {"content", t.instruction + kProtocol}});
  }

  action next(const observation* last) override {
    if (last) messages_.push_back({{"role", "user"}, {"content", observation_message(*last)}});
    formats::render_options ro;
    ro.add_generation_prompt = true;
    const auto ids = m_.tok->encode(m_.chat->render(messages_, ro), /*allow_special=*/true);
    if (ids.empty()) throw error("the conversation renders to an empty prompt");
    runtime::generate_options go;
    go.sampling.temperature = o_.temperature;
    go.sampling.seed = o_.seed + turn_++;
    go.max_tokens = o_.max_tokens;
    go.stop_tokens = m_.stop_tokens;
    go.logprobs = true;
    auto lm = m_.new_sequence();  // the whole conversation each turn: replies are short, prompts too
    std::string reply;
    const auto g = runtime::generate(*lm, *m_.tok, ids, go, [&](std::string_view text) {
      check_interrupt();
      reply += text;
    });
    action a;
    a.text = runtime::to_valid_utf8(reply);
    a.command = command_of_reply(a.text, a.finish);
    a.prompt_tokens = int64_t(ids.size());
    a.reply_tokens = int64_t(g.tokens.size());
    a.token_ids.assign(g.tokens.begin(), g.tokens.end());
    a.logprobs = g.logprobs;
    // What this turn added before the reply: the prompt past the previous prompt and reply, when the
    // template kept them as they were (moxi's templates do).
    const bool extends = ids.size() >= seq_.size() && std::equal(seq_.begin(), seq_.end(), ids.begin());
    a.context_reset = !extends;
    a.context_token_ids.assign(ids.begin() + (extends ? std::ptrdiff_t(seq_.size()) : 0), ids.end());
    seq_.assign(ids.begin(), ids.end());
    seq_.insert(seq_.end(), g.tokens.begin(), g.tokens.end());
    messages_.push_back({{"role", "assistant"}, {"content", a.text}});
    return a;
  }

 private:
  const eval_model& m_;
  model_agent_options o_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
  uint64_t turn_ = 0;
  std::vector<token_id> seq_;  // the episode's tokens so far: prompts and replies
};

class model_agent final : public agent {
 public:
  model_agent(const eval_model& m, const model_agent_options& o) : m_(m), o_(o) {
    if (!m.new_sequence || !m.tok || !m.chat) throw error("model agent: the model needs a chat template");
    if (o.max_tokens < 1) throw error("model agent: max_tokens must be >= 1");
  }
  std::string name() const override { return "model:" + m_.name; }
  std::unique_ptr<agent_session> start(const agent_task& t) override {
    return std::make_unique<model_session>(m_, o_, t);
  }

 private:
  const eval_model& m_;
  model_agent_options o_;
};

}  // namespace

std::unique_ptr<agent> make_model_agent(const eval_model& m, const model_agent_options& o) {
  return std::make_unique<model_agent>(m, o);
}

std::string command_of_reply(const std::string& reply, bool& finish) {
  std::string t = trim_space(reply);
  if (t.rfind("```", 0) == 0) {  // ```sh\nCMD\n```
    const size_t nl = t.find('\n');
    const size_t end = nl == std::string::npos ? std::string::npos : t.find("```", nl);
    t = trim_space(nl == std::string::npos ? "" : t.substr(nl + 1, end == std::string::npos ? end : end - nl - 1));
  }
  if (t.rfind("$ ", 0) == 0) t = trim_space(t.substr(2));
  std::string upper = t;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  finish = t.empty() || upper == "DONE" || upper == "DONE.";
  return finish ? "" : t;
}

std::string observation_message(const observation& o) {
  std::string m = "exit code " + std::to_string(o.exit_code);
  if (!o.limit.empty()) m += " (stopped: " + o.limit + " limit)";
  m += "\n";
  m += o.output.empty() ? "(no output)" : o.output;
  return m;
}

}  // namespace moxi::eval
