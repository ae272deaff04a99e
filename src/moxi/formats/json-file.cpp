// See json-file.h.
#include "moxi/formats/json-file.h"

#include <fstream>
#include <sstream>

namespace moxi::formats {

std::string read_text_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error("cannot open " + what + " " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw error("cannot read " + what + " " + path);
  return ss.str();
}

}  // namespace moxi::formats
