// Model output is untrusted text: before it reaches a terminal, invalid UTF-8 becomes U+FFFD and control
// characters (ESC and the rest of C0 except newline and tab, DEL, C1) become visible escapes, so a model
// cannot move the cursor, retitle the window or inject input through escape sequences.
#pragma once

#include <string>
#include <string_view>

namespace moxi::cli {

std::string terminal_safe(std::string_view bytes);

}  // namespace moxi::cli
