// hybrid_memory: the per-sequence caches of a hybrid model behind one handle the scheduler sees (the
// contract of docs/design.md §2 "Memory"), with one cache manager per cache kind (cache-spec.h): PAGED
// layers (MLA / Gated DSA) get latent blocks from one block pool (paged_latent_cache), STATE layers (KDA,
// sliding-window attention's ring) get one constant-size state slot per sequence (state_slots), and the
// prefix cache reuses full blocks by a hash chain together with state snapshots taken at block boundaries.
// Composition per layer follows llama.cpp's llama_memory_hybrid; the block/prefix bookkeeping follows vLLM
// v1's KVCacheManager. A sliding-window ring is a state like KDA's: its prefix reuse restores the snapshot
// of the ring at the block boundary (exactly the keys and values of the window before it), preemption
// frees it with the sequence and recomputes, and fork copies it.
//
// The contract, in call order for one step (single-threaded: the engine loop owns this object):
//   scheduler  find_prefix(tokens) -> hit; can_admit(hit, n) ; admit(hit, n) -> seq     (a new request)
//              reserve(seq, n)                          (a running request; false = preempt someone)
//   executor   for each scheduled (seq, n tokens at positions [length(seq), length(seq)+n)):
//                STATE slot layers: read and update state(seq, layer) (KDA: kda(seq, layer)) in place
//                  (state after length tokens on entry, after length+n on return);
//                MLA slot layers: write_latents(seq, layer, length, n, ...) for the new rows, then
//                  read_latents(seq, layer, 0, length+n, ...) (or walk block_table) for attention.
//              Positions below length(seq) are never written: their blocks may be shared with other
//              sequences and the prefix cache (copy-on-write happens at fork, not lazily).
//   scheduler  commit(seq, all tokens of the sequence, n): the n tokens are now computed; blocks that
//              became full enter the prefix cache, and when the step ended on a block boundary the
//              sequence's state slot is snapshotted for that block.
//              free(seq) when the request finishes, is cancelled or is preempted (recompute).
// A prefix hit is valid only up to the last block boundary that has a state snapshot (never reuse a KDA or
// ring prefix without its exact state: llama.cpp K3 --cache-reuse, SGLang extra_buffer garbage state), and at
// most tokens.size()-1 tokens, so that the last token is always computed and yields logits (vLLM).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "moxi/memory/block-pool.h"
#include "moxi/memory/cache-spec.h"
#include "moxi/memory/latent-cache.h"
#include "moxi/memory/state-slots.h"

namespace moxi::memory {

using seq_id = int32_t;

struct memory_options {
  int32_t block_size = 16;         // tokens per block: the paging unit and the prefix-match granularity
  int32_t num_blocks = 0;          // latent cache capacity = num_blocks * block_size positions
  int32_t num_state_slots = 0;     // sequences alive at once (one state slot each)
  int32_t num_snapshot_slots = 0;  // states kept for prefix reuse; 0 = no prefix hits with state layers
  bool prefix_caching = true;
};

// The reusable prefix of a token sequence, from find_prefix; consumed by can_admit/admit in the same step.
struct prefix_hit {
  int64_t num_tokens = 0;        // a multiple of block_size
  std::vector<block_id> blocks;  // cached full blocks covering them
  std::vector<uint64_t> hashes;  // their chain hashes
  slot_id snapshot = -1;         // snapshot of the state slot after num_tokens tokens; -1 without one
};

struct memory_stats {
  int32_t num_blocks = 0, free_blocks = 0, cached_blocks = 0;
  int32_t num_state_slots = 0, free_state_slots = 0;
  int32_t num_snapshot_slots = 0, used_snapshot_slots = 0;
  int32_t live_sequences = 0;
  // Fraction of blocks held by sequences (vLLM's kv_cache_usage_perc): cached unreferenced ones are free.
  double block_usage() const { return num_blocks ? 1.0 - double(free_blocks) / num_blocks : 0.0; }
};

class hybrid_memory {
 public:
  hybrid_memory(const cache_spec& spec, const memory_options& options);

  const cache_spec& spec() const { return spec_; }
  const memory_options& options() const { return opts_; }
  int32_t block_size() const { return opts_.block_size; }
  // True for a model with state layers and prefix caching on: a snapshot can only be taken when a step ends
  // on a block boundary, so the scheduler ends prefill chunks there (vLLM's "align" mamba cache mode).
  bool wants_block_aligned_steps() const;

  // ---- scheduler side ----
  // The longest reusable prefix of `tokens` (see the header comment for what "reusable" means).
  prefix_hit find_prefix(std::span<const token_id> tokens) const;
  // Whether a new sequence reusing `hit` and then holding n_new more positions fits now.
  bool can_admit(const prefix_hit& hit, int64_t n_new) const;
  // Creates it: a state slot (zeroed, or the hit's snapshot), the hit's blocks shared, blocks for n_new
  // more positions. Requires can_admit(hit, n_new) with no pool change in between.
  seq_id admit(const prefix_hit& hit, int64_t n_new);
  // Grows the block table to cover length + n_new positions; false (and no change) when blocks run out.
  bool reserve(seq_id s, int64_t n_new);
  // n more tokens are computed; tokens holds the sequence's tokens, at least length + n of them.
  void commit(seq_id s, std::span<const token_id> tokens, int64_t n);
  // A copy sharing every full block and owning a copy of the partial last block and of the state slot
  // (parallel sampling, n > 1); nullopt when no slot or block is free.
  std::optional<seq_id> fork(seq_id s);
  // Returns the sequence's blocks (tail first, so a sequence's last blocks are evicted first, as in
  // vLLM) and its state slot.
  void free(seq_id s);

  // ---- executor side ----
  int64_t length(seq_id s) const { return seq(s).length; }  // computed tokens = next position
  // A number no other sequence has had or will have (ids are reused, incarnations are not): a sequence's
  // rows below length() never change while its incarnation stays, so a copy of them stays valid.
  uint64_t incarnation(seq_id s) const { return seq(s).incarnation; }
  int64_t capacity(seq_id s) const { return int64_t(seq(s).blocks.size()) * opts_.block_size; }
  std::span<const block_id> block_table(seq_id s) const { return seq(s).blocks; }
  // `layer` is a cache slot index (decoder layer, or num_layers + k for MTP layer k).
  // The state of a STATE layer (cache_spec::state_floats of its kind), and a KDA layer's split in parts.
  float* state(seq_id s, int64_t layer);
  kda_state_view kda(seq_id s, int64_t layer);
  // Rows f32 [n, latent_width] and [n, index_width] (index may be nullptr without DSA) at positions
  // [pos, pos+n); pos >= length(s) and pos+n <= capacity(s).
  void write_latents(seq_id s, int64_t layer, int64_t pos, int64_t n, const float* latent,
                     const float* index);
  // Positions [begin, end) gathered into contiguous f32 [end-begin, width] buffers.
  void read_latents(seq_id s, int64_t layer, int64_t begin, int64_t end, float* latent, float* index) const;
  // Slot holding the sequence's states (for bit-exact comparisons in tests).
  const memory::state_slots& state_slots() const { return states_; }
  slot_id state_slot(seq_id s) const { return seq(s).slot; }

  memory_stats stats() const;
  const block_pool& blocks() const { return pool_; }
  // Aborts when holder counts disagree with the live sequences' block tables or the pools' own books.
  void check_invariants() const;

  // The chain hash of a block: xxHash3-64 of its tokens seeded with the parent block's hash.
  static uint64_t block_hash(uint64_t parent, std::span<const token_id> tokens);
  static constexpr uint64_t ROOT_HASH = 0x6d6f78692d726f6fULL;

 private:
  struct sequence {
    bool live = false;
    uint64_t incarnation = 0;
    slot_id slot = -1;
    int64_t length = 0;
    std::vector<block_id> blocks;
    std::vector<uint64_t> hashes;  // chain hashes of the full blocks, blocks[0..hashes.size())
  };
  const sequence& seq(seq_id s) const;
  sequence& seq(seq_id s);
  seq_id new_sequence(slot_id slot);
  int64_t blocks_for(int64_t positions) const {
    return (positions + opts_.block_size - 1) / opts_.block_size;
  }
  int64_t paged_index(int64_t layer) const;
  int64_t state_index(int64_t layer) const;
  void take_snapshot(block_id b, slot_id from);
  void drop_snapshot(block_id b);

  cache_spec spec_;
  memory_options opts_;
  std::vector<int64_t> kind_index_;  // cache slot -> index among the layers of its cache_kind
  // PAGED manager: the block pool and the latent rows in it.
  block_pool pool_;
  paged_latent_cache latents_;
  // STATE manager: one slot per live sequence, and the prefix cache's snapshots of slots.
  memory::state_slots states_;
  memory::state_slots snapshots_;
  std::vector<slot_id> block_snapshot_;   // per block: its snapshot slot or -1
  std::vector<block_id> snapshot_block_;  // per snapshot slot: its block or -1
  std::vector<uint64_t> snapshot_used_;   // per snapshot slot: tick of last take/restore (LRU)
  uint64_t tick_ = 0;
  std::vector<sequence> seqs_;
  std::vector<seq_id> free_seq_ids_;
  uint64_t incarnations_ = 0;
};

}  // namespace moxi::memory
