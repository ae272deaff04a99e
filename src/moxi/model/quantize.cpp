// Checkpoint quantization (see quantize.h). The manifest of the input's config decides which tensors are
// routed experts, so the same declaration drives init, quantize and the planner.
#include "moxi/model/quantize.h"

#include <map>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/base/mx.h"
#include "moxi/base/progress.h"
#include "moxi/formats/checkpoint.h"
#include "moxi/formats/convert.h"
#include "moxi/model/config.h"
#include "moxi/model/manifest.h"

namespace moxi::model {
namespace {

const char* act_name(formats::act_format a) {
  switch (a) {
    case formats::act_format::BF16:
      return "bf16";
    case formats::act_format::MXFP8_E4M3:
      return "mxfp8_e4m3";
    case formats::act_format::MXFP8_E5M2:
      return "mxfp8_e5m2";
  }
  return "bf16";
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

quantize_report quantize_checkpoint(const std::string& in_dir, const std::string& out_dir,
                                    const quantize_options& o) {
  const auto config = load_model_config(in_dir);
  if (config.quant)
    throw error(in_dir +
                ": already quantized (config.json has a quantization_config); quantize reads a "
                "BF16/F32 checkpoint");
  if (config.moe.num_experts == 0) throw error(in_dir + ": the model has no routed experts to quantize");
  const auto in = formats::checkpoint::open(in_dir);
  const auto names = in.names();
  for (const auto& n : names)
    if (ends_with(n, "_blocks") || ends_with(n, "_scales"))
      throw error(in_dir + ": tensor '" + n +
                  "' is already MXFP4 (a *_blocks/*_scales tensor); refusing to "
                  "quantize twice");

  nlohmann::json out_json = config.json;
  out_json["quantization_config"] = {{"quant_method", "mxfp4"},
                                     {"block_size", 32},
                                     {"activation_format", act_name(o.activations)},
                                     {"quantized_modules", "routed_experts"}};
  const auto out_config = parse_model_config(out_json, out_dir + "/config.json");
  const auto manifest = build_manifest(config);
  std::map<std::string, const tensor_decl*, std::less<>> decl_by_name;
  for (const auto& d : manifest) decl_by_name[d.name] = &d;

  // Order: manifest order for known tensors, then the rest by name, so shards hold whole layers.
  std::vector<std::string> order;
  std::map<std::string, bool, std::less<>> placed;
  for (const auto& d : manifest)
    if (in.contains(d.name)) order.push_back(d.name), placed[d.name] = true;
  for (const auto& n : names)
    if (!placed.count(n)) order.push_back(n);

  auto is_expert = [&](const std::string& n) {
    auto it = decl_by_name.find(n);
    return it != decl_by_name.end() && it->second->routed_expert;
  };
  std::vector<formats::tensor_spec> specs;
  uint64_t total_in = 0;
  for (const auto& n : order) {
    const auto& e = in.entry(n);
    total_in += e.end - e.begin;
    if (!is_expert(n)) {
      specs.push_back({n, e.type, e.shape});
      continue;
    }
    const tensor_decl& d = *decl_by_name.at(n);
    if (e.shape != d.shape)
      throw error(in_dir + ": tensor '" + n + "' has shape " + nlohmann::json(e.shape).dump() +
                  ", config expects " + nlohmann::json(d.shape).dump());
    if (!formats::convertible_to_f32(e.type))
      throw error(in_dir + ": tensor '" + n + "' is " + std::string(dtype_name(e.type)) +
                  ", not a float type");
    const int64_t rows = d.shape[0], blocks = d.shape[1] / 32;
    specs.push_back({mx_blocks_name(n), dtype::U8, {rows, blocks, 16}});
    specs.push_back({mx_scales_name(n), dtype::U8, {rows, blocks}});
  }
  if (specs.size() == order.size())
    throw error(in_dir + ": no routed expert tensors found (names do not match the config's architecture)");
  const int shards = o.num_shards > 0 ? o.num_shards : int(in.shard_paths().size());
  formats::checkpoint_writer writer(out_dir, specs, shards,
                                    {{"format", "pt"}, {"producer", "moxi quantize"}});
  writer.add_file("config.json", out_config.json.dump(2) + "\n");

  quantize_report rep;
  progress bar("quantize", total_in, /*bytes=*/true);
  std::vector<float> values;
  std::vector<unsigned char> blocks, scales;
  for (const auto& n : order) {
    const tensor_view v = in.view(n);
    rep.bytes_in += v.nbytes;
    if (is_expert(n)) {
      values.resize(size_t(v.numel()));
      formats::to_f32(v.type, v.data, values.size(), values.data());
      blocks.resize(values.size() / 2);
      scales.resize(values.size() / 32);
      mx::quantize_mxfp4(values.data(), values.size(), blocks.data(), scales.data());
      writer.write(mx_blocks_name(n), blocks.data(), blocks.size());
      writer.write(mx_scales_name(n), scales.data(), scales.size());
      rep.bytes_out += blocks.size() + scales.size();
      ++rep.quantized_tensors;
    } else {
      writer.write(n, v.data, v.nbytes);
      rep.bytes_out += v.nbytes;
      ++rep.copied_tensors;
    }
    if (o.show_progress) bar.advance(v.nbytes, n);
  }
  // Tokenizer and other small side files travel with the checkpoint.
  for (const char* side :
       {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "tiktoken.model"}) {
    const std::string p = in.dir() + "/" + side;
    if (FILE* f = std::fopen(p.c_str(), "rb")) {
      std::string contents;
      char buf[1 << 16];
      size_t got;
      while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) contents.append(buf, got);
      std::fclose(f);
      writer.add_file(side, contents);
    }
  }
  writer.commit();
  if (o.show_progress) bar.finish();
  return rep;
}

}  // namespace moxi::model
