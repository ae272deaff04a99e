// Issue 14: a model's chat template is code from the checkpoint. A runaway loop ran 7.3 s before the step
// limit stopped it, where docs/chat-templates.md promises about 2 s; now the step count is weighted by cost
// and a CPU-time limit (2 s by default) backs it. Through the library (the CPU time each variant took is
// printed, not asserted) and through `moxi chat`, bounded in memory and CPU.
#include <gtest/gtest.h>
#include <time.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/temp-dir.h"
#include "moxi/base/error.h"
#include "moxi/formats/chat-template.h"
#include "security/loading-util.h"

namespace moxi {
namespace {

using json = nlohmann::json;

const std::vector<std::string>& runaways() {
  static const std::vector<std::string> t = {
      // The probe's shape: nested loops.
      "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}"
      "{% endfor %}{% endfor %}{% endfor %}",
      "{% for m in messages %}{% for a in range(100000) %}{% for b in range(100000) %}{{ loop.index0 }}"
      "{% endfor %}{% endfor %}{% endfor %}",
      // Work the step count cannot see: searching an 8 MB string in every iteration.
      "{% set s = 'x' * 8000000 %}{% for a in range(100000) %}{% for b in range(100000) %}"
      "{{ s.count('y') }}{% endfor %}{% endfor %}",
  };
  return t;
}

double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

TEST(loading_chat_template_test, RunawayTemplatesEndInALimit) {
  const json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
  for (const auto& tpl : runaways()) {
    SCOPED_TRACE(tpl);
    const double t0 = thread_cpu_seconds();
    try {
      formats::chat_template(tpl, "hostile.jinja").render(msgs);
      ADD_FAILURE() << "rendered a runaway template";
    } catch (const moxi::error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("hostile.jinja:1: rendering took over"), std::string::npos) << msg;
      EXPECT_NE(msg.find("a runaway template?"), std::string::npos) << msg;
      std::printf("runaway template stopped after %.2f s of CPU: %s\n", thread_cpu_seconds() - t0,
                  msg.c_str());
    }
  }
}

class loading_chat_template_cli_test : public moxi::testing::temp_dir_test {};

TEST_F(loading_chat_template_cli_test, ChatStopsARunawayTemplate) {
  const std::string model = moxi::testing::tiny_model_copy(dir_, "m");
  moxi::testing::edit_json(model + "/tokenizer_config.json",
                           [](json& t) { t["chat_template"] = runaways()[1]; });
  const auto r = moxi::testing::run_moxi_bounded("chat --model " + model, dir_, "hello\n");
  moxi::testing::expect_clean_error(r, {model + "/tokenizer_config.json", "rendering took over", "runaway"});
}

}  // namespace
}  // namespace moxi
