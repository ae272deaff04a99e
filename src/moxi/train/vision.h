// The trainer's MoonViT encoder and Kimi-VL projector in libtorch (docs/vision.md "Encoder"), on the
// parameters of train_model under the engine's tensor names. Written from the published description with
// libtorch's own ops (F::interpolate bicubic for the position table, F::layer_norm, gelu tanh/erf), not from
// the engine's code, so the golden test (tests/train/golden-test.cpp) compares two independent forms.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>

#include "moxi/formats/model-config.h"
#include "moxi/model/vision.h"

namespace moxi::train {

// Every image's features in order, f32 [sum of placeholder tokens, text hidden], differentiable in the
// vision and projector parameters. p(name) returns the parameter of that checkpoint name.
// Intermediates go to dump under the engine's names ("vision.blocks.{i}.out", ...).
torch::Tensor vision_forward(const formats::model_config& config,
                             const std::function<const torch::Tensor&(const std::string&)>& p,
                             std::span<const model::image_input> images,
                             std::map<std::string, torch::Tensor>* dump = nullptr);

}  // namespace moxi::train
