// Chat templates: a model's own Jinja chat template (tokenizer_config.json `chat_template`) rendered by a
// small, sandboxed Jinja2 interpreter that covers what HF chat templates use (Kimi, DeepSeek, moxi-tiny).
// Semantics follow transformers' environment (trim_blocks, lstrip_blocks, loopcontrols, raise_exception,
// tojson without HTML escaping); hostile templates hit limits and fail with moxi::error naming the template
// and line, never crash or hang. See docs/chat-templates.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moxi::formats {

namespace chat_template_detail {
struct program;
}

// Bounds that keep a hostile template from exhausting memory, stack or time. Every one is checked while
// parsing or rendering and reported as a moxi::error; the defaults are far above what real templates need.
struct chat_template_limits {
  size_t max_template_bytes = 1 << 20;  // the template text
  size_t max_output_bytes = 16 << 20;   // the rendered prompt, and any one string built on the way
  uint64_t max_steps = 10'000'000;      // expressions evaluated + statements run, per render (weighted)
  double max_cpu_seconds = 2.0;         // CPU time of one render, whatever its steps cost
  int max_call_depth = 64;              // nested macro calls (recursion)
  int max_nesting = 128;                // nesting of blocks and expressions while parsing
  size_t max_items = 100'000;           // elements of any one list built (range, *, +, ...)
};

struct render_options {
  bool add_generation_prompt = false;
  // Unset: the tokenizer config's tokens (empty strings when the template did not come from one).
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  // OpenAI-style tool schemas; absent renders as `tools = none`, as transformers passes it.
  std::optional<nlohmann::ordered_json> tools;
  // More variables (an object): e.g. enable_thinking, documents; they may override the ones above.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

class chat_template {
 public:
  // Parses `text`; `source` names it in every error message (a path, or "moxi-tiny").
  chat_template(const std::string& text, const std::string& source, chat_template_limits limits = {});

  // Reads `chat_template` from a tokenizer_config.json: a string, or a list of {name, template} from which
  // `name` is chosen ("default" when that is what the list calls its main template). bos/eos tokens come
  // from the same file (plain strings or AddedToken objects).
  static chat_template from_tokenizer_config(const std::string& path, const std::string& name = "default",
                                             chat_template_limits limits = {});
  static chat_template from_tokenizer_config_json(const nlohmann::ordered_json& config,
                                                  const std::string& source,
                                                  const std::string& name = "default",
                                                  chat_template_limits limits = {});

  // Renders the conversation (a list of {role, content, tool_calls?, ...}). The ordered_json overload keeps
  // key order, which `tojson` shows; the plain json one sees keys sorted, as nlohmann::json stores them.
  std::string render(const nlohmann::ordered_json& messages, const render_options& options = {}) const;
  std::string render(const nlohmann::json& messages, const render_options& options = {}) const;

  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  std::shared_ptr<const chat_template_detail::program> program_;
  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  chat_template_limits limits_;
};

// moxi-tiny's chat template (configs/chat-templates/moxi-tiny.jinja, compiled in): specials <|system|>,
// <|user|>, <|assistant|>, <|end|>; each turn ends with <|end|>, where generation stops. `moxi init` gives
// every checkpoint it writes this template.
std::string_view moxi_tiny_chat_template();
inline constexpr const char* kMoxiTinyChatSpecials[] = {"<|system|>", "<|user|>", "<|assistant|>", "<|end|>"};
// The token that ends an assistant turn in moxi-tiny's template (a stop token for generation).
inline constexpr std::string_view kMoxiTinyEndOfTurn = "<|end|>";

// A model directory's own template: `chat_template` of DIR/tokenizer_config.json, with its bos/eos tokens.
// nullopt when the directory has no tokenizer_config.json or the file has no chat_template (a base model);
// a file that exists but is broken (bad JSON, a template that does not parse) throws moxi::error.
std::optional<chat_template> load_chat_template(const std::string& model_dir, chat_template_limits limits = {});

}  // namespace moxi::formats
