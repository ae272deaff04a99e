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
#include <sstream>

#include "moxi/base/error.h"
#include "moxi/formats/shard-plan.h"
#include "moxi/model/layers/attention.h"

namespace moxi::model {
namespace {

using formats::attn_kind;

bool is_replicated(param_group g) {
  return g == param_group::ROUTER || g == param_group::LAYER_NORM || g == param_group::NORM;
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

}  // namespace

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
    if (c.num_layers_of(k) > 0)
      fig[size_t(k)] = attention_kind(k).plan(c, o.cache == cache_format::FP8, r.context, o.tp);
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

  const double expert_share =
      c.moe.num_experts > 0 ? double((c.moe.num_experts + o.ep - 1) / o.ep) / double(c.moe.num_experts) : 0.0;
  r.stages.resize(size_t(o.pp));
  for (int s = 0; s < o.pp; ++s) {
    r.stages[size_t(s)].first_layer = int64_t(s) * c.num_layers / o.pp;
    r.stages[size_t(s)].last_layer = int64_t(s + 1) * c.num_layers / o.pp - 1;
  }
  auto stage_of_layer = [&](int64_t layer) {
    if (layer < 0 || layer >= c.num_layers) return -1;
    for (int s = 0; s < o.pp; ++s)
      if (layer <= r.stages[size_t(s)].last_layer) return s;
    return o.pp - 1;
  };
  std::vector<double> stage_weights(size_t(o.pp), 0.0);
  for (size_t i = 0; i < manifest.size(); ++i) {
    const auto& d = manifest[i];
    int s = stage_of_layer(d.layer);
    if (s < 0) s = (d.group == param_group::EMBEDDING || d.group == param_group::VISION) ? 0 : o.pp - 1;
    double b = double(decl_bytes[i]);
    if (d.group == param_group::ROUTED_EXPERTS || (d.group == param_group::MTP && d.routed_expert))
      b *= expert_share;
    else if (!is_replicated(d.group))
      b /= o.tp;
    stage_weights[size_t(s)] += b;
  }
  const double gib_bytes = o.device_memory_gib * double(1ull << 30);
  for (int s = 0; s < o.pp; ++s) {
    auto& st = r.stages[size_t(s)];
    st.weight_bytes = uint64_t(std::ceil(stage_weights[size_t(s)]));
    double cache = 0;
    for (int64_t l = st.first_layer; l <= st.last_layer; ++l) {
      const auto& f = fig[size_t(c.layer_attn[size_t(l)])];
      cache += f.token_bytes ? double(ctx) * double(f.token_bytes) : double(f.state_bytes) / f.tp_split;
    }
    st.cache_bytes = uint64_t(std::ceil(cache * double(o.batch)));
    r.device_bytes_max = std::max(r.device_bytes_max, st.weight_bytes + st.cache_bytes);
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
                {"format", o.cache == cache_format::BF16 ? "bf16" : "fp8"},
                {"kda_state_bytes_per_layer", r.kda_state_bytes_per_layer},
                {"latent_bytes_per_token_layer", r.latent_bytes_per_token_layer},
                {"bytes_per_sequence", r.cache_bytes_per_sequence}};
  if (r.swa_bytes_per_layer) j["cache"]["swa_bytes_per_layer"] = r.swa_bytes_per_layer;
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : r.stages)
    stages.push_back({{"first_layer", s.first_layer},
                      {"last_layer", s.last_layer},
                      {"weight_bytes_per_device", s.weight_bytes},
                      {"cache_bytes_per_device", s.cache_bytes}});
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
  return j;
}

std::string plan_to_text(const formats::model_config& c, const plan_result& r, const plan_options& o) {
  std::ostringstream out;
  char line[256];
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
  out << "\ncache   per sequence at " << r.context << " tokens ("
      << (o.cache == cache_format::BF16 ? "bf16" : "fp8") << "): " << gib(double(r.cache_bytes_per_sequence))
      << "\n";
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
      << o.batch << "\n";
  for (size_t s = 0; s < r.stages.size(); ++s) {
    const auto& st = r.stages[s];
    std::snprintf(line, sizeof line,
                  "        stage %zu: layers %lld-%lld, per device %s weights + %s cache\n", s,
                  (long long)st.first_layer, (long long)st.last_layer, gib(double(st.weight_bytes)).c_str(),
                  gib(double(st.cache_bytes)).c_str());
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
  return out.str();
}

}  // namespace moxi::model
