// The model a command uses when --model is not given: $MOXI_MODEL if set, else the bundled moxi-small
// (models/moxi-small in the source tree this binary was built from).
#pragma once

#include <string>

namespace moxi::cli {

std::string default_model_dir();

// `given` when not empty, else default_model_dir(); throws moxi::error with a hint when the directory has
// no config.json.
std::string resolve_model_dir(const std::string& given);

}  // namespace moxi::cli
