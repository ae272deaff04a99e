// json-constraint: constrained decoding to JSON (OpenAI's response_format json_object and json_schema). A
// byte-level pushdown automaton for RFC 8259 JSON, optionally specialised by a JSON Schema subset, masks
// each step's logits: a token is allowed iff its bytes (the tokenizer's vocabulary, byte-level BPE) advance
// the automaton without error, an end token only once the value is complete. The approach is the one of
// llama.cpp's GBNF grammars and of vLLM's structured outputs (xgrammar, outlines): a per-token walk of the
// automaton from the current state, here without copying the stack (copy-on-write frames on top of it).
// docs/serving.md "response_format" lists the schema keywords supported and the cost per step.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moxi/formats/tokenizer.h"

namespace moxi::runtime {

// How generated JSON is bounded. Validation of arbitrary JSON uses the defaults (unbounded whitespace,
// numbers of any length, trailing whitespace); decoding uses decoding() so that a model cannot spend its
// tokens on endless whitespace or digits, and the output ends right after its value.
struct json_grammar_options {
  int max_depth = 128;      // arrays and objects nested at most this deep
  int max_ws_run = -1;      // whitespace bytes in a row at most; -1: unbounded
  int max_number_len = -1;  // bytes of a number at most, at most 2 exponent digits; -1: unbounded
  bool trailing_ws = true;  // whitespace after the value
  // Whitespace runs of 2 at most (", " or "\n "): a model gets no room to pad, nor to indent.
  static json_grammar_options decoding() { return {32, 2, 18, false}; }
};

// Bounds on a JSON Schema (it comes from a request: hostile input).
struct json_schema_limits {
  int max_depth = 32;                 // schemas nested in properties/items
  int max_nodes = 1024;               // schemas in all
  int max_properties = 64;            // per object schema
  int max_enum = 256;                 // enum values
  size_t max_literal_bytes = 4096;    // one enum/const value, serialized
  size_t max_total_bytes = 64 << 10;  // property names and literals together
};

// A compiled grammar: immutable, shared by every request that uses it.
struct json_grammar;

// Any JSON value.
std::shared_ptr<const json_grammar> json_any_grammar(const json_grammar_options& o = {});
// A JSON object at the top (OpenAI's JSON mode), any values inside.
std::shared_ptr<const json_grammar> json_object_grammar(const json_grammar_options& o = {});
// A JSON value valid against `schema`. Supported: type (a name or a list of names: object, array, string,
// number, integer, boolean, null), properties (generated in the order given), required,
// additionalProperties (true or false; only declared properties are generated when there are any), items,
// minItems, maxItems, minLength, maxLength, enum, const, and the annotations title, description, $schema,
// $id, $comment, default, examples, strict. Anything else throws moxi::error naming the keyword and its
// path, rooted at `where` (e.g. "response_format.json_schema.schema.properties.a: 'pattern' is not
// supported"), as does a schema over `limits`.
std::shared_ptr<const json_grammar> json_schema_grammar(const nlohmann::ordered_json& schema,
                                                        const std::string& where,
                                                        const json_grammar_options& o = {},
                                                        const json_schema_limits& limits = {});

// Every token's bytes, once per tokenizer: special tokens and unused ids are never allowed.
class token_table {
 public:
  // `vocab_size`: the model's (ids at or above the tokenizer's own have no bytes).
  token_table(const formats::tokenizer& tok, int64_t vocab_size);
  // Raw byte strings; an empty one is never allowed (tests and benchmarks).
  explicit token_table(std::vector<std::string> bytes);

  size_t size() const { return plain_.size(); }
  std::string_view bytes(size_t id) const {
    return std::string_view(data_).substr(offset_[id], offset_[id + 1] - offset_[id]);
  }
  // Code points of a token that is plain string content (printable, no quote or backslash, whole UTF-8
  // characters), -1 otherwise: inside a string such a token is allowed without walking its bytes.
  int32_t plain_chars(size_t id) const { return plain_[id]; }
  std::span<const int32_t> plain() const { return plain_; }
  // Tokens (with bytes) that are not plain string content.
  std::span<const token_id> not_plain() const { return not_plain_; }
  // Tokens whose first byte is b: when a state refuses b, none of them is walked.
  std::span<const token_id> first_byte(uint8_t b) const { return by_first_[b]; }

 private:
  void index(const std::vector<std::string>& bytes);
  std::string data_;              // every token's bytes, one after another
  std::vector<uint32_t> offset_;  // token i: [offset_[i], offset_[i + 1])
  std::vector<int32_t> plain_;
  std::vector<token_id> not_plain_;
  std::vector<token_id> by_first_[256];
};

// One automaton state: feed bytes, ask what may follow.
class json_matcher {
 public:
  explicit json_matcher(std::shared_ptr<const json_grammar> g);

  // Advances over `bytes`; false (state unchanged) when they cannot be a prefix of a valid value.
  bool feed(std::string_view bytes);
  // Whether feed(bytes) would succeed.
  bool can_feed(std::string_view bytes) const;
  // The bytes so far are one complete value (the input may end here).
  bool accepting() const;
  // Complete, and nothing more may follow (generation ends).
  bool done() const;
  // allowed[i] = 1 iff token i's bytes may follow (resized to table.size()); returns how many are.
  size_t allowed_tokens(const token_table& table, std::vector<uint8_t>& allowed) const;

  // One level of the automaton's stack (its meaning depends on `kind`; see json-constraint.cpp).
  struct frame {
    uint8_t kind = 0, st = 0;
    uint8_t ws = 0;     // whitespace bytes in a row
    uint8_t flags = 0;  // number: integer only
    int32_t node = 0;   // schema node (a string: -1 for an open object's key)
    int32_t a = 0, b = 0;
    int64_t n = 0;  // items, characters, bytes, literal position
    uint64_t mask = 0;
  };

 private:
  std::shared_ptr<const json_grammar> g_;
  std::vector<frame> stack_;
  int depth_ = 0;
  mutable std::vector<frame> scratch_;
};

// One request's constraint for the sampler: the matcher, the token table and the end tokens (eos; allowed
// only once the value is complete).
class json_constraint {
 public:
  json_constraint(std::shared_ptr<const json_grammar> g, std::shared_ptr<const token_table> table,
                  std::vector<token_id> end_tokens);
  // Sets the logits of tokens that may not follow to -inf. Throws moxi::error when none may (not reachable
  // with a byte-level vocabulary: every byte is a token).
  void mask(std::span<float> logits);
  // Advances over a sampled token (an end token leaves the state as it is).
  void accept(token_id id);
  // The value is complete and nothing may follow: the generation ends here.
  bool done() const { return m_.done(); }
  const json_matcher& matcher() const { return m_; }

 private:
  json_matcher m_;
  std::shared_ptr<const token_table> table_;
  std::vector<token_id> end_;
  std::vector<uint8_t> allowed_;
};

}  // namespace moxi::runtime
