// See json-mask-bench.h.
#include "bench/json-mask-bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "moxi/base/error.h"
#include "moxi/formats/tokenizer.h"
#include "moxi/model/model.h"
#include "moxi/runtime/json-constraint.h"

namespace moxi::bench {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// A byte-level vocabulary of `n` tokens: the 256 bytes, then pieces shaped like BPE merges of text and
// code (an optional leading space, letters, digits, punctuation, some UTF-8), 2 to 12 bytes, distinct.
std::vector<std::string> synthetic_vocab(int64_t n) {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, char(b)));
  std::mt19937_64 rng(1);
  static const std::string kLetters = "etaoinshrdlucmfwypvbgkjqxz";
  static const std::string kPunct = "{}[]\":,.;()=+-*/_<>!?#'\\\n\t";
  std::vector<std::string> seen(v);
  std::sort(seen.begin(), seen.end());
  while (int64_t(v.size()) < n) {
    std::string t;
    if (rng() % 2) t += ' ';
    const int len = 2 + int(rng() % 11);
    const int style = int(rng() % 10);
    while (int(t.size()) < len) {
      if (style < 6)
        t += kLetters[std::min<size_t>(rng() % 26, rng() % 26)];
      else if (style < 8)
        t += char('0' + rng() % 10);
      else if (style < 9)
        t += kPunct[rng() % kPunct.size()];
      else
        t += "\xc3\xa9";
    }
    auto it = std::lower_bound(seen.begin(), seen.end(), t);
    if (it != seen.end() && *it == t) continue;
    seen.insert(it, t);
    v.push_back(std::move(t));
  }
  return v;
}

// The document whose prefixes the masks are computed at, and the schema it satisfies.
const char* kDocument =
    R"({"name": "Ada Lovelace", "id": 1815, "tags": ["math", "engine"], "score": -12.5e2, )"
    R"("active": true, "note": null, "address": {"city": "London", "zip": "W1"}})";
const char* kSchema = R"({"type":"object","properties":{"name":{"type":"string"},"id":{"type":"integer"},
  "tags":{"type":"array","items":{"type":"string"}},"score":{"type":"number"},"active":{"type":"boolean"},
  "note":{"type":"null"},"address":{"type":"object","properties":{"city":{"type":"string"},
  "zip":{"type":"string","maxLength":8}},"required":["city","zip"],"additionalProperties":false}},
  "required":["name","id","tags","score","active","note","address"],"additionalProperties":false})";

json_mask_row measure(const std::string& name, const runtime::token_table& table, int runs) {
  json_mask_row r;
  r.vocab = name;
  r.tokens = int64_t(table.size());
  double bytes = 0;
  int64_t used = 0;
  for (size_t i = 0; i < table.size(); ++i)
    if (!table.bytes(i).empty()) bytes += double(table.bytes(i).size()), ++used;
  r.mean_bytes_per_token = used ? bytes / double(used) : 0;
  // The schema with the serving bounds, properties in the document's order.
  const auto g = runtime::json_schema_grammar(nlohmann::ordered_json::parse(kSchema), "schema",
                                              runtime::json_grammar_options::decoding());
  const std::string doc = kDocument;
  runtime::json_matcher m(g);
  std::vector<uint8_t> allowed;
  double total = 0, in_string = 0, other = 0;
  int64_t n_string = 0, n_other = 0;
  bool string_state = false;  // the prefix ends inside a string (after an odd number of unescaped quotes)
  for (size_t k = 0; k <= doc.size(); ++k) {
    double best = std::numeric_limits<double>::infinity();
    for (int i = 0; i < runs; ++i) {
      const auto t0 = clock_type::now();
      m.allowed_tokens(table, allowed);
      best = std::min(best, seconds_since(t0));
    }
    const double us = best * 1e6;
    total += us;
    r.max_us = std::max(r.max_us, us);
    (string_state ? in_string : other) += us;
    (string_state ? n_string : n_other) += 1;
    ++r.states;
    if (k < doc.size()) {
      if (!m.feed(doc.substr(k, 1))) throw error("bench json-mask: the document does not match its schema");
      if (doc[k] == '"') string_state = !string_state;
    }
  }
  r.mean_us = total / double(r.states);
  r.string_us = n_string ? in_string / double(n_string) : 0;
  r.other_us = n_other ? other / double(n_other) : 0;
  return r;
}

}  // namespace

json_mask_result run_json_mask_bench(const std::string& model_dir, int64_t synthetic, int runs) {
  json_mask_result res;
  res.model = model_dir;
  const auto m = model::model::load(model_dir);
  const auto tok = formats::tokenizer::from_hf_json_file(model_dir + "/tokenizer.json");
  const int64_t vocab = m.config().vocab_size;
  // The decode step: 16 tokens of context, then single-token forwards (last_only), best of `runs` x 16.
  {
    auto cache = m.new_cache();
    model::forward_options fo;
    fo.last_only = true;
    std::vector<token_id> prompt(16);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = token_id((i * 7919) % uint64_t(vocab));
    m.forward(prompt, *cache, fo);
    double best = std::numeric_limits<double>::infinity();
    for (int i = 0; i < runs; ++i) {
      const auto t0 = clock_type::now();
      for (int s = 0; s < 16; ++s) {
        const token_id t = token_id((s * 104729 + i) % vocab);
        m.forward(std::span(&t, 1), *cache, fo);
      }
      best = std::min(best, seconds_since(t0) / 16);
    }
    res.forward_ms = best * 1e3;
  }
  res.rows.push_back(measure("model", runtime::token_table(tok, vocab), runs));
  res.rows.push_back(measure("synthetic", runtime::token_table(synthetic_vocab(synthetic)), runs));
  for (auto& r : res.rows) r.vs_forward = r.mean_us / (res.forward_ms * 1e3);
  return res;
}

void add_json_mask_bench(CLI::App& bench) {
  struct options {
    std::string model = "models/moxi-tiny";
    int64_t synthetic = 32000;
    int runs = 3;
    bool json = false;
  };
  auto o = std::make_shared<options>();
  auto* cmd = bench.add_subcommand(
      "json-mask", "response_format: token-mask time per decoding step vs the model's forward step");
  cmd->add_option("--model", o->model, "model directory (its tokenizer.json and its forward)")
      ->capture_default_str();
  cmd->add_option("--synthetic-vocab", o->synthetic, "tokens of the synthetic byte-level vocabulary")
      ->capture_default_str();
  cmd->add_option("--runs", o->runs, "timings per state (best is kept)")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object instead of text");
  cmd->callback([o] {
    if (o->runs < 1) throw error("bench json-mask: --runs must be >= 1");
    if (o->synthetic < 256 || o->synthetic > 1'000'000)
      throw error("bench json-mask: --synthetic-vocab must be in [256, 1000000]");
    const auto res = run_json_mask_bench(o->model, o->synthetic, o->runs);
    if (o->json) {
      nlohmann::json j = {{"bench", "json-mask"}, {"model", res.model}, {"forward_ms", res.forward_ms}};
      for (const auto& r : res.rows)
        j["rows"].push_back({{"vocab", r.vocab},
                             {"tokens", r.tokens},
                             {"mean_bytes_per_token", r.mean_bytes_per_token},
                             {"states", r.states},
                             {"mean_us", r.mean_us},
                             {"string_us", r.string_us},
                             {"other_us", r.other_us},
                             {"max_us", r.max_us},
                             {"vs_forward", r.vs_forward}});
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::printf("json-mask: %s, forward (decode step, batch 1) %.3f ms\n", res.model.c_str(), res.forward_ms);
    std::printf("%-10s %8s %10s %7s %10s %11s %10s %9s %11s\n", "vocab", "tokens", "bytes/tok", "states",
                "mean us", "in-string", "elsewhere", "max us", "vs forward");
    for (const auto& r : res.rows)
      std::printf("%-10s %8lld %10.2f %7lld %10.1f %11.1f %10.1f %9.1f %10.1f%%\n", r.vocab.c_str(),
                  (long long)r.tokens, r.mean_bytes_per_token, (long long)r.states, r.mean_us, r.string_us,
                  r.other_us, r.max_us, 100 * r.vs_forward);
  });
}

}  // namespace moxi::bench
