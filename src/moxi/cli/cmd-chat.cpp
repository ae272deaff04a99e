// `moxi chat [-m DIR] [--system TEXT] [--max-tokens N] [sampling flags, greedy by default]`: an interactive
// chat with history. Each turn renders the WHOLE conversation with the model's chat template and prefills
// only what the sequence does not hold yet: the new tokens when the prompt extends the held tokens token for
// token, else the part after the previous turn's history (a snapshot taken there; KDA state cannot be rolled
// back), else everything. Reads lines until EOF, so it works with a pipe as well as a terminal.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "moxi/base/error.h"
#include "moxi/cli/command.h"
#include "moxi/cli/model-dir.h"
#include "moxi/cli/options.h"
#include "moxi/cli/terminal-text.h"
#include "moxi/runtime/local-model.h"

namespace moxi::cli {
namespace {

bool is_prefix(std::span<const token_id> prefix, std::span<const token_id> of) {
  return prefix.size() <= of.size() && std::equal(prefix.begin(), prefix.end(), of.begin());
}

// The chat's one sequence. generate() hands the whole prompt to the first append() of a turn; this appends
// only the part the sequence does not already hold (see the file comment) and counts what it reused.
class chat_sequence final : public runtime::causal_lm {
 public:
  chat_sequence(const model::model& m, bool reuse) : lm_(m), reuse_(reuse) {}

  // The next append() is a turn's prompt; its first `history` tokens are the conversation before the
  // generation prompt (0: unknown), where the snapshot for the next turn is taken.
  void begin_turn(size_t history) {
    history_ = history;
    turn_start_ = true;
  }
  void reset() {
    lm_.reset();
    snapshot_.reset();
  }

  int64_t vocab_size() const override { return lm_.vocab_size(); }
  std::vector<float> append(std::span<const token_id> tokens) override {
    if (!turn_start_) return lm_.append(tokens);
    turn_start_ = false;
    return prefill(tokens);
  }
  // Speculative decoding goes to the one sequence; its snapshots carry what drafting needs.
  bool can_draft() const override { return lm_.can_draft(); }
  void prepare_drafts() override { lm_.prepare_drafts(); }
  void draft(token_id next, int64_t k, const std::function<token_id(std::vector<float>&)>& pick) override {
    lm_.draft(next, k, pick);
  }
  std::vector<float> append_verify(std::span<const token_id> tokens) override {
    return lm_.append_verify(tokens);
  }
  void keep(int64_t n) override { lm_.keep(n); }

  size_t reused() const { return reused_; }
  size_t cache_tokens() const { return lm_.tokens().size(); }

 private:
  std::vector<float> prefill(std::span<const token_id> prompt) {
    reused_ = 0;
    if (!reuse_) {
      lm_.reset();
    } else if (lm_.tokens().size() < prompt.size() && is_prefix(lm_.tokens(), prompt)) {
      reused_ = lm_.tokens().size();  // the prompt extends everything held: append the new tokens only
    } else if (snapshot_ && snapshot_->tokens.size() < prompt.size() &&
               is_prefix(snapshot_->tokens, prompt)) {
      lm_.restore(*snapshot_);  // back to the end of the previous turn's history
      reused_ = lm_.tokens().size();
    } else {
      lm_.reset();
    }
    // Stop at the history boundary to snapshot it, then the generation prompt (both parts at least one
    // token, so the logits come from the last one).
    const size_t done = lm_.tokens().size();
    if (reuse_ && history_ > done && history_ < prompt.size()) {
      lm_.append(prompt.subspan(done, history_ - done));
      snapshot_ = lm_.save();
    }
    return lm_.append(prompt.subspan(lm_.tokens().size()));
  }

  runtime::model_lm lm_;
  bool reuse_;
  std::optional<runtime::model_lm::snapshot> snapshot_;
  size_t history_ = 0;
  bool turn_start_ = false;
  size_t reused_ = 0;
};

void setup_chat(CLI::App& root) {
  auto* cmd =
      root.add_subcommand("chat", "Chat with a model in the terminal (reads lines until EOF; /reset, /exit)");
  struct args {
    std::string model, system;
    runtime::generate_options opt;
    uint64_t seed = 0;
    bool show_prompt = false, no_reuse = false, verbose = false, raw = false;
  };
  auto a = std::make_shared<args>();
  a->opt.max_tokens = 512;
  add_model_option(cmd, a->model, /*required=*/false);
  cmd->add_option("--system", a->system, "system message at the start of the conversation");
  cmd->add_option("--max-tokens", a->opt.max_tokens, "reply length limit per turn")
      ->check(integer_in(1, int64_t(1) << 20))
      ->capture_default_str();
  auto* seed = add_sampling_options(cmd, a->opt.sampling, a->seed);
  cmd->add_flag("--show-prompt", a->show_prompt,
                "print each turn's rendered prompt and token counts to stderr (one JSON line per turn)");
  add_draft_option(cmd, a->opt.draft_tokens);
  cmd->add_flag("--no-cache-reuse", a->no_reuse, "prefill the whole conversation every turn");
  cmd->add_flag("-v,--verbose", a->verbose, "prefill details per turn on stderr");
  cmd->add_flag("--raw", a->raw, "write the reply bytes as they are (default: made terminal-safe)");
  set_examples(cmd,
               {"moxi chat", "moxi chat -m /tmp/tiny --system 'Reply with one shell command.'",
                "printf 'How many lines are in notes.txt?\\n' | moxi chat --temperature 0.7 --seed 1"},
               "docs/chat.md");
  cmd->callback([a, seed] {
    if (seed->count() > 0) a->opt.sampling.seed = a->seed;
    runtime::validate(a->opt.sampling);
    const runtime::local_model lm = runtime::local_model::load(resolve_model_dir(a->model));
    const auto& tpl = lm.require_chat();
    a->opt.stop_tokens = lm.stop_tokens;
    const bool tty = ::isatty(STDIN_FILENO) != 0;
    if (tty)
      std::fprintf(stderr, "moxi chat with %s (/reset clears the history, /exit or Ctrl-D ends)\n",
                   lm.dir.c_str());

    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    auto start = [&] {
      messages = nlohmann::ordered_json::array();
      if (!a->system.empty())
        messages.push_back({{"role", "system"}, {"content", runtime::to_valid_utf8(a->system)}});
    };
    start();
    chat_sequence seq(lm.model, !a->no_reuse);
    check_draft_option(a->opt.draft_tokens, seq, lm.dir);
    const int64_t context = lm.model.config().max_position_embeddings;
    int turn = 0;
    std::string line;
    for (;;) {
      if (tty) {
        std::fputs("> ", stderr);
        std::fflush(stderr);
      }
      if (!std::getline(std::cin, line)) break;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      if (line == "/exit" || line == "/quit") break;
      if (line == "/reset") {
        start();
        seq.reset();
        std::fputs("(history cleared)\n", stderr);
        continue;
      }
      if (line[0] == '/' && line.find(' ') == std::string::npos) {
        std::fprintf(stderr, "unknown command %s (commands: /reset, /exit)\n", terminal_safe(line).c_str());
        continue;
      }
      messages.push_back({{"role", "user"}, {"content", runtime::to_valid_utf8(line)}});
      formats::render_options ro;
      const auto history = lm.tok.encode(tpl.render(messages, ro));
      ro.add_generation_prompt = true;
      const std::string prompt_text = tpl.render(messages, ro);
      const auto prompt = lm.tok.encode(prompt_text);
      if (prompt.empty()) throw error("chat: the template rendered an empty prompt");
      // The reply must fit the model's context (max_position_embeddings) after the whole conversation.
      runtime::generate_options opt = a->opt;
      if (context > 0 && int64_t(prompt.size()) >= context) {
        std::fprintf(stderr,
                     "the conversation has %zu tokens, the model's context is %lld: /reset to start again\n",
                     prompt.size(), (long long)context);
        messages.erase(messages.end() - 1);
        continue;
      }
      if (context > 0) opt.max_tokens = std::min(opt.max_tokens, context - int64_t(prompt.size()));
      seq.begin_turn(is_prefix(history, prompt) ? history.size() : 0);

      std::string reply;
      const auto r = runtime::generate(seq, lm.tok, prompt, opt, [&](std::string_view text) {
        reply += text;
        const std::string out = a->raw ? std::string(text) : terminal_safe(text);
        std::fwrite(out.data(), 1, out.size(), stdout);
        std::fflush(stdout);
      });
      std::fputc('\n', stdout);
      std::fflush(stdout);
      ++turn;
      reply = runtime::to_valid_utf8(reply);
      if (a->show_prompt) {
        const nlohmann::ordered_json j = {{"turn", turn},
                                          {"prompt", prompt_text},
                                          {"prompt_tokens", prompt.size()},
                                          {"reused_tokens", seq.reused()},
                                          {"prefilled_tokens", prompt.size() - seq.reused()},
                                          {"reply_tokens", r.tokens.size()},
                                          {"finish_reason", r.finish_reason},
                                          {"reply", reply}};
        // ensure_ascii: every byte the model or the user wrote arrives escaped, so the line is terminal-safe.
        std::fprintf(stderr, "%s\n", j.dump(-1, ' ', true).c_str());
      }
      if (a->verbose)
        std::fprintf(
            stderr,
            "[prompt %zu tokens: %zu reused, %zu prefilled at %.1f tokens/s, first token in %.1f ms] ",
            prompt.size(), seq.reused(), prompt.size() - seq.reused(),
            r.prompt_seconds > 0 ? double(prompt.size() - seq.reused()) / r.prompt_seconds : 0.0,
            r.prompt_seconds * 1e3);
      const std::string drafts = a->verbose ? draft_summary(r) : "";
      std::fprintf(stderr, "[%zu tokens, %.1f tokens/s%s%s%s]\n", r.tokens.size(), r.generate_tokens_per_second(),
                   r.finish_reason == "length" ? ", cut at the length limit" : "", drafts.empty() ? "" : "; ",
                   drafts.c_str());
      messages.push_back({{"role", "assistant"}, {"content", reply}});
    }
  });
}

MOXI_COMMAND("chat", setup_chat);

}  // namespace
}  // namespace moxi::cli
