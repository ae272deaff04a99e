// api-openai: request validation follows the OpenAI API reference ranges (temperature [0, 2], top_p (0, 1],
// penalties [-2, 2], at most 4 stop strings, top_logprobs [0, 20]) and vLLM's behaviour where OpenAI says
// nothing (token-id prompts, seed; n at most 16, each choice one engine request).
#include "moxi/serve/api-openai.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <set>

#include "moxi/base/base64.h"
#include "moxi/base/error.h"
#include "moxi/runtime/multimodal.h"

namespace moxi::serve {

using nlohmann::json;

namespace {

std::string default_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw api_error(400, message, param);
}

std::string type_name(const json& v) {
  return v.type_name();
}

double number(const json& body, const char* key, double lo, double hi, bool lo_open = false) {
  const json& v = body.at(key);
  if (!v.is_number()) bad(key, std::string("'") + key + "' must be a number, got " + type_name(v));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
    bad(key, std::string("'") + key + "' must be in " + (lo_open ? "(" : "[") + std::to_string(lo) + ", " +
                 std::to_string(hi) + "], got " + v.dump());
  return x;
}

int64_t integer(const json& body, const char* key, int64_t lo, int64_t hi) {
  const json& v = body.at(key);
  if (!v.is_number_integer() && !v.is_number_unsigned())
    bad(key, std::string("'") + key + "' must be an integer, got " + type_name(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    bad(key, std::string("'") + key + "' is out of range: " + v.dump());
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    bad(key, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                 "], got " + std::to_string(x));
  return x;
}

bool boolean(const json& body, const char* key) {
  const json& v = body.at(key);
  if (!v.is_boolean()) bad(key, std::string("'") + key + "' must be a boolean, got " + type_name(v));
  return v.get<bool>();
}

bool has(const json& body, const char* key) {
  return body.contains(key) && !body.at(key).is_null();
}

// An image part's URL: a data: URL with base64 data (RFC 2397), decoded here, or an http(s) URL, fetched
// later only when the server allows its host (no server-side request forgery by default). The image type
// is read from the bytes, not from the URL's media type.
completion_request::image_part image_url_part(const nlohmann::ordered_json& part, const std::string& p) {
  const auto& u = part.contains("image_url") ? part["image_url"] : nlohmann::ordered_json();
  const nlohmann::ordered_json* url = nullptr;
  if (u.is_string()) url = &u;
  else if (u.is_object() && u.contains("url") && u["url"].is_string()) url = &u["url"];
  if (!url) bad(p, "'" + p + "' must be {\"type\": \"image_url\", \"image_url\": {\"url\": \"data:...\"}}");
  const auto& s = url->get_ref<const std::string&>();
  if (s.starts_with("http://") || s.starts_with("https://")) return {"", s};
  if (!s.starts_with("data:"))
    bad(p, "'" + p + ".image_url.url' must be a data: URL (base64) or an http(s) URL");
  const size_t comma = s.find(',');
  if (comma == std::string::npos || !std::string_view(s).substr(0, comma).ends_with(";base64"))
    bad(p, "'" + p + ".image_url.url' must be data:<type>;base64,<data>");
  auto bytes = base64_decode(std::string_view(s).substr(comma + 1));
  if (!bytes) bad(p, "'" + p + ".image_url.url' has invalid base64 data");
  return {std::move(*bytes), ""};
}

// A message's content for the template: a string stays, null stays null (an assistant turn with only tool
// calls), text parts are joined into one string (vLLM's "string" content format). A content with image
// parts stays a list of {"type": "text", "text"} and {"type": "image"} parts (the image bytes go to
// `images`, in order), which templates that know images render (Kimi-VL's, moxi-tiny's).
nlohmann::ordered_json message_content(const nlohmann::ordered_json& c, size_t i,
                                       std::vector<completion_request::image_part>& images) {
  const std::string p = "messages[" + std::to_string(i) + "].content";
  if (c.is_string() || c.is_null()) return c;
  if (!c.is_array()) bad(p, "'" + p + "' must be a string or an array of content parts");
  std::string text;
  auto parts = nlohmann::ordered_json::array();
  bool has_image = false;
  for (size_t k = 0; k < c.size(); ++k) {
    const auto& part = c[k];
    const std::string pk = p + "[" + std::to_string(k) + "]";
    const bool is_image = part.is_object() && part.contains("type") && part["type"] == "image_url";
    if (is_image) {
      images.push_back(image_url_part(part, pk));
      parts.push_back({{"type", "image"}});
      has_image = true;
      continue;
    }
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        !part["text"].is_string())
      bad(p, "'" + p + "': content parts must be {\"type\": \"text\", \"text\": ...} or "
             "{\"type\": \"image_url\", ...}");
    text += part["text"].get<std::string>();
    parts.push_back({{"type", "text"}, {"text", part["text"]}});
  }
  if (has_image) return parts;
  return text;
}

}  // namespace

namespace {

// A function or schema name as OpenAI accepts it: a-z, A-Z, 0-9, underscores and dashes, 1 to 64.
bool function_name_ok(const nlohmann::ordered_json& n) {
  if (!n.is_string()) return false;
  const auto& s = n.get_ref<const std::string&>();
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

}  // namespace

std::shared_ptr<const runtime::json_grammar> parse_response_format(const nlohmann::ordered_json& rf) {
  if (!rf.is_object()) bad("response_format", "'response_format' must be an object");
  for (const auto& [k, v] : rf.items())
    if (k != "type" && k != "json_schema")
      bad("response_format." + k, "'response_format." + k + "' is not a known field");
  if (!rf.contains("type") || !rf["type"].is_string())
    bad("response_format.type", "'response_format.type' must be one of 'text', 'json_object', 'json_schema'");
  const std::string type = rf["type"].get<std::string>();
  if (type != "json_schema" && rf.contains("json_schema"))
    bad("response_format.json_schema", "'response_format.json_schema' needs 'type': 'json_schema'");
  const auto options = runtime::json_grammar_options::decoding();
  if (type == "text") return nullptr;
  if (type == "json_object") return runtime::json_object_grammar(options);
  if (type != "json_schema")
    bad("response_format.type",
        "'response_format.type' must be one of 'text', 'json_object', 'json_schema', "
        "got '" +
            type + "'");
  const std::string js = "response_format.json_schema";
  if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
    bad(js, "'" + js + "' must be an object with 'name' and 'schema'");
  const auto& j = rf["json_schema"];
  for (const auto& [k, v] : j.items()) {
    if (k != "name" && k != "description" && k != "schema" && k != "strict")
      bad(js + "." + k, "'" + js + "." + k + "' is not a known field");
  }
  if (!j.contains("name") || !function_name_ok(j["name"])) bad(js + ".name", "'" + js + ".name' must be 1 to 64 of a-z, A-Z, 0-9, '_' and '-'");
  if (j.contains("description") && !j["description"].is_string())
    bad(js + ".description", "'" + js + ".description' must be a string");
  if (j.contains("strict") && !j["strict"].is_boolean() && !j["strict"].is_null())
    bad(js + ".strict", "'" + js + ".strict' must be a boolean");
  if (!j.contains("schema") || !j["schema"].is_object())
    bad(js + ".schema", "'" + js + ".schema' must be a JSON Schema object");
  try {
    return runtime::json_schema_grammar(j["schema"], js + ".schema", options);
  } catch (const moxi::error& e) {
    bad(js + ".schema", e.what());
  }
}

std::string error_body(int status, const std::string& message, const std::string& param,
                       const std::string& type) {
  json e = {{"message", message},
            {"type", type.empty() ? default_type(status) : type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", status}};
  return dump(json{{"error", e}});
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

// A SAX pass that only tracks how deep arrays and objects nest and stops at the first level beyond the
// limit, before any tree is built: the tree's copies, dumps and the chat template recurse per level, so a
// body of 30,000 nested arrays would otherwise exhaust the stack of whichever walks it first.
struct depth_probe : nlohmann::json_sax<json> {
  int max_depth, depth = 0;
  bool too_deep = false;
  explicit depth_probe(int limit) : max_depth(limit) {}
  bool open() {
    if (++depth <= max_depth) return true;
    too_deep = true;
    return false;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return open(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return --depth, true; }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { return --depth, true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }
};

}  // namespace

bool json_nesting_exceeds(std::string_view text, int max_depth) {
  depth_probe probe(max_depth);
  json::sax_parse(text, &probe, nlohmann::detail::input_format_t::json, /*strict=*/true);
  return probe.too_deep;
}

namespace {

// {"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}.
void check_tool(const nlohmann::ordered_json& t, const std::string& where) {
  if (!t.is_object() || !t.contains("type") || t["type"] != "function")
    bad("tools", "'" + where + "' must be an object with 'type': 'function'");
  if (!t.contains("function") || !t["function"].is_object())
    bad("tools", "'" + where + ".function' must be an object");
  const auto& f = t["function"];
  if (!f.contains("name") || !function_name_ok(f["name"]))
    bad("tools", "'" + where + ".function.name' must be 1 to 64 of a-z, A-Z, 0-9, '_' and '-'");
  if (f.contains("description") && !f["description"].is_string())
    bad("tools", "'" + where + ".function.description' must be a string");
  if (f.contains("parameters") && !f["parameters"].is_object())
    bad("tools", "'" + where + ".function.parameters' must be a JSON Schema object");
}

// "none" | "auto" | "required" | {"type": "function", "function": {"name"}}: the last two force a call
// (of the named function; "required" only with a single tool), compiled to the grammar of its arguments.
void parse_tool_choice(const nlohmann::ordered_json& tc, completion_request& r) {
  const auto none = nlohmann::ordered_json::array();
  const auto& tools = r.tools ? *r.tools : none;
  const nlohmann::ordered_json* chosen = nullptr;
  if (tc.is_string()) {
    const std::string s = tc.get<std::string>();
    if (s == "none" || s == "auto") {
      r.tool_choice_none = s == "none";
      return;
    }
    if (s != "required") bad("tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or a function");
    if (tools.size() != 1)
      bad("tool_choice", "'tool_choice': 'required' needs exactly one tool here; name the function instead");
    chosen = &tools[0];
  } else if (tc.is_object() && tc.contains("type") && tc["type"] == "function" && tc.contains("function") &&
             tc["function"].is_object() && tc["function"].contains("name") && tc["function"]["name"].is_string()) {
    for (const auto& t : tools)
      if (t["function"]["name"] == tc["function"]["name"]) chosen = &t;
    if (!chosen)
      bad("tool_choice", "'tool_choice' names '" + tc["function"]["name"].get<std::string>() + "', which is not in 'tools'");
  } else {
    bad("tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}");
  }
  const auto& f = (*chosen)["function"];
  r.forced_tool = f["name"].get<std::string>();
  const nlohmann::ordered_json params = f.contains("parameters") ? f["parameters"] : nlohmann::ordered_json{{"type", "object"}};
  try {
    r.response_grammar = runtime::json_schema_grammar(params, "tools." + *r.forced_tool + ".parameters",
                                                      runtime::json_grammar_options::decoding());
  } catch (const moxi::error& e) {
    bad("tools", e.what());
  }
}

}  // namespace

completion_request parse_completion_request(const std::string& text, bool chat,
                                            const std::string& served_model) {
  if (json_nesting_exceeds(text, max_json_depth))
    throw api_error(400, "the request body nests arrays and objects deeper than " +
                             std::to_string(max_json_depth) + " levels");
  const json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) throw api_error(400, "the request body is not valid JSON (UTF-8)");
  if (!body.is_object()) throw api_error(400, "the request body must be a JSON object");
  completion_request r;
  r.chat = chat;

  if (has(body, "model")) {
    if (!body["model"].is_string()) bad("model", "'model' must be a string");
    r.model = body["model"].get<std::string>();
    if (r.model != served_model)
      throw api_error(404, "The model `" + r.model + "` does not exist.", "model", "not_found_error");
  } else {
    r.model = served_model;
  }

  if (chat) {
    if (!has(body, "messages") || !body["messages"].is_array() || body["messages"].empty())
      bad("messages", "'messages' must be a non-empty array");
    // Parsed again keeping key order: the template may print messages and tools with tojson.
    const auto ordered = nlohmann::ordered_json::parse(text);
    size_t i = 0;
    for (const auto& m : ordered["messages"]) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        bad("messages", "messages[" + std::to_string(i) + "] must be an object with a string 'role'");
      const std::string role = m["role"].get<std::string>();
      if (role != "system" && role != "user" && role != "assistant" && role != "developer" && role != "tool")
        bad("messages", "messages[" + std::to_string(i) + "].role '" + role + "' is not a known role");
      auto msg = m;
      msg["content"] =
          message_content(m.contains("content") ? m["content"] : nlohmann::ordered_json(), i, r.images);
      r.messages.push_back(std::move(msg));
      ++i;
    }
    if (has(body, "tools")) {
      const auto& t = ordered["tools"];
      if (!t.is_array()) bad("tools", "'tools' must be an array of tool definitions");
      for (size_t k = 0; k < t.size(); ++k) check_tool(t[k], "tools[" + std::to_string(k) + "]");
      r.tools = t;
    }
    if (has(body, "tool_choice")) parse_tool_choice(ordered["tool_choice"], r);
    if (has(body, "chat_template_kwargs")) {
      if (!body["chat_template_kwargs"].is_object())
        bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
      r.template_kwargs = ordered["chat_template_kwargs"];
    }
    if (has(body, "add_generation_prompt")) r.add_generation_prompt = boolean(body, "add_generation_prompt");
  } else {
    if (!has(body, "prompt")) bad("prompt", "'prompt' is required");
    const json& p = body["prompt"];
    if (p.is_string()) {
      r.prompt_text = p.get<std::string>();
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      r.prompt_text = p[0].get<std::string>();
    } else if (p.is_array() && !p.empty() && p[0].is_number()) {
      for (const auto& t : p) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
          bad("prompt", "token-id prompts must be arrays of non-negative integers");
        r.prompt_ids.push_back(token_id(t.get<int64_t>()));
      }
    } else if (p.is_array() && p.size() > 1) {
      bad("prompt", "batched prompts (more than one prompt per request) are not supported");
    } else {
      bad("prompt", "'prompt' must be a string, an array of one string or an array of token ids");
    }
  }

  if (has(body, "max_completion_tokens")) r.max_tokens = integer(body, "max_completion_tokens", 1, INT32_MAX);
  if (has(body, "max_tokens")) r.max_tokens = integer(body, "max_tokens", 1, INT32_MAX);
  if (has(body, "temperature")) r.sampling.temperature = float(number(body, "temperature", 0, 2));
  if (has(body, "top_p")) r.sampling.top_p = float(number(body, "top_p", 0, 1, /*lo_open=*/true));
  if (has(body, "top_k")) r.sampling.top_k = int(integer(body, "top_k", -1, INT32_MAX));
  if (has(body, "presence_penalty"))
    r.sampling.presence_penalty = float(number(body, "presence_penalty", -2, 2));
  if (has(body, "frequency_penalty"))
    r.sampling.frequency_penalty = float(number(body, "frequency_penalty", -2, 2));
  if (has(body, "seed")) r.sampling.seed = uint64_t(integer(body, "seed", INT64_MIN, INT64_MAX));
  if (has(body, "n")) r.n = int(integer(body, "n", 1, 16));
  if (has(body, "best_of") && integer(body, "best_of", 1, 128) != 1)
    bad("best_of", "best_of > 1 is not supported");
  if (has(body, "echo") && boolean(body, "echo")) bad("echo", "echo is not supported");
  if (has(body, "stream")) r.stream = boolean(body, "stream");
  if (has(body, "stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed with stream: true");
    if (has(so, "include_usage")) r.include_usage = boolean(so, "include_usage");
  }
  if (has(body, "stop")) {
    const json& s = body["stop"];
    if (s.is_string()) {
      r.stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      if (s.size() > 4) bad("stop", "at most 4 stop sequences are allowed");
      for (const auto& x : s) {
        if (!x.is_string()) bad("stop", "'stop' must be a string or an array of strings");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", "'stop' must be a string or an array of strings");
    }
    for (const auto& x : r.stop)
      if (x.empty()) bad("stop", "stop sequences must not be empty");
  }
  if (chat) {
    const bool lp = has(body, "logprobs") && boolean(body, "logprobs");
    if (has(body, "top_logprobs")) {
      const int64_t k = integer(body, "top_logprobs", 0, 20);
      if (!lp) bad("top_logprobs", "'top_logprobs' requires 'logprobs': true");
      r.top_logprobs = int(k);
    } else if (lp) {
      r.top_logprobs = 0;
    }
  } else if (has(body, "logprobs")) {
    r.top_logprobs = int(integer(body, "logprobs", 0, 20));
  }
  if (has(body, "ignore_eos")) r.ignore_eos = boolean(body, "ignore_eos");
  if (has(body, "return_tokens_as_token_ids")) r.tokens_as_ids = boolean(body, "return_tokens_as_token_ids");
  // Parsed again keeping key order: a schema's properties are generated in the order given.
  if (has(body, "response_format") && r.forced_tool)
    bad("response_format", "'response_format' cannot be combined with a 'tool_choice' that forces a call");
  if (has(body, "response_format"))
    r.response_grammar = parse_response_format(nlohmann::ordered_json::parse(text)["response_format"]);
  return r;
}

namespace {

// The conversation followed by an assistant turn that calls `name` with `arguments` (the text as given):
// what the template renders for it shows how it writes a call.
nlohmann::ordered_json with_probe_call(const nlohmann::ordered_json& messages, const std::string& name,
                                       const std::string& arguments) {
  auto probe = messages;
  probe.push_back({{"role", "assistant"},
                   {"content", ""},
                   {"tool_calls",
                    {{{"id", "call_probe"},
                      {"type", "function"},
                      {"function", {{"name", name}, {"arguments", arguments}}}}}}});
  return probe;
}

}  // namespace

std::string render_chat(const formats::chat_template* tmpl, const completion_request& request) {
  if (!tmpl)
    throw api_error(400,
                    "The model `" + request.model +
                        "` has no chat template (no chat_template in its tokenizer_config.json), so chat "
                        "messages cannot be rendered; use /v1/completions with a prompt instead.",
                    "messages");
  formats::render_options o;
  o.add_generation_prompt = request.add_generation_prompt;
  o.tools = request.tools;
  o.extra = request.template_kwargs;
  std::string prompt;
  try {
    prompt = tmpl->render(request.messages, o);
  } catch (const std::exception& e) {
    throw api_error(400, e.what(), "messages");
  }
  if (!request.forced_tool) return prompt;
  // The template's own opening of a call: render the conversation with a probe call appended and keep it
  // up to the probe's arguments (the conversation so far, then the assistant turn as the template renders
  // a past one, up to where the arguments go).
  const std::string marker = "\x01moxi-arguments\x01";
  const auto probe = with_probe_call(request.messages, *request.forced_tool, marker);
  o.add_generation_prompt = false;
  std::string before, with_call;
  try {
    before = tmpl->render(request.messages, o);
    with_call = tmpl->render(probe, o);
  } catch (const std::exception& e) {
    throw api_error(400, std::string("the chat template cannot render a tool call: ") + e.what(), "tool_choice");
  }
  const size_t at = with_call.find(marker);
  if (with_call.rfind(before, 0) != 0 || at == std::string::npos || at < before.size())
    throw api_error(400,
                    "this model's chat template does not render a tool call's arguments after the conversation, "
                    "so 'tool_choice' cannot force one",
                    "tool_choice");
  return with_call.substr(0, at);
}

bool template_uses_call_lines(const formats::chat_template& tmpl, const completion_request& request) {
  const auto probe = with_probe_call(request.messages, "moxi_probe", "{\"x\": 1}");
  formats::render_options o;
  o.add_generation_prompt = false;
  o.tools = request.tools;
  o.extra = request.template_kwargs;
  try {
    return tmpl.render(probe, o).find("[call 1/1] moxi_probe({\"x\": 1})") != std::string::npos;
  } catch (const std::exception&) {
    return false;
  }
}

parsed_reply parse_tool_calls(const std::string& text, const nlohmann::ordered_json& tools) {
  parsed_reply out;
  std::set<std::string> names;
  for (const auto& t : tools)
    if (t.is_object() && t.contains("function") && t["function"].contains("name")) names.insert(t["function"]["name"]);
  size_t first_call = std::string::npos, pos = 0;
  while (pos <= text.size()) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    std::string line = text.substr(pos, end - pos);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
    // [call I/N] NAME(ARGS)
    size_t i = 0;
    auto digits = [&] {
      const size_t s = i;
      while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
      return i > s;
    };
    bool ok = line.rfind("[call ", 0) == 0 && (i = 6, digits()) && i < line.size() && line[i++] == '/' && digits() &&
              line.compare(i, 2, "] ") == 0;
    if (ok) {
      i += 2;
      const size_t open = line.find('(', i);
      ok = open != std::string::npos && line.back() == ')';
      if (ok) {
        const std::string name = line.substr(i, open - i), args = line.substr(open + 1, line.size() - open - 2);
        const auto v = json::parse(args, nullptr, false);
        ok = names.count(name) && !v.is_discarded() && v.is_object();
        if (ok) {
          out.calls.emplace_back(name, args);
          if (first_call == std::string::npos) first_call = pos;
        }
      }
    }
    if (end == text.size()) break;
    pos = end + 1;
  }
  std::string content = text.substr(0, std::min(first_call, text.size()));
  if (!out.calls.empty()) {
    while (!content.empty() && std::isspace(static_cast<unsigned char>(content.back()))) content.pop_back();
    size_t a = 0;
    while (a < content.size() && std::isspace(static_cast<unsigned char>(content[a]))) ++a;
    content = content.substr(a);
  }
  out.content = out.calls.empty() || !content.empty() ? json(content) : json(nullptr);
  return out;
}

json usage_counts::to_json() const {
  json j = {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
  if (image_tokens > 0) j["prompt_tokens_details"]["image_tokens"] = image_tokens;
  return j;
}

json logprobs_json(bool chat, const std::vector<logprob_entry>& entries) {
  auto bytes = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(int(c));
    return b;
  };
  if (chat) {
    json content = json::array();
    for (const auto& e : entries) {
      json top = json::array();
      for (const auto& [t, lp] : e.top) top.push_back({{"token", t}, {"logprob", lp}, {"bytes", bytes(t)}});
      content.push_back({{"token", e.token_text},
                         {"logprob", e.logprob},
                         {"bytes", bytes(e.token_text)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = 0;
  for (const auto& e : entries) {
    tokens.push_back(e.token_text);
    lps.push_back(e.logprob);
    json top = json::object();
    for (const auto& [t, lp] : e.top) top[t] = lp;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += e.token_text.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

namespace {

// The prefix-cache key of placeholder j of an image with content hash h: a negative id (never a real token)
// from a 64-bit mix of both, so blocks holding different images (or the same image elsewhere in its grid)
// hash apart while the same image at the same place reuses its cache.
token_id image_key(uint64_t h, int64_t j) {
  uint64_t x = h ^ (uint64_t(j) + 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  return token_id(int32_t(uint32_t(x) | 0x80000000u));
}

// The bytes at an http(s) URL whose host the server allows: no redirects, at most `max_bytes`, within the
// timeout. Throws api_error 400 saying why not.
std::string fetch_image(const std::string& url, const request_context& ctx, size_t max_bytes,
                        const std::string& what) {
  if (ctx.allowed_media_domains.empty())
    bad("messages", what + ": only data: URLs are accepted; this server fetches remote images only from hosts "
                           "given with --allowed-media-domains");
  const size_t scheme_end = url.find("://") + 3;
  const size_t path_at = std::min(url.find_first_of("/?#", scheme_end), url.size());
  const std::string authority = url.substr(scheme_end, path_at - scheme_end);
  if (authority.empty() || authority.find('@') != std::string::npos)
    bad("messages", what + ": the URL has no plain host");
  std::string host = authority.substr(0, authority.rfind(':') == std::string::npos || authority.back() == ']'
                                             ? authority.size()
                                             : authority.rfind(':'));
  for (char& c : host) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (std::find(ctx.allowed_media_domains.begin(), ctx.allowed_media_domains.end(), host) ==
      ctx.allowed_media_domains.end())
    bad("messages", what + ": host '" + host + "' is not in --allowed-media-domains");
  httplib::Client client(url.substr(0, path_at));
  const auto timeout = std::chrono::milliseconds(int64_t(ctx.media_fetch_timeout_s * 1000));
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  client.set_follow_location(false);
  std::string body;
  bool too_big = false;
  const std::string path = path_at < url.size() ? url.substr(path_at) : "/";
  const auto res = client.Get(path, [&](const char* data, size_t n) {
    if (body.size() + n > max_bytes) {
      too_big = true;
      return false;  // stops the download
    }
    body.append(data, n);
    return true;
  });
  if (too_big) bad("messages", what + ": the image at the URL is over " + std::to_string(max_bytes) + " bytes");
  if (!res) bad("messages", what + ": cannot fetch the URL (" + httplib::to_string(res.error()) + ")");
  if (res->status != 200)
    bad("messages", what + ": fetching the URL gave HTTP " + std::to_string(res->status));
  return body;
}

// Decodes and preprocesses the request's images, expands the prompt's placeholders and keys them for the
// prefix cache; returns the images for the encoder (run once every other check has passed).
std::vector<runtime::prompt_image> attach_images(validated_request& v, const request_context& ctx) {
  const auto& images = v.request.images;
  if (!ctx.model || !ctx.model->vision())
    bad("messages", "this model takes text only: it has no vision encoder for image_url parts");
  if (int64_t(images.size()) > ctx.max_images)
    bad("messages", "the request has " + std::to_string(images.size()) + " images; the limit is " +
                        std::to_string(ctx.max_images));
  std::vector<runtime::prompt_image> prepared;
  for (size_t i = 0; i < images.size(); ++i) {
    const std::string what = "image " + std::to_string(i + 1);
    const std::string fetched =
        images[i].url.empty() ? std::string() : fetch_image(images[i].url, ctx, ctx.image_limits.max_bytes, what);
    const std::string& data = images[i].url.empty() ? images[i].bytes : fetched;
    try {
      prepared.push_back(runtime::prepare_image(*ctx.model, image::decode(data, ctx.image_limits, what)));
    } catch (const error& e) {
      bad("messages", e.what());
    }
  }
  const token_id pad = token_id(*ctx.model->config().media_placeholder_token_id);
  try {
    v.prompt = runtime::expand_image_placeholders(v.prompt, pad, prepared);
  } catch (const error& e) {
    bad("messages", std::string("the chat template and the images disagree: ") + e.what());
  }
  v.cache_key = v.prompt;
  for (size_t t = 0, k = 0, j = 0; t < v.cache_key.size(); ++t) {
    if (v.cache_key[t] != pad) continue;
    v.cache_key[t] = image_key(prepared[k].hash, int64_t(j));
    if (++j == size_t(prepared[k].tokens)) ++k, j = 0;
  }
  for (const auto& im : prepared) v.image_tokens += im.tokens;
  return prepared;
}

}  // namespace

validated_request validate_request(const std::string& body, bool chat, const request_context& ctx) {
  validated_request v;
  completion_request& r = v.request;
  r = parse_completion_request(body, chat, ctx.served_model);
  std::vector<token_id>& prompt = v.prompt;
  try {
    if (chat) {
      // The template's special tokens (<|user|>, <|end|> ...) must encode as specials, so the rendered text
      // is encoded with them on; as in vLLM, special-token text inside a message then is one too.
      prompt = ctx.tok->encode(render_chat(ctx.tmpl, r), /*allow_special=*/true);
      r.parse_calls = r.tools && !r.tools->empty() && !r.forced_tool && !r.tool_choice_none &&
                      template_uses_call_lines(*ctx.tmpl, r);
    } else if (r.prompt_text) {
      prompt = ctx.tok->encode(*r.prompt_text, /*allow_special=*/true);
    } else {
      prompt = r.prompt_ids;
    }
  } catch (const api_error&) {
    throw;
  } catch (const std::exception& e) {
    bad("prompt", std::string("cannot tokenize the prompt: ") + e.what());
  }
  for (token_id t : prompt)
    if (t < 0 || t >= ctx.vocab_size)
      bad("prompt", "token id " + std::to_string(t) + " is outside the vocabulary");
  std::vector<runtime::prompt_image> images;
  if (!r.images.empty()) images = attach_images(v, ctx);
  if (prompt.empty() && ctx.bos) prompt.push_back(*ctx.bos);
  if (prompt.empty()) bad("prompt", "the prompt is empty");
  const int64_t len = ctx.max_model_len;
  const int64_t max_prompt = ctx.max_prompt_tokens > 0 ? ctx.max_prompt_tokens : len - 1;
  if (int64_t(prompt.size()) > max_prompt)
    bad("prompt", "the prompt has " + std::to_string(prompt.size()) + " tokens; the limit is " +
                      std::to_string(max_prompt));
  const int64_t max_limit = ctx.max_tokens_limit > 0 ? ctx.max_tokens_limit : len - 1;
  v.max_tokens = r.max_tokens.value_or(std::min(ctx.default_max_tokens, len - int64_t(prompt.size())));
  if (v.max_tokens > max_limit)
    bad("max_tokens",
        "max_tokens " + std::to_string(v.max_tokens) + " exceeds the limit of " + std::to_string(max_limit));
  if (int64_t(prompt.size()) + v.max_tokens > len)
    bad("max_tokens", "This model's maximum context length is " + std::to_string(len) +
                          " tokens. However, you requested " +
                          std::to_string(int64_t(prompt.size()) + v.max_tokens) + " tokens (" +
                          std::to_string(prompt.size()) + " in the messages, " +
                          std::to_string(v.max_tokens) + " in the completion).");
  try {
    runtime::validate(r.sampling);
  } catch (const std::exception& e) {
    throw api_error(400, e.what());
  }
  if (!images.empty())
    v.media = std::make_shared<const std::vector<float>>(runtime::encode_images(*ctx.model, images));
  return v;
}

}  // namespace moxi::serve
