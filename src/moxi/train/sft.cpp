// The SFT driver (see sft.h): data and tokenizer preparation, the training loop with its progress line,
// held-out evaluation, atomic checkpoints and resume, the QAT phase and the export.
#include "moxi/train/sft.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>

#include "moxi/base/error.h"
#include "moxi/eval/evaluate.h"
#include "moxi/formats/bpe-trainer.h"
#include "moxi/formats/convert.h"
#include "moxi/model/config.h"
#include "moxi/train/dist.h"
#include "moxi/train/interrupt.h"
#include "moxi/train/losses.h"
#include "moxi/train/optim.h"
#include "moxi/train/run-dir.h"
#include "moxi/train/run-lock.h"

namespace moxi::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct run_state {
  int64_t step = 0;  // steps completed = the next step to run
};

// Besides the training state, a checkpoint is a loadable model directory: save() writes a config.json that
// declares no quantization for the F32 master weights, and the tokenizer and chat template come along.
void write_checkpoint(const std::string& out, const train_model& m, torch::optim::Optimizer& opt,
                      const run_state& st, const batch_order& order, const export_assets& assets) {
  commit_checkpoint(out, st.step, [&](const std::string& tmp) {
    m.save(tmp, {.mxfp4_experts = false, .float_type = dtype::F32});  // exact master weights
    write_model_assets(tmp, m.config(), assets);
    torch::save(opt, tmp + "/optimizer.pt");
    save_rng(tmp + "/rng.pt");
    const json state = {{"step", st.step},
                        {"data_position",
                         {{"epoch", st.step / order.batches_per_epoch()},
                          {"batch", st.step % order.batches_per_epoch()},
                          {"batches_per_epoch", order.batches_per_epoch()}}}};
    write_file(tmp + "/state.json", state.dump(2) + "\n");
  });
}

// ---- tokenizer and data -------------------------------------------------------------------------------

std::string train_tokenizer(const recipe& r, const formats::model_config& c,
                            const std::vector<eval::task>& tasks, const formats::chat_template& tpl) {
  formats::bpe_train_options o;
  o.vocab_size = c.vocab_size;
  // A model with a vision encoder: <|media_pad|> (Kimi-VL's placeholder) is the special after the others.
  // A config that puts it elsewhere trains text only.
  const auto media_at = int64_t(o.special_tokens.size());
  if (c.media_placeholder_token_id == media_at) {
    o.special_tokens.push_back("<|media_pad|>");
  } else if (std::any_of(tasks.begin(), tasks.end(), [](const eval::task& t) { return !t.images.empty(); })) {
    throw error(c.source + ": tasks with pictures need media_placeholder_token_id " + std::to_string(media_at) +
                ", where the trained tokenizer puts <|media_pad|> after its other specials");
  }
  o.min_frequency = r.tokenizer_min_frequency;
  o.split = formats::parse_bpe_split(r.tokenizer_split, r.source + ": tokenizer.split");
  formats::bpe_trainer t(o);
  for (const auto& task : tasks) {
    std::string text;
    for (const auto& seg : render_chat(task, tpl, r.end_token)) text += seg.text;
    t.add_text(text, task.id);
  }
  const auto model = t.train();
  std::fprintf(stderr, "sft: tokenizer trained on %zu conversations (%.1f MB): %zu merges, %" PRId64 " ids\n",
               tasks.size(), double(t.stats().input_bytes) / 1e6, model.merges.size(), c.vocab_size);
  return formats::bpe_to_hf_json(model);
}

std::string special_of(const formats::tokenizer& tok, const std::optional<int64_t>& id,
                       const std::string& what, const std::string& fallback) {
  if (!id) return fallback;
  if (*id < 0 || *id >= tok.vocab_size() || !tok.is_special(token_id(*id)))
    throw error("config " + what + " " + std::to_string(*id) + " is not a special token of the tokenizer");
  return std::string(tok.token_bytes(token_id(*id)));
}

std::vector<sft_sample> make_samples(const std::vector<eval::task>& tasks, const formats::chat_template& tpl,
                                     const formats::tokenizer& tok, const recipe& r, const char* what,
                                     const sample_vision* vision, bool verbose) {
  std::vector<sft_sample> out;
  size_t dropped = 0;
  for (const auto& t : tasks) {
    auto s = make_sample(t, tpl, tok, r.end_token, vision);
    if (int64_t(s.tokens.size()) > r.max_tokens) {
      ++dropped;
      continue;
    }
    out.push_back(std::move(s));
  }
  int64_t total = 0;
  for (const auto& s : out) total += int64_t(s.tokens.size());
  if (verbose)
    std::fprintf(
        stderr, "sft: %s: %zu conversations, %" PRId64 " tokens (mean %.0f)%s\n", what, out.size(), total,
        out.empty() ? 0.0 : double(total) / double(out.size()),
        dropped ? (", " + std::to_string(dropped) + " longer than data.max_tokens skipped").c_str() : "");
  return out;
}

std::vector<eval::task> load_all(const std::vector<data_source>& sources) {
  std::vector<eval::task> out;
  for (const auto& s : sources) {
    auto t = load_tasks(s);
    out.insert(out.end(), std::make_move_iterator(t.begin()), std::make_move_iterator(t.end()));
  }
  return out;
}

// ---- what a run may overwrite ---------------------------------------------------------------------------

}  // namespace

// ---- export ---------------------------------------------------------------------------------------------

void export_model(train_model& m, const export_assets& a, const std::string& dir) {
  const bool mxfp4 = m.config().quant && m.config().quant->method == formats::quant_method::MXFP4;
  {
    // Round what is stored as BF16 in place: the trainer keeps exactly the shipped weights.
    torch::NoGradGuard no_grad;
    std::vector<uint16_t> bits;
    for (const auto& d : m.manifest()) {
      if (d.fp32 || (d.routed_expert && mxfp4)) continue;
      auto& p = m.params().at(d.name);
      auto w = p.detach().contiguous();
      bits.resize(size_t(w.numel()));
      formats::from_f32(dtype::BF16, w.data_ptr<float>(), bits.size(), bits.data());
      auto r = torch::empty_like(w);
      formats::to_f32(dtype::BF16, bits.data(), bits.size(), r.data_ptr<float>());
      p.copy_(r);
    }
  }
  const std::string tmp = dir + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp);
  m.save(tmp, {.mxfp4_experts = true, .float_type = dtype::BF16});
  write_model_assets(tmp, m.config(), a);
  fsync_tree(tmp);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(tmp)) fs::rename(e.path(), fs::path(dir) / e.path().filename());
  fsync_path(dir, true);
  fs::remove_all(tmp);
}

void write_model_assets(const std::string& tmp, const formats::model_config& c, const export_assets& a) {
  write_file(tmp + "/tokenizer.json", a.tokenizer_json);
  const nlohmann::ordered_json tc = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                                     {"bos_token", a.bos_token},
                                     {"eos_token", a.eos_token},
                                     {"pad_token", a.pad_token},
                                     {"model_max_length", c.max_position_embeddings},
                                     {"chat_template", a.chat_template}};
  write_file(tmp + "/tokenizer_config.json", tc.dump(2) + "\n");
  nlohmann::ordered_json gc = {{"bos_token_id", c.bos_token_id ? json(*c.bos_token_id) : json(nullptr)}};
  json eos = json::array();
  if (c.eos_token_id) eos.push_back(*c.eos_token_id);
  if (a.end_token_id >= 0) eos.push_back(a.end_token_id);
  gc["eos_token_id"] = eos;
  gc["pad_token_id"] = c.pad_token_id ? json(*c.pad_token_id) : json(nullptr);
  gc["do_sample"] = false;
  write_file(tmp + "/generation_config.json", gc.dump(2) + "\n");
}

// The image rows of a batch's pictures (train_model::encode_images), or undefined without pictures.
torch::Tensor batch_media(const train_model& m, const sft_batch& b) {
  if (b.images.empty()) return {};
  return m.encode_images(b.image_inputs());
}

namespace {

// The held-out loss's sum and count over the batches rank, rank + world, ... of the length-sorted samples.
std::pair<double, double> held_out_sums(const train_model& m, const std::vector<sft_sample>& samples,
                                        int64_t batch_size, int64_t pad_id, const sample_vision* vision,
                                        int rank, int world) {
  torch::NoGradGuard no_grad;
  // Sorted by length so that batches carry little padding; the result does not depend on the order.
  std::vector<const sft_sample*> sorted;
  for (const auto& s : samples) sorted.push_back(&s);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto* a, const auto* b) { return a->tokens.size() < b->tokens.size(); });
  double sum = 0, n = 0;
  size_t k = 0;
  for (size_t at = 0; at < sorted.size(); at += size_t(batch_size), ++k) {
    if (k % size_t(world) != size_t(rank)) continue;
    std::vector<const sft_sample*> rows(
        sorted.begin() + ptrdiff_t(at),
        sorted.begin() + ptrdiff_t(std::min(sorted.size(), at + size_t(batch_size))));
    const auto b = make_batch(rows, pad_id, vision);
    const int64_t T = b.tokens.size(1);
    const auto logits = m.forward(b.tokens, nullptr, nullptr, batch_media(m, b)).logits.slice(1, 0, T - 1);
    const auto ce = torch::nn::functional::cross_entropy(
        logits.reshape({-1, logits.size(-1)}), b.tokens.slice(1, 1).reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    const auto w = b.masks.target.slice(1, 1).reshape({-1});
    sum += (ce * w).sum().item<double>();
    n += w.sum().item<double>();
  }
  return {sum, n};
}

}  // namespace

double held_out_loss(const train_model& m, const std::vector<sft_sample>& samples, int64_t batch_size,
                     int64_t pad_id, const sample_vision* vision) {
  const auto [sum, n] = held_out_sums(m, samples, batch_size, pad_id, vision, 0, 1);
  return n > 0 ? sum / n : 0.0;
}

// ---- the run --------------------------------------------------------------------------------------------

namespace {

struct step_outcome {
  double total = 0, ce = 0, mtp = 0, balance = 0, indexer_kl = 0;  // the loss terms of the (global) batch
  int64_t tokens_real = 0;                                         // its unpadded tokens
  double grad_norm = 0;                                            // before clipping
};

// One optimizer step on the global batch `idx`. A single process (g null) trains the whole batch. A rank of a
// data-parallel run trains its slice, padded to the global batch's length; the slices' counts are summed
// first (the loss terms divide by the global batch's counts), then the gradients, the loss terms and the
// router loads, so that every rank takes the step a single process takes on the whole batch.
step_outcome train_step(dist_group* g, train_model& m, torch::optim::Optimizer& opt,
                        const std::vector<torch::Tensor>& params, const std::vector<std::string>& bias_names,
                        const std::vector<sft_sample>& samples, const std::vector<size_t>& idx,
                        int64_t pad_id, const sample_vision* vis, const loss_options& lo, const recipe& r) {
  step_outcome out;
  opt.zero_grad();
  if (!g) {
    std::vector<const sft_sample*> rows;
    for (auto i : idx) rows.push_back(&samples[i]);
    const auto b = make_batch(rows, pad_id, vis);
    auto loss = training_loss(m, b.tokens, lo, b.masks, batch_media(m, b));
    loss.total.backward();
    out.grad_norm = clip_grad_norm(params, r.clip_norm);
    opt.step();
    update_router_bias(m, loss.stats, r.bias_update_speed, b.masks.valid);
    out.total = loss.total.item<double>();
    out.ce = loss.ce.item<double>();
    out.mtp = loss.mtp.item<double>();
    out.balance = loss.balance.item<double>();
    out.indexer_kl = loss.indexer_kl.item<double>();
    out.tokens_real = b.tokens_real;
    return out;
  }
  int64_t T = 0;
  for (auto i : idx) T = std::max<int64_t>(T, int64_t(samples[i].tokens.size()));
  const auto [begin, end] = rank_slice(idx.size(), g->rank(), g->world());
  std::vector<const sft_sample*> rows;
  for (size_t k = begin; k < end; ++k) rows.push_back(&samples[idx[k]]);
  std::optional<sft_batch> b;
  batch_counts mine;
  if (!rows.empty()) {  // (an epoch's last, short batch may leave a rank nothing)
    b = make_batch(rows, pad_id, vis, T);
    mine = count_batch(b->tokens, b->masks);
  }
  auto counts = torch::tensor({mine.ce_targets, mine.mtp_targets, mine.valid, mine.valid_mtp, mine.rows},
                              torch::kFloat64);
  g->all_reduce_sum(counts, "summing the batch's token counts");
  const batch_counts global{counts[0].item<double>(), counts[1].item<double>(), counts[2].item<double>(),
                            counts[3].item<double>(), counts[4].item<double>()};
  // Per router: the expert loads of this slice, and whether the router ran (last column).
  const int64_t E = m.config().moe.num_experts;
  auto loads = torch::zeros({int64_t(bias_names.size()), E + 1}, torch::kFloat64);
  auto terms = torch::zeros({6}, torch::kFloat64);
  if (b) {
    auto loss = training_loss(m, b->tokens, lo, b->masks, batch_media(m, *b), &global);
    loss.total.backward();
    for (const auto& s : loss.stats.moe) {
      const auto at = int64_t(std::find(bias_names.begin(), bias_names.end(), s.bias) - bias_names.begin());
      if (at == int64_t(bias_names.size())) throw error("train_step: no router bias named " + s.bias);
      loads[at].slice(0, 0, E).add_(router_load(s, E, b->masks.valid).to(torch::kFloat64));
      loads[at][E] = 1.0;
    }
    const double t[6] = {loss.total.item<double>(),   loss.ce.item<double>(),         loss.mtp.item<double>(),
                         loss.balance.item<double>(), loss.indexer_kl.item<double>(), double(b->tokens_real)};
    terms = torch::tensor(std::vector<double>(t, t + 6), torch::kFloat64);
  }
  all_reduce_gradients(g, params);
  g->all_reduce_sum(terms, "summing the loss terms");
  g->all_reduce_sum(loads, "summing the router loads");
  out.grad_norm = clip_grad_norm(params, r.clip_norm);
  opt.step();
  for (size_t k = 0; k < bias_names.size(); ++k)
    if (loads[int64_t(k)][E].item<double>() > 0)
      move_router_bias(m, bias_names[k], loads[int64_t(k)].slice(0, 0, E).to(torch::kFloat32),
                       r.bias_update_speed);
  const auto* t = terms.data_ptr<double>();
  out.total = t[0];
  out.ce = t[1];
  out.mtp = t[2];
  out.balance = t[3];
  out.indexer_kl = t[4];
  out.tokens_real = int64_t(t[5]);
  return out;
}

}  // namespace

sft_result run_sft(const recipe& r, const run_options& o) {
  validate(r);
  check_init_model(r.source, r.init);
  const int world = o.dist.world;
  if (world > 1 && r.batch_size % world != 0)
    throw error(
        r.source + ": optimizer.batch_size " + std::to_string(r.batch_size) + " is not divisible by the " +
        std::to_string(world) +
        " ranks of this data-parallel run: each rank trains an equal slice of every batch; use a batch "
        "size that is a multiple of the world size");
  if (r.threads > 0) torch::set_num_threads(r.threads);
  // Data parallelism: every rank joins the group first, so that a rank that stops early (rank 0 refused by
  // the run lock, say) ends the others at once instead of leaving them waiting.
  const auto group = dist_group::join(o.dist);
  dist_group* const g = group.get();       // null: a single process
  const bool lead = !g || g->rank() == 0;  // rank 0 alone writes the run directory, logs and reports
  check_same_recipe(g, to_json(r), o.override_recipe, o.force_export);
  const std::string final_export = export_target(r);
  std::optional<run_lock> run_dir_lock;
  if (lead) {
    fs::create_directories(r.out + "/checkpoints");
    run_dir_lock.emplace(r.out);         // before anything in the run directory is read or written
    remove_checkpoint_leftovers(r.out);  // nobody else writes here: the lock
    check_export_target(r.out, final_export, o.force_export);
    adopt_recipe(r.out, to_json(r), o.override_recipe, "sft", [&](const json& saved) {
      // Runs saved the recipe file as written (relative paths): read against the current recipe's directory.
      return schedule_differences(parse_recipe(saved, r.out + "/recipe.json", r.base_dir), r);
    });
  }

  const auto config = model::load_model_config(r.init.empty() ? r.config : r.init);
  const std::string template_source = r.chat_template.empty() ? "moxi-tiny (built in)" : r.chat_template;
  const std::string template_text = r.chat_template.empty() ? std::string(formats::moxi_tiny_chat_template())
                                                            : read_text(r.chat_template, "chat template");
  const auto train_tasks = load_all(r.train_data), eval_tasks = load_all(r.eval_data);
  if (train_tasks.empty()) throw error(r.source + ": data.train yields no tasks");

  // The tokenizer: given, or trained once and kept in the run directory (a resume reuses it).
  const std::string run_tok = r.out + "/tokenizer.json";
  std::string tok_json;
  if (!r.tokenizer.empty()) {
    tok_json = read_text(r.tokenizer, "tokenizer");
  } else if (!lead) {
    // Rank 0 trains it (below the barrier, the others read what it wrote).
  } else if (fs::exists(run_tok)) {
    tok_json = read_text(run_tok, "tokenizer");
  } else {
    // Rendering for the trainer needs the specials' text only; the default names are the trainer's.
    const auto specials = formats::default_special_tokens();
    const auto pre = formats::chat_template::from_tokenizer_config_json(
        {{"chat_template", template_text}, {"bos_token", specials[1]}, {"eos_token", specials[2]}},
        template_source);
    tok_json = train_tokenizer(r, config, train_tasks, pre);
    eval::write_file_atomic(run_tok, tok_json);
  }
  // The other ranks read the run directory only once rank 0 has locked and prepared it.
  if (g) g->barrier("waiting for rank 0 to prepare the run directory (lock, recipe, tokenizer)");
  if (tok_json.empty()) tok_json = read_text(run_tok, "tokenizer");
  const std::string resume_dir = latest_checkpoint(r.out);
  const auto tok = formats::tokenizer::from_hf_json(tok_json, r.tokenizer.empty() ? run_tok : r.tokenizer);
  if (tok.vocab_size() > config.vocab_size)
    throw error("tokenizer has " + std::to_string(tok.vocab_size()) +
                " ids, the model config's vocab_size is " + std::to_string(config.vocab_size));
  export_assets assets;
  assets.tokenizer_json = tok_json;
  assets.chat_template = template_text;
  assets.bos_token = special_of(tok, config.bos_token_id, "bos_token_id", "");
  assets.eos_token = special_of(tok, config.eos_token_id, "eos_token_id", "");
  assets.pad_token = special_of(tok, config.pad_token_id, "pad_token_id", "");
  assets.end_token = r.end_token;
  const auto end_id = tok.find(r.end_token);
  if (!end_id) throw error(r.source + ": end_token '" + r.end_token + "' is not a token of the tokenizer");
  assets.end_token_id = *end_id;
  const int64_t pad_id = config.pad_token_id.value_or(0);
  const auto tpl = formats::chat_template::from_tokenizer_config_json(
      {{"chat_template", template_text}, {"bos_token", assets.bos_token}, {"eos_token", assets.eos_token}},
      template_source);

  const auto vision = sample_vision_of(config);
  const sample_vision* vis = vision ? &*vision : nullptr;
  const auto train_samples = make_samples(train_tasks, tpl, tok, r, "train", vis, lead);
  const auto eval_samples = make_samples(eval_tasks, tpl, tok, r, "eval", vis, lead);
  if (train_samples.empty())
    throw error(r.source + ": every training conversation is longer than max_tokens");
  std::vector<int64_t> lengths;
  for (const auto& s : train_samples) lengths.push_back(int64_t(s.tokens.size()));
  batch_order order(lengths, r.batch_size, r.seed);

  // The model and optimizer: fresh, or exactly as the latest checkpoint left them.
  torch::manual_seed(r.seed);
  run_state st;
  // A checkpoint's config.json declares no quantization (its experts are F32 master weights); the run keeps
  // training under its own config (QAT, MXFP8 activations and the export read it).
  train_model m = !resume_dir.empty() ? train_model::load(config, resume_dir)
                  : r.init.empty()    ? train_model::init(config, r.seed)
                                      : train_model::load(r.init);
  const auto groups = group_parameters(m);
  auto opt = make_adamw(groups, {r.lr, r.weight_decay, r.beta1, r.beta2, r.eps});
  if (!resume_dir.empty()) {
    torch::load(*opt, resume_dir + "/optimizer.pt");
    load_rng(resume_dir + "/rng.pt");
    st.step =
        json::parse(read_text(resume_dir + "/state.json", "checkpoint state")).at("step").get<int64_t>();
    if (lead) std::fprintf(stderr, "sft: resuming from %s (step %" PRId64 ")\n", resume_dir.c_str(), st.step);
  }
  std::vector<torch::Tensor> all_params = groups.params[0];
  all_params.insert(all_params.end(), groups.params[1].begin(), groups.params[1].end());
  int64_t n_params = 0;
  for (const auto& p : all_params) n_params += p.numel();
  // The routers' correction biases: not trained by the optimizer, moved by the summed loads of the step.
  std::vector<std::string> bias_names;
  std::vector<torch::Tensor> every_tensor;  // the whole model state, in the same order on every rank
  for (const auto& d : m.manifest()) {
    if (!trainable(d)) bias_names.push_back(d.name);
    every_tensor.push_back(m.params().at(d.name));
  }
  if (g) {
    // Every rank built the same model from the same seed (or read the same checkpoint); rank 0's values are
    // copied to all the same, and the ranks agree on where the run stands.
    check_same_text(g, "step " + std::to_string(st.step) + " of " + resume_dir,
                    "resume point (the checkpoint every rank read)");
    broadcast_tensors(g, every_tensor, "broadcasting rank 0's parameters");
  }
  if (lead)
    std::fprintf(
        stderr,
        "sft: %" PRId64 " trainable parameters, %" PRId64 " steps + %" PRId64 " QAT steps, batch %" PRId64
        "%s, %" PRId64 " batches per epoch\n",
        n_params, r.steps, r.qat_steps, r.batch_size,
        g ? (" (" + std::to_string(r.batch_size / world) + " on each of " + std::to_string(world) + " ranks)")
                .c_str()
          : "",
        order.batches_per_epoch());

  const lr_schedule main_lr{r.lr, r.min_lr, r.warmup_steps, r.steps};
  const lr_schedule qat_lr{r.qat_lr, r.qat_lr * 0.1, 0, r.qat_steps};
  const loss_options lo{r.mtp_weight, r.balance_alpha, 1.0};
  const std::string sft_export = r.out + "/model-sft";

  // The held-out batches are shared out among the ranks; their sums are added up.
  auto eval_now = [&](int64_t step) {
    if (eval_samples.empty()) return -1.0;
    const auto [sum, n] = held_out_sums(m, eval_samples, r.batch_size, pad_id, vis, g ? g->rank() : 0, world);
    auto sums = torch::tensor({sum, n}, torch::kFloat64);
    if (g) g->all_reduce_sum(sums, "summing the held-out loss");
    const double l = sums[1].item<double>() > 0 ? sums[0].item<double>() / sums[1].item<double>() : 0.0;
    if (lead) {
      std::fprintf(stderr, "sft: step %" PRId64 " held-out loss %.4f%s\n", step, l,
                   m.options().qat ? " (QAT)" : "");
      append_log(r.out, {{"step", step}, {"eval_loss", l}, {"qat", m.options().qat}});
    }
    return l;
  };

  // Greedy pass rates of an exported directory through the engine and the sandboxed checkers (moxi eval).
  // Rank 0 only; the other ranks wait for it in the next collective.
  auto pass_eval = [&](const std::string& dir, const std::string& name, int64_t step) {
    if (!lead) return;
    eval::evaluate_options eo;
    eo.max_tokens = r.pass_eval_max_new;
    eo.progress = false;
    log_pass_rates(r.out, "sft", "pass_rate", dir, name, step, eval_tasks, eo);
  };

  sft_result res;
  if (st.step == 0) res.final_eval_loss = eval_now(0);  // the baseline the log compares against
  using clock = std::chrono::steady_clock;
  auto window_start = clock::now();
  int64_t window_tokens = 0, window_steps = 0;
  double sec_per_step = 0;
  std::optional<graceful_interrupts> graceful;  // in the loop, Ctrl-C finishes the step, checkpoints, stops
  graceful.emplace();
  for (int64_t step = st.step; step < r.total_steps(); ++step) {
    const bool qat = step >= r.steps;
    if (lead && qat && step == r.steps && !fs::exists(sft_export + "/config.json")) {
      // The model before QAT, exported as the engine will serve it (MXFP4 by rounding, no QAT).
      auto copy = clone(m);
      export_model(copy, assets, sft_export);
      std::fprintf(stderr, "sft: exported the pre-QAT model to %s\n", sft_export.c_str());
      pass_eval(sft_export, "sft", step);
    }
    auto mo = m.options();
    mo.qat = qat;
    mo.dsa_dense = step < r.dsa_dense_steps;
    m.set_options(mo);
    const double lr = qat ? qat_lr.lr_at(step - r.steps) : main_lr.lr_at(step);
    set_lr(*opt, lr);

    const auto so =
        train_step(g, m, *opt, all_params, bias_names, train_samples, order.batch(step), pad_id, vis, lo, r);
    res.final_loss = so.total;
    ++res.steps_done;
    window_tokens += so.tokens_real;
    ++window_steps;

    const int64_t done = step + 1;
    if (lead && (done % r.log_every == 0 || done == r.total_steps())) {
      const double secs = std::chrono::duration<double>(clock::now() - window_start).count();
      const double per = secs / double(window_steps);
      sec_per_step = sec_per_step == 0 ? per : 0.7 * sec_per_step + 0.3 * per;
      const double tps = secs > 0 ? double(window_tokens) / secs : 0;
      std::fprintf(stderr,
                   "sft: step %" PRId64 "/%" PRId64
                   "%s loss %.4f (ce %.4f mtp %.4f) lr %.2e gnorm %.2f "
                   "%.0f tok/s eta %s\n",
                   done, r.total_steps(), qat ? " QAT" : "", so.total, so.ce, so.mtp, lr, so.grad_norm, tps,
                   format_duration(sec_per_step * double(r.total_steps() - done)).c_str());
      append_log(r.out, {{"step", done},
                         {"loss", so.total},
                         {"ce", so.ce},
                         {"mtp", so.mtp},
                         {"balance", so.balance},
                         {"indexer_kl", so.indexer_kl},
                         {"lr", lr},
                         {"grad_norm", so.grad_norm},
                         {"tokens_per_s", tps},
                         {"qat", qat}});
      window_start = clock::now();
      window_tokens = window_steps = 0;
    }
    if ((r.eval_every > 0 && done % r.eval_every == 0) || done == r.steps || done == r.total_steps())
      res.final_eval_loss = eval_now(done);
    if (lead && r.pass_eval_every > 0 && done % r.pass_eval_every == 0 && done != r.total_steps()) {
      auto copy = clone(m);
      export_model(copy, assets, r.out + "/model-eval");
      pass_eval(r.out + "/model-eval", "step", done);
    }
    const int sig = agree_on_interrupt(g, interrupt_requested());
    if (sig || done % r.checkpoint_every == 0 || done == r.total_steps()) {
      st.step = done;
      check_same_on_all_ranks(g, every_tensor, "comparing the ranks' parameters before a checkpoint");
      if (lead) write_checkpoint(r.out, m, *opt, st, order, assets);
      if (g) g->barrier("waiting for rank 0's checkpoint");
    }
    if (sig) throw interrupted_after(sig, r.out, done);
  }
  graceful.reset();
  auto fo = m.options();
  fo.qat = r.qat_steps > 0;
  fo.dsa_dense = false;
  m.set_options(fo);
  if (lead) {
    // Another run may have exported there meanwhile.
    check_export_target(r.out, final_export, o.force_export);
    claim_export_target(r.out, final_export);
    export_model(m, assets, final_export);
    std::fprintf(stderr, "sft: exported %s\n", final_export.c_str());
    pass_eval(final_export, r.qat_steps > 0 ? "qat" : "final", r.total_steps());
  }
  if (g) g->barrier("waiting for rank 0's export");
  res.export_dir = final_export;
  res.lead = lead;
  return res;
}

}  // namespace moxi::train
