// model_runner: what the engine step needs from a model: run one scheduled batch through the hybrid
// memory (the contract in memory/hybrid-memory.h) and return the next token of every request whose step
// reached its last known token. The real executor (executor.h) and the fake model of the tests implement it.
#pragma once

#include <map>
#include <set>

#include "moxi/serve/scheduler.h"

namespace moxi::serve {

class model_runner {
 public:
  virtual ~model_runner() = default;
  // Feeds each scheduled request's tokens at positions [start, start + n) and leaves the caches holding
  // them; must not commit (the scheduler does, in update()). With speculative decoding a decode step may
  // also verify drafts at its lookahead positions: it returns the kept drafts and then the sampled token,
  // and leaves the caches holding the kept ones too.
  virtual sampled_tokens execute(const scheduler_output& step) = 0;
  // Requests whose token from the last execute() ends them although it is no stop token: a constrained
  // output (response_format) that is complete. The scheduler finishes them with STOP.
  virtual const std::set<request_id>& ended() const {
    static const std::set<request_id> none;
    return none;
  }
};

}  // namespace moxi::serve
