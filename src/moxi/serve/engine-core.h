// engine_core: one engine step = schedule, execute on the model runner, update (vLLM's EngineCore.step).
// The one step both the scheduler tests (over the fake model) and the HTTP server (over the executor) run;
// the loop that calls step() and hands outputs to clients lives with the server.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "moxi/serve/model-runner.h"
#include "moxi/serve/scheduler.h"

namespace moxi::serve {

// What one step did.
struct step_result {
  scheduler_output scheduled;           // the batch the scheduler made (empty when idle)
  std::vector<request_output> outputs;  // new tokens, finishes and aborts, as update() reports them
  // The runner threw: the step's requests (and the forks it sampled for) are cancelled, their memory
  // freed at the next step, and nothing of the step is committed; `error` is the runner's message.
  std::vector<request_id> failed;
  std::string error;
  bool idle() const { return scheduled.scheduled.empty() && scheduled.aborted.empty(); }
};

class engine_core {
 public:
  engine_core(scheduler& sched, model_runner& runner) : sched_(sched), runner_(runner) {}

  step_result step() {
    step_result r;
    r.scheduled = sched_.schedule();
    const scheduler_output& out = r.scheduled;
    if (r.idle()) return r;
    sampled_tokens sampled;
    try {
      if (!out.scheduled.empty()) sampled = runner_.execute(out);
    } catch (const std::exception& e) {
      r.error = e.what();
      for (const auto& s : out.scheduled) {
        r.failed.push_back(s.id);
        r.failed.insert(r.failed.end(), s.forks.begin(), s.forks.end());
      }
      for (request_id id : r.failed) sched_.cancel(id);
      // The requests cancelled before this step are still reported (and forgotten by the scheduler).
      scheduler_output aborts_only;
      aborts_only.aborted = out.aborted;
      r.outputs = sched_.update(aborts_only, {});
      return r;
    }
    r.outputs = sched_.update(out, sampled, runner_.ended());
    return r;
  }

 private:
  scheduler& sched_;
  model_runner& runner_;
};

}  // namespace moxi::serve
