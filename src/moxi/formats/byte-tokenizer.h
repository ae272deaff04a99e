// A byte-level tokenizer.json with no merges: 256 byte tokens plus the config's special tokens, in the
// Hugging Face tokenizers format (BPE model, ByteLevel pre-tokenizer and decoder). `moxi init` writes it
// next to random checkpoints so that every checkpoint moxi makes can be prompted with text.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace moxi::formats {

// specials: id -> content (e.g. {1, "<|bos|>"}). Byte tokens take the lowest ids the specials leave free.
// Throws moxi::error when vocab_size cannot hold 256 bytes plus the specials, or a special id is out of
// range.
std::string byte_level_tokenizer_json(int64_t vocab_size, const std::map<int64_t, std::string>& specials);

}  // namespace moxi::formats
