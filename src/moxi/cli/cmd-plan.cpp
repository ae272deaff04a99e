// `moxi plan --config FILE [...]`: parameters, bytes on disk, shards, per-device memory and decode traffic
// for a parallel layout, computed from the config alone (see model/plan.h). A layout that does not fit
// --device-memory exits 1 and names the stage whose devices are short, by how much; without layout flags
// it says which cluster it assumed.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "moxi/base/error.h"
#include "moxi/cli/command.h"
#include "moxi/cli/options.h"
#include "moxi/formats/model-config.h"
#include "moxi/model/config.h"
#include "moxi/model/k8s.h"
#include "moxi/model/plan.h"

namespace moxi::cli {
namespace {

// `--emit k8s`: the manifests to --out DIR (lws.yaml, statefulset.yaml, alerts.yaml) or stdout.
template <class Args>
void emit_k8s(Args& a, const formats::model_config& config, const model::plan_result& plan) {
  namespace fs = std::filesystem;
  if (!plan.fits)
    throw error("the layout does NOT fit " + std::to_string(a.opt.device_memory_gib) +
                " GiB per device (moxi plan without --emit says by how much); no manifests written");
  auto k = a.k8s;
  if (k.model_path.empty()) {
    fs::path src(a.config);
    std::string leaf = fs::is_directory(src) ? fs::absolute(src).lexically_normal().filename().string()
                                             : src.stem().string();
    if (leaf.empty()) leaf = "model";
    k.model_path = "/models/" + leaf;
  }
  const auto m = model::make_k8s_manifests(config, plan, a.opt, k);
  if (a.out.empty()) {
    std::cout << (a.variant == "lws" ? m.lws : m.statefulset) << m.alerts.substr(m.alerts.find("---"));
    return;
  }
  const fs::path dir(a.out);
  const std::pair<const char*, const std::string*> files[] = {
      {"lws.yaml", &m.lws}, {"statefulset.yaml", &m.statefulset}, {"alerts.yaml", &m.alerts}};
  for (const auto& [file, text] : files)
    if (fs::exists(dir / file) && !a.force)
      throw usage_error("--out: " + (dir / file).string() + " exists (--force replaces it)");
  fs::create_directories(dir);
  for (const auto& [file, text] : files) {
    const fs::path tmp = dir / (std::string(".") + file + ".tmp");
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f << *text;
      if (!f.flush()) throw error("cannot write " + tmp.string());
    }
    fs::rename(tmp, dir / file);
    std::cerr << "moxi plan: wrote " << (dir / file).string() << "\n";
  }
}

void setup_plan(CLI::App& root) {
  auto* cmd =
      root.add_subcommand("plan", "Plan parameters, disk, shards, memory per device and decode traffic");
  struct args {
    std::string config;
    model::plan_options opt;
    std::string cache = "bf16";
    bool json = false;
    std::string emit, out, variant = "lws";
    bool force = false;
    model::k8s_options k8s;
    args() { k8s.model_path.clear(); }  // derived from --config unless given
  };
  auto a = std::make_shared<args>();
  cmd->add_option("--config", a->config, "config.json (or a checkpoint directory)")->required();
  const auto layout = std::make_shared<std::vector<CLI::Option*>>();
  layout->push_back(cmd->add_option("--tp", a->opt.tp, "tensor-parallel size")
                        ->check(integer_in(1, 1 << 20))
                        ->capture_default_str());
  layout->push_back(cmd->add_option("--pp", a->opt.pp, "pipeline-parallel stages")
                        ->check(integer_in(1, 1 << 20))
                        ->capture_default_str());
  layout->push_back(
      cmd->add_option("--ep", a->opt.ep, "expert-parallel size (devices sharing one stage's routed experts)")
          ->check(integer_in(1, 1 << 20))
          ->capture_default_str());
  layout->push_back(cmd->add_option("--nodes", a->opt.nodes, "machines")
                        ->check(integer_in(1, 1 << 20))
                        ->capture_default_str());
  layout->push_back(cmd->add_option("--gpus-per-node", a->opt.gpus_per_node, "devices per machine")
                        ->check(integer_in(1, 1 << 20))
                        ->capture_default_str());
  cmd->add_option("--device-memory", a->opt.device_memory_gib, "memory per device in GiB (0: no fit check)")
      ->check(number_in(0, 1 << 30))
      ->capture_default_str();
  cmd->add_option("--context", a->opt.context, "tokens per sequence (default: max_position_embeddings)")
      ->check(integer_in(1, int64_t(1) << 40));
  cmd->add_option("--batch", a->opt.batch, "concurrent sequences per model replica")
      ->check(integer_in(1, int64_t(1) << 30))
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", a->opt.prefill_chunk,
                  "tokens of one forward whose activations a device holds (serve --max-batch-tokens; 0: "
                  "not counted)")
      ->check(integer_in(0, int64_t(1) << 30))
      ->capture_default_str();
  cmd->add_option("--shards", a->opt.num_shards, "checkpoint shards")
      ->check(integer_in(1, 100000))
      ->capture_default_str();
  cmd->add_option("--cache-format", a->cache,
                  "cache element format: bf16, fp8 (GPU serving) or f32 (moxi's CPU engine)")
      ->check(CLI::IsMember({"bf16", "fp8", "f32"}))
      ->capture_default_str();
  cmd->add_option("--link-gbps", a->opt.link_gbps,
                  "bandwidth between nodes per device and direction, Gb/s (RDMA NIC)")
      ->check(number_in(1e-3, 1e9))
      ->capture_default_str();
  cmd->add_option("--intra-node-gbps", a->opt.intra_node_gbps,
                  "bandwidth within a node per device and direction, Gb/s (NVLink 4: 450 GB/s = 3600)")
      ->check(number_in(1e-3, 1e9))
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "print JSON instead of a table");
  cmd->add_option("--emit", a->emit, "write deployment manifests instead of the plan: k8s")
      ->check(CLI::IsMember({"k8s"}));
  cmd->add_option("--out", a->out,
                  "with --emit k8s: a directory for lws.yaml, statefulset.yaml and alerts.yaml (default: one "
                  "variant and the alerts on stdout)");
  cmd->add_flag("--force", a->force, "with --out: replace existing manifest files");
  cmd->add_option("--k8s-variant", a->variant, "with --emit k8s on stdout: lws or statefulset")
      ->check(CLI::IsMember({"lws", "statefulset"}))
      ->capture_default_str();
  cmd->add_option("--name", a->k8s.name, "with --emit k8s: name of the objects")->capture_default_str();
  cmd->add_option("--namespace", a->k8s.ns, "with --emit k8s: namespace")->capture_default_str();
  cmd->add_option("--image", a->k8s.image, "with --emit k8s: container image (moxi, Open MPI, sshd, ssh)")
      ->capture_default_str();
  cmd->add_option("--replicas", a->k8s.replicas, "with --emit k8s: serving groups (each a whole MPI world)")
      ->check(integer_in(0, 100000))
      ->capture_default_str();
  cmd->add_option("--model-path", a->k8s.model_path,
                  "with --emit k8s: the model directory in the pod, under /models (default: /models/ and the "
                  "config's directory or file name)");
  cmd->add_option("--model-pvc", a->k8s.model_pvc, "with --emit k8s: PersistentVolumeClaim holding the weights");
  cmd->add_option("--model-host-path", a->k8s.model_host_path,
                  "with --emit k8s: or a directory holding the weights on every node");
  cmd->add_option("--ssh-secret", a->k8s.ssh_secret,
                  "with --emit k8s: Secret with the group's SSH keys for mpirun (default NAME-ssh)");
  cmd->add_option("--gpu-resource", a->k8s.gpu_resource, "with --emit k8s: extended resource of one device")
      ->capture_default_str();
  cmd->add_option("--port", a->k8s.port, "with --emit k8s: the API port")
      ->check(integer_in(1, 65535))
      ->capture_default_str();
  cmd->add_option("--pod-memory", a->k8s.pod_memory_gib,
                  "with --emit k8s: host memory per pod in GiB (default: the pod's ranks' load bytes + 16)")
      ->check(number_in(0, 1 << 30));
  set_examples(cmd,
               {"moxi plan --config configs/seed-2.8t.json",
                "moxi plan --config configs/seed-2.8t.json --tp 8 --ep 64 --nodes 8 --device-memory 141 "
                "--context 1048576 --json",
                "moxi plan --config configs/seed-2.8t.json --tp 8 --ep 64 --nodes 8 --device-memory 141 "
                "--context 131072 --emit k8s --model-pvc seed-weights --image registry.example/moxi:1 --out k8s/"},
               "docs/plan.md");
  cmd->callback([a, layout] {
    a->opt.cache = model::parse_cache_format(a->cache);
    const auto config = model::load_model_config(a->config);
    const auto plan = model::make_plan(config, a->opt);
    const auto& o = a->opt;
    if (!a->emit.empty()) return emit_k8s(*a, config, plan);
    // The JSON carries the layout it assumed; the table says so on stderr.
    if (!a->json &&
        std::none_of(layout->begin(), layout->end(), [](const CLI::Option* x) { return x->count() > 0; }))
      std::fprintf(
          stderr,
          "moxi plan: no layout flags given; assumed one node of %d devices (tp %d, pp %d, ep %d)%s\n",
          o.gpus_per_node, o.tp, o.pp, o.ep,
          o.device_memory_gib > 0 ? "" : " and no memory limit (--device-memory GiB checks the fit)");
    if (a->json)
      std::cout << model::plan_to_json(plan, o).dump(2) << "\n";
    else
      std::cout << model::plan_to_text(config, plan, o);
    if (plan.fits) return;
    std::cout.flush();
    const double limit = o.device_memory_gib * double(uint64_t(1) << 30);
    std::string shortfall;
    for (size_t s = 0; s < plan.stages.size(); ++s) {
      const auto& st = plan.stages[s];
      const double need = double(st.weight_bytes + st.cache_bytes);
      if (need <= limit) continue;
      char line[200];
      std::snprintf(line, sizeof line,
                    "%sstage %zu (layers %lld-%lld) needs %.2f GiB per device, %.2f GiB over",
                    shortfall.empty() ? "" : "; ", s, (long long)st.first_layer, (long long)st.last_layer,
                    need / double(uint64_t(1) << 30), (need - limit) / double(uint64_t(1) << 30));
      shortfall += line;
    }
    if (shortfall.empty())
      shortfall = "the heaviest device needs " +
                  std::to_string(double(plan.device_bytes_max) / double(uint64_t(1) << 30)) + " GiB";
    char head[120];
    std::snprintf(head, sizeof head, "the layout does NOT fit %g GiB per device: ", o.device_memory_gib);
    throw error(head + shortfall +
                " (more --tp/--pp/--ep or devices, a shorter --context or a smaller --batch)");
  });
}

MOXI_COMMAND("plan", setup_plan);

}  // namespace
}  // namespace moxi::cli
