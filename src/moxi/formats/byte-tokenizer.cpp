// Byte-level tokenizer.json generator (see byte-tokenizer.h). Byte tokens are spelled with GPT-2's
// bytes_to_unicode alphabet (tokenizer.h byte_level_codepoint), as every byte-level BPE vocabulary is.
#include "moxi/formats/byte-tokenizer.h"

#include <nlohmann/json.hpp>

#include "moxi/base/error.h"
#include "moxi/formats/tokenizer.h"

namespace moxi::formats {

std::string byte_level_tokenizer_json(int64_t vocab_size, const std::map<int64_t, std::string>& specials) {
  if (vocab_size < 256 + int64_t(specials.size()))
    throw error("a byte-level tokenizer needs vocab_size >= 256 + " + std::to_string(specials.size()) +
                " special tokens, got " + std::to_string(vocab_size));
  nlohmann::json vocab = nlohmann::json::object();
  nlohmann::json added = nlohmann::json::array();
  for (const auto& [id, content] : specials) {
    if (id < 0 || id >= vocab_size)
      throw error("special token '" + content + "' has id " + std::to_string(id) + " outside the vocabulary");
    vocab[content] = id;
    added.push_back({{"id", id},
                     {"content", content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  int64_t next_id = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    while (specials.count(next_id)) ++next_id;
    vocab[byte_level_spelling(std::string(1, char(b)))] = next_id++;
  }
  nlohmann::json doc = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
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
        {"vocab", vocab},
        {"merges", nlohmann::json::array()}}},
  };
  return doc.dump(1) + "\n";
}

}  // namespace moxi::formats
