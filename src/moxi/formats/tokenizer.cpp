// Byte-level BPE: loading HF tokenizer.json and tiktoken files into one table layout (id -> raw bytes,
// raw bytes -> id, pair -> merge), added-token extraction, PCRE2 pre-splitting, BPE with a rank heap and a
// word cache, and decoding. Semantics follow the HF `tokenizers` crate and OpenAI's tiktoken.
#include "moxi/formats/tokenizer.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "moxi/base/base64.h"
#include "moxi/base/error.h"
#include "moxi/formats/tokenizer-regex.h"

namespace moxi::formats {

const char* const kKimiPattern =
    R"([\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

using json = nlohmann::json;

// Limits that keep a hostile file from exhausting memory or time; real tokenizers are far below them.
constexpr size_t kMaxFileBytes = size_t{1} << 30;  // tokenizer.json / tiktoken.model
constexpr token_id kMaxTokenId = (1 << 23) - 1;    // 8M ids
constexpr size_t kMaxTokenBytes = 4096;            // one vocabulary entry or added token
constexpr size_t kMaxPatternBytes = 64 * 1024;     // one pre-tokenizer regex
constexpr size_t kMaxPreTokenizerSteps = 64;       // Sequence nesting and length
constexpr size_t kMaxCachedWordBytes = 256;        // longer words are not cached
constexpr size_t kMaxCacheEntries = 1 << 16;       // cleared wholesale when full

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the rest to U+0100 upwards in
// byte order, so that every byte is one visible character in vocab strings.
std::array<uint32_t, 256> make_byte_to_codepoint() {
  std::array<uint32_t, 256> table{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    table[b] = printable ? b : next++;
  }
  return table;
}

const std::array<uint32_t, 256>& byte_to_codepoint() {
  static const auto table = make_byte_to_codepoint();
  return table;
}

// Inverse of the above for code points < 0x144 (the largest one used); -1 where unmapped.
const std::array<int, 0x144>& codepoint_to_byte() {
  static const auto table = [] {
    std::array<int, 0x144> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_codepoint()[b]] = b;
    return t;
  }();
  return table;
}

// Decodes one UTF-8 code point at text[i] (text already validated); advances i.
uint32_t next_codepoint(std::string_view text, size_t& i) {
  const auto c = static_cast<unsigned char>(text[i]);
  int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : 4;
  uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
  i += len;
  return cp;
}

// A vocab string of byte-level characters back to raw bytes; nullopt when some character is outside the
// byte-level alphabet (then the HF ByteLevel decoder emits the token's own UTF-8, as we do).
std::optional<std::string> byte_level_to_bytes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp = next_codepoint(s, i);
    if (cp >= codepoint_to_byte().size() || codepoint_to_byte()[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(codepoint_to_byte()[cp]));
  }
  return out;
}

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool is_ascii_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// Heterogeneous lookup so that string_views of the text can probe the byte maps without copying.
struct string_hash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using bytes_map = std::unordered_map<std::string, token_id, string_hash, std::equal_to<>>;

enum class split_behavior {
  isolated,
  removed,
  merged_with_previous,
  merged_with_next,
  contiguous,
  matches_only
};

struct pre_step {
  enum class kind { split, byte_level } type = kind::split;
  std::unique_ptr<regex> re;  // split pattern, or GPT-2's pattern for ByteLevel with use_regex
  split_behavior behavior = split_behavior::isolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel only
};

// Byte trie over added-token contents for leftmost-longest matching.
struct token_trie {
  struct node {
    int token = -1;  // index into impl::added, or -1
  };
  std::vector<node> nodes{node{}};
  std::unordered_map<uint64_t, int> edges;  // (node << 8 | byte) -> child

  void insert(std::string_view s, int token) {
    int cur = 0;
    for (char ch : s) {
      const uint64_t key = (uint64_t(cur) << 8) | static_cast<unsigned char>(ch);
      auto it = edges.find(key);
      if (it == edges.end()) {
        nodes.push_back(node{});
        it = edges.emplace(key, int(nodes.size() - 1)).first;
      }
      cur = it->second;
    }
    if (nodes[cur].token < 0) nodes[cur].token = token;  // first definition wins on duplicates
  }
  bool empty() const { return nodes.size() == 1; }
};

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

struct tokenizer::impl {
  std::string source;
  bool tiktoken = false;
  bool ignore_merges = false;
  token_id unk_id = -1;

  std::vector<std::string> id_bytes;  // id -> raw bytes
  std::vector<uint8_t> id_flags;      // kUsed | kSpecial | kAdded
  static constexpr uint8_t kUsed = 1, kSpecial = 2, kAdded = 4;
  bytes_map bytes_to_id;              // model vocabulary by raw bytes (tiktoken: rank == id)
  std::array<token_id, 256> byte_id;  // single-byte tokens, -1 when absent

  struct merge {
    uint32_t rank;
    token_id id;
  };
  std::unordered_map<uint64_t, merge> merges;  // HF only: (left << 32 | right) -> merge

  std::vector<pre_step> steps;
  std::vector<added_token> added;
  std::unordered_map<std::string, token_id> added_by_content;
  token_trie raw_trie, normalized_trie;  // HF's two passes: normalized=false first, then normalized=true

  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<token_id>> cache;

  impl() { byte_id.fill(-1); }

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw error(source + ": " + field + ": " + what);
  }

  void set_token(token_id id, std::string bytes, uint8_t flags) {
    if (size_t(id) >= id_bytes.size()) {
      id_bytes.resize(size_t(id) + 1);
      id_flags.resize(size_t(id) + 1, 0);
    }
    id_bytes[id] = std::move(bytes);
    id_flags[id] |= flags | kUsed;
  }

  void add_token(const added_token& t, const std::string& field) {
    if (t.content.empty()) fail(field + ".content", "empty added token");
    if (t.content.size() > kMaxTokenBytes) fail(field + ".content", "longer than the limit");
    if (t.id < 0 || t.id > kMaxTokenId) fail(field + ".id", "id " + std::to_string(t.id) + " out of range");
    if (!utf8_valid(t.content)) fail(field + ".content", "not valid UTF-8");
    const int index = int(added.size());
    added.push_back(t);
    added_by_content.emplace(t.content, t.id);
    set_token(t.id, t.content, uint8_t(kAdded | (t.special ? kSpecial : 0)));
    (t.normalized ? normalized_trie : raw_trie).insert(t.content, index);
  }

  void finish() {
    for (int b = 0; b < 256; ++b) {
      const char ch = static_cast<char>(b);
      auto it = bytes_to_id.find(std::string_view(&ch, 1));
      byte_id[b] = it == bytes_to_id.end() ? -1 : it->second;
    }
  }

  // --- encoding ---

  struct segment {
    size_t begin, end;
    token_id id;  // -1 for text
  };

  // Splits [begin, end) of text at matches of `trie`, appending to out.
  void split_added(std::string_view text, size_t begin, size_t end, const token_trie& trie,
                   bool allow_special, std::vector<segment>& out) const {
    size_t text_start = begin;  // start of the pending text run
    size_t i = begin;
    while (i < end) {
      // Longest match starting at i.
      int cur = 0, best = -1;
      size_t best_end = i;
      for (size_t k = i; k < end; ++k) {
        auto it = trie.edges.find((uint64_t(cur) << 8) | static_cast<unsigned char>(text[k]));
        if (it == trie.edges.end()) break;
        cur = it->second;
        const int t = trie.nodes[cur].token;
        if (t >= 0 && (allow_special || !added[t].special)) {
          best = t;
          best_end = k + 1;
        }
      }
      if (best >= 0) {
        const added_token& tok = added[best];
        size_t m_begin = i, m_end = best_end;
        const bool word_ok = !tok.single_word || ((m_begin == 0 || !is_ascii_word(text[m_begin - 1])) &&
                                                  (m_end >= text.size() || !is_ascii_word(text[m_end])));
        if (word_ok) {
          if (tok.lstrip) {
            while (m_begin > text_start && is_ascii_space(text[m_begin - 1])) --m_begin;
          }
          if (tok.rstrip) {
            while (m_end < end && is_ascii_space(text[m_end])) ++m_end;
          }
          if (m_begin > text_start) out.push_back({text_start, m_begin, -1});
          out.push_back({m_begin, m_end, tok.id});
          i = text_start = m_end;
          continue;
        }
      }
      ++i;
    }
    if (end > text_start) out.push_back({text_start, end, -1});
  }

  void apply_split(const pre_step& step, const std::string& piece, std::vector<std::string>& out) const {
    auto matches = step.re->find_all(piece);
    struct seg {
      size_t b, e;
      bool match;
    };
    std::vector<seg> segs;
    size_t pos = 0;
    for (auto [b, e] : matches) {
      if (b > pos) segs.push_back({pos, b, false});
      segs.push_back({b, e, true});
      pos = e;
    }
    if (pos < piece.size()) segs.push_back({pos, piece.size(), false});
    if (step.invert) {
      for (auto& s : segs) s.match = !s.match;
    }
    std::vector<std::pair<size_t, size_t>> parts;
    switch (step.behavior) {
      case split_behavior::isolated:
        for (auto& s : segs) parts.emplace_back(s.b, s.e);
        break;
      case split_behavior::removed:
        for (auto& s : segs) {
          if (!s.match) parts.emplace_back(s.b, s.e);
        }
        break;
      case split_behavior::matches_only:
        for (auto& s : segs) {
          if (s.match) parts.emplace_back(s.b, s.e);
        }
        break;
      case split_behavior::merged_with_previous: {
        bool prev_match = false;
        for (auto& s : segs) {
          if (s.match && !prev_match && !parts.empty()) {
            parts.back().second = s.e;
          } else {
            parts.emplace_back(s.b, s.e);
          }
          prev_match = s.match;
        }
        break;
      }
      case split_behavior::merged_with_next: {
        bool next_match = false;
        for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
          if (it->match && !next_match && !parts.empty()) {
            parts.back().first = it->b;
          } else {
            parts.emplace_back(it->b, it->e);
          }
          next_match = it->match;
        }
        std::reverse(parts.begin(), parts.end());
        break;
      }
      case split_behavior::contiguous: {
        bool prev_match = false;
        for (auto& s : segs) {
          if (s.match == prev_match && !parts.empty()) {
            parts.back().second = s.e;
          } else {
            parts.emplace_back(s.b, s.e);
          }
          prev_match = s.match;
        }
        break;
      }
    }
    for (auto [b, e] : parts) out.emplace_back(piece.substr(b, e - b));
  }

  std::vector<std::string> pre_tokenize(std::string_view text) const {
    std::vector<std::string> pieces{std::string(text)};
    std::vector<std::string> next;
    for (const auto& step : steps) {
      next.clear();
      for (auto& piece : pieces) {
        if (step.type == pre_step::kind::byte_level) {
          // As the HF crate does: per piece, not only at the start of the text.
          if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) piece.insert(piece.begin(), ' ');
          if (!step.re) {
            next.push_back(std::move(piece));
            continue;
          }
        }
        apply_split(step, piece, next);
      }
      pieces.swap(next);
    }
    return pieces;
  }

  std::optional<merge> find_merge(token_id a, token_id b, std::string& scratch) const {
    if (!tiktoken) {
      auto it = merges.find((uint64_t(uint32_t(a)) << 32) | uint32_t(b));
      if (it == merges.end()) return std::nullopt;
      return it->second;
    }
    // tiktoken ranks the concatenation itself; the rank is the id.
    scratch.assign(id_bytes[a]);
    scratch.append(id_bytes[b]);
    auto it = bytes_to_id.find(std::string_view(scratch));
    if (it == bytes_to_id.end()) return std::nullopt;
    return merge{uint32_t(it->second), it->second};
  }

  void bpe(std::string_view word, std::vector<token_id>& out) const {
    if (word.empty()) return;
    if (tiktoken || ignore_merges) {
      // tiktoken (and HF with ignore_merges) take a whole word that is itself a token as is.
      auto it = bytes_to_id.find(word);
      if (it != bytes_to_id.end()) {
        out.push_back(it->second);
        return;
      }
    }
    const bool cacheable = word.size() <= kMaxCachedWordBytes;
    if (cacheable) {
      std::lock_guard lock(cache_mu);
      auto it = cache.find(std::string(word));
      if (it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    struct symbol {
      token_id id;
      int prev, next;
    };
    std::vector<symbol> syms;
    syms.reserve(word.size());
    for (size_t i = 0; i < word.size(); ++i) {
      token_id id = byte_id[static_cast<unsigned char>(word[i])];
      if (id < 0) {
        if (unk_id < 0) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned char>(word[i]));
          throw error(source + ": the vocabulary has no token for byte " + hex + " and no unk_token");
        }
        id = unk_id;
      }
      syms.push_back({id, int(i) - 1, i + 1 < word.size() ? int(i) + 1 : -1});
    }
    struct candidate {
      uint32_t rank;
      int left;
      token_id left_id, right_id, merged;
      bool operator>(const candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    std::priority_queue<candidate, std::vector<candidate>, std::greater<>> heap;
    std::string scratch;
    auto consider = [&](int left) {
      if (left < 0) return;
      const int right = syms[left].next;
      if (right < 0) return;
      if (auto m = find_merge(syms[left].id, syms[right].id, scratch)) {
        heap.push({m->rank, left, syms[left].id, syms[right].id, m->id});
      }
    };
    for (int i = 0; i + 1 < int(syms.size()); ++i) consider(i);
    while (!heap.empty()) {
      const candidate c = heap.top();
      heap.pop();
      symbol& l = syms[c.left];
      // Entries go stale when a neighbour merged first; the ids tell whether the pair is still there.
      if (l.id != c.left_id || l.next < 0 || syms[l.next].id != c.right_id) continue;
      const int r = l.next;
      l.id = c.merged;
      l.next = syms[r].next;
      if (l.next >= 0) syms[l.next].prev = c.left;
      syms[r].id = -1;  // dead
      consider(l.prev);
      consider(c.left);
    }
    const size_t first = out.size();
    for (int i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
    if (cacheable) {
      std::lock_guard lock(cache_mu);
      if (cache.size() >= kMaxCacheEntries) cache.clear();
      cache.emplace(std::string(word), std::vector<token_id>(out.begin() + first, out.end()));
    }
  }

  void encode_text(std::string_view text, std::vector<token_id>& out) const {
    for (const auto& piece : pre_tokenize(text)) bpe(piece, out);
  }
};

// ---------------------------------------------------------------------------------------------------------
// HF tokenizer.json

namespace {

std::string read_file_limited(const std::string& path, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw io_error("open", path, errno);
  in.seekg(0, std::ios::end);
  const auto size = in.tellg();
  if (size < 0) throw io_error("seek", path, errno);
  if (size_t(size) > limit) {
    throw error(path + ": file is " + std::to_string(size_t(size)) + " bytes, over the limit of " +
                std::to_string(limit));
  }
  in.seekg(0);
  std::string data(size_t(size), '\0');
  if (!in.read(data.data(), size)) throw io_error("read", path, errno);
  return data;
}

struct hf_loader {
  tokenizer::impl& t;

  [[noreturn]] void fail(const std::string& field, const std::string& what) { t.fail(field, what); }

  const json& member(const json& obj, const std::string& field, const char* key) {
    if (!obj.is_object()) fail(field, "expected an object");
    auto it = obj.find(key);
    if (it == obj.end()) fail(field + "." + key, "missing");
    return *it;
  }
  std::string type_of(const json& obj, const std::string& field) {
    if (!obj.is_object()) fail(field, "expected an object");
    auto it = obj.find("type");
    if (it == obj.end() || !it->is_string()) fail(field + ".type", "missing or not a string");
    return it->get<std::string>();
  }
  bool flag(const json& obj, const std::string& field, const char* key, bool def) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return def;
    if (!it->is_boolean()) fail(field + "." + key, "expected true or false");
    return it->get<bool>();
  }

  void normalizer(const json& n, const std::string& field) {
    if (n.is_null()) return;
    const std::string type = type_of(n, field);
    if (type == "Sequence") {
      const json& list = member(n, field, "normalizers");
      if (!list.is_array()) fail(field + ".normalizers", "expected an array");
      for (size_t i = 0; i < list.size(); ++i)
        normalizer(list[i], field + ".normalizers[" + std::to_string(i) + "]");
      return;
    }
    fail(field + ".type", "normalizer '" + type + "' is not supported (only none or an empty Sequence)");
  }

  split_behavior behavior(const json& v, const std::string& field) {
    if (!v.is_string()) fail(field, "expected a string");
    const auto s = v.get<std::string>();
    if (s == "Isolated") return split_behavior::isolated;
    if (s == "Removed") return split_behavior::removed;
    if (s == "MergedWithPrevious") return split_behavior::merged_with_previous;
    if (s == "MergedWithNext") return split_behavior::merged_with_next;
    if (s == "Contiguous") return split_behavior::contiguous;
    fail(field, "unknown split behavior '" + s + "'");
  }

  void pre_tokenizer(const json& p, const std::string& field) {
    if (p.is_null()) return;
    if (t.steps.size() >= kMaxPreTokenizerSteps) fail(field, "too many pre-tokenizer steps");
    const std::string type = type_of(p, field);
    if (type == "Sequence") {
      const json& list = member(p, field, "pretokenizers");
      if (!list.is_array()) fail(field + ".pretokenizers", "expected an array");
      if (list.size() > kMaxPreTokenizerSteps) fail(field + ".pretokenizers", "too many steps");
      for (size_t i = 0; i < list.size(); ++i) {
        pre_tokenizer(list[i], field + ".pretokenizers[" + std::to_string(i) + "]");
      }
      return;
    }
    pre_step step;
    if (type == "Split") {
      const json& pattern = member(p, field, "pattern");
      std::string text;
      bool literal = false;
      if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
        text = pattern["Regex"].get<std::string>();
      } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
        text = pattern["String"].get<std::string>();
        literal = true;
      } else {
        fail(field + ".pattern", "expected {\"Regex\": string} or {\"String\": string}");
      }
      if (text.size() > kMaxPatternBytes) fail(field + ".pattern", "longer than the limit");
      step.re = std::make_unique<regex>(text, t.source + ": " + field + ".pattern", literal);
      step.behavior = behavior(member(p, field, "behavior"), field + ".behavior");
      step.invert = flag(p, field, "invert", false);
    } else if (type == "ByteLevel") {
      step.type = pre_step::kind::byte_level;
      step.add_prefix_space = flag(p, field, "add_prefix_space", true);
      if (flag(p, field, "use_regex", true)) {
        step.re = std::make_unique<regex>(kGpt2Pattern, t.source + ": " + field + " (GPT-2 regex)");
      }
    } else {
      fail(field + ".type", "pre-tokenizer '" + type + "' is not supported (Split, ByteLevel, Sequence)");
    }
    t.steps.push_back(std::move(step));
  }

  void decoder(const json& d, const std::string& field) {
    if (d.is_null()) return;
    const std::string type = type_of(d, field);
    if (type == "ByteLevel") return;
    if (type == "Sequence") {
      const json& list = member(d, field, "decoders");
      if (!list.is_array()) fail(field + ".decoders", "expected an array");
      for (size_t i = 0; i < list.size(); ++i)
        decoder(list[i], field + ".decoders[" + std::to_string(i) + "]");
      return;
    }
    fail(field + ".type", "decoder '" + type + "' is not supported (ByteLevel)");
  }

  void model(const json& m) {
    if (!m.is_object()) fail("model", "expected an object");
    if (m.contains("type")) {
      const std::string type = type_of(m, "model");
      if (type != "BPE") fail("model.type", "model '" + type + "' is not supported (BPE)");
    }
    if (m.contains("dropout") && !m["dropout"].is_null()) {
      if (!m["dropout"].is_number() || m["dropout"].get<double>() != 0.0) {
        fail("model.dropout", "BPE dropout is not supported at inference");
      }
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (m.contains(key) && !m[key].is_null() &&
          !(m[key].is_string() && m[key].get<std::string>().empty())) {
        fail(std::string("model.") + key, "not supported for byte-level BPE");
      }
    }
    t.ignore_merges = flag(m, "model", "ignore_merges", false);

    const json& vocab = member(m, "model", "vocab");
    if (!vocab.is_object()) fail("model.vocab", "expected an object of token -> id");
    std::unordered_map<std::string, token_id> by_string;
    by_string.reserve(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      const std::string field = "model.vocab[\"" + it.key().substr(0, 64) + "\"]";
      if (!it.value().is_number_integer()) fail(field, "expected an integer id");
      const auto id64 = it.value().get<int64_t>();
      if (id64 < 0 || id64 > kMaxTokenId) fail(field, "id " + std::to_string(id64) + " out of range");
      if (it.key().empty() || it.key().size() > kMaxTokenBytes) fail(field, "empty or too long token");
      const auto id = token_id(id64);
      if (size_t(id) < t.id_flags.size() && (t.id_flags[id] & tokenizer::impl::kUsed)) {
        fail(field, "id " + std::to_string(id) + " used twice");
      }
      by_string.emplace(it.key(), id);
      if (auto bytes = byte_level_to_bytes(it.key())) {
        t.bytes_to_id.emplace(*bytes, id);
        t.set_token(id, std::move(*bytes), 0);
      } else {
        t.set_token(id, it.key(), 0);  // not byte-level text: stands for its own UTF-8 (HF decoder)
      }
    }

    if (m.contains("unk_token") && !m["unk_token"].is_null()) {
      if (!m["unk_token"].is_string()) fail("model.unk_token", "expected a string or null");
      auto it = by_string.find(m["unk_token"].get<std::string>());
      if (it == by_string.end()) fail("model.unk_token", "not in model.vocab");
      t.unk_id = it->second;
    }

    const json& merges = member(m, "model", "merges");
    if (!merges.is_array()) fail("model.merges", "expected an array");
    t.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string field = "model.merges[" + std::to_string(i) + "]";
      const json& e = merges[i];
      std::string a, b;
      if (e.is_string()) {
        const auto s = e.get<std::string>();
        const auto space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
          fail(field, "expected \"left right\"");
        }
        a = s.substr(0, space);
        b = s.substr(space + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        a = e[0].get<std::string>();
        b = e[1].get<std::string>();
      } else {
        fail(field, "expected \"left right\" or [\"left\", \"right\"]");
      }
      auto ia = by_string.find(a), ib = by_string.find(b), iab = by_string.find(a + b);
      if (ia == by_string.end() || ib == by_string.end()) fail(field, "a part is not in model.vocab");
      if (iab == by_string.end()) fail(field, "the merged token is not in model.vocab");
      const uint64_t key = (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second);
      t.merges.emplace(key, tokenizer::impl::merge{uint32_t(i), iab->second});  // first rank wins
    }
  }

  void added_tokens(const json& list) {
    if (list.is_null()) return;
    if (!list.is_array()) fail("added_tokens", "expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string field = "added_tokens[" + std::to_string(i) + "]";
      const json& e = list[i];
      if (!e.is_object()) fail(field, "expected an object");
      added_token tok;
      const json& id = member(e, field, "id");
      if (!id.is_number_integer()) fail(field + ".id", "expected an integer");
      const auto id64 = id.get<int64_t>();
      if (id64 < 0 || id64 > kMaxTokenId) fail(field + ".id", "id " + std::to_string(id64) + " out of range");
      tok.id = token_id(id64);
      const json& content = member(e, field, "content");
      if (!content.is_string()) fail(field + ".content", "expected a string");
      tok.content = content.get<std::string>();
      tok.special = flag(e, field, "special", false);
      tok.lstrip = flag(e, field, "lstrip", false);
      tok.rstrip = flag(e, field, "rstrip", false);
      tok.single_word = flag(e, field, "single_word", false);
      tok.normalized = flag(e, field, "normalized", !tok.special);
      t.add_token(tok, field);
    }
  }
};

}  // namespace

tokenizer tokenizer::from_hf_json_file(const std::string& path) {
  return from_hf_json(read_file_limited(path, kMaxFileBytes), path);
}

tokenizer tokenizer::from_hf_json(std::string_view json_text, const std::string& source_name) {
  auto p = std::make_shared<impl>();
  p->source = source_name;
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    throw error(source_name + ": invalid JSON: " + e.what());
  }
  if (!root.is_object()) p->fail("(root)", "expected a JSON object");
  hf_loader load{*p};
  try {
    load.normalizer(root.value("normalizer", json()), "normalizer");
    load.pre_tokenizer(root.value("pre_tokenizer", json()), "pre_tokenizer");
    load.decoder(root.value("decoder", json()), "decoder");
    load.model(load.member(root, "(root)", "model"));
    load.added_tokens(root.value("added_tokens", json()));
  } catch (const json::exception& e) {
    throw error(source_name + ": unexpected JSON value: " + e.what());
  }
  const bool has_byte_level = std::any_of(p->steps.begin(), p->steps.end(), [](const pre_step& s) {
    return s.type == pre_step::kind::byte_level;
  });
  if (!has_byte_level) {
    p->fail("pre_tokenizer", "no ByteLevel step: only byte-level BPE tokenizers are supported");
  }
  p->finish();
  return tokenizer(std::move(p));
}

// ---------------------------------------------------------------------------------------------------------
// tiktoken

tokenizer tokenizer::from_tiktoken_file(const std::string& path, tiktoken_options options) {
  return from_tiktoken(read_file_limited(path, kMaxFileBytes), path, std::move(options));
}

tokenizer tokenizer::from_tiktoken(std::string_view text, const std::string& source_name,
                                   tiktoken_options options) {
  auto p = std::make_shared<impl>();
  p->source = source_name;
  p->tiktoken = true;
  size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::string field = "line " + std::to_string(line_no);
    const size_t space = line.find(' ');
    if (space == std::string_view::npos) p->fail(field, "expected \"<base64 token> <rank>\"");
    auto bytes = base64_decode(line.substr(0, space));
    if (!bytes) p->fail(field, "invalid base64 token");
    if (bytes->size() > kMaxTokenBytes) p->fail(field, "token longer than the limit");
    std::string_view rank_text = line.substr(space + 1);
    if (rank_text.empty() || rank_text.size() > 9 ||
        !std::all_of(rank_text.begin(), rank_text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      p->fail(field, "rank is not a non-negative integer");
    }
    const long rank = std::stol(std::string(rank_text));
    if (rank > kMaxTokenId) p->fail(field, "rank " + std::to_string(rank) + " out of range");
    const auto id = token_id(rank);
    if (size_t(id) < p->id_flags.size() && (p->id_flags[id] & impl::kUsed)) {
      p->fail(field, "rank " + std::to_string(rank) + " used twice");
    }
    if (!p->bytes_to_id.emplace(*bytes, id).second) p->fail(field, "token listed twice");
    p->set_token(id, std::move(*bytes), 0);
  }
  if (p->bytes_to_id.empty()) p->fail("(file)", "no tokens");

  const std::string pattern = options.pattern.empty() ? std::string(kKimiPattern) : options.pattern;
  if (pattern.size() > kMaxPatternBytes) throw error(source_name + ": pattern: longer than the limit");
  pre_step step;
  step.re = std::make_unique<regex>(
      translate_class_intersections(pattern, source_name + ": pattern"), source_name + ": pattern");
  step.behavior = split_behavior::matches_only;  // tiktoken encodes regex matches only
  p->steps.push_back(std::move(step));

  for (const auto& [content, id] : options.special_tokens) {
    const std::string field = "special_tokens[\"" + content.substr(0, 64) + "\"]";
    if (id >= 0 && size_t(id) < p->id_flags.size() && (p->id_flags[id] & impl::kUsed)) {
      p->fail(field, "id " + std::to_string(id) + " is already a token");
    }
    added_token tok;
    tok.content = content;
    tok.id = id;
    p->add_token(tok, field);
  }
  p->finish();
  return tokenizer(std::move(p));
}

// ---------------------------------------------------------------------------------------------------------
// Encode / decode

std::vector<token_id> tokenizer::encode(std::string_view text, bool allow_special) const {
  if (!utf8_valid(text)) throw error("tokenizer encode: the text is not valid UTF-8");
  std::vector<token_id> out;
  out.reserve(text.size() / 3 + 1);
  std::vector<impl::segment> first, second;
  impl_->split_added(text, 0, text.size(), impl_->raw_trie, allow_special, first);
  for (const auto& s : first) {
    if (s.id >= 0) {
      second.push_back(s);
    } else if (impl_->normalized_trie.empty()) {
      second.push_back(s);
    } else {
      impl_->split_added(text, s.begin, s.end, impl_->normalized_trie, allow_special, second);
    }
  }
  for (const auto& s : second) {
    if (s.id >= 0) {
      out.push_back(s.id);
    } else {
      impl_->encode_text(text.substr(s.begin, s.end - s.begin), out);
    }
  }
  return out;
}

std::string tokenizer::decode(std::span<const token_id> ids, bool skip_special) const {
  std::string out;
  for (token_id id : ids) {
    if (id < 0 || size_t(id) >= impl_->id_bytes.size() || !(impl_->id_flags[id] & impl::kUsed)) {
      throw error("tokenizer decode: token id " + std::to_string(id) + " is not in the vocabulary of " +
                  impl_->source);
    }
    if (skip_special && (impl_->id_flags[id] & impl::kSpecial)) continue;
    out += impl_->id_bytes[id];
  }
  return out;
}

std::string_view tokenizer::token_bytes(token_id id) const {
  if (id < 0 || size_t(id) >= impl_->id_bytes.size()) return {};
  return impl_->id_bytes[id];
}

bool tokenizer::is_special(token_id id) const {
  return id >= 0 && size_t(id) < impl_->id_flags.size() && (impl_->id_flags[id] & impl::kSpecial);
}

token_id tokenizer::vocab_size() const {
  return token_id(impl_->id_bytes.size());
}

std::optional<token_id> tokenizer::find(std::string_view text_or_bytes) const {
  auto a = impl_->added_by_content.find(std::string(text_or_bytes));
  if (a != impl_->added_by_content.end()) return a->second;
  auto it = impl_->bytes_to_id.find(text_or_bytes);
  if (it != impl_->bytes_to_id.end()) return it->second;
  return std::nullopt;
}

uint32_t byte_level_codepoint(uint8_t b) { return byte_to_codepoint()[b]; }

std::string byte_level_spelling(std::string_view bytes) {
  std::string s;
  for (char c : bytes) {
    const uint32_t cp = byte_level_codepoint(static_cast<uint8_t>(c));  // < 0x144: one or two UTF-8 bytes
    if (cp < 0x80) {
      s += char(cp);
    } else {
      s += char(0xC0 | (cp >> 6));
      s += char(0x80 | (cp & 0x3F));
    }
  }
  return s;
}

}  // namespace moxi::formats
