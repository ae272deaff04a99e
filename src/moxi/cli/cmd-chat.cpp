// `moxi chat [-m DIR] [--system TEXT] [--max-tokens N] [sampling flags, greedy by default]`: an interactive
// chat with history. Each turn renders the WHOLE conversation with the model's chat template and prefills
// only what the sequence does not hold yet: the new tokens when the prompt extends the held tokens token for
// token, else the part after the previous turn's history (a snapshot taken there; KDA state cannot be rolled
// back), else everything. Reads lines until EOF, so it works with a pipe as well as a terminal. Images
// (--image FILE for the first message, /image FILE for the next one; a model with a vision encoder) become
// image parts of the user message; the template writes their placeholders, which take the encoder's rows.
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
#include "moxi/runtime/multimodal.h"

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
  // The conversation's image features in order (model_lm::set_media).
  void set_media(std::vector<float> rows) { lm_.set_media(std::move(rows)); }

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
    std::vector<std::string> images;
    runtime::generate_options opt;
    uint64_t seed = 0;
    bool show_prompt = false, no_reuse = false, verbose = false, raw = false;
  };
  auto a = std::make_shared<args>();
  a->opt.max_tokens = 512;
  add_model_option(cmd, a->model, /*required=*/false);
  cmd->add_option("--system", a->system, "system message at the start of the conversation");
  cmd->add_option("--image", a->images,
                  "a PNG or JPEG sent with the first message (a model with a vision encoder; repeatable; "
                  "/image FILE attaches one to the next message)")
      ->check(CLI::ExistingFile);
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
                "printf 'How many lines are in notes.txt?\\n' | moxi chat --temperature 0.7 --seed 1",
                "moxi chat -m /tmp/vision-model --image chart.png"},
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

    // Images: those waiting for the next user message, and the conversation's with their features.
    std::vector<runtime::prompt_image> pending, conv_images;
    std::vector<float> conv_media;
    auto attach = [&](const std::string& path) {
      auto im = runtime::prepare_image(lm.model, image::read_file(path));
      if (tty)
        std::fprintf(stderr, "(image %s: %lld x %lld patches, %lld tokens, sent with your next message)\n",
                     terminal_safe(path).c_str(), (long long)im.patches.grid_h, (long long)im.patches.grid_w,
                     (long long)im.tokens);
      pending.push_back(std::move(im));
    };
    for (const auto& path : a->images) attach(path);
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
        pending.clear();
        conv_images.clear();
        conv_media.clear();
        seq.set_media({});
        std::fputs("(history cleared)\n", stderr);
        continue;
      }
      if (line.rfind("/image ", 0) == 0) {
        try {
          attach(line.substr(7));
        } catch (const error& e) {
          std::fprintf(stderr, "%s\n", terminal_safe(e.what()).c_str());
        }
        continue;
      }
      if (line[0] == '/' && line.find(' ') == std::string::npos) {
        std::fprintf(stderr, "unknown command %s (commands: /image FILE, /reset, /exit)\n",
                     terminal_safe(line).c_str());
        continue;
      }
      const size_t images_before = conv_images.size(), media_before = conv_media.size();
      if (pending.empty()) {
        messages.push_back({{"role", "user"}, {"content", runtime::to_valid_utf8(line)}});
      } else {
        auto parts = nlohmann::ordered_json::array();
        for (size_t i = 0; i < pending.size(); ++i) parts.push_back({{"type", "image"}});
        parts.push_back({{"type", "text"}, {"text", runtime::to_valid_utf8(line)}});
        messages.push_back({{"role", "user"}, {"content", parts}});
        const auto rows = runtime::encode_images(lm.model, pending);
        conv_media.insert(conv_media.end(), rows.begin(), rows.end());
        for (auto& im : pending) conv_images.push_back(std::move(im));
        pending.clear();
        seq.set_media(conv_media);
      }
      // The template writes one placeholder per image; each becomes as many as the image has tokens.
      auto encode = [&](const std::string& text) {
        auto t = lm.tok.encode(text);
        if (conv_images.empty()) return t;
        return runtime::expand_image_placeholders(t, token_id(*lm.model.config().media_placeholder_token_id),
                                                  conv_images);
      };
      formats::render_options ro;
      const auto history = encode(tpl.render(messages, ro));
      ro.add_generation_prompt = true;
      const std::string prompt_text = tpl.render(messages, ro);
      const auto prompt = encode(prompt_text);
      if (prompt.empty()) throw error("chat: the template rendered an empty prompt");
      // The reply must fit the model's context (max_position_embeddings) after the whole conversation.
      runtime::generate_options opt = a->opt;
      if (context > 0 && int64_t(prompt.size()) >= context) {
        std::fprintf(stderr,
                     "the conversation has %zu tokens, the model's context is %lld: /reset to start again\n",
                     prompt.size(), (long long)context);
        messages.erase(messages.end() - 1);
        conv_images.resize(images_before);  // the message's images go with it
        conv_media.resize(media_before);
        seq.set_media(conv_media);
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
