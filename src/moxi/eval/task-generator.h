// Deterministic generator of verifiable tasks for SFT, RL and evaluation (`moxi data`): math with worked
// references ending in "Answer: N", terminal requests checked by running commands, one-bug Python programs
// checked by a test, and plain chat (greetings, questions about the assistant) answered in prose.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moxi/eval/task.h"

namespace moxi::eval {

// n tasks of one domain and split (split::length: math only, else moxi::error). Item i depends only on
// (domain, split, seed, i), through a portable generator (no std:: distributions, whose output differs
// between standard libraries), so the same arguments give byte-identical JSONL on every machine and --n 10 is
// a prefix of --n 100.
// `only`, when not empty, restricts the items to those templates of the split (an error names the valid
// ones); without it every template of the split is drawn. The group name "shared" in `only` stands for every
// template both splits draw (the code templates without the train-only composed ones, for example).
inline constexpr const char* kSharedTemplates = "shared";
enum class division_format {
  plain,      // each step states the quotient digit, multiplies it back and subtracts
  multiples,  // the divisor's multiples 1..9 come first, so each quotient digit is read off that list
};
division_format parse_division_format(const std::string& name);  // "plain" or "multiples", else moxi::error
std::string to_string(division_format f);
// Variants of the generated data that a caller opts into; the defaults draw what every earlier recipe drew.
struct generate_options {
  // How math references work a division out (only the references of div, share and story_share differ;
  // prompts and answers are the same).
  division_format division = division_format::plain;
  // Terminal, train split: one made-up name word in five (file stems, directories, grep and sed words) is
  // written in capitals (`TAVOKU.md`) or capitalized (`Tavoku.log`), as README.md or ERROR are; without it
  // no train name has a capital letter. The test split is the same either way.
  bool capitals = false;
  // Code, train split: one request in four names only the function ("count_above has a bug, can you
  // fix it?"), with no description and no example call, as users often ask; the rest of the item is what
  // it is without it. The test split is the same either way.
  bool bare_requests = false;
};
std::vector<task> generate_tasks(domain d, split s, size_t n, uint64_t seed,
                                 std::vector<std::string> only = {}, const generate_options& options = {});

// A generator template and where it appears: `shared` templates appear in both splits, with the test
// split drawing the parameters named in `holdout` from a range train never uses; `test_only` templates
// never appear in train (they use train's parameter ranges, so that they measure the template alone);
// `train_only` templates never appear in the test split (commands the hand-written user prompts ask for,
// taught so that the test split's composition stays what it was; tasks/user-prompts.jsonl measures them).
struct template_info {
  std::string name;
  bool test_only = false;
  std::string holdout;  // the held-out rule, in words (docs/tasks.md lists the same)
  bool train_only = false;
};
std::vector<template_info> templates(domain d);

// A phrasing family: one way of asking (a question, a terse lowercase request, ...), with phrasings for
// every template of its domain. `test_only` families word the test split alone, so it measures unseen
// phrasings; train uses the others. The family of each item is in params["family"].
struct family_info {
  std::string name;
  bool test_only = false;
};
// The terminal and code families; math has none (empty).
std::vector<family_info> families(domain d);

}  // namespace moxi::eval
