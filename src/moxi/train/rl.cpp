// The RL driver (see rl.h; the algorithms and every logged quantity in docs/rl.md).
#include "moxi/train/rl.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#include "moxi/base/error.h"
#include "moxi/base/splitmix.h"
#include "moxi/eval/evaluate.h"
#include "moxi/eval/reward.h"
#include "moxi/model/config.h"
#include "moxi/runtime/local-model.h"
#include "moxi/serve/offline.h"
#include "moxi/train/dist.h"
#include "moxi/train/interrupt.h"
#include "moxi/train/optim.h"
#include "moxi/train/run-dir.h"
#include "moxi/train/run-lock.h"
#include "moxi/train/sft-data.h"

namespace moxi::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// A deterministic 64-bit value of (seed, a, b, c): prompt choice and sampler seeds depend only on the recipe
// seed and the step, so a resumed run draws exactly what an uninterrupted one would.
uint64_t mix(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  uint64_t s = seed ^ 0x5151'7e7e'0000'0000ull;
  splitmix64(s);
  s ^= a * 0x9e3779b97f4a7c15ull;
  splitmix64(s);
  s ^= b * 0xc2b2ae3d27d4eb4full;
  splitmix64(s);
  s ^= c * 0x165667b19e3779f9ull;
  return splitmix64(s);
}

// The files besides the weights that the SFT model directory carries (the RL export and checkpoints keep
// them unchanged).
export_assets read_assets(const std::string& dir, const formats::model_config& c,
                          const formats::tokenizer& tok, const std::vector<token_id>& stop_tokens) {
  export_assets a;
  a.tokenizer_json = read_text(dir + "/tokenizer.json", "tokenizer");
  const json tc = json::parse(read_text(dir + "/tokenizer_config.json", "tokenizer config"));
  auto str = [&](const char* k) {
    return tc.contains(k) && tc[k].is_string() ? tc[k].get<std::string>() : "";
  };
  a.chat_template = str("chat_template");
  a.bos_token = str("bos_token");
  a.eos_token = str("eos_token");
  a.pad_token = str("pad_token");
  for (token_id t : stop_tokens)
    if (!c.eos_token_id || t != *c.eos_token_id) {
      a.end_token_id = t;
      a.end_token = std::string(tok.token_bytes(t));
    }
  if (a.chat_template.empty()) throw error(dir + ": the model has no chat template (tokenizer_config.json)");
  return a;
}

// The policy's current weights for the engine: routed experts MXFP4 as served, the rest F32 (the master
// weights) or BF16 (rounded in the copy, not in place), written to `dir` and loaded by the engine.
std::unique_ptr<model::model> engine_snapshot(const train_model& m, const std::string& dir, dtype floats) {
  const std::string tmp = dir + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp);
  m.save(tmp, {.mxfp4_experts = true, .float_type = floats});
  fs::remove_all(dir);
  fs::rename(tmp, dir);
  return std::make_unique<model::model>(model::model::load(dir));
}

struct prompt_ref {
  const eval::task* task = nullptr;
  const std::vector<token_id>* ids = nullptr;
};

// One sampled reply and everything the update needs of it.
struct rollout {
  const eval::task* task = nullptr;
  int64_t group = 0;  // the prompt it answers (within the step)
  std::vector<token_id> prompt, reply;
  std::vector<float> engine_logp;
  bool truncated = false;
  eval::reward rw;
};

// Per-domain sums for the log.
struct domain_stats {
  int64_t samples = 0, tokens = 0;
  double reward = 0, correct = 0, completion = 0, format = 0, length = 0;
  double kl = 0, entropy = 0, clipped = 0;  // token sums
  json to_json() const {
    const double n = std::max<int64_t>(samples, 1), t = std::max<int64_t>(tokens, 1);
    return {{"samples", samples},
            {"reward", reward / n},
            {"pass_rate", correct / n},
            {"completion", completion / n},
            {"format", format / n},
            {"length", length / n},
            {"kl", kl / t},
            {"entropy", entropy / t},
            {"clip_frac", clipped / t},
            {"response_length", double(tokens) / n}};
  }
};

// Rows of prompt + reply, right-padded: tokens [N, T]; per-token tensors are [N, T - 1] over positions
// p = 0..T-2, where position p's logits predict token p + 1; mask is 1 where token p + 1 is a reply token.
struct batch {
  torch::Tensor tokens, targets, mask;
  torch::Tensor engine_logp;  // [N, T - 1], the sampler's log-probs on the reply positions (0 elsewhere)
  std::vector<int64_t> last;  // per row: the position of its last reply token
  std::vector<int64_t> len;   // per row: its tokens, prompt and reply (the rest of the row is padding)
};

batch make_rl_batch(const std::vector<rollout>& rows, int64_t pad_id) {
  batch b;
  const int64_t N = int64_t(rows.size());
  int64_t T = 0;
  for (const auto& r : rows) T = std::max<int64_t>(T, int64_t(r.prompt.size() + r.reply.size()));
  b.tokens = torch::full({N, T}, pad_id, torch::kInt64);
  b.mask = torch::zeros({N, T - 1}, torch::kFloat32);
  b.engine_logp = torch::zeros({N, T - 1}, torch::kFloat32);
  auto tok = b.tokens.accessor<int64_t, 2>();
  auto msk = b.mask.accessor<float, 2>();
  auto elp = b.engine_logp.accessor<float, 2>();
  for (int64_t i = 0; i < N; ++i) {
    const auto& r = rows[size_t(i)];
    const int64_t P = int64_t(r.prompt.size());
    for (int64_t j = 0; j < P; ++j) tok[i][j] = r.prompt[size_t(j)];
    for (int64_t j = 0; j < int64_t(r.reply.size()); ++j) {
      tok[i][P + j] = r.reply[size_t(j)];
      msk[i][P + j - 1] = 1;
      if (size_t(j) < r.engine_logp.size()) elp[i][P + j - 1] = r.engine_logp[size_t(j)];
    }
    b.last.push_back(P + int64_t(r.reply.size()) - 2);
    b.len.push_back(P + int64_t(r.reply.size()));
  }
  b.targets = b.tokens.slice(1, 1);
  return b;
}

// Rows grouped for the trainer's forwards by length, under a token budget (verl's dynamic batch size: a
// budget of tokens per forward rather than a count of rows): sorted by length, each group as many rows as fit
// `budget` tokens once padded to its longest row (at least one row). Each group's forward is cut to its
// longest row, so short terminal replies are not padded to the longest math reply of the step. budget 0: one
// group of all the rows, in their order.
std::vector<std::vector<int64_t>> length_groups(std::vector<int64_t> rows, const std::vector<int64_t>& len,
                                                int64_t budget) {
  if (rows.empty()) return {};
  if (budget <= 0) return {rows};
  std::stable_sort(rows.begin(), rows.end(),
                   [&](int64_t a, int64_t b) { return len[size_t(a)] < len[size_t(b)]; });
  std::vector<std::vector<int64_t>> groups;
  for (const int64_t i : rows) {
    if (groups.empty() || int64_t(groups.back().size() + 1) * len[size_t(i)] > budget) groups.emplace_back();
    groups.back().push_back(i);
  }
  return groups;
}

int64_t longest(const std::vector<int64_t>& rows, const std::vector<int64_t>& len) {
  int64_t L = 0;
  for (const int64_t i : rows) L = std::max(L, len[size_t(i)]);
  return L;
}

// What one pass over a batch computes (no gradient): per-token log-probs, entropies, and the final hidden
// states when asked, [N, T - 1] (and [N, T - 1, D]) with zeros past each row's end.
struct pass_out {
  torch::Tensor logp, entropy, hidden;
};

// Forwards of at most `budget` tokens (length_groups; 0: 16 rows at a time).
pass_out score_pass(const train_model& m, const batch& b, bool want_hidden, bool want_entropy,
                    double temperature, int64_t budget) {
  torch::NoGradGuard no_grad;
  const int64_t N = b.tokens.size(0), T1 = b.targets.size(1);
  std::vector<int64_t> all(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) all[size_t(i)] = i;
  std::vector<std::vector<int64_t>> groups;
  if (budget > 0) {
    groups = length_groups(all, b.len, budget);
  } else {
    for (int64_t at = 0; at < N; at += 16)
      groups.emplace_back(all.begin() + at, all.begin() + std::min(N, at + 16));
  }
  pass_out p;
  p.logp = torch::zeros({N, T1}, torch::kFloat32);
  if (want_entropy) p.entropy = torch::zeros({N, T1}, torch::kFloat32);
  for (const auto& rows : groups) {
    const auto ix = torch::tensor(rows, torch::kInt64);
    const int64_t L = longest(rows, b.len);
    const auto out = m.forward(b.tokens.index_select(0, ix).slice(1, 0, L));
    const auto logits = out.logits.slice(1, 0, L - 1) / temperature;
    p.logp.slice(1, 0, L - 1)
        .index_copy_(0, ix, rl::token_logprobs(logits, b.targets.index_select(0, ix).slice(1, 0, L - 1)));
    if (want_entropy) p.entropy.slice(1, 0, L - 1).index_copy_(0, ix, rl::entropy_from_logits(logits));
    if (want_hidden) {
      if (!p.hidden.defined()) p.hidden = torch::zeros({N, T1, out.hidden.size(2)}, torch::kFloat32);
      p.hidden.slice(1, 0, L - 1).index_copy_(0, ix, out.hidden.slice(1, 0, L - 1));
    }
  }
  return p;
}

// PPO's value head: v = hidden . w + b on the policy's final hidden state, detached (the critic is a linear
// map of the policy's features and does not train the trunk).
struct value_head {
  torch::Tensor w, b;
  explicit value_head(int64_t hidden)
      : w(torch::zeros({hidden}, torch::kFloat32).requires_grad_(true)),
        b(torch::zeros({1}, torch::kFloat32).requires_grad_(true)) {}
  torch::Tensor operator()(const torch::Tensor& h) const { return torch::matmul(h.detach(), w) + b; }
};

}  // namespace

rl_result run_rl(const rl_recipe& r, const run_options& o) {
  validate(r);
  check_init_model(r.source, r.init);
  if (r.threads > 0) torch::set_num_threads(r.threads);
  // Data parallelism (docs/train.md "Data-parallel training", RL across ranks): every rank joins first, so
  // that a rank that stops early ends the others at once. Each rank rolls out its slice of every round's
  // prompts; the keep decisions, loss denominators and gradients are summed over the ranks, so every rank
  // takes the step one process takes on the whole batch.
  const auto dgroup = dist_group::join(o.dist);
  dist_group* const g = dgroup.get();      // null: a single process
  const bool lead = !g || g->rank() == 0;  // rank 0 alone writes the run directory, logs and evaluates
  const int rank = g ? g->rank() : 0, world = g ? g->world() : 1;
  check_same_recipe(g, to_json(r), o.override_recipe, o.force_export);
  const std::string final_export = export_target(r);
  std::optional<run_lock> lock;
  if (lead) {
    fs::create_directories(r.out + "/checkpoints");
    lock.emplace(r.out);
    remove_checkpoint_leftovers(r.out);
    check_export_target(r.out, final_export, o.force_export);
    adopt_recipe(r.out, to_json(r), o.override_recipe, "rl", [&](const json& saved) {
      return schedule_differences(parse_rl_recipe(saved, r.out + "/recipe.json", r.base_dir), r);
    });
  }
  if (g) g->barrier("waiting for rank 0 to prepare the run directory (lock, recipe)");
  const std::string resume_dir = latest_checkpoint(r.out);

  // The SFT model: tokenizer, chat template, stop tokens, and the weights of the policy's start and of the
  // frozen reference.
  const auto sft = runtime::local_model::load(r.init);
  const auto& chat = sft.require_chat();
  const auto config = model::load_model_config(r.init);
  const auto assets = read_assets(r.init, config, sft.tok, sft.stop_tokens);
  train_options topts;
  topts.qat = r.qat;
  train_model policy =
      resume_dir.empty() ? train_model::load(r.init, topts) : train_model::load(config, resume_dir, topts);
  train_model ref = train_model::load(r.init, topts);
  for (auto& [name, p] : ref.params()) p.requires_grad_(false);

  // Prompts: every source's tasks rendered as the model sees them at inference.
  struct source_prompts {
    std::vector<eval::task> tasks;
    std::vector<std::vector<token_id>> ids;
    double weight = 1;
  };
  std::vector<source_prompts> sources;
  double weight_sum = 0;
  for (const auto& s : r.train_data) {
    source_prompts sp;
    sp.tasks = load_tasks(s);
    sp.weight = s.weight;
    if (sp.tasks.empty()) continue;
    for (const auto& t : sp.tasks) {
      if (!t.images.empty())
        throw error(r.source + ": task " + t.id + " has pictures; RL rollouts take text tasks only");
      const auto ids = sft.tok.encode(eval::render_task_prompt(t, chat), /*allow_special=*/true);
      sp.ids.emplace_back(ids.begin(), ids.end());
    }
    weight_sum += sp.weight;
    sources.push_back(std::move(sp));
  }
  if (sources.empty()) throw error(r.source + ": data.train yields no tasks");
  std::vector<eval::task> eval_tasks;
  for (const auto& s : r.eval_data) {
    auto t = load_tasks(s);
    eval_tasks.insert(eval_tasks.end(), std::make_move_iterator(t.begin()), std::make_move_iterator(t.end()));
  }
  auto pick = [&](int64_t step, int64_t round, int64_t j) {
    const uint64_t h = mix(r.seed, uint64_t(step), uint64_t(round), uint64_t(j));
    double u = double(h >> 11) / double(1ull << 53) * weight_sum;
    size_t s = 0;
    while (s + 1 < sources.size() && u >= sources[s].weight) u -= sources[s++].weight;
    const size_t i = size_t(mix(r.seed ^ 0xabcdef, uint64_t(step), uint64_t(round), uint64_t(j)) %
                            uint64_t(sources[s].tasks.size()));
    return prompt_ref{&sources[s].tasks[i], &sources[s].ids[i]};
  };

  // Optimizers: AdamW over the policy (as SFT), Adam over the value head (PPO).
  const auto groups = group_parameters(policy);
  auto opt = make_adamw(groups, {r.lr, r.weight_decay, r.beta1, r.beta2, r.eps});
  std::vector<torch::Tensor> all_params = groups.params[0];
  all_params.insert(all_params.end(), groups.params[1].begin(), groups.params[1].end());
  const bool ppo = r.algorithm == rl_algorithm::ppo;
  value_head vh(config.hidden_size);
  torch::optim::Adam vopt({vh.w, vh.b}, torch::optim::AdamOptions(r.value_lr));
  rl::kl_controller klc{r.kl_coef, r.kl_target, r.kl_horizon};
  int64_t start = 0;
  if (!resume_dir.empty()) {
    torch::load(*opt, resume_dir + "/optimizer.pt");
    if (ppo) {
      // Into the tensors the optimizer holds (torch::load would replace the tensor objects).
      torch::Tensor w, bias;
      torch::load(w, resume_dir + "/value-w.pt");
      torch::load(bias, resume_dir + "/value-b.pt");
      {
        torch::NoGradGuard ng;
        vh.w.copy_(w);
        vh.b.copy_(bias);
      }
      torch::load(vopt, resume_dir + "/value-optimizer.pt");
    }
    load_rng(resume_dir + "/rng.pt");
    const json st = json::parse(read_text(resume_dir + "/state.json", "checkpoint state"));
    start = st.at("step").get<int64_t>();
    klc.coef = st.at("kl_coef").get<double>();
    std::fprintf(stderr, "rl: resuming from %s (step %" PRId64 ")\n", resume_dir.c_str(), start);
  }
  std::vector<torch::Tensor> every_tensor = all_params;  // the whole trained state, in the same order everywhere
  every_tensor.push_back(vh.w);
  every_tensor.push_back(vh.b);
  check_same_on_all_ranks(g, every_tensor, "comparing the ranks' starting parameters");
  auto checkpoint = [&](int64_t step) {
    check_same_on_all_ranks(g, every_tensor, "comparing the ranks' parameters before a checkpoint");
    if (!lead) return;
    commit_checkpoint(r.out, step, [&](const std::string& tmp) {
      policy.save(tmp, {.mxfp4_experts = false, .float_type = dtype::F32});
      write_model_assets(tmp, config, assets);
      torch::save(*opt, tmp + "/optimizer.pt");
      if (ppo) {
        torch::save(vh.w, tmp + "/value-w.pt");
        torch::save(vh.b, tmp + "/value-b.pt");
        torch::save(vopt, tmp + "/value-optimizer.pt");
      }
      save_rng(tmp + "/rng.pt");
      write_file(tmp + "/state.json", json({{"step", step}, {"kl_coef", klc.coef}}).dump(2) + "\n");
    });
  };

  eval::checker checker;
  auto pass_eval = [&](const std::string& dir, const std::string& name, int64_t step) {
    if (!lead) return;
    eval::evaluate_options eo;
    eo.max_tokens = r.eval_max_tokens;
    eo.progress = false;
    eo.check = &checker;
    log_pass_rates(r.out, "rl", "eval_pass_rate", dir, name, step, eval_tasks, eo);
  };

  const int64_t pad_id = config.pad_token_id.value_or(0);
  const double norm_len = double(r.max_tokens);
  int64_t n_params = 0;
  for (const auto& p : all_params) n_params += p.numel();
  if (lead)
    std::fprintf(stderr,
                 "rl: %s from %s, %" PRId64 " trainable parameters, %" PRId64 " steps of %" PRId64
                 " prompts x %" PRId64 " samples, KL %s (%s, coef %g)%s%s\n",
                 to_string(r.algorithm), r.init.c_str(), n_params, r.steps, r.prompts, r.samples,
                 to_string(r.kl_where), rl::to_string(r.kl_estimator), r.kl_coef, r.qat ? ", QAT on" : "",
                 g ? (", " + std::to_string(world) + " data-parallel ranks").c_str() : "");
  if (start == 0) pass_eval(r.init, "sft", 0);  // the baseline (nothing without eval tasks)

  rl_result res;
  double sec_per_step = 0;
  std::optional<graceful_interrupts> graceful;
  graceful.emplace();
  for (int64_t step = start; step < r.steps; ++step) {
    const auto t_step = clock_type::now();
    const double lr =
        r.warmup_steps > 0 ? r.lr * std::min(1.0, double(step + 1) / double(r.warmup_steps)) : r.lr;
    set_lr(*opt, lr);

    // ---- rollouts ----
    auto t0 = clock_type::now();
    // Each rank's own engine directory: the ranks hold the same policy but must not write one directory.
    const std::string engine_dir = r.out + "/rollout-model" + (g ? ".rank" + std::to_string(rank) : "");
    auto engine = engine_snapshot(policy, engine_dir, r.rollout_weights == "bf16" ? dtype::BF16 : dtype::F32);
    std::vector<rollout> kept;
    std::vector<int64_t> kept_row;  // each kept rollout's row in the whole step's batch (over all ranks)
    int64_t rows_total = 0;         // that batch's size
    int64_t groups_kept = 0, groups_filtered = 0, dropped = 0, generated = 0, judged = 0;
    double rollout_s = 0, judged_correct = 0, judged_reward = 0;  // every judged sample, before filtering
    const auto [mine_begin, mine_end] = rank_slice(size_t(r.prompts), rank, world);
    for (int64_t round = 0; round < r.max_gen_batches && groups_kept < r.prompts; ++round) {
      std::vector<prompt_ref> prompts;
      std::vector<serve::offline_request> reqs;
      for (int64_t j = int64_t(mine_begin); j < int64_t(mine_end); ++j) {
        prompts.push_back(pick(step, round, j));
        serve::offline_request q;
        q.prompt = *prompts.back().ids;
        q.n = int(r.samples);
        q.max_tokens = r.max_tokens;
        q.sampling.temperature = float(r.temperature);
        q.sampling.seed = mix(r.seed, uint64_t(step), uint64_t(round), uint64_t(j) + 0x1000000);
        q.stop_tokens = sft.stop_tokens;
        reqs.push_back(std::move(q));
      }
      serve::offline_options oo;
      oo.max_running = int32_t(r.max_running);
      oo.max_batch_tokens = r.max_batch_tokens;
      serve::offline_stats os;
      const auto outs = reqs.empty() ? std::vector<std::vector<serve::offline_sample>>{}
                                     : serve::generate_offline(*engine, reqs, oo, &os);
      rollout_s += os.seconds;
      generated += os.generated_tokens;
      // Replies as text, judged all at once in the sandbox.
      std::vector<rollout> all;
      std::vector<std::pair<const eval::task*, std::string>> items;
      for (size_t j = 0; j < outs.size(); ++j)
        for (const auto& smp : outs[j]) {
          rollout ro;
          ro.task = prompts[j].task;
          ro.group = round * r.prompts + int64_t(mine_begin + j);
          ro.prompt = reqs[j].prompt;
          ro.reply = smp.tokens;
          ro.engine_logp = smp.logprobs;
          ro.truncated = smp.finish == serve::finish_reason::LENGTH;
          std::vector<token_id> text_ids = smp.tokens;
          if (!ro.truncated && !text_ids.empty()) text_ids.pop_back();  // the stop token
          items.emplace_back(ro.task,
                             runtime::to_valid_utf8(sft.tok.decode(text_ids, /*skip_special=*/true)));
          all.push_back(std::move(ro));
        }
      const auto checks = checker.check_all(items);
      for (size_t i = 0; i < all.size(); ++i)
        all[i].rw = eval::score_reply(*all[i].task, items[i].second, checks[i], int64_t(all[i].reply.size()),
                                      all[i].truncated, r.reward);
      for (const auto& ro : all)
        if (!ro.rw.dropped) {
          ++judged;
          judged_correct += ro.rw.correct;
          judged_reward += ro.rw.total;
        }
      // Per prompt of the round: its judged members, its dropped samples, whether their rewards differ. A
      // rank fills its own prompts' rows; the sum over the ranks gives every rank the whole round.
      auto info = torch::zeros({r.prompts, 3}, torch::kFloat64);
      {
        auto in = info.accessor<double, 2>();
        std::map<int64_t, double> first_reward;
        for (const auto& ro : all) {
          const int64_t j = ro.group - round * r.prompts;
          if (ro.rw.dropped) {
            in[j][1] += 1;
            continue;
          }
          in[j][0] += 1;
          auto [it, fresh] = first_reward.emplace(j, ro.rw.total);
          if (!fresh && ro.rw.total != it->second) in[j][2] = 1;
        }
      }
      if (g) g->all_reduce_sum(info, "summing the round's groups");
      // Groups in prompt order: dropped samples leave; GRPO with dynamic sampling keeps only groups whose
      // rewards differ; the step takes the first `prompts` groups that remain.
      const auto in = info.accessor<double, 2>();
      for (int64_t j = 0; j < r.prompts && groups_kept < r.prompts; ++j) {
        dropped += int64_t(in[j][1]);
        const int64_t members = int64_t(in[j][0]);
        if (members == 0) continue;
        if (!ppo && r.dynamic_sampling && in[j][2] == 0) {
          ++groups_filtered;
          continue;
        }
        int64_t k = 0;
        for (auto& ro : all)
          if (ro.group == round * r.prompts + j && !ro.rw.dropped) {
            kept.push_back(std::move(ro));
            kept_row.push_back(rows_total + k++);
          }
        rows_total += members;
        ++groups_kept;
      }
      if (ppo || !r.dynamic_sampling) break;
    }
    engine.reset();
    if (g) {
      // The step's rollout figures over every rank (its wall time: the slowest rank's).
      auto sums = torch::tensor({double(generated), double(judged), judged_correct, judged_reward}, torch::kFloat64);
      g->all_reduce_sum(sums, "summing the rollout figures");
      auto slowest = torch::tensor({rollout_s}, torch::kFloat64);
      g->all_reduce_max(slowest, "the slowest rollout");
      generated = int64_t(sums[0].item<double>());
      judged = int64_t(sums[1].item<double>());
      judged_correct = sums[2].item<double>();
      judged_reward = sums[3].item<double>();
      rollout_s = slowest[0].item<double>();
    }
    const double rollout_wall = seconds_since(t0);

    std::map<std::string, domain_stats> by_domain;
    json log = {{"step", step + 1},
                {"lr", lr},
                {"groups", groups_kept},
                {"groups_filtered", groups_filtered},
                {"dropped", dropped},
                {"rollout_tokens", generated},
                {"rollout_pass_rate", judged ? judged_correct / double(judged) : 0.0},
                {"rollout_reward", judged ? judged_reward / double(judged) : 0.0},
                {"rollout_tokens_per_s", rollout_s > 0 ? double(generated) / rollout_s : 0.0}};
    double mean_reward = 0, mean_pass = 0, mean_kl = 0, mean_entropy = 0, clip_frac = 0, gnorm = 0;
    double train_tps = 0;
    if (rows_total == 0) {
      if (lead)
        std::fprintf(stderr, "rl: step %" PRId64 ": no group with a learning signal; no update\n", step + 1);
    } else {
      // ---- the trainer's view of this rank's rollouts (a rank may have none) ----
      t0 = clock_type::now();
      const int64_t N = int64_t(kept.size());
      const bool any = N > 0;
      batch b;
      pass_out old, refp;
      torch::Tensor mask, kl_old, scores, adv, returns, values_old, tis;
      if (any) {
        b = make_rl_batch(kept, pad_id);
        old = score_pass(policy, b, ppo, true, r.temperature, r.micro_batch_tokens);
        refp = score_pass(ref, b, false, false, r.temperature, r.micro_batch_tokens);
        mask = b.mask;
        kl_old = rl::kl_penalty(old.logp, refp.logp, r.kl_estimator);

        // Scores and advantages (a group's samples are all on one rank).
        scores = torch::zeros({N}, torch::kFloat32);
        for (int64_t i = 0; i < N; ++i) scores[i] = float(kept[size_t(i)].rw.total);
        torch::Tensor kl_reward = torch::zeros_like(old.logp);
        if (r.kl_where == kl_placement::reward) kl_reward = klc.coef * kl_old * mask;
        if (!ppo) {
          const auto group = torch::empty({N}, torch::kInt64);
          for (int64_t i = 0; i < N; ++i) group[i] = kept[size_t(i)].group;
          const auto a = rl::grpo_advantages(scores - kl_reward.sum(1), group, r.norm_adv_by_std);
          adv = a.unsqueeze(1).expand_as(old.logp).contiguous() * mask;
        } else {
          torch::NoGradGuard ng;
          values_old = vh(old.hidden) * mask;
          auto tok_rewards = -kl_reward;
          for (int64_t i = 0; i < N; ++i) tok_rewards[i][b.last[size_t(i)]] += scores[i];
          const auto gl = rl::gae(tok_rewards, values_old, mask, r.gamma, r.lam);
          adv = gl.advantages * mask;
          returns = gl.returns;
        }
        // Truncated importance sampling between the engine that sampled and the trainer's graph.
        if (r.tis_cap > 0) tis = torch::exp(old.logp - b.engine_logp).clamp_max(r.tis_cap) * mask;
      }
      std::unordered_map<int64_t, int64_t> local_of;  // row of the whole batch -> this rank's row
      for (int64_t i = 0; i < N; ++i) local_of[kept_row[size_t(i)]] = i;

      // ---- updates: epochs x mini-batches over the whole batch's rows ----
      // Each mini-batch runs as forwards of at most optimizer.micro_batch_tokens tokens (length_groups) whose
      // gradients add up: a group's loss is scaled by its share of the mini-batch's aggregation denominator
      // (its reply tokens for token-mean, its replies otherwise) over every rank, so the summed gradients are
      // those of the whole mini-batch in one forward, whatever the grouping and the ranks.
      std::vector<double> row_tokens(static_cast<size_t>(N));
      if (any) {
        const auto per_row = mask.sum(1).to(torch::kFloat64).contiguous();
        std::copy_n(per_row.data_ptr<double>(), N, row_tokens.begin());
      }
      const int share_of = r.agg == rl::loss_agg::token_mean ? 0 : 1;
      auto count = [&](const std::vector<int64_t>& rows) {
        std::array<double, 2> c{0, 0};
        for (const int64_t i : rows) c[0] += row_tokens[size_t(i)], c[1] += row_tokens[size_t(i)] > 0;
        return c;
      };
      const int64_t T1 = any ? b.targets.size(1) : 0;
      std::vector<torch::Tensor> clipped(
          static_cast<size_t>(N));  // per row: [T - 1], the clipped branch taken
      for (auto& c : clipped) c = torch::zeros({T1}, torch::kBool);
      double clip_sum = 0, clip_n = 0;
      int64_t trained_tokens = 0, forwards = 0;
      for (int64_t epoch = 0; epoch < r.epochs; ++epoch) {
        std::vector<int64_t> order(static_cast<size_t>(rows_total));
        for (int64_t i = 0; i < rows_total; ++i) order[size_t(i)] = i;
        uint64_t st = mix(r.seed, uint64_t(step), uint64_t(epoch), 0x5eed);
        for (int64_t i = rows_total - 1; i > 0; --i)
          std::swap(order[size_t(i)], order[size_t(splitmix64(st) % uint64_t(i + 1))]);
        const int64_t per = (rows_total + r.mini_batches - 1) / r.mini_batches;
        for (int64_t at = 0; at < rows_total; at += per) {
          std::vector<int64_t> idx;  // this rank's rows of the mini-batch, in the mini-batch's order
          for (int64_t k = at; k < std::min(rows_total, at + per); ++k)
            if (auto it = local_of.find(order[size_t(k)]); it != local_of.end()) idx.push_back(it->second);
          const auto mine = count(idx);
          auto whole = torch::tensor({mine[0], mine[1]}, torch::kFloat64);
          if (g) g->all_reduce_sum(whole, "summing the mini-batch's tokens");
          const double denominator = whole[share_of].item<double>();
          opt->zero_grad();
          if (ppo) vopt.zero_grad();
          for (const auto& rows : length_groups(idx, b.len, r.micro_batch_tokens)) {
            const double part = count(rows)[size_t(share_of)];
            if (part == 0) continue;  // replies without tokens: nothing to learn, nothing to add
            const double share = part / denominator;
            const auto ix = torch::tensor(rows, torch::kInt64);
            const int64_t L = longest(rows, b.len), Lt = L - 1;
            auto cut = [&](const torch::Tensor& t) { return t.index_select(0, ix).slice(1, 0, Lt); };
            const auto mb_mask = cut(mask);
            const auto out = policy.forward(b.tokens.index_select(0, ix).slice(1, 0, L));
            const auto logits = out.logits.slice(1, 0, Lt) / r.temperature;
            const auto logp = rl::token_logprobs(logits, cut(b.targets));
            const auto pl = rl::policy_loss(logp, cut(old.logp), cut(adv), mb_mask, r.clip, r.agg, norm_len,
                                            tis.defined() ? cut(tis) : tis);
            auto loss = pl.loss;
            if (r.kl_where == kl_placement::loss && klc.coef > 0)
              loss = loss + klc.coef * rl::aggregate(rl::kl_penalty(logp, cut(refp.logp), r.kl_estimator),
                                                     mb_mask, r.agg, norm_len);
            if (r.entropy_coef > 0)
              loss = loss - r.entropy_coef *
                                rl::aggregate(rl::entropy_from_logits(logits), mb_mask, r.agg, norm_len);
            (loss * share).backward();
            if (ppo) {
              const auto v = vh(out.hidden.slice(1, 0, Lt)) * mb_mask;
              const auto vl =
                  rl::value_loss(v, cut(values_old), cut(returns), mb_mask, r.value_clip, r.agg, norm_len);
              (vl * share).backward();
            }
            if (epoch == r.epochs - 1)
              for (size_t k = 0; k < rows.size(); ++k)
                clipped[size_t(rows[k])].slice(0, 0, Lt).copy_(pl.clipped[int64_t(k)]);
            const double tokens = mb_mask.sum().item<double>();
            clip_sum += pl.clip_frac * tokens;
            clip_n += tokens;
            for (const int64_t i : rows) trained_tokens += b.len[size_t(i)];
            ++forwards;
          }
          all_reduce_gradients(g, all_params);
          gnorm = clip_grad_norm(all_params, r.clip_norm);
          opt->step();
          if (ppo) {
            all_reduce_gradients(g, {vh.w, vh.b});
            vopt.step();
          }
        }
      }

      // ---- logs: sums over this rank's rows, then over the ranks ----
      constexpr int kDomains = int(eval::domain::vision) + 1;
      enum { SAMPLES, TOKENS, REWARD, CORRECT, COMPLETION, FORMAT, LENGTH, KL, ENTROPY, CLIPPED, kFields };
      auto dom_sums = torch::zeros({kDomains, kFields}, torch::kFloat64);
      // reward, pass, kl, entropy, reply tokens, |engine - trainer| sum, clip sum and count, trained tokens,
      // the update's forwards
      auto sums = torch::zeros({10}, torch::kFloat64);
      auto diff_max = torch::zeros({1}, torch::kFloat64);
      if (any) {
        auto ds = dom_sums.accessor<double, 2>();
        for (int64_t i = 0; i < N; ++i) {
          const auto& ro = kept[size_t(i)];
          double* d = &ds[int(ro.task->domain)][0];
          const auto m = mask[i];
          d[SAMPLES] += 1;
          d[TOKENS] += double(ro.reply.size());
          d[REWARD] += ro.rw.total;
          d[CORRECT] += ro.rw.correct;
          d[COMPLETION] += ro.rw.completion;
          d[FORMAT] += ro.rw.format;
          d[LENGTH] += ro.rw.length;
          d[KL] += (kl_old[i] * m).sum().item<double>();
          d[ENTROPY] += (old.entropy[i] * m).sum().item<double>();
          d[CLIPPED] += (clipped[size_t(i)].to(torch::kFloat32) * m).sum().item<double>();
        }
        const auto diff = (old.logp - b.engine_logp).abs() * mask;
        double pass = 0;
        for (const auto& ro : kept) pass += ro.rw.correct;
        sums = torch::tensor(
            {scores.sum().item<double>(), pass, (kl_old * mask).sum().item<double>(),
             (old.entropy * mask).sum().item<double>(), mask.sum().item<double>(), diff.sum().item<double>(),
             clip_sum, clip_n, double(trained_tokens), double(forwards)},
            torch::kFloat64);
        diff_max[0] = diff.max().item<double>();
      }
      if (g) {
        g->all_reduce_sum(dom_sums, "summing the per-domain figures");
        g->all_reduce_sum(sums, "summing the step's figures");
        g->all_reduce_max(diff_max, "the largest engine/trainer log-prob difference");
      }
      const double ntok = std::max(1.0, sums[4].item<double>());
      klc.update(sums[2].item<double>() / ntok, 1);
      const double train_s = seconds_since(t0);
      train_tps = train_s > 0 ? sums[8].item<double>() / train_s : 0;
      clip_frac = sums[7].item<double>() > 0 ? sums[6].item<double>() / sums[7].item<double>() : 0;
      const auto ds = dom_sums.accessor<double, 2>();
      for (int k = 0; k < kDomains; ++k) {
        if (ds[k][SAMPLES] == 0) continue;
        auto& d = by_domain[eval::to_string(eval::domain(k))];
        d.samples = int64_t(ds[k][SAMPLES]);
        d.tokens = int64_t(ds[k][TOKENS]);
        d.reward = ds[k][REWARD];
        d.correct = ds[k][CORRECT];
        d.completion = ds[k][COMPLETION];
        d.format = ds[k][FORMAT];
        d.length = ds[k][LENGTH];
        d.kl = ds[k][KL];
        d.entropy = ds[k][ENTROPY];
        d.clipped = ds[k][CLIPPED];
      }
      mean_reward = sums[0].item<double>() / double(rows_total);
      mean_pass = sums[1].item<double>() / double(rows_total);
      mean_kl = sums[2].item<double>() / ntok;
      mean_entropy = sums[3].item<double>() / ntok;
      log["samples"] = rows_total;
      log["reward"] = mean_reward;
      log["pass_rate"] = mean_pass;
      log["kl"] = mean_kl;
      log["kl_coef"] = klc.coef;
      log["entropy"] = mean_entropy;
      log["clip_frac"] = clip_frac;
      log["grad_norm"] = gnorm;
      log["engine_logprob_diff_mean"] = sums[5].item<double>() / ntok;
      log["engine_logprob_diff_max"] = diff_max[0].item<double>();
      log["train_tokens_per_s"] = train_tps;
      log["train_forwards"] = int64_t(sums[9].item<double>());
      json dom = json::object();
      for (const auto& [name, d] : by_domain) dom[name] = d.to_json();
      log["domains"] = dom;
    }
    ++res.steps_done;
    const int64_t done = step + 1;
    const double step_s = seconds_since(t_step);
    sec_per_step = sec_per_step == 0 ? step_s : 0.7 * sec_per_step + 0.3 * step_s;
    log["seconds"] = step_s;
    log["rollout_seconds"] = rollout_wall;
    if (lead) append_log(r.out, log);
    if (lead && (done % r.log_every == 0 || done == r.steps)) {
      std::string doms;
      for (const auto& [name, d] : by_domain) {
        char buf[64];
        std::snprintf(buf, sizeof buf, " %s %.0f%%", name.c_str(),
                      100 * d.correct / double(std::max<int64_t>(d.samples, 1)));
        doms += buf;
      }
      std::fprintf(
          stderr,
          "rl: step %" PRId64 "/%" PRId64
          " sampled pass %.1f%% | kept: reward %.3f pass %.1f%% (%s) kl %.4f entropy %.3f clip %.3f | "
          "rollout %.0f tok/s, train %.0f tok/s | eta %s\n",
          done, r.steps, judged ? 100 * judged_correct / double(judged) : 0.0, mean_reward, 100 * mean_pass,
          doms.empty() ? "-" : doms.substr(1).c_str(), mean_kl, mean_entropy, clip_frac,
          rollout_s > 0 ? double(generated) / rollout_s : 0.0, train_tps,
          format_duration(sec_per_step * double(r.steps - done)).c_str());
    }
    if (lead && r.eval_every > 0 && done % r.eval_every == 0 && done != r.steps) {
      auto copy = clone(policy);
      export_model(copy, assets, r.out + "/model-eval");
      pass_eval(r.out + "/model-eval", "step", done);
    }
    const int sig = agree_on_interrupt(g, interrupt_requested());
    if (sig || done % r.checkpoint_every == 0 || done == r.steps) {
      checkpoint(done);
      if (g) g->barrier("waiting for rank 0's checkpoint");
    }
    if (sig) throw interrupted_after(sig, r.out, done);
  }
  graceful.reset();
  fs::remove_all(r.out + "/rollout-model" + (g ? ".rank" + std::to_string(rank) : ""));
  if (lead) {
    check_export_target(r.out, final_export, o.force_export);
    claim_export_target(r.out, final_export);
    export_model(policy, assets, final_export);
    std::fprintf(stderr, "rl: exported %s\n", final_export.c_str());
    pass_eval(final_export, "final", r.steps);
  }
  if (g) g->barrier("waiting for rank 0's export");
  res.export_dir = final_export;
  res.lead = lead;
  return res;
}

}  // namespace moxi::train
