// The SFT pieces: the warmup + cosine schedule against its closed form, grad-norm clipping,
// AdamW's decay groups, the reply-only loss mask on a conversation rendered with moxi-tiny's template,
// right-padding invariance of every loss term and of the router bias update, recipe parsing, and the export
// round trip (the engine serves the exported directory with the trainer's QAT logits).
#include "moxi/train/sft.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>

#include "common/read-file.h"
#include "common/temp-dir.h"
#include "moxi/base/error.h"
#include "moxi/eval/task-generator.h"
#include "moxi/formats/bpe-trainer.h"
#include "moxi/formats/byte-tokenizer.h"
#include "moxi/formats/checkpoint.h"
#include "moxi/formats/model-config.h"
#include "moxi/model/config.h"
#include "moxi/model/manifest.h"
#include "moxi/model/model.h"
#include "moxi/train/fake-quant.h"
#include "moxi/train/losses.h"
#include "moxi/train/optim.h"
#include "moxi/train/recipe-detail.h"
#include "moxi/train/recipe.h"
#include "moxi/train/sft-data.h"

namespace fs = std::filesystem;
using namespace moxi;

namespace {

const std::string kSource = MOXI_SOURCE_DIR;

using moxi::testing::read_file;  // common/read-file.h

formats::model_config tiny_seed() {
  return model::load_model_config(kSource + "/configs/tiny-seed.json");
}

formats::chat_template template_file(const std::string& name) {
  return formats::chat_template::from_tokenizer_config_json(
      {{"chat_template", read_file(kSource + "/configs/chat-templates/" + name)},
       {"bos_token", "<|bos|>"},
       {"eos_token", "<|eos|>"}},
      name);
}

formats::chat_template moxi_tiny_template() {
  return template_file("moxi-tiny.jinja");
}

// A BPE tokenizer (default specials: pad bos eos system user assistant end) trained on a few conversations.
formats::tokenizer small_tokenizer(const std::vector<eval::task>& tasks, const formats::chat_template& tpl) {
  formats::bpe_train_options o;
  o.vocab_size = 400;
  formats::bpe_trainer t(o);
  for (const auto& task : tasks) {
    std::string text;
    for (const auto& seg : train::render_chat(task, tpl, "<|end|>")) text += seg.text;
    t.add_text(text);
  }
  return formats::tokenizer::from_hf_json(formats::bpe_to_hf_json(t.train()), "test");
}

TEST(Schedule, LinearWarmupThenCosineMatchesTheClosedForm) {
  const train::lr_schedule s{1e-3, 1e-4, 10, 110};
  // Warmup: peak * (s + 1) / 10.
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(4), 5e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(9), 1e-3);
  // Cosine over the 100 steps after warmup: peak at its start, the midpoint halfway, the floor at the end.
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1e-3);
  EXPECT_NEAR(s.lr_at(60), 1e-4 + 0.5 * 9e-4, 1e-15);
  EXPECT_NEAR(s.lr_at(35), 1e-4 + 9e-4 * (1 + std::cos(std::numbers::pi * 0.25)) / 2, 1e-15);
  EXPECT_NEAR(s.lr_at(110), 1e-4, 1e-15);
  EXPECT_NEAR(s.lr_at(500), 1e-4, 1e-15);
  // Monotone after warmup.
  for (int64_t i = 10; i < 110; ++i) EXPECT_LE(s.lr_at(i + 1), s.lr_at(i)) << i;
  // No warmup: step 0 is the peak.
  EXPECT_DOUBLE_EQ((train::lr_schedule{2e-3, 0, 0, 4}.lr_at(0)), 2e-3);
  EXPECT_NEAR((train::lr_schedule{2e-3, 0, 0, 4}.lr_at(2)), 1e-3, 1e-15);
}

TEST(Clip, ClippedGlobalNormEqualsTheBoundAndKeepsTheDirection) {
  torch::manual_seed(1);
  std::vector<torch::Tensor> ps = {torch::zeros({7, 5}, torch::requires_grad()),
                                   torch::zeros({3}, torch::requires_grad()),
                                   torch::zeros({2, 2, 2}, torch::requires_grad())};
  std::vector<torch::Tensor> before;
  double sq = 0;
  for (auto& p : ps) {
    p.mutable_grad() = torch::randn(p.sizes()) * 10;
    before.push_back(p.grad().clone());
    sq += p.grad().to(torch::kFloat64).pow(2).sum().item<double>();
  }
  const double norm = train::clip_grad_norm(ps, 0.5);
  EXPECT_NEAR(norm, std::sqrt(sq), 1e-9 * std::sqrt(sq));
  double after = 0;
  for (auto& p : ps) after += p.grad().to(torch::kFloat64).pow(2).sum().item<double>();
  EXPECT_NEAR(std::sqrt(after), 0.5, 1e-6);
  for (size_t i = 0; i < ps.size(); ++i)
    EXPECT_TRUE(torch::allclose(ps[i].grad(), before[i] * float(0.5 / std::sqrt(sq)), 1e-6, 1e-7));
  // Under the bound nothing changes.
  const auto g = ps[0].grad().clone();
  train::clip_grad_norm(ps, 10.0);
  EXPECT_TRUE(torch::equal(ps[0].grad(), g));
}

TEST(AdamW, WeightDecayReachesMatricesButNotNormsBiasesOrEmbeddings) {
  auto m = train::train_model::init(tiny_seed(), 1);
  const auto g = train::group_parameters(m);
  auto in = [&](int group, const std::string& name) {
    return std::find(g.names[group].begin(), g.names[group].end(), name) != g.names[group].end();
  };
  EXPECT_TRUE(in(0, "model.layers.1.self_attn.q_proj.weight"));
  EXPECT_TRUE(in(0, "model.layers.1.self_attn.q_conv1d.weight"));
  EXPECT_TRUE(in(0, "model.layers.1.block_sparse_moe.experts.0.w1.weight"));
  EXPECT_TRUE(in(0, "lm_head.weight"));
  EXPECT_TRUE(in(1, "model.embed_tokens.weight"));
  EXPECT_TRUE(in(1, "model.norm.weight"));
  EXPECT_TRUE(in(1, "model.layers.0.input_layernorm.weight"));
  EXPECT_TRUE(in(1, "model.layers.1.self_attn.A_log"));
  EXPECT_TRUE(in(1, "model.layers.1.self_attn.dt_bias"));
  EXPECT_TRUE(in(1, "model.layers.3.self_attn.indexer.k_norm.bias"));
  // The router's correction bias is moved by the aux-free update only.
  EXPECT_FALSE(in(0, "model.layers.1.block_sparse_moe.gate.e_score_correction_bias"));
  EXPECT_FALSE(in(1, "model.layers.1.block_sparse_moe.gate.e_score_correction_bias"));
  EXPECT_EQ(g.names[0].size() + g.names[1].size() + 6 /* MoE layers' correction biases */,
            m.manifest().size());

  // One step with zero gradients: AdamW's update is the decoupled decay alone, p -= lr * wd * p, in group 0.
  auto opt = train::make_adamw(g, {.lr = 0.1, .weight_decay = 0.5});
  for (int i = 0; i < 2; ++i)
    for (auto& p : g.params[i]) p.mutable_grad() = torch::zeros_like(p);
  const auto w0 = g.params[0][0].detach().clone(), n0 = g.params[1][0].detach().clone();
  opt->step();
  EXPECT_TRUE(torch::allclose(g.params[0][0].detach(), w0 * (1 - 0.1 * 0.5), 1e-6, 1e-9));
  EXPECT_TRUE(torch::equal(g.params[1][0].detach(), n0));
}

TEST(SftData, LossMaskCoversTheReplyAndItsEndTokenOnly) {
  const auto tpl = moxi_tiny_template();
  const auto tasks = eval::generate_tasks(eval::domain::terminal, eval::split::train, 8, 5);
  ASSERT_TRUE(std::any_of(tasks.begin(), tasks.end(), [](const eval::task& t) { return !t.history.empty(); }))
      << "the sample should hold a follow-up";
  const auto tok = small_tokenizer(tasks, tpl);
  for (const auto& t : tasks) {
    const auto s = train::make_sample(t, tpl, tok, "<|end|>");
    ASSERT_EQ(s.tokens.size(), s.target.size());
    std::vector<token_id> prompt, reply;
    for (size_t j = 0; j < s.tokens.size(); ++j)
      (s.target[j] ? reply : prompt).push_back(token_id(s.tokens[j]));
    // Targets are one run at the end: the prompt first, then the reply.
    for (size_t j = 0; j + 1 < s.target.size(); ++j) EXPECT_LE(s.target[j], s.target[j + 1]) << t.id;
    // The prompt is what the model sees at inference: moxi-tiny's turns (a follow-up's history first, an
    // assistant turn that is not the last closed with <|eos|>) and the generation prompt.
    std::string turns;
    for (const auto& h : t.history)
      turns += "<|" + h.role + "|>" + h.content + "<|end|>" + (h.role == "assistant" ? "<|eos|>" : "") + "\n";
    EXPECT_EQ(tok.decode(prompt), "<|bos|>" + turns + "<|user|>" + t.prompt + "<|end|>\n<|assistant|>\n")
        << t.id;
    // The reply is the reference and the end-of-turn token, nothing of the prompt and nothing after.
    EXPECT_EQ(tok.decode(reply), t.reference + "<|end|>") << t.id;
    EXPECT_EQ(reply.back(), *tok.find("<|end|>"));
  }
}

// A follow-up task (history: a request and its reply). Under moxi-small's template every reply is trained and
// the tokens are exactly the whole conversation; under moxi-tiny's, whose generation prompt differs from a
// rendered past reply, only the last reply is, after the whole conversation as its prompt.
TEST(SftData, FollowUpsTrainEveryReplyWhenTheTemplateAllows) {
  eval::task t;
  t.id = "follow-up";
  t.domain = eval::domain::terminal;
  t.history = {{"user", "count lines in a.txt"}, {"assistant", "wc -l a.txt"}};
  t.prompt = "and the words?";
  t.reference = "wc -w a.txt";
  auto tasks = eval::generate_tasks(eval::domain::terminal, eval::split::train, 8, 5);
  tasks.push_back(t);

  const auto small = template_file("moxi-small.jinja");
  const auto tok = small_tokenizer(tasks, small);
  auto parts = [&](const train::sft_sample& s) {
    std::vector<std::string> out;  // decoded runs of equal target, in order
    size_t j = 0;
    while (j < s.tokens.size()) {
      std::vector<token_id> run;
      const auto v = s.target[j];
      for (; j < s.tokens.size() && s.target[j] == v; ++j) run.push_back(token_id(s.tokens[j]));
      out.push_back((v ? "+" : "-") + tok.decode(run));
    }
    return out;
  };
  EXPECT_EQ(parts(train::make_sample(t, small, tok, "<|end|>")),
            (std::vector<std::string>{
                "-<|bos|><|user|>count lines in a.txt<|end|>\n<|assistant|>", "+wc -l a.txt<|end|>",
                "-\n<|user|>and the words?<|end|>\n<|assistant|>", "+wc -w a.txt<|end|>"}));
  const auto tiny = moxi_tiny_template();
  EXPECT_EQ(parts(train::make_sample(t, tiny, tok, "<|end|>")),
            (std::vector<std::string>{"-<|bos|><|user|>count lines in a.txt<|end|>\n<|assistant|>wc -l "
                                      "a.txt<|end|><|eos|>\n<|user|>and the words?<|end|>\n<|assistant|>\n",
                                      "+wc -w a.txt<|end|>"}));
}

TEST(SftData, BatchOrderIsAPureFunctionOfSeedAndStepAndCoversEverySampleEachEpoch) {
  std::vector<int64_t> lengths;
  for (int i = 0; i < 37; ++i) lengths.push_back(10 + (i * 7) % 23);
  train::batch_order a(lengths, 4, 9), b(lengths, 4, 9), c(lengths, 4, 10);
  EXPECT_EQ(a.batches_per_epoch(), 10);
  std::vector<int> seen(37, 0);
  for (int64_t s = 0; s < 10; ++s)
    for (auto i : a.batch(s)) ++seen[i];
  for (int i = 0; i < 37; ++i) EXPECT_EQ(seen[size_t(i)], 1) << i;
  // Random access (a resumed run) gives the same batches as walking from the start.
  EXPECT_EQ(b.batch(23), a.batch(23));
  EXPECT_EQ(b.batch(3), a.batch(3));
  bool differs = false;
  for (int64_t s = 0; s < 10; ++s) differs |= a.batch(s) != c.batch(s);
  EXPECT_TRUE(differs) << "another seed gives another order";
  bool epochs_differ = false;
  for (int64_t s = 0; s < 10; ++s) epochs_differ |= a.batch(s) != a.batch(s + 10);
  EXPECT_TRUE(epochs_differ);
}

// Every loss term and the router bias update of a right-padded batch equal those of its rows alone.
TEST(SftData, RightPaddingChangesNoLossTermAndNoRouterStatistic) {
  auto m = train::train_model::init(tiny_seed(), 2);
  torch::manual_seed(4);
  const int64_t V = m.config().vocab_size;
  train::sft_sample a, b;
  for (int i = 0; i < 13; ++i) a.tokens.push_back(3 + torch::randint(V - 3, {1}).item<int64_t>());
  for (int i = 0; i < 21; ++i) b.tokens.push_back(3 + torch::randint(V - 3, {1}).item<int64_t>());
  a.target.assign(a.tokens.size(), 1);
  b.target.assign(b.tokens.size(), 1);
  for (int i = 0; i < 5; ++i) a.target[size_t(i)] = b.target[size_t(i)] = 0;  // prompts

  auto alone = [&](const train::sft_sample& s) {
    const auto batch = train::make_batch({&s}, 0);
    EXPECT_EQ(batch.tokens.size(1), int64_t(s.tokens.size()));
    return train::training_loss(m, batch.tokens, {}, batch.masks);
  };
  const auto la = alone(a), lb = alone(b);
  const auto pb = train::make_batch({&a, &b}, 0);
  ASSERT_EQ(pb.tokens.size(1), 21);
  EXPECT_EQ(pb.tokens[0][20].item<int64_t>(), 0);
  const auto lp = train::training_loss(m, pb.tokens, {}, pb.masks);

  // CE and MTP: means over target tokens, so the batch is the target-weighted mean of the rows.
  const double na = 8, nb = 16;  // targets: tokens 5.. of each row, for CE and MTP alike
  EXPECT_NEAR(lp.ce.item<double>(), (la.ce.item<double>() * na + lb.ce.item<double>() * nb) / (na + nb),
              2e-5);
  EXPECT_NEAR(lp.mtp.item<double>(), (la.mtp.item<double>() * na + lb.mtp.item<double>() * nb) / (na + nb),
              2e-5);
  // Balance: per-row losses averaged over the rows; indexer KL: mean over valid queries.
  EXPECT_NEAR(lp.balance.item<double>(), (la.balance.item<double>() + lb.balance.item<double>()) / 2, 2e-5);
  EXPECT_NEAR(lp.indexer_kl.item<double>(),
              (la.indexer_kl.item<double>() * 13 + lb.indexer_kl.item<double>() * 21) / 34, 2e-5);

  // Router bias update: the padded batch moves each bias as the loads of the two rows together do.
  const auto bias0 = m.params().at(lp.stats.moe[0].bias).detach().clone();
  train::update_router_bias(m, lp.stats, 0.001, pb.masks.valid);
  const auto moved = m.params().at(lp.stats.moe[0].bias).detach() - bias0;
  const int64_t E = m.config().moe.num_experts;
  auto load = torch::zeros({E});
  for (const auto* l : {&la, &lb}) {
    const auto f = l->stats.moe[0].experts.reshape({-1});
    load += torch::zeros({E}).scatter_add(0, f, torch::ones_like(f, torch::kFloat32));
  }
  EXPECT_TRUE(torch::equal(moved.sign(), (load.mean() - load).sign())) << moved << load;
  // Without the valid mask the pads would count: the test can tell the difference.
  const auto f0 = lp.stats.moe[0].experts.reshape({-1});
  const auto load_with_pads = torch::zeros({E}).scatter_add(0, f0, torch::ones_like(f0, torch::kFloat32));
  EXPECT_FALSE(torch::equal(load_with_pads, load));
}

TEST(Recipe, UnknownFieldsAndBadValuesNameTheFieldAndOverridesApply) {
  const nlohmann::json base = {{"model", {{"config", "c.json"}}},
                               {"chat_template", "t.jinja"},
                               {"data", {{"train", {{{"domain", "math"}, {"n", 10}}}}}},
                               {"optimizer", {{"steps", 5}}}};
  auto r = train::parse_recipe(base, "r.json", "/base");
  EXPECT_EQ(r.config, "/base/c.json");
  EXPECT_EQ(r.train_data.at(0).split, "train");
  EXPECT_EQ(r.steps, 5);
  train::apply_override(r, "optimizer.steps=7");
  train::apply_override(r, "out=runs/x");
  EXPECT_EQ(r.steps, 7);
  EXPECT_EQ(r.out, "/base/runs/x");
  auto bad = base;
  bad["optimizer"]["stepz"] = 3;
  try {
    train::parse_recipe(bad, "r.json", "/base");
    FAIL() << "accepted an unknown field";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("r.json.optimizer: unknown field 'stepz'"), std::string::npos)
        << e.what();
  }
  bad = base;
  bad["optimizer"]["lr"] = "fast";
  EXPECT_THROW(train::parse_recipe(bad, "r.json", "/base"), error);
  r.lr = 0;
  EXPECT_THROW(train::validate(r), error);
  // A generated source may keep only some templates; load_tasks draws those alone.
  auto picked = base;
  picked["data"]["train"] = {{{"domain", "chat"}, {"n", 12}, {"seed", 3}, {"templates", {"repeat"}}}};
  const auto rp = train::parse_recipe(picked, "r.json", "/base");
  ASSERT_EQ(rp.train_data.at(0).templates, std::vector<std::string>{"repeat"});
  const auto tasks = train::load_tasks(rp.train_data.at(0));
  ASSERT_EQ(tasks.size(), 12u);
  for (const auto& t : tasks) EXPECT_EQ(t.template_name, "repeat");
  picked["data"]["train"][0]["templates"] = {"nope"};
  EXPECT_THROW(train::load_tasks(train::parse_recipe(picked, "r.json", "/base").train_data.at(0)), error);
  // A math source may pick the multiples division format; load_tasks draws the generator's items in it.
  auto divided = base;
  divided["data"]["train"] = {
      {{"domain", "math"}, {"n", 40}, {"seed", 5}, {"templates", {"share"}}, {"division", "multiples"}}};
  const auto rd = train::parse_recipe(divided, "r.json", "/base");
  EXPECT_EQ(rd.train_data.at(0).options.division, eval::division_format::multiples);
  EXPECT_EQ(eval::to_jsonl(train::load_tasks(rd.train_data.at(0))),
            eval::to_jsonl(eval::generate_tasks(eval::domain::math, eval::split::train, 40, 5, {"share"},
                                                {.division = eval::division_format::multiples})));
  EXPECT_EQ(train::detail::sources_json(rd.train_data).at(0).at("division"), "multiples");
  // A terminal source may draw its train names with capitals, a code source bare requests: load_tasks
  // draws the generator's items with the option, and the run's record keeps the field.
  struct variant {
    const char* field;
    eval::domain d;
    eval::generate_options options;
  };
  for (const variant& v : {variant{"capitals", eval::domain::terminal, {.capitals = true}},
                           variant{"bare_requests", eval::domain::code, {.bare_requests = true}}}) {
    auto named = base;
    named["data"]["train"] = {{{"domain", eval::to_string(v.d)}, {"n", 20}, {"seed", 6}, {v.field, true}}};
    const auto rn = train::parse_recipe(named, "r.json", "/base");
    EXPECT_EQ(eval::to_jsonl(train::load_tasks(rn.train_data.at(0))),
              eval::to_jsonl(eval::generate_tasks(v.d, eval::split::train, 20, 6, {}, v.options)))
        << v.field;
    EXPECT_EQ(train::detail::sources_json(rn.train_data).at(0).at(v.field), true) << v.field;
  }
  divided["data"]["train"][0]["division"] = "short";
  try {
    train::parse_recipe(divided, "r.json", "/base");
    ADD_FAILURE() << "an unknown division format was accepted";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("r.json.data.train[0].division: unknown division format 'short'"),
              std::string::npos)
        << e.what();
  }
}

// The exported directory, loaded by the engine, gives the trainer's QAT logits (MXFP4 experts encoded from
// the master weights, MXFP8 expert inputs, BF16 elsewhere: the trainer holds the rounded weights after
// export), and carries the tokenizer, chat template and stop tokens.
TEST(Export, EngineServesTheExportWithTheTrainersQatLogits) {
  moxi::testing::temp_dir tmp("moxi-export");
  auto m = train::train_model::init(tiny_seed(), 7);
  train::export_assets a;
  a.tokenizer_json = formats::byte_level_tokenizer_json(m.config().vocab_size,
                                                        {{0, "<|pad|>"}, {1, "<|bos|>"}, {2, "<|eos|>"}});
  a.chat_template = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}";
  a.bos_token = "<|bos|>";
  a.eos_token = "<|eos|>";
  a.pad_token = "<|pad|>";
  a.end_token_id = 2;
  const std::string dir = tmp / "model";
  fs::create_directories(dir);
  { std::ofstream(dir + "/README.md") << "kept\n"; }
  train::export_model(m, a, dir);
  EXPECT_EQ(read_file(dir + "/README.md"), "kept\n");
  const auto tc = nlohmann::json::parse(read_file(dir + "/tokenizer_config.json"));
  EXPECT_EQ(tc.at("chat_template"), a.chat_template);
  EXPECT_EQ(tc.at("bos_token"), "<|bos|>");
  const auto gc = nlohmann::json::parse(read_file(dir + "/generation_config.json"));
  EXPECT_EQ(gc.at("eos_token_id"), nlohmann::json::array({2, 2}));

  const auto engine = model::model::load(dir);
  std::vector<token_id> toks;
  for (int i = 0; i < 19; ++i) toks.push_back(token_id((i * 37 + 5) % m.config().vocab_size));
  auto cache = engine.new_cache();
  const auto e = engine.forward(toks, *cache);
  m.set_options({.qat = true});
  std::vector<int64_t> t64(toks.begin(), toks.end());
  const auto tl = m.forward(torch::tensor(t64).view({1, -1})).logits.squeeze(0).contiguous();
  ASSERT_EQ(int64_t(e.size()), tl.numel());
  const float* tp = tl.data_ptr<float>();
  double worst = 0;
  for (size_t i = 0; i < e.size(); ++i) worst = std::max(worst, double(std::fabs(e[i] - tp[i])));
  EXPECT_LT(worst, 1e-4);
  // The export really holds MXFP4 experts: blocks and scales, decoding bit for bit to the fake-quantized
  // master weights (and not to the master weights themselves); BF16 elsewhere, F32 where the manifest says.
  const auto ckpt = formats::checkpoint::open(dir);
  const auto back = train::train_model::load(dir);
  int64_t experts = 0;
  for (const auto& d : m.manifest()) {
    const auto& master = m.params().at(d.name);
    const auto& loaded = back.params().at(d.name);
    if (d.routed_expert) {
      ++experts;
      EXPECT_EQ(ckpt.view(model::mx_blocks_name(d.name)).type, dtype::U8) << d.name;
      EXPECT_TRUE(torch::equal(loaded, train::mx_fake_quant(master.detach(), mx::elem_format::FP4_E2M1)))
          << d.name;
      EXPECT_FALSE(torch::equal(loaded, master.detach())) << d.name;
    } else {
      EXPECT_EQ(ckpt.view(d.name).type, d.fp32 ? dtype::F32 : dtype::BF16) << d.name;
      EXPECT_TRUE(torch::equal(loaded, master.detach()))
          << d.name << ": the trainer must hold what it shipped";
    }
  }
  EXPECT_GT(experts, 0);
}

}  // namespace
