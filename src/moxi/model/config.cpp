#include "moxi/model/config.h"

#include "moxi/formats/config-reader.h"
#include "moxi/model/arch/registry.h"

namespace moxi::model {

formats::model_config parse_model_config(const nlohmann::json& doc, const std::string& source) {
  return formats::parse_model_config(doc, source, [](formats::config_reader& r, formats::model_config& c) {
    const arch::architecture* a = arch::find_architecture(c.model_type);
    if (!a)
      r.fail("model_type",
             "unknown model type '" + c.model_type + "' (supported: " + arch::registered_model_types() + ")");
    a->parse_config(r, c);
  });
}

formats::model_config load_model_config(const std::string& path) {
  std::string file;
  nlohmann::json doc = formats::read_model_config_json(path, &file);
  return parse_model_config(doc, file);
}

}  // namespace moxi::model
