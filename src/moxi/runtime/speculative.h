// The acceptance rule of speculative decoding (docs/speculative.md): a drafted token d, drawn from the draft
// distribution q, is kept with probability min(1, p(d) / q(d)) where p is the target model's distribution at
// that position; when it is not, the emitted token is drawn from the residual max(0, p - q), renormalized.
// Every emitted token is then distributed exactly as p (Leviathan et al. 2023, "Fast Inference from
// Transformers via Speculative Decoding", §2.3; Chen et al. 2023, "Accelerating Large Language Model Decoding
// with Speculative Sampling", Algorithm 2). With one-hot p and q (greedy) it keeps d exactly when d is p's
// argmax and otherwise emits that argmax.
#pragma once

#include <span>

#include "moxi/formats/tokenizer.h"

namespace moxi::runtime {

struct draft_verdict {
  token_id token = -1;    // the token to emit: d, or a draw from the residual
  bool accepted = false;  // token == d, kept by the rule
};

// p, q: fp64 [vocab] distributions (each summing to 1); d: the draft, q(d) > 0. u_accept and u_resample are
// independent uniform draws in [0, 1).
draft_verdict accept_draft(std::span<const double> p, std::span<const double> q, token_id d, double u_accept,
                           double u_resample);

}  // namespace moxi::runtime
