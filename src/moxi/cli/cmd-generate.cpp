// `moxi generate --model DIR --prompt TEXT [--max-tokens N --temperature T --top-p P --top-k K --seed S]`:
// streams the continuation of a prompt to stdout with the reference forward pass (tokenizer.json from the
// model directory, stop at eos_token_id) and prints prompt and generation speed to stderr.
#include <cstdio>
#include <iostream>

#include "moxi/base/error.h"
#include "moxi/cli/command.h"
#include "moxi/model/model.h"
#include "moxi/runtime/generate.h"

namespace moxi::cli {
namespace {

// One sequence of model::model behind the generation loop's interface.
class model_lm final : public causal_lm {
 public:
  explicit model_lm(const model::model& m) : m_(m), cache_(m.new_cache()) {}
  int64_t vocab_size() const override { return m_.config().vocab_size; }
  std::vector<float> append(std::span<const token_id> tokens) override {
    model::forward_options o;
    o.last_only = true;
    return m_.forward(tokens, *cache_, o);
  }

 private:
  const model::model& m_;
  std::unique_ptr<model::sequence_cache> cache_;
};

void setup_generate(CLI::App& root) {
  auto* cmd = root.add_subcommand("generate", "Generate text from a prompt with the reference forward pass");
  struct args {
    std::string model, prompt;
    generate_options opt;
    uint64_t seed = 0;
    bool no_special = false;
  };
  auto a = std::make_shared<args>();
  cmd->add_option("--model", a->model, "checkpoint directory (config.json, safetensors, tokenizer.json)")
      ->required();
  cmd->add_option("--prompt", a->prompt, "prompt text")->required();
  cmd->add_option("--max-tokens", a->opt.max_tokens, "tokens to generate at most")->capture_default_str();
  cmd->add_option("--temperature", a->opt.sampling.temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-p", a->opt.sampling.top_p, "nucleus sampling mass")->capture_default_str();
  cmd->add_option("--top-k", a->opt.sampling.top_k, "keep the k most likely tokens (0: all)")
      ->capture_default_str();
  auto* seed = cmd->add_option("--seed", a->seed, "random seed (default: nondeterministic)");
  cmd->add_flag("--no-special", a->no_special, "treat special-token text in the prompt as plain text");
  cmd->callback([a, seed] {
    if (seed->count() > 0) a->opt.sampling.seed = a->seed;
    const auto m = model::model::load(a->model);
    const auto tok = tokenizer::from_hf_json_file(a->model + "/tokenizer.json");
    const auto& c = m.config();
    if (c.eos_token_id) a->opt.stop_tokens.push_back(token_id(*c.eos_token_id));
    auto prompt = tok.encode(a->prompt, !a->no_special);
    // A model needs at least one token to condition on; an empty prompt starts from BOS.
    if (prompt.empty() && c.bos_token_id) prompt.push_back(token_id(*c.bos_token_id));
    model_lm lm(m);
    const auto r = generate(lm, tok, prompt, a->opt, [](std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    });
    std::fputc('\n', stdout);
    std::fflush(stdout);
    std::fprintf(stderr, "prompt: %lld tokens, %.1f tokens/s; generation: %zu tokens, %.1f tokens/s (%s)\n",
                 static_cast<long long>(r.prompt_tokens), r.prompt_tokens_per_second(), r.tokens.size(),
                 r.generate_tokens_per_second(), r.finish_reason.c_str());
  });
}

MOXI_COMMAND("generate", setup_generate);

}  // namespace
}  // namespace moxi::cli
