// An OpenAI-compatible server as an episode agent (episode.h, docs/agent-eval.md "The endpoint agent").
// The request and response shapes follow OpenAI's chat completions API with `tools` (function calling).
#include <httplib.h>

#include "moxi/base/error.h"
#include "moxi/eval/episode.h"

namespace moxi::eval {
namespace {

using json = nlohmann::json;

constexpr const char* kSystem =
    "You are working in a Linux terminal to complete a task. Use the run_command tool to run one shell "
    "command at a time; you will see its exit code and output. When the task is complete, reply without "
    "calling a tool.";

json run_command_tool() {
  return {{"type", "function"},
          {"function",
           {{"name", "run_command"},
            {"description", "Run a shell command (bash) in the task's working directory and return its exit "
                            "code and output."},
            {"parameters",
             {{"type", "object"},
              {"properties", {{"command", {{"type", "string"}, {"description", "the command line to run"}}}}},
              {"required", {"command"}}}}}}};
}

// Splits http(s)://host[:port]/prefix into the client's origin and the path prefix.
void split_url(const std::string& url, std::string& origin, std::string& prefix) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos || (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0))
    throw error("endpoint '" + url + "': expected http://HOST[:PORT]/PATH or https://...");
  const size_t slash = url.find('/', scheme + 3);
  origin = url.substr(0, slash);
  prefix = slash == std::string::npos ? "" : url.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
}

// One connection's worth of client: each episode has its own, so episodes run in parallel.
class endpoint_client {
 public:
  explicit endpoint_client(const endpoint_options& o) : o_(o) {
    split_url(o.url, origin_, prefix_);
    client_ = std::make_unique<httplib::Client>(origin_);
    client_->set_connection_timeout(10, 0);
    client_->set_read_timeout(time_t(o.timeout_s), 0);
    client_->set_write_timeout(30, 0);
    if (!o.api_key.empty()) client_->set_bearer_token_auth(o.api_key);
  }

  json call(const std::string& path, const json* body) {
    auto res = body ? client_->Post(prefix_ + path, body->dump(), "application/json") : client_->Get(prefix_ + path);
    if (!res) throw error(o_.url + path + ": " + httplib::to_string(res.error()));
    if (res->status != 200)
      throw error(o_.url + path + ": HTTP " + std::to_string(res->status) + ": " + res->body.substr(0, 500));
    try {
      return json::parse(res->body);
    } catch (const json::exception& e) {
      throw error(o_.url + path + ": the response is not JSON: " + e.what());
    }
  }

  const endpoint_options& options() const { return o_; }

 private:
  endpoint_options o_;
  std::string origin_, prefix_;
  std::unique_ptr<httplib::Client> client_;
};

class endpoint_session final : public agent_session {
 public:
  endpoint_session(const endpoint_options& o, std::string model, const agent_task& t)
      : c_(o), model_(std::move(model)) {
    messages_.push_back({{"role", "system"}, {"content", kSystem}});
    messages_.push_back({{"role", "user"}, {"content", t.instruction}});
  }

  action next(const observation* last) override {
    for (size_t i = 0; i < pending_.size(); ++i) {
      const std::string content =
          i == 0 && last ? observation_message(*last) : "not run: run one command per turn";
      messages_.push_back({{"role", "tool"}, {"tool_call_id", pending_[i]}, {"content", content}});
    }
    pending_.clear();
    const auto& o = c_.options();
    json body = {{"model", model_},          {"messages", messages_}, {"tools", json::array({run_command_tool()})},
                 {"tool_choice", "auto"},    {"max_tokens", o.max_tokens}, {"temperature", o.temperature}};
    const json res = c_.call("/chat/completions", &body);
    if (!res.contains("choices") || !res["choices"].is_array() || res["choices"].empty() ||
        !res["choices"][0].contains("message"))
      throw error("the chat completion has no choices[0].message");
    const json& msg = res["choices"][0]["message"];
    action a;
    if (res.contains("usage") && res["usage"].is_object()) {
      a.prompt_tokens = res["usage"].value("prompt_tokens", int64_t(0));
      a.reply_tokens = res["usage"].value("completion_tokens", int64_t(0));
    }
    a.text = msg.contains("content") && msg["content"].is_string() ? msg["content"].get<std::string>() : "";
    json assistant = {{"role", "assistant"}, {"content", msg.contains("content") ? msg["content"] : json(nullptr)}};
    const bool calls = msg.contains("tool_calls") && msg["tool_calls"].is_array() && !msg["tool_calls"].empty();
    if (!calls) {
      a.finish = true;
      messages_.push_back(assistant);
      return a;
    }
    assistant["tool_calls"] = msg["tool_calls"];
    messages_.push_back(assistant);
    for (const auto& call : msg["tool_calls"]) pending_.push_back(call.value("id", std::string()));
    const json& first = msg["tool_calls"][0];
    const std::string name = first.contains("function") ? first["function"].value("name", std::string()) : "";
    if (name != "run_command") throw error("the model called an unknown tool '" + name + "'");
    json args;
    try {
      args = json::parse(first["function"].value("arguments", std::string("{}")));
    } catch (const json::exception& e) {
      throw error(std::string("run_command arguments are not JSON: ") + e.what());
    }
    if (!args.is_object() || !args.contains("command") || !args["command"].is_string())
      throw error("run_command needs a string \"command\"");
    a.command = args["command"].get<std::string>();
    if (a.command.empty()) a.command = "true";  // an empty command line runs nothing; the turn still counts
    return a;
  }

 private:
  endpoint_client c_;
  std::string model_;
  json messages_ = json::array();
  std::vector<std::string> pending_;  // tool call ids of the last reply, answered on the next turn
};

class endpoint_agent final : public agent {
 public:
  explicit endpoint_agent(const endpoint_options& o) : o_(o) {
    std::string origin, prefix;
    split_url(o.url, origin, prefix);  // a bad URL fails here, before any episode
    model_ = o.model;
    if (model_.empty()) {
      endpoint_client c(o);
      const json models = c.call("/models", nullptr);
      if (!models.contains("data") || !models["data"].is_array() || models["data"].empty() ||
          !models["data"][0].contains("id"))
        throw error(o.url + "/models lists no model; give the model name");
      model_ = models["data"][0]["id"].get<std::string>();
    }
  }
  std::string name() const override { return "endpoint:" + model_; }
  std::unique_ptr<agent_session> start(const agent_task& t) override {
    return std::make_unique<endpoint_session>(o_, model_, t);
  }

 private:
  endpoint_options o_;
  std::string model_;
};

}  // namespace

std::unique_ptr<agent> make_endpoint_agent(const endpoint_options& o) {
  return std::make_unique<endpoint_agent>(o);
}

}  // namespace moxi::eval
