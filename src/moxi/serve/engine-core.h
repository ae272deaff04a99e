// engine_core: one engine step = schedule, execute on the model runner, update (vLLM's EngineCore.step).
// The loop that calls step() and hands outputs to clients lives with the HTTP server.
#pragma once

#include <vector>

#include "moxi/serve/model-runner.h"
#include "moxi/serve/scheduler.h"

namespace moxi::serve {

class engine_core {
 public:
  engine_core(scheduler& sched, model_runner& runner) : sched_(sched), runner_(runner) {}

  // One step; returns what happened to each request (new tokens, finishes, aborts). Empty when idle.
  std::vector<request_output> step() {
    const scheduler_output out = sched_.schedule();
    if (out.scheduled.empty() && out.aborted.empty()) return {};
    return sched_.update(out,
                         out.scheduled.empty() ? std::map<request_id, token_id>{} : runner_.execute(out));
  }

 private:
  scheduler& sched_;
  model_runner& runner_;
};

}  // namespace moxi::serve
