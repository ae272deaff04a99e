// `moxi tokenizer train --input FILE... --vocab-size N --out tokenizer.json`: trains a byte-level BPE
// tokenizer (formats/bpe-trainer.h); `moxi tokenizer encode` shows how a tokenizer.json splits a text.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "moxi/base/error.h"
#include "moxi/base/progress.h"
#include "moxi/cli/command.h"
#include "moxi/cli/options.h"
#include "moxi/eval/task.h"
#include "moxi/formats/bpe-trainer.h"
#include "moxi/formats/tokenizer.h"

namespace moxi::cli {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw io_error("open", path, errno);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void setup_tokenizer(CLI::App& root) {
  auto* cmd = root.add_subcommand("tokenizer", "Train or try byte-level BPE tokenizers");
  cmd->require_subcommand(1);
  set_examples(cmd,
               {"moxi tokenizer train --input corpus.txt --vocab-size 4096 --out tokenizer.json",
                "moxi tokenizer encode --tokenizer tokenizer.json --text 'hello world'"},
               "docs/tasks.md");

  struct train_args {
    std::vector<std::string> inputs, specials;
    std::string out, split = "llama3";
    int64_t vocab_size = 512, min_frequency = 2;
  };
  auto t = std::make_shared<train_args>();
  auto* train = cmd->add_subcommand("train", "Learn BPE merges from text files and write tokenizer.json");
  train->add_option("--input", t->inputs, "text files (UTF-8)")->required()->check(CLI::ExistingFile);
  train->add_option("--vocab-size", t->vocab_size, "total ids: specials + 256 bytes + merged tokens")
      ->check(integer_in(256, int64_t(1) << 30))
      ->capture_default_str();
  auto outs = std::make_shared<output_paths>(train);
  outs->add("--out", t->out, "tokenizer.json to write (atomically)", output_paths::kind::file)->required();
  train
      ->add_option("--split", t->split,
                   "pre-tokenizer: llama3, llama3-digits (numbers digit by digit) or gpt2")
      ->check(CLI::IsMember({"llama3", "llama3-digits", "gpt2"}))
      ->capture_default_str();
  train->add_option("--min-frequency", t->min_frequency, "do not merge pairs seen fewer times")
      ->check(integer_in(1, int64_t(1) << 62))
      ->capture_default_str();
  train->add_option("--special", t->specials,
                    "special tokens in id order (default: <|pad|> <|bos|> <|eos|> <|system|> <|user|> "
                    "<|assistant|> <|end|>)");
  set_examples(
      train,
      {"moxi tokenizer train --input corpus.txt --vocab-size 4096 --out tokenizer.json",
       "moxi tokenizer train --input a.txt --input b.txt --split gpt2 --special '<|eos|>' --out tok.json "
       "--force"},
      "docs/tasks.md");
  train->callback([t, outs] {
    outs->check();
    formats::bpe_train_options o;
    o.vocab_size = t->vocab_size;
    o.min_frequency = t->min_frequency;
    o.split = formats::parse_bpe_split(t->split, "--split");
    if (!t->specials.empty()) o.special_tokens = t->specials;
    formats::bpe_trainer trainer(o);
    for (const auto& path : t->inputs) trainer.add_text(read_all(path), path);
    // Redrawn in place on a terminal, a line every few seconds in a log (base/progress.h).
    std::optional<progress> bar;
    int64_t shown = 0;
    const auto model = trainer.train([&](int64_t done, int64_t target) {
      if (!bar) bar.emplace("moxi tokenizer: merged tokens", uint64_t(std::max<int64_t>(target, 0)), false);
      bar->advance(uint64_t(std::max<int64_t>(done - shown, 0)));
      shown = std::max(shown, done);
    });
    if (bar) bar->finish();
    eval::write_file_atomic(t->out, formats::bpe_to_hf_json(model));
    const auto& s = trainer.stats();
    std::fprintf(
        stderr,
        "moxi tokenizer: %llu bytes, %llu pieces (%llu distinct) counted in %.2f s; %zu merges, %zu ids "
        "in %.2f s -> %s\n",
        static_cast<unsigned long long>(s.input_bytes), static_cast<unsigned long long>(s.pieces),
        static_cast<unsigned long long>(s.unique_words), s.count_s, model.merges.size(),
        model.token_bytes.size(), s.merge_s, t->out.c_str());
  });

  struct encode_args {
    std::string tokenizer, text, input;
  };
  auto e = std::make_shared<encode_args>();
  auto* encode = cmd->add_subcommand("encode", "Print the ids and pieces a tokenizer.json gives a text");
  encode->add_option("--tokenizer", e->tokenizer, "tokenizer.json")->required()->check(CLI::ExistingFile);
  auto* text_opt = encode->add_option("--text", e->text, "text to encode");
  auto* input = encode->add_option("--input", e->input, "file to encode instead of --text")
                    ->excludes(text_opt)
                    ->check(CLI::ExistingFile);
  set_examples(encode,
               {"moxi tokenizer encode --tokenizer models/moxi-small/tokenizer.json --text 'wc -l notes.txt'",
                "moxi tokenizer encode --tokenizer tokenizer.json --input corpus.txt"},
               "docs/tasks.md");
  encode->callback([e, text_opt, input] {
    if (text_opt->count() == 0 && input->count() == 0)
      throw usage_error("give the text to encode: --text TEXT or --input FILE");
    const auto tok = formats::tokenizer::from_hf_json_file(e->tokenizer);
    const std::string text = e->input.empty() ? e->text : read_all(e->input);
    const auto ids = tok.encode(text);
    for (auto id : ids) {
      std::string piece(tok.token_bytes(id));
      for (auto& c : piece) {
        if (c == '\n') c = '|';
      }
      std::cout << id << "\t" << piece << "\n";
    }
    std::fprintf(stderr, "moxi tokenizer: %zu bytes -> %zu tokens\n", text.size(), ids.size());
  });
}

MOXI_COMMAND("tokenizer", setup_tokenizer);

}  // namespace
}  // namespace moxi::cli
