// Byte-level BPE training: learns merges from a text corpus up to a vocabulary size and writes a Hugging
// Face tokenizer.json that formats::tokenizer loads (the tiny model's tokenizer; `moxi tokenizer train`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace moxi::formats {

// The pre-tokenizer split the trainer applies and writes into tokenizer.json, both through the PCRE2
// wrapper the loader uses, so training pieces and encoding pieces are the same.
enum class bpe_split {
  llama3,         // Split(Llama-3 regex, Isolated) + ByteLevel(use_regex=false): digits in groups of 1-3
  llama3_digits,  // the same with \p{N} in place of \p{N}{1,3}: every digit its own piece, so no merge
                  // ever joins digits and every number is spelled digit by digit (learnable arithmetic)
  gpt2,           // ByteLevel(use_regex=true): GPT-2's regex
};

// Parses "llama3", "llama3-digits" or "gpt2"; throws moxi::error naming `what` and the accepted values.
bpe_split parse_bpe_split(const std::string& name, const std::string& what);
const char* to_string(bpe_split split);

// The regex of a split (the Llama-3 one verbatim from its tokenizer.json; GPT-2's from the HF ByteLevel).
const char* bpe_split_pattern(bpe_split split);

// pad, bos, eos at ids 0, 1, 2 (the tiny configs' pad/bos/eos_token_id), then the chat-role markers.
std::vector<std::string> default_special_tokens();

struct bpe_train_options {
  // Total ids: special tokens + 256 byte tokens + merged tokens. Training stops earlier when no pair
  // reaches min_frequency.
  int64_t vocab_size = 512;
  // Ids 0..n-1 in this order; never split or merged, matched before pre-tokenization.
  std::vector<std::string> special_tokens = default_special_tokens();
  bpe_split split = bpe_split::llama3;
  // A pair seen fewer times than this is not merged (a pair seen once only memorizes the corpus).
  int64_t min_frequency = 2;
};

struct bpe_merge {
  int32_t left, right;  // ids in the written vocabulary
  int32_t result;       // the merged token's id (an existing one when its bytes were already a token)
  int64_t count;        // weighted occurrences when it was chosen
};

// A trained vocabulary. Ids: specials first, then byte b at specials.size() + b, then merged tokens in the
// order they were created.
struct bpe_model {
  std::vector<std::string> special_tokens;
  std::vector<std::string> token_bytes;  // id -> raw bytes (for a special: its content)
  std::vector<bpe_merge> merges;         // in rank order
  bpe_split split = bpe_split::llama3;

  int32_t byte_id(uint8_t b) const { return int32_t(special_tokens.size()) + b; }
};

// Statistics for progress lines and the docs' speed figures.
struct bpe_train_stats {
  uint64_t input_bytes = 0;
  uint64_t pieces = 0;        // pre-tokenized pieces (with repetition)
  uint64_t unique_words = 0;  // distinct pieces
  double count_s = 0, merge_s = 0;
};

// Counts pre-tokenized pieces of the texts it is given, then learns merges:
//  - the merge chosen at each step is the pair of adjacent tokens with the highest count summed over all
//    pieces (weighted by how often the piece occurs);
//  - ties go to the smallest (left id, right id) in the written vocabulary, i.e. the pair of older tokens,
//    which makes the result independent of hash order and of how the input was split into files;
//  - within a piece, occurrences are merged left to right without overlap ("aaa" + (a,a) -> "aa" "a");
//  - a merge whose bytes are already a token reuses that token's id (HF's trainer does the same).
// Pair counts are kept incrementally (only the pieces containing the merged pair are revisited), so a few
// MB of text train in seconds.
class bpe_trainer {
 public:
  explicit bpe_trainer(bpe_train_options options);
  ~bpe_trainer();
  bpe_trainer(const bpe_trainer&) = delete;
  bpe_trainer& operator=(const bpe_trainer&) = delete;

  // Adds one document (valid UTF-8, else moxi::error naming `what`). Special tokens in the text are cut
  // out first, so they are never part of a merge.
  void add_text(std::string_view text, const std::string& what = "text");
  // Learns the merges. `on_merge(done, target)` is called now and then for progress output.
  bpe_model train(const std::function<void(int64_t, int64_t)>& on_merge = {});

  const bpe_train_stats& stats() const { return stats_; }

 private:
  bpe_train_options options_;
  std::unordered_map<std::string, int64_t> words_;
  bpe_train_stats stats_;
};

// tokenizer.json text (HF format: BPE model, the split's pre-tokenizer, ByteLevel decoder, the specials
// as added tokens with special=true).
std::string bpe_to_hf_json(const bpe_model& model);

}  // namespace moxi::formats
