// Planner arithmetic (see plan.h). Conventions, documented in docs/plan.md: tensor parallelism splits every
// matrix of a stage tp ways; norms and routers are replicated; routed experts are spread over ep devices;
// pipeline stages own contiguous layer ranges (embedding and vision on the first, final norm, lm_head and MTP
// on the last); each attention kind's cache figures come from its entry in model/layers/attention.h (the
// MLA latent cache is replicated across tp ranks, it has no head dimension; the KDA state and the
// sliding-window ring are split by heads).
#include "moxi/model/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <map>
#include <numeric>
#include <sstream>
#include <string>

#include "moxi/base/error.h"
#include "moxi/formats/shard-plan.h"
#include "moxi/kernels/x86/mxfp4-matmul.h"
#include "moxi/kernels/x86/mxfp4-x86.h"
#include "moxi/model/layers/attention.h"
#include "moxi/model/layers/ffn.h"
#include "moxi/model/layers/mla.h"

namespace moxi::model {

std::string cache_format_name(cache_format f) {
  switch (f) {
    case cache_format::BF16:
      return "bf16";
    case cache_format::FP8:
      return "fp8";
    case cache_format::F32:
      return "f32";
  }
  return "?";
}

cache_format parse_cache_format(const std::string& name) {
  for (cache_format f : {cache_format::BF16, cache_format::FP8, cache_format::F32})
    if (cache_format_name(f) == name) return f;
  throw error("unknown cache format '" + name + "' (bf16, fp8 or f32)");
}
namespace {

using formats::attn_kind;

// ---- bytes read at load: which rank reads which tensor (docs/plan.md "Bytes read at load") ----

// The dimension a tensor is sliced along under tensor parallelism, or -1 when every rank of the stage reads
// it whole. Attention matrices split by heads (column-parallel: their output rows; o_proj row-parallel: its
// input columns), dense and shared FFNs by their intermediate width. Low-rank
// down projections shared by all heads (KDA f_a/g_a, MLA q_a/kv_a with their norms), KDA's o_norm (one
// head_dim vector for every head), the DSA indexer, routers, latent-MoE projections, norms, the embedding,
// lm_head, MTP's eh_proj and norms, and the vision tower stay whole (model/parallel.h tp_split_axis, the
// distributed loader's rule, splits the same tensors).
int tp_slice_dim(const formats::model_config& c, const tensor_decl& d, int tp) {
  if (d.routed_expert || d.group == param_group::ROUTED_EXPERTS) return -1;  // split by ep instead
  switch (d.group) {
    case param_group::EMBEDDING:
    case param_group::NORM:
    case param_group::LAYER_NORM:
    case param_group::ROUTER:
    case param_group::LATENT_PROJ:
    case param_group::VISION:
    case param_group::ROUTED_EXPERTS:
    case param_group::LM_HEAD:  // whole on the last stage's ranks, whose first rank broadcasts the logits
      return -1;
    case param_group::DENSE_MLP:
    case param_group::SHARED_EXPERTS:
    case param_group::KDA:
    case param_group::MLA:
    case param_group::SWA:
    case param_group::MTP:
    case param_group::COUNT:
      break;
  }
  const std::string& n = d.name;
  auto ends = [&](const char* suffix) { return n.ends_with(suffix); };
  // Dense and shared FFNs (routed experts were handled above; MTP's block has the same names).
  if (n.find(".shared_experts.") != std::string::npos || n.find(".mlp.") != std::string::npos) {
    if (n.find(".gate.") != std::string::npos || n.find("latent_") != std::string::npos) return -1;
    if (ends(".gate_proj.weight") || ends(".up_proj.weight")) return 0;
    if (ends(".down_proj.weight")) return 1;
    return -1;
  }
  const auto at = n.find(".self_attn.");
  if (at == std::string::npos) return -1;  // norms, MTP's enorm/hnorm/eh_proj/shared_head, routers, latents
  const std::string leaf = n.substr(at + 11);
  if (leaf.starts_with("indexer.")) return -1;
  if (d.group == param_group::SWA && (leaf == "k_proj.weight" || leaf == "v_proj.weight"))
    return c.swa && c.swa->num_kv_heads % tp == 0 ? 0 : -1;  // else the KV heads are replicated
  for (const char* x : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "q_conv1d.weight",
                        "k_conv1d.weight", "v_conv1d.weight", "f_b_proj.weight", "b_proj.weight", "dt_bias",
                        "g_proj.weight", "g_b_proj.weight", "q_b_proj.weight", "kv_b_proj.weight"})
    if (leaf == x) return 0;
  if (leaf == "o_proj.weight") return 1;
  if (leaf == "A_log") return 2;  // [1, 1, heads, 1]
  return -1;
}

// The routed expert a tensor belongs to ("...experts.<e>...."), -1 for none.
int64_t expert_index(const tensor_decl& d) {
  if (!d.routed_expert) return -1;
  const auto at = d.name.rfind(".experts.");
  if (at == std::string::npos) return -1;
  return std::stoll(d.name.substr(at + 9));
}

// E experts over ep ranks in contiguous blocks, the first E % ep ranks one expert more.
int64_t experts_of(int64_t E, int ep, int j) {
  return E / ep + (j < E % ep ? 1 : 0);
}
int expert_owner(int64_t E, int ep, int64_t e) {
  const int64_t q = E / ep, r = E % ep;
  return e < r * (q + 1) ? int(e / (q + 1)) : int(r + (e - r * (q + 1)) / q);
}

// First decoder layer of stage s: the contiguous split of plan.cpp's layout.
int64_t stage_first_layer(int64_t layers, int pp, int s) {
  return int64_t(s) * layers / pp;
}

// Per stage: bytes every rank reads, bytes rank tp_index t reads of the sliced tensors, and bytes of the
// routed experts held at ep_index j. A rank reads base[s] + sliced[s][t] + experts[s][j].
struct load_table {
  std::vector<uint64_t> base;
  std::vector<std::vector<uint64_t>> sliced, experts;
  uint64_t bytes(const rank_coords& r) const {
    return base[size_t(r.stage)] + sliced[size_t(r.stage)][size_t(r.tp_index)] +
           experts[size_t(r.stage)][size_t(r.ep_index)];
  }
};

load_table build_load_table(const formats::model_config& c, const std::vector<tensor_decl>& manifest,
                            const std::vector<stored_tensor>& stored, int tp, int ep, int pp) {
  load_table t;
  t.base.assign(size_t(pp), 0);
  t.sliced.assign(size_t(pp), std::vector<uint64_t>(size_t(tp), 0));
  t.experts.assign(size_t(pp), std::vector<uint64_t>(size_t(ep), 0));
  std::vector<int> stage_of_layer(size_t(c.num_layers), 0);
  for (int s = 0; s < pp; ++s)
    for (int64_t l = stage_first_layer(c.num_layers, pp, s); l < stage_first_layer(c.num_layers, pp, s + 1);
         ++l)
      stage_of_layer[size_t(l)] = s;
  std::vector<int> slice(manifest.size());
  for (size_t i = 0; i < manifest.size(); ++i) slice[i] = tp > 1 ? tp_slice_dim(c, manifest[i], tp) : -1;
  for (const auto& st : stored) {
    const auto& d = manifest[st.decl_index];
    int s;
    if (d.layer >= 0 && d.layer < c.num_layers)
      s = stage_of_layer[size_t(d.layer)];
    else  // the embedding and vision open the pipeline; final norm, lm_head and MTP close it
      s = (d.group == param_group::EMBEDDING || d.group == param_group::VISION) ? 0 : pp - 1;
    const uint64_t b = st.nbytes();
    // The last stage reads the embedding too when its head or MTP layers use it (model.cpp's loader).
    if (d.group == param_group::EMBEDDING && pp > 1 && (c.tie_word_embeddings || c.num_mtp_layers > 0))
      t.base[size_t(pp - 1)] += b;
    const int64_t e = expert_index(d);
    if (e >= 0 && c.moe.num_experts > 0) {
      t.experts[size_t(s)][size_t(expert_owner(c.moe.num_experts, ep, e))] += b;
      continue;
    }
    const int dim = slice[st.decl_index];
    if (dim < 0 || size_t(dim) >= d.shape.size()) {
      t.base[size_t(s)] += b;
      continue;
    }
    // Rank q holds rows [floor(q U / tp), floor((q + 1) U / tp)) of the U along `dim`; its bytes are that
    // share of the stored tensor (exact for BF16/F32 rows; FP8 block scales follow proportionally).
    const int64_t U = d.shape[size_t(dim)];
    for (int q = 0; q < tp; ++q) {
      const int64_t rows = (int64_t(q) + 1) * U / tp - int64_t(q) * U / tp;
      t.sliced[size_t(s)][size_t(q)] +=
          b / uint64_t(U) * uint64_t(rows) + b % uint64_t(U) * uint64_t(rows) / uint64_t(U);
    }
  }
  return t;
}

int smallest_dp(int tp, int ep) {
  return ep / std::gcd(tp, ep);
}

// Expected share of a tensor's parameters used per text token.
double active_fraction(const formats::model_config& c, const tensor_decl& d) {
  switch (d.group) {
    case param_group::ROUTED_EXPERTS:
      return double(c.moe.experts_per_token) / double(c.moe.num_experts);
    case param_group::EMBEDDING:  // a lookup, not a matmul: not counted as active (docs/model-spec.md §1)
    case param_group::MTP:
    case param_group::VISION:
      return 0.0;
    default:
      return 1.0;
  }
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (b >= 1000 && u < 5) b /= 1000, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e12)
    std::snprintf(buf, sizeof buf, "%.3f T", n / 1e12);
  else if (n >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f B", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2f M", n / 1e6);
  else if (n >= 1e3)
    std::snprintf(buf, sizeof buf, "%.2f K", n / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

std::string gib(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
  return buf;
}

// One forward of o.prefill_chunk rows over layers [first, last] at `context` (docs/plan.md "Activations"):
// the residual stream and the decoder's normed input and sublayer output (3 x hidden per row), plus the
// larger of the heaviest attention and the heaviest FFN of the stage (each frees its buffers before the
// next runs), plus the buffers of the attention kinds that keep theirs between calls (work_held: KDA). The
// logits are of the last row only, as in a prefill.
uint64_t stage_activation_bytes(const formats::model_config& c, const plan_options& o, int64_t context,
                                int64_t first, int64_t last) {
  if (o.prefill_chunk <= 0) return 0;
  const int64_t rows = o.prefill_chunk;
  double attn = 0, ffn = 0;
  std::map<formats::attn_kind, double> held;
  for (int64_t l = first; l <= last; ++l) {
    const attention_kind_info& k = attention_kind(c.layer_attn[size_t(l)]);
    const double work = k.work_elems(c, rows, context, o.tp);
    if (k.work_held)
      held[k.kind] = work;  // one set per thread, shared by the kind's layers
    else
      attn = std::max(attn, work);
    ffn = std::max(ffn,
                   c.is_moe(l) ? moe_work_elems(c, rows, o.tp, o.ep) : dense_ffn_work_elems(c, rows, o.tp));
  }
  double elems = 3.0 * double(rows) * double(c.hidden_size) + std::max(attn, ffn);
  for (const auto& [kind, work] : held) elems += work;
  double bytes = elems * (o.cache == cache_format::F32 ? 4.0 : 2.0);
  if (o.dense_tiles) {
    // The split scratch of the widest dense BF16 product input of the stage (a linear [out, in] whose in is
    // a multiple of 32; the head runs on the last row only), which the calling thread keeps between calls
    // (kernels::x86::detail::matmul_bf16_panels_amx).
    int64_t widest = 0;
    for (const tensor_decl& d : build_manifest(c))
      if (d.layer >= first && d.layer <= last && d.shape.size() == 2 && !d.fp32 && !d.routed_expert &&
          d.group != param_group::ROUTER && d.shape[1] % 32 == 0)
        widest = std::max(widest, d.shape[1]);
    const int64_t block = std::min<int64_t>(rows, kernels::x86::detail::kDenseAmxBlockTokens);
    bytes += double(kernels::x86::kDenseSplits) * 2.0 * double((block + 15) / 16 * 16) * double(widest);
  }
  return uint64_t(std::ceil(bytes));
}

}  // namespace

rank_coords rank_position(int tp, int ep, int pp, int world_size, int rank) {
  if (tp < 1 || ep < 1 || pp < 1 || world_size < 1 || world_size % (tp * pp) || (world_size / pp) % ep)
    throw error("plan: no layout of " + std::to_string(world_size) + " ranks has tp " + std::to_string(tp) +
                ", ep " + std::to_string(ep) + " and pp " + std::to_string(pp));
  if (rank < 0 || rank >= world_size)
    throw error("plan: rank " + std::to_string(rank) + " is outside the " + std::to_string(world_size) +
                " ranks");
  const int stage_devices = world_size / pp;
  rank_coords c;
  c.stage = rank / stage_devices;
  const int i = rank % stage_devices;
  c.replica = i / tp;
  c.tp_index = i % tp;
  c.ep_group = i / ep;
  c.ep_index = i % ep;
  return c;
}

uint64_t rank_load_bytes(const formats::model_config& c, int tp, int ep, int pp, int rank, int world_size) {
  if (tp < 1 || ep < 1 || pp < 1) throw error("plan: tp, ep and pp must be >= 1");
  if (pp > c.num_layers) throw error("plan: pp " + std::to_string(pp) + " exceeds the layers");
  if (c.moe.num_experts > 0 && ep > c.moe.num_experts) throw error("plan: ep exceeds the routed experts");
  if (world_size == 0) world_size = tp * pp * smallest_dp(tp, ep);
  const auto rc = rank_position(tp, ep, pp, world_size, rank);
  const auto manifest = build_manifest(c);
  const auto stored = storage_layout(c, manifest, dtype::BF16);
  return build_load_table(c, manifest, stored, tp, ep, pp).bytes(rc);
}

double expected_remote_ranks(int64_t E, int64_t k, int ep) {
  if (E <= 0 || k <= 0 || ep <= 1) return 0;
  double sum = 0;
  for (int j = 0; j < ep; ++j) {
    const int64_t n = experts_of(E, ep, j);
    double none = 1.0;
    for (int64_t i = 0; i < k; ++i) none *= double(std::max<int64_t>(0, E - n - i)) / double(E - i);
    sum += 1.0 - none;
  }
  return double(ep - 1) / ep * sum;
}

plan_result make_plan(const formats::model_config& c, const plan_options& o) {
  if (o.tp < 1 || o.pp < 1 || o.ep < 1 || o.nodes < 1 || o.gpus_per_node < 1)
    throw error("plan: --tp, --pp, --ep, --nodes and --gpus-per-node must be >= 1");
  if (o.batch < 1) throw error("plan: --batch must be >= 1");
  if (o.context < 0) throw error("plan: --context must be >= 0");
  if (o.num_shards < 1) throw error("plan: --shards must be >= 1");
  if (o.pp > c.num_layers)
    throw error("plan: --pp " + std::to_string(o.pp) + " exceeds the " + std::to_string(c.num_layers) +
                " layers");

  plan_result r;
  const auto manifest = build_manifest(c);
  const auto stored = storage_layout(c, manifest, dtype::BF16);
  r.num_tensors = int64_t(stored.size());

  std::vector<uint64_t> decl_bytes(manifest.size(), 0);
  std::vector<uint64_t> sizes;
  sizes.reserve(stored.size());
  for (const auto& s : stored) {
    decl_bytes[s.decl_index] += s.nbytes();
    sizes.push_back(s.nbytes());
    r.checkpoint_bytes += s.nbytes();
    r.largest_tensor_bytes = std::max(r.largest_tensor_bytes, s.nbytes());
  }

  for (size_t i = 0; i < manifest.size(); ++i) {
    const auto& d = manifest[i];
    auto& g = r.groups[size_t(d.group)];
    g.params += d.numel();
    g.active_params += double(d.numel()) * active_fraction(c, d);
    g.disk_bytes += decl_bytes[i];
    if (d.group == param_group::VISION)
      (d.name.starts_with("vision_tower.") ? r.vision_tower_params : r.vision_projector_params) += d.numel();
  }
  for (size_t gi = 0; gi < r.groups.size(); ++gi) {
    const auto g = param_group(gi);
    if (g == param_group::MTP) {
      r.mtp_params = r.groups[gi].params;
      continue;
    }
    if (g == param_group::VISION) {
      r.vision_params = r.groups[gi].params;
      continue;
    }
    r.total_params += r.groups[gi].params;
    r.active_params += r.groups[gi].active_params;
    r.disk_bytes += r.groups[gi].disk_bytes;
  }

  // Shards: the same contiguous balanced split the checkpoint writer uses.
  const auto shard_of = formats::plan_shards(sizes, o.num_shards);
  r.num_shards = shard_of.empty() ? 0 : shard_of.back() + 1;
  std::vector<uint64_t> shard_bytes(size_t(r.num_shards), 0);
  for (size_t i = 0; i < sizes.size(); ++i) shard_bytes[size_t(shard_of[i])] += sizes[i];
  if (!shard_bytes.empty()) {
    r.shard_bytes_min = *std::min_element(shard_bytes.begin(), shard_bytes.end());
    r.shard_bytes_max = *std::max_element(shard_bytes.begin(), shard_bytes.end());
  }

  // Caches per sequence, from each attention kind's figures (layers/attention.h).
  r.context = o.context > 0 ? o.context : c.max_position_embeddings;
  const uint64_t ctx = uint64_t(r.context);
  constexpr attn_kind kKinds[] = {attn_kind::KDA, attn_kind::MLA, attn_kind::SWA};
  std::array<attention_plan_figures, std::size(kKinds)> fig{};
  for (attn_kind k : kKinds)
    if (c.num_layers_of(k) > 0) fig[size_t(k)] = attention_kind(k).plan(c, o.cache, r.context, o.tp);
  r.kda_state_bytes_per_layer = fig[size_t(attn_kind::KDA)].state_bytes;
  r.latent_bytes_per_token_layer = fig[size_t(attn_kind::MLA)].token_bytes;
  r.swa_bytes_per_layer = fig[size_t(attn_kind::SWA)].state_bytes;
  for (attn_kind k : kKinds)
    r.cache_bytes_per_sequence +=
        uint64_t(c.num_layers_of(k)) * (fig[size_t(k)].state_bytes + ctx * fig[size_t(k)].token_bytes);

  // Parallel layout.
  r.world_size = o.nodes * o.gpus_per_node;
  if (o.tp * o.pp > r.world_size || r.world_size % (o.tp * o.pp))
    throw error("plan: tp x pp = " + std::to_string(o.tp * o.pp) + " must divide the " +
                std::to_string(r.world_size) + " devices (nodes x gpus-per-node)");
  r.dp = r.world_size / (o.tp * o.pp);
  const int stage_devices = o.tp * r.dp;
  if (stage_devices % o.ep)
    throw error("plan: --ep " + std::to_string(o.ep) + " must divide the " + std::to_string(stage_devices) +
                " devices of a pipeline stage (tp x dp)");
  if (c.moe.num_experts > 0 && o.ep > c.moe.num_experts)
    throw error("plan: --ep " + std::to_string(o.ep) + " exceeds the " + std::to_string(c.moe.num_experts) +
                " routed experts");
  if (c.moe.num_experts > 0 && c.moe.num_experts % o.ep)
    r.warnings.push_back("ep does not divide the routed experts: some devices hold one expert more");
  if (c.kda && c.kda->num_heads % o.tp) r.warnings.push_back("tp does not divide the KDA heads");
  if (c.mla && c.mla->num_heads % o.tp) r.warnings.push_back("tp does not divide the MLA heads");
  if (c.swa && c.swa->num_kv_heads % o.tp)
    r.warnings.push_back("tp does not divide the sliding-window KV heads: their ring is replicated");

  r.stages.resize(size_t(o.pp));
  for (int s = 0; s < o.pp; ++s) {
    r.stages[size_t(s)].first_layer = stage_first_layer(c.num_layers, o.pp, s);
    r.stages[size_t(s)].last_layer = stage_first_layer(c.num_layers, o.pp, s + 1) - 1;
  }
  // Weights per device: the bytes each rank reads at load (the stage's heaviest rank).
  const auto load = build_load_table(c, manifest, stored, o.tp, o.ep, o.pp);
  r.comm.resize(size_t(o.pp));
  r.load_bytes_min = UINT64_MAX;
  if (r.world_size <= 4096) r.load_bytes_per_rank.resize(size_t(r.world_size));
  for (int s = 0; s < o.pp; ++s) {
    auto& cm = r.comm[size_t(s)];
    cm.load_bytes_min = UINT64_MAX;
    // Ranks of a stage repeat their (tp_index, ep_index) pair with period lcm(tp, ep).
    const int64_t period = std::lcm(int64_t(o.tp), int64_t(o.ep));
    for (int64_t i = 0; i < std::min<int64_t>(stage_devices, period); ++i) {
      const auto rc = rank_position(o.tp, o.ep, o.pp, r.world_size, int(int64_t(s) * stage_devices + i));
      const uint64_t b = load.bytes(rc);
      cm.load_bytes_min = std::min(cm.load_bytes_min, b);
      cm.load_bytes_max = std::max(cm.load_bytes_max, b);
      r.load_bytes_total += b * uint64_t((stage_devices - i + period - 1) / period);
    }
    r.stages[size_t(s)].weight_bytes = cm.load_bytes_max;
    r.load_bytes_min = std::min(r.load_bytes_min, cm.load_bytes_min);
    r.load_bytes_max = std::max(r.load_bytes_max, cm.load_bytes_max);
  }
  for (size_t rank = 0; rank < r.load_bytes_per_rank.size(); ++rank)
    r.load_bytes_per_rank[rank] = load.bytes(rank_position(o.tp, o.ep, o.pp, r.world_size, int(rank)));
  const double gib_bytes = o.device_memory_gib * double(1ull << 30);
  for (int s = 0; s < o.pp; ++s) {
    auto& st = r.stages[size_t(s)];
    double cache = 0;
    for (int64_t l = st.first_layer; l <= st.last_layer; ++l) {
      const auto& f = fig[size_t(c.layer_attn[size_t(l)])];
      cache += f.token_bytes ? double(ctx) * double(f.token_bytes) : double(f.state_bytes) / f.tp_split;
    }
    st.cache_bytes = uint64_t(std::ceil(cache * double(o.batch)));
    st.activation_bytes = stage_activation_bytes(c, o, r.context, st.first_layer, st.last_layer);
    r.device_bytes_max = std::max(r.device_bytes_max, st.weight_bytes + st.cache_bytes + st.activation_bytes);
  }
  if (o.device_memory_gib > 0) r.fits = double(r.device_bytes_max) <= gib_bytes;

  // Decode traffic: weights touched by one token, plus its cache reads (KDA state read and written; DSA
  // scans every index key, then reads top-k latents; dense MLA reads every latent).
  double weights_b1 = 0, shared_weights = 0, expert_weights_batch = 0;
  const double k_over_e =
      c.moe.num_experts > 0 ? double(c.moe.experts_per_token) / double(c.moe.num_experts) : 0.0;
  const double distinct_share = 1.0 - std::pow(1.0 - k_over_e, double(o.batch));
  for (size_t i = 0; i < manifest.size(); ++i) {
    const auto& d = manifest[i];
    const double b = double(decl_bytes[i]);
    if (d.group == param_group::MTP || d.group == param_group::VISION) continue;
    if (d.group == param_group::ROUTED_EXPERTS) {
      weights_b1 += b * k_over_e;
      expert_weights_batch += b * distinct_share;
    } else if (d.group == param_group::EMBEDDING) {
      weights_b1 += b / double(c.vocab_size);
      shared_weights += b / double(c.vocab_size) * double(o.batch);
    } else {
      weights_b1 += b;
      shared_weights += b;
    }
  }
  double cache_read = 0;
  for (attn_kind k : kKinds) cache_read += double(c.num_layers_of(k)) * fig[size_t(k)].decode_read_bytes;
  r.bytes_per_token_batch1 = weights_b1 + cache_read;
  r.weight_bytes_per_token_batch = (shared_weights + expert_weights_batch) / double(o.batch);

  // Communication per token of a model replica, per rank (docs/plan.md "Communication"). Placement: rank =
  // (stage * dp + replica) * tp + tp_index, node = rank / gpus_per_node; a stage's EP groups are `ep`
  // consecutive ranks. Tokens are spread evenly over the tp ranks of their replica for the dispatch.
  const double bw_inter = o.link_gbps * 1e9 / 8, bw_intra = o.intra_node_gbps * 1e9 / 8;
  if (!(bw_inter > 0) || !(bw_intra > 0)) throw error("plan: --link-gbps and --intra-node-gbps must be > 0");
  const int64_t g = o.gpus_per_node;
  auto node = [g](int64_t rank) { return rank / g; };
  const double hv = double(c.hidden_size) * o.activation_bytes;
  r.dispatch_bytes_per_token = c.moe.expert_width(c.hidden_size) * o.activation_bytes;
  std::vector<double> hit(size_t(o.ep), 0.0);  // P(ep_index j holds >= 1 of a token's experts)
  for (int j = 0; j < o.ep && c.moe.num_experts > 0; ++j) {
    const int64_t E = c.moe.num_experts, k = c.moe.experts_per_token, n = experts_of(E, o.ep, j);
    double none = 1.0;  // C(E - n, k) / C(E, k) = prod_{i<k} (E - n - i) / (E - i)
    for (int64_t i = 0; i < k; ++i) none *= double(std::max<int64_t>(0, E - n - i)) / double(E - i);
    hit[size_t(j)] = 1.0 - none;
  }
  const int64_t sd = stage_devices;
  double remote_sum = 0, remote_inter_sum = 0;
  for (int s = 0; s < o.pp; ++s) {
    auto& cm = r.comm[size_t(s)];
    const auto& st = r.stages[size_t(s)];
    const int64_t first = int64_t(s) * sd;
    cm.layers = st.last_layer - st.first_layer + 1;
    for (int64_t l = st.first_layer; l <= st.last_layer; ++l) cm.moe_layers += c.is_moe(l) ? 1 : 0;
    for (int64_t d = 0; d < r.dp; ++d)
      cm.tp_inter_node = cm.tp_inter_node || node(first + d * o.tp) != node(first + d * o.tp + o.tp - 1);
    if (s + 1 < o.pp)
      for (int64_t i = 0; i < sd && !cm.pp_inter_node; ++i)
        cm.pp_inter_node = node(first + i) != node(first + i + sd);
    const double bw_tp = cm.tp_inter_node ? bw_inter : bw_intra;
    const double bw_pp = cm.pp_inter_node ? bw_inter : bw_intra;
    if (o.tp > 1) cm.allreduce_bytes = 2.0 * double(cm.layers) * 2.0 * (o.tp - 1) / o.tp * hv;
    if (o.tp > 1 && c.dsa) {
      // A query that splits the scan (indexer_scan_splits) has each rank send its k candidates of 8 bytes to
      // the tp - 1 others.
      int64_t dsa_layers = 0;
      for (int64_t l = st.first_layer; l <= st.last_layer; ++l)
        dsa_layers += c.layer_attn.at(size_t(l)) == formats::attn_kind::MLA ? 1 : 0;
      const double per_query = double(dsa_layers) * double(o.tp - 1) * double(c.dsa->index_topk) * 8.0;
      const double from = double(c.dsa->index_topk) * o.tp;  // positions before it do not split
      const double ctx_d = double(r.context);
      if (indexer_scan_splits(r.context, c.dsa->index_topk, o.tp)) {
        cm.indexer_decode_bytes = per_query;
        cm.indexer_prefill_bytes = per_query * (ctx_d - from) / ctx_d;
      }
    }
    // The last stage's first rank broadcasts a decoded token's logits (F32) to every rank (model.cpp
    // share_from_last_stage); a pipelined broadcast moves about one copy of them through each rank.
    if (r.world_size > 1 && s == o.pp - 1) cm.logits_bytes = double(c.vocab_size) * 4.0;
    const double bw_logits = node(0) != node(r.world_size - 1) ? bw_inter : bw_intra;
    if (s + 1 < o.pp) cm.pp_send_bytes = hv;
    // Expected distinct remote ranks per home rank, within and across nodes; EP groups whose start has
    // the same offset in its node have the same pattern.
    double a2a_seconds = 0, stage_remote = 0, stage_remote_inter = 0;
    std::map<int64_t, std::array<double, 3>> pattern;  // start % g -> {sum intra, sum inter, max seconds}
    for (int64_t grp = 0; grp < sd / o.ep; ++grp) {
      const int64_t start = first + grp * o.ep;
      auto [it, fresh] = pattern.try_emplace(start % g, std::array<double, 3>{0, 0, 0});
      if (fresh)
        for (int hh = 0; hh < o.ep; ++hh) {
          double in = 0, out = 0;
          for (int j = 0; j < o.ep; ++j)
            if (j != hh) (node(start + j) == node(start + hh) ? in : out) += hit[size_t(j)];
          it->second[0] += in;
          it->second[1] += out;
          it->second[2] = std::max(it->second[2], std::max(in / bw_intra, out / bw_inter));
        }
      stage_remote += it->second[0] + it->second[1];
      stage_remote_inter += it->second[1];
      a2a_seconds = std::max(a2a_seconds, it->second[2]);
    }
    remote_sum += stage_remote;
    remote_inter_sum += stage_remote_inter;
    if (o.ep > 1 && cm.moe_layers > 0) {
      // Per token: its dispatch (one vector to each remote rank) and combine (one back from each), done by
      // one of the tp ranks of its replica.
      const double per_remote = double(cm.moe_layers) * 2.0 * double(r.dispatch_bytes_per_token) / o.tp;
      cm.alltoall_bytes = per_remote * stage_remote / double(sd);
      cm.alltoall_bytes_inter = per_remote * stage_remote_inter / double(sd);
      a2a_seconds *= per_remote;
    } else {
      a2a_seconds = 0;
    }
    const double prefill_common = cm.allreduce_bytes / bw_tp + a2a_seconds + cm.pp_send_bytes / bw_pp;
    cm.prefill_seconds = prefill_common + cm.indexer_prefill_bytes / bw_tp;
    cm.decode_seconds = prefill_common + cm.indexer_decode_bytes / bw_tp + cm.logits_bytes / bw_logits;
    r.decode_comm_bytes_per_rank =
        std::max(r.decode_comm_bytes_per_rank, cm.allreduce_bytes + cm.alltoall_bytes + cm.pp_send_bytes +
                                                   cm.indexer_decode_bytes + cm.logits_bytes);
    r.prefill_comm_bytes_per_rank =
        std::max(r.prefill_comm_bytes_per_rank,
                 cm.allreduce_bytes + cm.alltoall_bytes + cm.pp_send_bytes + cm.indexer_prefill_bytes);
    r.decode_comm_seconds += cm.decode_seconds;
    r.prefill_comm_seconds = std::max(r.prefill_comm_seconds, cm.prefill_seconds);
  }
  r.expected_remote_ranks = remote_sum / double(r.world_size);
  r.expected_remote_ranks_inter = remote_inter_sum / double(r.world_size);
  return r;
}

nlohmann::json plan_to_json(const plan_result& r, const plan_options& o) {
  nlohmann::json j;
  j["total_params"] = r.total_params;
  j["active_params"] = int64_t(std::llround(r.active_params));
  j["disk_bytes"] = r.disk_bytes;
  j["num_shards"] = r.num_shards;
  j["mtp_params"] = r.mtp_params;
  j["vision_params"] = r.vision_params;
  j["vision_tower_params"] = r.vision_tower_params;
  j["vision_projector_params"] = r.vision_projector_params;
  j["checkpoint_bytes"] = r.checkpoint_bytes;
  j["num_tensors"] = r.num_tensors;
  j["shard_bytes_min"] = r.shard_bytes_min;
  j["shard_bytes_max"] = r.shard_bytes_max;
  j["largest_tensor_bytes"] = r.largest_tensor_bytes;
  auto& g = j["groups"];
  for (size_t i = 0; i < r.groups.size(); ++i) {
    const auto& s = r.groups[i];
    if (s.params == 0) continue;
    g[param_group_name(param_group(i))] = {{"params", s.params},
                                           {"active_params", int64_t(std::llround(s.active_params))},
                                           {"disk_bytes", s.disk_bytes}};
  }
  j["cache"] = {{"context", r.context},
                {"format", cache_format_name(o.cache)},
                {"kda_state_bytes_per_layer", r.kda_state_bytes_per_layer},
                {"latent_bytes_per_token_layer", r.latent_bytes_per_token_layer},
                {"bytes_per_sequence", r.cache_bytes_per_sequence}};
  if (r.swa_bytes_per_layer) j["cache"]["swa_bytes_per_layer"] = r.swa_bytes_per_layer;
  nlohmann::json stages = nlohmann::json::array();
  for (size_t i = 0; i < r.stages.size(); ++i) {
    const auto& s = r.stages[i];
    const auto& cm = r.comm[i];
    stages.push_back({{"first_layer", s.first_layer},
                      {"last_layer", s.last_layer},
                      {"weight_bytes_per_device", s.weight_bytes},
                      {"cache_bytes_per_device", s.cache_bytes},
                      {"activation_bytes_per_device", s.activation_bytes},
                      {"load_bytes_per_rank_min", cm.load_bytes_min},
                      {"load_bytes_per_rank_max", cm.load_bytes_max},
                      {"comm",
                       {{"layers", cm.layers},
                        {"moe_layers", cm.moe_layers},
                        {"allreduce_bytes_per_token", cm.allreduce_bytes},
                        {"alltoall_bytes_per_token", cm.alltoall_bytes},
                        {"alltoall_bytes_per_token_inter_node", cm.alltoall_bytes_inter},
                        {"pp_send_bytes_per_token", cm.pp_send_bytes},
                        {"indexer_bytes_per_decoded_token", cm.indexer_decode_bytes},
                        {"indexer_bytes_per_prefill_token", cm.indexer_prefill_bytes},
                        {"logits_bytes_per_decoded_token", cm.logits_bytes},
                        {"tp_inter_node", cm.tp_inter_node},
                        {"pp_inter_node", cm.pp_inter_node},
                        {"prefill_seconds_per_token", cm.prefill_seconds},
                        {"decode_seconds_per_token", cm.decode_seconds}}}});
  }
  j["layout"] = {{"tp", o.tp},
                 {"pp", o.pp},
                 {"ep", o.ep},
                 {"dp", r.dp},
                 {"nodes", o.nodes},
                 {"gpus_per_node", o.gpus_per_node},
                 {"world_size", r.world_size},
                 {"batch", o.batch},
                 {"stages", stages},
                 {"device_bytes_max", r.device_bytes_max},
                 {"device_memory_gib", o.device_memory_gib},
                 {"fits", r.fits},
                 {"warnings", r.warnings}};
  j["decode"] = {{"bytes_per_token_batch1", r.bytes_per_token_batch1},
                 {"weight_bytes_per_token_at_batch", r.weight_bytes_per_token_batch}};
  j["comm"] = {{"link_gbps", o.link_gbps},
               {"intra_node_gbps", o.intra_node_gbps},
               {"activation_bytes", o.activation_bytes},
               {"dispatch_bytes_per_token", r.dispatch_bytes_per_token},
               {"expected_remote_ranks", r.expected_remote_ranks},
               {"expected_remote_ranks_inter_node", r.expected_remote_ranks_inter},
               {"decode_bytes_per_token_per_rank", r.decode_comm_bytes_per_rank},
               {"prefill_bytes_per_token_per_rank", r.prefill_comm_bytes_per_rank},
               {"decode_seconds_per_token", r.decode_comm_seconds},
               {"prefill_seconds_per_token", r.prefill_comm_seconds}};
  j["load"] = {{"bytes_per_rank_min", r.load_bytes_min},
               {"bytes_per_rank_max", r.load_bytes_max},
               {"bytes_all_ranks", r.load_bytes_total}};
  if (!r.load_bytes_per_rank.empty()) j["load"]["bytes_per_rank"] = r.load_bytes_per_rank;
  return j;
}

std::string plan_to_text(const formats::model_config& c, const plan_result& r, const plan_options& o) {
  std::ostringstream out;
  char line[512];
  out << "model   " << c.source << " (" << c.model_type << "): " << c.num_layers
      << " layers = " << c.num_kda_layers() << " KDA + " << c.num_mla_layers()
      << (c.dsa ? " Gated DSA" : " MLA");
  if (c.swa) out << " + " << c.num_swa_layers() << " SWA (window " << c.swa->window << ")";
  if (c.moe.num_experts)
    out << ", " << c.moe.num_experts << " experts (" << c.moe.experts_per_token << " active + "
        << c.moe.num_shared_experts << " shared)";
  out << "\n\nparameters            total        active/token   on disk\n";
  for (size_t i = 0; i < r.groups.size(); ++i) {
    const auto& s = r.groups[i];
    if (s.params == 0) continue;
    std::snprintf(line, sizeof line, "  %-16s %12s %14s %12s\n", param_group_name(param_group(i)),
                  human_count(double(s.params)).c_str(), human_count(s.active_params).c_str(),
                  human_bytes(double(s.disk_bytes)).c_str());
    out << line;
    if (param_group(i) == param_group::VISION) {
      std::snprintf(line, sizeof line, "  %-16s %12s   tower + %s projector into the text width\n", "",
                    human_count(double(r.vision_tower_params)).c_str(),
                    human_count(double(r.vision_projector_params)).c_str());
      out << line;
    }
  }
  std::snprintf(line, sizeof line, "  %-16s %12s %14s %12s   (text model without MTP and vision)\n", "TOTAL",
                human_count(double(r.total_params)).c_str(), human_count(r.active_params).c_str(),
                human_bytes(double(r.disk_bytes)).c_str());
  out << line;
  std::snprintf(line, sizeof line, "  active share %.2f %%; whole checkpoint %s in %lld tensors\n",
                100.0 * r.active_params / double(std::max<int64_t>(1, r.total_params)),
                human_bytes(double(r.checkpoint_bytes)).c_str(), (long long)r.num_tensors);
  out << line;
  out << "\nshards  " << r.num_shards << " shards, " << human_bytes(double(r.shard_bytes_min)) << " .. "
      << human_bytes(double(r.shard_bytes_max)) << " each (largest tensor "
      << human_bytes(double(r.largest_tensor_bytes)) << ")\n";
  out << "\ncache   per sequence at " << r.context << " tokens (" << cache_format_name(o.cache)
      << "): " << gib(double(r.cache_bytes_per_sequence)) << "\n";
  if (c.kda)
    out << "        KDA state " << human_bytes(double(r.kda_state_bytes_per_layer)) << " per layer x "
        << c.num_kda_layers() << " layers, constant in context\n";
  if (c.mla)
    out << "        " << (c.dsa ? "DSA latent + index key " : "MLA latent ") << r.latent_bytes_per_token_layer
        << " B per token per layer x " << c.num_mla_layers() << " layers, linear in context\n";
  if (c.swa)
    out << "        SWA ring " << human_bytes(double(r.swa_bytes_per_layer)) << " per layer x "
        << c.num_swa_layers() << " layers, constant past the " << c.swa->window << "-token window\n";
  out << "\nlayout  tp " << o.tp << " x pp " << o.pp << " x dp " << r.dp << " = " << r.world_size
      << " devices (" << o.nodes << " nodes x " << o.gpus_per_node << "), ep " << o.ep << ", batch "
      << o.batch << ", "
      << (o.prefill_chunk > 0 ? "activations of a " + std::to_string(o.prefill_chunk) + "-token prefill chunk"
                              : std::string("activations not counted"))
      << "\n";
  for (size_t s = 0; s < r.stages.size(); ++s) {
    const auto& st = r.stages[s];
    std::snprintf(line, sizeof line,
                  "        stage %zu: layers %lld-%lld, per device %s weights + %s cache + %s activations\n",
                  s, (long long)st.first_layer, (long long)st.last_layer,
                  gib(double(st.weight_bytes)).c_str(), gib(double(st.cache_bytes)).c_str(),
                  gib(double(st.activation_bytes)).c_str());
    out << line;
  }
  out << "        heaviest device " << gib(double(r.device_bytes_max));
  if (o.device_memory_gib > 0)
    out << (r.fits ? " fits in " : " does NOT fit in ") << o.device_memory_gib << " GiB";
  out << "\n";
  for (const auto& w : r.warnings) out << "        warning: " << w << "\n";
  out << "\ndecode  bytes read per token at batch 1: " << human_bytes(r.bytes_per_token_batch1)
      << "; weight bytes per token at batch " << o.batch << ": "
      << human_bytes(r.weight_bytes_per_token_batch) << "\n";
  out << "\nload    bytes read from the checkpoint per rank: " << human_bytes(double(r.load_bytes_min))
      << " .. " << human_bytes(double(r.load_bytes_max)) << "; all " << r.world_size << " ranks together "
      << human_bytes(double(r.load_bytes_total)) << " (" << std::fixed << std::setprecision(2)
      << double(r.load_bytes_total) / double(std::max<uint64_t>(1, r.checkpoint_bytes))
      << " x the checkpoint)\n";
  out.unsetf(std::ios::floatfield);
  std::snprintf(
      line, sizeof line,
      "\ncomm    per token, per rank (BF16 activations; links %g Gb/s between nodes, %g Gb/s within)\n",
      o.link_gbps, o.intra_node_gbps);
  out << line;
  if (o.ep > 1 && c.moe.num_experts > 0) {
    std::snprintf(
        line, sizeof line,
        "        a token's %lld experts land on %.2f other ranks of its %d-rank EP group on average "
        "(%.2f on other nodes), %lld B each way\n",
        (long long)c.moe.experts_per_token, r.expected_remote_ranks, o.ep, r.expected_remote_ranks_inter,
        (long long)r.dispatch_bytes_per_token);
    out << line;
  }
  for (size_t s = 0; s < r.comm.size(); ++s) {
    const auto& cm = r.comm[s];
    std::snprintf(
        line, sizeof line,
        "        stage %zu: all-reduce %s%s, all-to-all %s (%s off node), send %s%s%s%s; %.1f us "
        "prefill, %.1f us decode\n",
        s, human_bytes(cm.allreduce_bytes).c_str(),
        o.tp > 1 ? (cm.tp_inter_node ? " across nodes" : " in node") : "",
        human_bytes(cm.alltoall_bytes).c_str(), human_bytes(cm.alltoall_bytes_inter).c_str(),
        human_bytes(cm.pp_send_bytes).c_str(),
        s + 1 < r.comm.size() ? (cm.pp_inter_node ? " across nodes" : " in node") : "",
        cm.indexer_decode_bytes > 0 ? (", indexer " + human_bytes(cm.indexer_decode_bytes) + " decode / " +
                                       human_bytes(cm.indexer_prefill_bytes) + " prefill")
                                          .c_str()
                                    : "",
        cm.logits_bytes > 0 ? (", logits " + human_bytes(cm.logits_bytes) + " (decode)").c_str() : "",
        cm.prefill_seconds * 1e6, cm.decode_seconds * 1e6);
    out << line;
  }
  std::snprintf(line, sizeof line,
                "        decoded token %s per rank, %.1f us through all stages; prefill token %s per rank, "
                "%.1f us at the slowest stage\n",
                human_bytes(r.decode_comm_bytes_per_rank).c_str(), r.decode_comm_seconds * 1e6,
                human_bytes(r.prefill_comm_bytes_per_rank).c_str(), r.prefill_comm_seconds * 1e6);
  out << line;
  return out.str();
}

}  // namespace moxi::model
