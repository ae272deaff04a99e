// fake_model: a deterministic stand-in for the model that uses the hybrid memory exactly as the real
// executor must (KDA state updated in place, latent rows written for new positions, all rows read back for
// attention), so that any paging, prefix-cache, snapshot or scheduling bug changes the tokens it returns.
// Its next token is a function of the whole token history; reference_next() computes the same function
// from scratch with plain vectors and no cache: the independent oracle of the serve tests. The k-th fork
// (1-based) of a request gets reference_next(prompt) + k (mod vocab) as its first token.
#pragma once

#include <cstdint>
#include <span>

#include "moxi/memory/hybrid-memory.h"
#include "moxi/serve/model-runner.h"

namespace moxi::serve {

class fake_model final : public model_runner {
 public:
  fake_model(memory::hybrid_memory& memory, int32_t vocab_size);

  std::map<request_id, token_id> execute(const scheduler_output& step) override;
  // The token after `history`, computed token by token from zero state without any cache.
  token_id reference_next(std::span<const token_id> history) const;
  int64_t tokens_computed() const { return tokens_computed_; }

  static constexpr int kHidden = 8;  // width of the fake hidden state

 private:
  memory::hybrid_memory& memory_;
  int32_t vocab_;
  int64_t tokens_computed_ = 0;
};

}  // namespace moxi::serve
