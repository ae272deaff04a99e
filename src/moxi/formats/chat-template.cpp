// Chat template API: loading a template from tokenizer_config.json and rendering a conversation with the
// variables transformers' apply_chat_template passes (messages, tools, add_generation_prompt, special
// tokens, extra keyword arguments).
#include "moxi/formats/chat-template.h"

#include <filesystem>

#include "moxi/base/error.h"
#include "moxi/formats/chat-template-ast.h"
#include "moxi/formats/json-file.h"

namespace moxi::formats {

namespace detail = chat_template_detail;

namespace {
#include "moxi/formats/builtin-chat-templates.inc"
}  // namespace

std::string_view moxi_tiny_chat_template() { return kMoxiTinyChatTemplate; }

chat_template::chat_template(const std::string& text, const std::string& source, chat_template_limits limits)
    : source_(source), limits_(limits) {
  program_ = detail::parse_template(text, source, limits_);
}

namespace {

// A special token in tokenizer_config.json: a plain string or an AddedToken object {content: ...}.
std::string token_text(const nlohmann::ordered_json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

nlohmann::ordered_json read_tokenizer_config(const std::string& path) {
  return read_json_file<nlohmann::ordered_json>(path, "tokenizer config");
}

}  // namespace

chat_template chat_template::from_tokenizer_config_json(const nlohmann::ordered_json& config,
                                                        const std::string& source, const std::string& name,
                                                        chat_template_limits limits) {
  if (!config.is_object()) throw error(source + ": tokenizer config is not a JSON object");
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) throw error(source + ": no chat_template in the tokenizer config");
  std::string text;
  std::string label = source;
  if (it->is_string()) {
    text = it->get<std::string>();
  } else if (it->is_array()) {
    std::string names;
    bool found = false;
    for (const auto& entry : *it) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
          !entry["name"].is_string() || !entry["template"].is_string()) {
        throw error(source + ": chat_template list entries must be {name, template} strings");
      }
      const std::string n = entry["name"].get<std::string>();
      names += (names.empty() ? "" : ", ") + n;
      if (n == name) {
        text = entry["template"].get<std::string>();
        found = true;
      }
    }
    if (!found) throw error(source + ": no chat template named '" + name + "' (have: " + names + ")");
    label += " (" + name + ")";
  } else {
    throw error(source + ": chat_template must be a string or a list of {name, template}");
  }
  chat_template t(text, label, limits);
  t.bos_token_ = token_text(config, "bos_token");
  t.eos_token_ = token_text(config, "eos_token");
  return t;
}

chat_template chat_template::from_tokenizer_config(const std::string& path, const std::string& name,
                                                   chat_template_limits limits) {
  const nlohmann::ordered_json config = read_tokenizer_config(path);
  return from_tokenizer_config_json(config, path, name, limits);
}

std::optional<chat_template> load_chat_template(const std::string& model_dir, chat_template_limits limits) {
  const std::string path = (std::filesystem::path(model_dir) / "tokenizer_config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  const nlohmann::ordered_json config = read_tokenizer_config(path);
  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null())
    return std::nullopt;
  return chat_template::from_tokenizer_config_json(config, path, "default", limits);
}

std::string chat_template::render(const nlohmann::ordered_json& messages,
                                  const render_options& options) const {
  if (!messages.is_array()) throw error("chat template " + source_ + ": messages must be a list");
  if (!options.extra.is_object() && !options.extra.is_null()) {
    throw error("chat template " + source_ + ": extra variables must be an object");
  }
  detail::dict globals;
  globals.set("messages", detail::from_json(messages));
  globals.set("tools", options.tools ? detail::from_json(*options.tools) : detail::value::none());
  globals.set("add_generation_prompt", detail::value::boolean(options.add_generation_prompt));
  globals.set("bos_token", detail::value::string(options.bos_token.value_or(bos_token_)));
  globals.set("eos_token", detail::value::string(options.eos_token.value_or(eos_token_)));
  if (options.extra.is_object()) {
    for (auto it = options.extra.begin(); it != options.extra.end(); ++it) {
      globals.set(it.key(), detail::from_json(it.value()));
    }
  }
  return detail::render_program(*program_, globals, limits_);
}

std::string chat_template::render(const nlohmann::json& messages, const render_options& options) const {
  return render(
      nlohmann::ordered_json::parse(messages.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)),
      options);
}

}  // namespace moxi::formats
