// Byte-level BPE tokenizers: HF tokenizer.json (GPT-2/Llama-3/DeepSeek-V3 style) and tiktoken files (Kimi),
// behind one type that encodes text to ids and decodes ids to bytes. See docs/tokenizers.md.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace moxi {

// A vocabulary index. Every layer passes token ids around (model inputs, caches, the scheduler), so the
// type lives in moxi itself; the tokenizers below are moxi::formats.
using token_id = int32_t;

}  // namespace moxi

namespace moxi::formats {

// An added token: matched in the raw text before pre-tokenization, never split by BPE. `special` tokens
// (BOS, EOS, chat markers) can be disabled per call and skipped when decoding.
struct added_token {
  std::string content;
  token_id id = 0;
  bool special = true;
  bool lstrip = false;       // swallow whitespace on the left of a match
  bool rstrip = false;       // swallow whitespace on the right of a match
  bool single_word = false;  // match only when not inside a word (ASCII word characters)
  bool normalized = false;   // matched after normalization (HF: second pass)
};

// Settings a tiktoken file does not carry: the pre-split regex and the special tokens, both given by the
// model's tokenizer code or config (for Kimi: tokenization_kimi.py and tokenizer_config.json).
struct tiktoken_options {
  // The pre-tokenizer regex in tiktoken/fancy-regex syntax; class intersections of the form [A&&[^B]]
  // are translated for PCRE2. Defaults to Kimi's pat_str.
  std::string pattern;
  std::map<std::string, token_id> special_tokens;
};

// Kimi's pat_str (tokenization_kimi.py), verbatim in its original fancy-regex syntax.
extern const char* const kKimiPattern;

// A byte-level BPE tokenizer. Immutable after loading apart from an internal word cache, so one instance
// may be shared by threads; copies share the loaded tables.
class tokenizer {
 public:
  // HF tokenizer.json. Errors (moxi::error) name the file and the JSON field.
  static tokenizer from_hf_json_file(const std::string& path);
  static tokenizer from_hf_json(std::string_view json_text, const std::string& source_name);

  // tiktoken BPE file: one "<base64 token> <rank>" per line; the rank is the token id.
  static tokenizer from_tiktoken_file(const std::string& path, tiktoken_options options);
  static tokenizer from_tiktoken(std::string_view file_text, const std::string& source_name,
                                 tiktoken_options options);

  // Text (valid UTF-8, else moxi::error) to ids. With allow_special false, special added tokens are
  // treated as plain text (non-special added tokens still match), which is what untrusted user content
  // should get. No BOS/EOS is added: that is the chat template's job.
  std::vector<token_id> encode(std::string_view text, bool allow_special = true) const;

  // Ids to the bytes they stand for (not necessarily valid UTF-8 when a character is split across a
  // truncated sequence). Ids out of range are a moxi::error.
  std::string decode(std::span<const token_id> ids, bool skip_special = false) const;

  // The raw bytes of one token (an added token's content for added tokens); empty for unused ids.
  std::string_view token_bytes(token_id id) const;
  bool is_special(token_id id) const;
  // Largest id + 1 (ids in between may be unused).
  token_id vocab_size() const;
  // The id of an added token's content, or of a vocabulary entry given by its raw bytes.
  std::optional<token_id> find(std::string_view text_or_bytes) const;

  struct impl;

 private:
  explicit tokenizer(std::shared_ptr<impl> p) : impl_(std::move(p)) {}
  std::shared_ptr<impl> impl_;
};

// Incremental detokenizer: feed ids one at a time, get back text that ends on a UTF-8 character
// boundary. A trailing incomplete but still possible UTF-8 sequence is held back until it completes;
// bytes that can never become valid UTF-8 are passed through as they are, so the concatenation of all
// push() results and flush() equals tokenizer::decode of the same ids byte for byte.
class stream_decoder {
 public:
  explicit stream_decoder(const tokenizer& tok, bool skip_special = false);
  std::string push(token_id id);
  // Emits whatever is held back (an incomplete sequence at the end of generation) and resets.
  std::string flush();
  // Bytes currently held back.
  size_t pending() const { return pending_.size(); }

 private:
  tokenizer tok_;
  bool skip_special_;
  std::string pending_;
};

// Length of the longest prefix of `bytes` that does not end inside a UTF-8 sequence that could still be
// completed by more bytes. Used by stream_decoder and by the stop-string matcher.
size_t utf8_complete_prefix(std::string_view bytes);

// Whether `text` is well-formed UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
bool utf8_valid(std::string_view text);

// GPT-2's bytes_to_unicode alphabet: the code point that spells byte b in byte-level vocabularies.
uint32_t byte_level_codepoint(uint8_t b);
// Raw bytes spelled in that alphabet (UTF-8), as byte-level vocabularies store them.
std::string byte_level_spelling(std::string_view bytes);

}  // namespace moxi::formats
