// api-openai: the OpenAI-compatible request and response bodies of /v1/completions and
// /v1/chat/completions: strict parsing with OpenAI-style errors (a wrong type, a value out of range or an
// unknown model is a 4xx naming the parameter, never a crash), chat prompts rendered with the model's own
// template, and the JSON of responses, stream chunks and errors. No I/O here; server.cpp drives it.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "moxi/formats/chat-template.h"
#include "moxi/formats/tokenizer.h"
#include "moxi/image/image.h"
#include "moxi/model/model.h"
#include "moxi/runtime/json-constraint.h"
#include "moxi/runtime/sampler.h"

namespace moxi::serve {

// An HTTP error with an OpenAI error body: {"error": {"message", "type", "param", "code"}}.
struct api_error : std::runtime_error {
  api_error(int status_code, const std::string& message, std::string param_name = "",
            std::string error_type = "")
      : std::runtime_error(message),
        status(status_code),
        param(std::move(param_name)),
        type(std::move(error_type)) {}
  int status;
  std::string param, type;
};

// The body of an error response; type defaults from the status (invalid_request_error, authentication_error,
// rate_limit_error, server_error ...).
std::string error_body(int status, const std::string& message, const std::string& param = "",
                       const std::string& type = "");

struct completion_request {
  bool chat = false;
  std::string model;
  std::optional<std::string> prompt_text;  // /v1/completions string prompt
  std::vector<token_id> prompt_ids;        // /v1/completions token-id prompt
  // /v1/chat/completions: the messages as sent (key order kept, for the template's tojson), each content
  // given as text parts joined into one string; tools and chat_template_kwargs (vLLM) go to the template.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::optional<nlohmann::ordered_json> tools;
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
  std::optional<int64_t> max_tokens;  // max_tokens or max_completion_tokens
  runtime::sampling_params sampling;
  std::vector<std::string> stop;
  int n = 1;  // choices (independent samples of one prompt)
  bool stream = false, include_usage = false;
  int top_logprobs = -1;       // -1: no logprobs; else sampled token + this many alternatives
  bool ignore_eos = false;     // vLLM's ignore_eos: generate max_tokens whatever comes
  bool tokens_as_ids = false;  // vLLM's return_tokens_as_token_ids: logprob tokens "token_id:N"
  // response_format json_object / json_schema: the grammar the output is constrained to (null: text).
  std::shared_ptr<const runtime::json_grammar> response_grammar;
  // tool_choice naming a function (or "required" with one tool): the reply is a call of it. The prompt
  // ends with the template's own opening of a call (render_chat), the output is the arguments, held to
  // the function's parameters schema by response_grammar, and the response carries them as tool_calls.
  std::optional<std::string> forced_tool;
  // tools with tool_choice auto (or absent) on a template that writes calls as `[call i/n] NAME(ARGS)`
  // lines (moxi's): the reply is parsed for such lines (parse_tool_calls).
  bool parse_calls = false;
  bool tool_choice_none = false;
  // The image parts in message order: the bytes of a data: URL, or a remote http(s) URL to fetch.
  struct image_part {
    std::string bytes, url;
  };
  std::vector<image_part> images;
};

// A reply parsed for calls in moxi's syntax: each line `[call i/n] NAME(ARGS)` whose NAME is one of
// `tools` and whose ARGS is a JSON object is a call (ARGS kept as written); the text before the first call
// line is the content (null when empty). No such line: no calls, and the whole text is the content.
struct parsed_reply {
  nlohmann::json content;                 // string or null
  std::vector<std::pair<std::string, std::string>> calls;  // {name, arguments}
};
parsed_reply parse_tool_calls(const std::string& text, const nlohmann::ordered_json& tools);

// OpenAI's response_format: {"type": "text"}, {"type": "json_object"} or {"type": "json_schema",
// "json_schema": {"name", "description"?, "schema", "strict"?}}; the JSON Schema subset of
// runtime/json-constraint.h. Null for text. Throws api_error 400 naming the field (param
// "response_format..." and the schema keyword's path in the message).
std::shared_ptr<const runtime::json_grammar> parse_response_format(const nlohmann::ordered_json& rf);

// The template writes tool calls in moxi's `[call i/n] NAME(ARGS)` syntax (checked by rendering a probe).
bool template_uses_call_lines(const formats::chat_template& tmpl, const completion_request& request);

// How deep arrays and objects may nest in a request body (the body itself is level 1). OpenAI's own API
// accepts tool schemas nested a few levels; 64 leaves room for any real one.
inline constexpr int max_json_depth = 64;
// Whether `text` nests arrays/objects deeper than `max_depth`, found by a SAX pass that builds no tree and
// stops at the first level too deep (false for malformed JSON that stays within the limit).
bool json_nesting_exceeds(std::string_view text, int max_depth);

// Parses and validates a request body. A body nested deeper than max_json_depth is a 400. `served_model` is
// the only accepted model name (an absent "model" means it). Throws api_error (400 for bad JSON, types and
// ranges; 404 for another model).
completion_request parse_completion_request(const std::string& body, bool chat,
                                            const std::string& served_model);

// The prompt text of a chat request: the model's chat template over its messages, tools and
// chat_template_kwargs. With a forced tool, the conversation is followed instead by an assistant turn as
// the template renders a past one with a call, up to where the call's arguments go (found by rendering a
// probe call; a template that does not render the call after the conversation cannot force one, a 400). Throws api_error 400 when the model has none (`tmpl` null; as vLLM, no default
// template is made up) or when rendering fails (raise_exception in the template, a limit), with the
// template's message.
std::string render_chat(const formats::chat_template* tmpl, const completion_request& request);

// What a request is checked against: the served model and its tokenizer, template and serving limits.
struct request_context {
  std::string served_model;
  const formats::tokenizer* tok = nullptr;
  const formats::chat_template* tmpl = nullptr;  // null: the model has none (chat is 400)
  std::optional<token_id> bos;                   // an empty prompt becomes this one token
  int32_t vocab_size = 0;                        // the model's (token-id prompts must be below it)
  int64_t max_model_len = 0;                     // prompt + max_tokens at most
  int64_t max_prompt_tokens = 0;                 // 0: max_model_len - 1
  int64_t max_tokens_limit = 0;                  // largest max_tokens accepted; 0: max_model_len - 1
  int64_t default_max_tokens = 16;               // when the request gives none
  // Images: the model whose vision encoder turns them into prompt rows (null or no encoder: images are a
  // 400), at most max_images per request, each decoded within image_limits.
  const model::model* model = nullptr;
  int64_t max_images = 8;
  // Hosts whose http(s) image URLs are fetched (vLLM's --allowed-media-domains); empty: data: URLs only.
  std::vector<std::string> allowed_media_domains;
  double media_fetch_timeout_s = 10;
  image::decode_limits image_limits{.max_bytes = 16u << 20, .max_pixels = 32ll << 20, .max_side = 16384};
};

// A request ready for the engine: its parameters, prompt token ids and the max_tokens it runs with.
struct validated_request {
  completion_request request;
  std::vector<token_id> prompt;
  int64_t max_tokens = 0;
  // With images: the encoder's rows for the prompt's placeholder tokens (model::forward_options::media),
  // the prompt's prefix-cache identity (each placeholder keyed by its image's content and index, so only
  // the same image reuses a cached prefix) and the image tokens among prompt_tokens.
  std::shared_ptr<const std::vector<float>> media;
  std::vector<token_id> cache_key;
  int64_t image_tokens = 0;
};

// Parses, renders (chat) or encodes the prompt, and checks every limit: the one place a body becomes an
// engine request. Throws api_error (400, or 404 for another model) naming the parameter.
validated_request validate_request(const std::string& body, bool chat, const request_context& ctx);

// JSON dump that never throws on generated bytes that are not valid UTF-8 (replaced by U+FFFD).
std::string dump(const nlohmann::json& j);

struct usage_counts {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  int64_t image_tokens = 0;  // of prompt_tokens, the image placeholders' (reported when > 0)
  nlohmann::json to_json() const;
};

// One choice's logprobs as the API shapes them; `text` per token, in order.
struct logprob_entry {
  std::string token_text;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};
nlohmann::json logprobs_json(bool chat, const std::vector<logprob_entry>& entries);

}  // namespace moxi::serve
