// io_error: turn an errno from a failed system call into a moxi::error naming the path.
#include "moxi/base/error.h"

#include <cstring>

namespace moxi {

error io_error(const std::string& op, const std::string& path, int errno_value) {
  return error(op + " '" + path + "': " + std::strerror(errno_value));
}

}  // namespace moxi
