// Byte-level BPE trainer (see bpe-trainer.h): word counting through the loader's PCRE2 split, then merges
// with incrementally maintained pair counts and a lazily updated max-heap.
#include "moxi/formats/bpe-trainer.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <queue>

#include "moxi/base/clock.h"
#include "moxi/base/error.h"
#include "moxi/formats/tokenizer-regex.h"
#include "moxi/formats/tokenizer.h"

namespace moxi::formats {
namespace {

// Llama-3's pre-tokenizer regex, verbatim from its tokenizer.json (Split, Isolated).
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Llama-3's regex with single-digit numbers (\p{N}{1,3} -> \p{N}), as HF's Digits(individual_digits)
// pre-tokenizer would split them.
const char* const kLlama3DigitsPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// The pattern HF's ByteLevel pre-tokenizer applies with use_regex=true (and tokenizer.cpp with it).
const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

uint64_t pair_key(int32_t a, int32_t b) {
  return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
}

struct heap_entry {
  int64_t count;
  uint64_t pair;
  // std::priority_queue pops the largest: higher count first, then the smaller (left, right).
  bool operator<(const heap_entry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

}  // namespace

const char* bpe_split_pattern(bpe_split split) {
  switch (split) {
    case bpe_split::llama3:
      return kLlama3Pattern;
    case bpe_split::llama3_digits:
      return kLlama3DigitsPattern;
    case bpe_split::gpt2:
      return kGpt2Pattern;
  }
  return kLlama3Pattern;
}

const char* to_string(bpe_split split) {
  switch (split) {
    case bpe_split::llama3:
      return "llama3";
    case bpe_split::llama3_digits:
      return "llama3-digits";
    case bpe_split::gpt2:
      return "gpt2";
  }
  return "llama3";
}

bpe_split parse_bpe_split(const std::string& name, const std::string& what) {
  for (auto s : {bpe_split::llama3, bpe_split::llama3_digits, bpe_split::gpt2}) {
    if (name == to_string(s)) return s;
  }
  throw error(what + ": unknown pre-tokenizer split '" + name + "' (accepted: llama3, llama3-digits, gpt2)");
}

std::vector<std::string> default_special_tokens() {
  return {"<|pad|>", "<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"};
}

bpe_trainer::bpe_trainer(bpe_train_options options) : options_(std::move(options)) {
  for (size_t i = 0; i < options_.special_tokens.size(); ++i) {
    const auto& s = options_.special_tokens[i];
    if (s.empty() || !utf8_valid(s))
      throw error("special token #" + std::to_string(i) + " is empty or not UTF-8");
    for (size_t j = 0; j < i; ++j) {
      if (options_.special_tokens[j] == s) throw error("special token '" + s + "' is given twice");
    }
  }
  const int64_t base = 256 + int64_t(options_.special_tokens.size());
  if (options_.vocab_size < base) {
    throw error("vocab size " + std::to_string(options_.vocab_size) +
                " cannot hold the 256 byte tokens and " + std::to_string(options_.special_tokens.size()) +
                " special tokens (need >= " + std::to_string(base) + ")");
  }
  if (options_.vocab_size > (int64_t(1) << 30)) throw error("vocab size over 2^30");
}

bpe_trainer::~bpe_trainer() = default;

void bpe_trainer::add_text(std::string_view text, const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!utf8_valid(text)) throw error(what + ": not valid UTF-8");
  // Compiled per call: cheap next to a document, and it keeps the trainer free of PCRE2 state.
  regex re(bpe_split_pattern(options_.split), what + ": pre-tokenizer regex");
  stats_.input_bytes += text.size();
  auto add_chunk = [&](std::string_view chunk) {
    // Isolated split: matches and the gaps between them are pieces (the loader's apply_split).
    size_t pos = 0;
    auto add_piece = [&](size_t b, size_t e) {
      if (e <= b) return;
      ++words_[std::string(chunk.substr(b, e - b))];
      ++stats_.pieces;
    };
    for (auto [b, e] : re.find_all(chunk)) {
      add_piece(pos, b);
      add_piece(b, e);
      pos = e;
    }
    add_piece(pos, chunk.size());
  };
  // Cut out special tokens, leftmost first and the longest at a position (the loader's added-token trie).
  size_t start = 0;
  while (start < text.size()) {
    size_t best = std::string_view::npos, best_len = 0;
    for (const auto& s : options_.special_tokens) {
      const size_t at = text.find(s, start);
      if (at == std::string_view::npos) continue;
      if (at < best || (at == best && s.size() > best_len)) {
        best = at;
        best_len = s.size();
      }
    }
    if (best == std::string_view::npos) {
      add_chunk(text.substr(start));
      break;
    }
    add_chunk(text.substr(start, best - start));
    start = best + best_len;
  }
  stats_.unique_words = words_.size();
  stats_.count_s += seconds_since(t0);
}

bpe_model bpe_trainer::train(const std::function<void(int64_t, int64_t)>& on_merge) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto offset = int32_t(options_.special_tokens.size());
  const int64_t target_new = options_.vocab_size - 256 - offset;

  // Internal ids: byte b is b, merged tokens follow; the written id adds `offset`, which keeps the order
  // (and so the tie rule) the same.
  std::vector<std::string> tokens(256);
  for (int b = 0; b < 256; ++b) tokens[b] = std::string(1, char(b));
  std::unordered_map<std::string, int32_t> token_ids;
  for (int b = 0; b < 256; ++b) token_ids.emplace(tokens[b], b);

  // Words sorted by bytes so that everything below is independent of hash order.
  std::vector<std::pair<std::string, int64_t>> sorted(words_.begin(), words_.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::vector<int32_t>> words(sorted.size());
  std::vector<int64_t> freq(sorted.size());
  std::unordered_map<uint64_t, int64_t> counts;
  std::unordered_map<uint64_t, std::vector<uint32_t>> where;  // pair -> words that (may) contain it
  for (size_t w = 0; w < sorted.size(); ++w) {
    const auto& bytes = sorted[w].first;
    freq[w] = sorted[w].second;
    auto& syms = words[w];
    syms.reserve(bytes.size());
    for (char c : bytes) syms.push_back(static_cast<uint8_t>(c));
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      const uint64_t p = pair_key(syms[i], syms[i + 1]);
      counts[p] += freq[w];
      auto& list = where[p];
      if (list.empty() || list.back() != w) list.push_back(uint32_t(w));
    }
  }
  sorted = {};

  std::priority_queue<heap_entry> heap;
  for (const auto& [p, c] : counts) heap.push({c, p});

  bpe_model model;
  model.special_tokens = options_.special_tokens;
  model.split = options_.split;
  int64_t created = 0;
  std::unordered_map<uint64_t, int64_t> delta;
  std::vector<int32_t> merged;
  while (created < target_new && !heap.empty()) {
    const heap_entry top = heap.top();
    heap.pop();
    auto it = counts.find(top.pair);
    const int64_t actual = it == counts.end() ? 0 : it->second;
    if (actual != top.count) {
      // Stale: the count dropped since this entry was pushed (rises push a fresh entry).
      if (actual > 0 && actual < top.count) heap.push({actual, top.pair});
      continue;
    }
    if (actual < std::max<int64_t>(options_.min_frequency, 1)) break;
    const auto a = int32_t(top.pair >> 32), b = int32_t(top.pair & 0xffffffffu);
    std::string bytes = tokens[a] + tokens[b];
    int32_t t;
    if (auto found = token_ids.find(bytes); found != token_ids.end()) {
      t = found->second;
    } else {
      t = int32_t(tokens.size());
      token_ids.emplace(bytes, t);
      tokens.push_back(std::move(bytes));
      ++created;
    }
    model.merges.push_back({a + offset, b + offset, t + offset, actual});

    std::vector<uint32_t> list = std::move(where[top.pair]);
    where.erase(top.pair);
    delta.clear();
    for (uint32_t w : list) {
      auto& syms = words[w];
      bool present = false;
      for (size_t i = 0; i + 1 < syms.size() && !present; ++i) present = syms[i] == a && syms[i + 1] == b;
      if (!present) continue;  // a stale entry: an earlier merge took the pair away
      const int64_t f = freq[w];
      for (size_t i = 0; i + 1 < syms.size(); ++i) delta[pair_key(syms[i], syms[i + 1])] -= f;
      merged.clear();
      for (size_t i = 0; i < syms.size();) {
        if (i + 1 < syms.size() && syms[i] == a && syms[i + 1] == b) {
          merged.push_back(t);
          i += 2;
        } else {
          merged.push_back(syms[i]);
          ++i;
        }
      }
      syms.assign(merged.begin(), merged.end());
      for (size_t i = 0; i + 1 < syms.size(); ++i) {
        const uint64_t p = pair_key(syms[i], syms[i + 1]);
        delta[p] += f;
        // Every pair not touching t was adjacent before, so only those are new to this word.
        if (syms[i] == t || syms[i + 1] == t) {
          auto& wl = where[p];
          if (wl.empty() || wl.back() != w) wl.push_back(w);
        }
      }
    }
    for (const auto& [p, d] : delta) {
      if (d == 0) continue;
      auto& c = counts[p];
      c += d;
      if (d > 0) heap.push({c, p});
      if (c == 0) counts.erase(p);
    }
    if (on_merge && (model.merges.size() % 256 == 0)) on_merge(created, target_new);
  }
  if (on_merge) on_merge(created, target_new);

  model.token_bytes = options_.special_tokens;
  for (auto& tok : tokens) model.token_bytes.push_back(std::move(tok));
  stats_.merge_s += seconds_since(t0);
  return model;
}

std::string bpe_to_hf_json(const bpe_model& model) {
  using ojson = nlohmann::ordered_json;
  const size_t n_special = model.special_tokens.size();
  ojson added = ojson::array();
  for (size_t i = 0; i < n_special; ++i) {
    added.push_back({{"id", i},
                     {"content", model.special_tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  // Specials live only in added_tokens (as in Llama-3's file): model.vocab is the byte-level BPE part.
  ojson vocab = ojson::object();
  for (size_t id = n_special; id < model.token_bytes.size(); ++id) {
    vocab[byte_level_spelling(model.token_bytes[id])] = id;
  }
  ojson merges = ojson::array();
  for (const auto& m : model.merges) {
    merges.push_back(byte_level_spelling(model.token_bytes[size_t(m.left)]) + " " +
                     byte_level_spelling(model.token_bytes[size_t(m.right)]));
  }
  const ojson byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  ojson pre;
  if (model.split != bpe_split::gpt2) {
    pre = {{"type", "Sequence"},
           {"pretokenizers",
            {{{"type", "Split"},
              {"pattern", {{"Regex", bpe_split_pattern(model.split)}}},
              {"behavior", "Isolated"},
              {"invert", false}},
             byte_level}}};
  } else {
    pre = byte_level;
    pre["use_regex"] = true;
  }
  ojson doc = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}},
  };
  return doc.dump(1) + "\n";
}

}  // namespace moxi::formats
