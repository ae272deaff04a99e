// hybrid_memory: sequences over the block pool, the latent cache and the state slots; the prefix cache's
// hash chain and its state snapshots.
#include "moxi/memory/hybrid-memory.h"

#include <xxhash.h>

#include <algorithm>

#include "moxi/base/error.h"

namespace moxi::memory {

namespace {

memory_options checked(const memory_options& o) {
  if (o.block_size <= 0 || o.num_blocks < 0 || o.num_state_slots < 0 || o.num_snapshot_slots < 0)
    throw error("memory options: block_size must be > 0 and the pool sizes >= 0");
  return o;
}

// Floats of each held state layer, in slot order.
std::vector<int64_t> state_layer_floats(const cache_spec& spec) {
  std::vector<int64_t> f;
  for (size_t l = 0; l < spec.layers.size(); ++l)
    if (spec.holds(l) && cache_kind_of(spec.layers[l]) == cache_kind::STATE) f.push_back(spec.state_floats(spec.layers[l]));
  return f;
}

int64_t held_paged_layers(const cache_spec& spec) {
  int64_t n = 0;
  for (size_t l = 0; l < spec.layers.size(); ++l) n += spec.holds(l) && cache_kind_of(spec.layers[l]) == cache_kind::PAGED;
  return n;
}

}  // namespace

hybrid_memory::hybrid_memory(const cache_spec& spec, const memory_options& options)
    : spec_(spec),
      opts_(checked(options)),
      pool_(opts_.num_blocks, opts_.block_size),
      latents_(held_paged_layers(spec), opts_.num_blocks, opts_.block_size, spec.latent_width,
               spec.index_width),
      states_(opts_.num_state_slots, state_layer_floats(spec)),
      snapshots_(spec.num_state_layers() > 0 ? opts_.num_snapshot_slots : 0, state_layer_floats(spec)),
      block_snapshot_(size_t(opts_.num_blocks), -1),
      snapshot_block_(size_t(snapshots_.num_slots()), -1),
      snapshot_used_(size_t(snapshots_.num_slots()), 0) {
  MOXI_ASSERT(spec_.held.empty() || spec_.held.size() == spec_.layers.size(), "cache spec: held per slot");
  int64_t n_state = 0, n_paged = 0;
  for (size_t l = 0; l < spec_.layers.size(); ++l)
    kind_index_.push_back(!spec_.holds(l)                                         ? -1
                          : cache_kind_of(spec_.layers[l]) == cache_kind::STATE ? n_state++
                                                                                 : n_paged++);
  // An evicted block takes its snapshot with it: a snapshot is only meaningful with its prefix's blocks.
  pool_.set_evict_listener([this](block_id b) { drop_snapshot(b); });
}

bool hybrid_memory::wants_block_aligned_steps() const {
  return opts_.prefix_caching && spec_.num_state_layers() > 0 && snapshots_.num_slots() > 0;
}

uint64_t hybrid_memory::block_hash(uint64_t parent, std::span<const token_id> tokens) {
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), parent);
}

const hybrid_memory::sequence& hybrid_memory::seq(seq_id s) const {
  MOXI_ASSERT(s >= 0 && size_t(s) < seqs_.size() && seqs_[size_t(s)].live, "unknown sequence id");
  return seqs_[size_t(s)];
}

hybrid_memory::sequence& hybrid_memory::seq(seq_id s) {
  return const_cast<sequence&>(std::as_const(*this).seq(s));
}

int64_t hybrid_memory::paged_index(int64_t layer) const {
  MOXI_ASSERT(layer >= 0 && size_t(layer) < spec_.layers.size() &&
                  cache_kind_of(spec_.layers[size_t(layer)]) == cache_kind::PAGED,
              "latent access to a layer that does not cache rows (not MLA)");
  MOXI_ASSERT(spec_.holds(size_t(layer)), "latent access to a layer this process does not hold");
  return kind_index_[size_t(layer)];
}

int64_t hybrid_memory::state_index(int64_t layer) const {
  MOXI_ASSERT(layer >= 0 && size_t(layer) < spec_.layers.size() &&
                  cache_kind_of(spec_.layers[size_t(layer)]) == cache_kind::STATE,
              "state access to a layer that does not keep a state (not KDA or sliding-window)");
  MOXI_ASSERT(spec_.holds(size_t(layer)), "state access to a layer this process does not hold");
  return kind_index_[size_t(layer)];
}

seq_id hybrid_memory::new_sequence(slot_id slot) {
  seq_id id;
  if (!free_seq_ids_.empty()) {
    id = free_seq_ids_.back();
    free_seq_ids_.pop_back();
  } else {
    id = seq_id(seqs_.size());
    seqs_.emplace_back();
  }
  sequence& s = seqs_[size_t(id)];
  s = sequence{};
  s.live = true;
  s.incarnation = ++incarnations_;
  s.slot = slot;
  return id;
}

prefix_hit hybrid_memory::find_prefix(std::span<const token_id> tokens) const {
  prefix_hit hit;
  if (!opts_.prefix_caching || tokens.empty()) return hit;
  const bool need_snapshot = spec_.num_state_layers() > 0;
  if (need_snapshot && snapshots_.num_slots() == 0) return hit;
  const int64_t B = opts_.block_size;
  const int64_t max_blocks = (int64_t(tokens.size()) - 1) / B;  // leave the last token to compute
  uint64_t parent = ROOT_HASH;
  size_t usable = 0;  // blocks up to the last one that ends in a usable state
  for (int64_t j = 0; j < max_blocks; ++j) {
    const auto block_tokens = tokens.subspan(size_t(j * B), size_t(B));
    const uint64_t h = block_hash(parent, block_tokens);
    const auto b = pool_.lookup(h, parent, block_tokens);
    if (!b) break;
    hit.blocks.push_back(*b);
    hit.hashes.push_back(h);
    if (!need_snapshot || block_snapshot_[size_t(*b)] >= 0) usable = hit.blocks.size();
    parent = h;
  }
  hit.blocks.resize(usable);
  hit.hashes.resize(usable);
  hit.num_tokens = int64_t(usable) * B;
  if (need_snapshot && usable > 0) hit.snapshot = block_snapshot_[size_t(hit.blocks.back())];
  return hit;
}

bool hybrid_memory::can_admit(const prefix_hit& hit, int64_t n_new) const {
  if (states_.num_free() == 0) return false;
  // Hit blocks nobody holds sit in the free queue; taking them shrinks what allocation can use.
  int64_t pinned_free = 0;
  for (block_id b : hit.blocks) pinned_free += pool_.ref_count(b) == 0;
  const int64_t need = blocks_for(hit.num_tokens + n_new) - int64_t(hit.blocks.size());
  return need <= pool_.num_free() - pinned_free;
}

seq_id hybrid_memory::admit(const prefix_hit& hit, int64_t n_new) {
  MOXI_ASSERT(can_admit(hit, n_new), "admit without room; call can_admit first");
  const seq_id id = new_sequence(*states_.acquire());
  sequence& s = seq(id);
  // Retain the hit first: its blocks (and so its snapshot) must not be evicted by the allocation below.
  for (block_id b : hit.blocks) pool_.retain(b);
  s.blocks = hit.blocks;
  s.hashes = hit.hashes;
  s.length = hit.num_tokens;
  if (hit.snapshot >= 0) {
    MOXI_ASSERT(snapshot_block_[size_t(hit.snapshot)] == hit.blocks.back(), "stale prefix hit");
    states_.copy_from(snapshots_, hit.snapshot, s.slot);
    snapshot_used_[size_t(hit.snapshot)] = ++tick_;
  } else {
    MOXI_ASSERT(hit.num_tokens == 0 || spec_.num_state_layers() == 0,
                "state prefix reuse without a snapshot");
  }
  const bool ok = reserve(id, n_new);
  MOXI_ASSERT(ok);
  return id;
}

bool hybrid_memory::reserve(seq_id id, int64_t n_new) {
  MOXI_ASSERT(n_new >= 0);
  sequence& s = seq(id);
  const int64_t need = blocks_for(s.length + n_new) - int64_t(s.blocks.size());
  if (need <= 0) return true;
  auto got = pool_.allocate(int32_t(need));
  if (!got) return false;
  s.blocks.insert(s.blocks.end(), got->begin(), got->end());
  return true;
}

void hybrid_memory::commit(seq_id id, std::span<const token_id> tokens, int64_t n) {
  sequence& s = seq(id);
  MOXI_ASSERT(n >= 0 && s.length + n <= capacity(id), "commit beyond the reserved positions");
  MOXI_ASSERT(int64_t(tokens.size()) >= s.length + n, "commit needs the tokens of every computed position");
  s.length += n;
  const int64_t B = opts_.block_size;
  const int64_t full = s.length / B;
  // Extend the hash chain over blocks that just became full; the chain is kept even with caching off so
  // that turning it on later needs no recomputation.
  for (int64_t j = int64_t(s.hashes.size()); j < full; ++j) {
    const uint64_t parent = j ? s.hashes[size_t(j - 1)] : ROOT_HASH;
    const auto block_tokens = tokens.subspan(size_t(j * B), size_t(B));
    const uint64_t h = block_hash(parent, block_tokens);
    s.hashes.push_back(h);
    if (opts_.prefix_caching) pool_.insert_cached(s.blocks[size_t(j)], h, parent, block_tokens);
  }
  // The state exists only at step ends, so only a step that ends on a boundary can be snapshotted.
  if (n > 0 && s.length % B == 0 && wants_block_aligned_steps()) {
    const int64_t j = full - 1;
    const uint64_t parent = j ? s.hashes[size_t(j - 1)] : ROOT_HASH;
    // The cached block for this prefix may be another sequence's (it computed the same block first).
    const auto cached = pool_.lookup(s.hashes[size_t(j)], parent, tokens.subspan(size_t(j * B), size_t(B)));
    if (cached && block_snapshot_[size_t(*cached)] < 0) take_snapshot(*cached, s.slot);
  }
}

void hybrid_memory::take_snapshot(block_id b, slot_id from) {
  auto slot = snapshots_.acquire();
  if (!slot) {
    // Evict the least recently taken or restored snapshot; its blocks stay cached (still useful as part
    // of a longer hit that ends at a later snapshot).
    slot_id lru = 0;
    for (slot_id i = 1; i < snapshots_.num_slots(); ++i)
      if (snapshot_used_[size_t(i)] < snapshot_used_[size_t(lru)]) lru = i;
    drop_snapshot(snapshot_block_[size_t(lru)]);
    slot = snapshots_.acquire();
  }
  MOXI_ASSERT(slot.has_value());
  snapshots_.copy_from(states_, from, *slot);
  block_snapshot_[size_t(b)] = *slot;
  snapshot_block_[size_t(*slot)] = b;
  snapshot_used_[size_t(*slot)] = ++tick_;
}

void hybrid_memory::drop_snapshot(block_id b) {
  const slot_id s = block_snapshot_[size_t(b)];
  if (s < 0) return;
  block_snapshot_[size_t(b)] = -1;
  snapshot_block_[size_t(s)] = -1;
  snapshots_.release(s);
}

std::optional<seq_id> hybrid_memory::fork(seq_id id) {
  const int64_t B = opts_.block_size;
  const int64_t length = seq(id).length;
  const bool partial = length % B != 0;
  if (states_.num_free() == 0 || (partial && pool_.num_free() == 0)) return std::nullopt;
  const seq_id child = new_sequence(*states_.acquire());
  sequence& p = seq(id);
  sequence& c = seq(child);
  states_.copy(p.slot, c.slot);
  const int64_t full = length / B;
  for (int64_t j = 0; j < full; ++j) {
    pool_.retain(p.blocks[size_t(j)]);
    c.blocks.push_back(p.blocks[size_t(j)]);
  }
  if (partial) {
    const block_id copy = pool_.allocate(1)->front();
    latents_.copy_block(p.blocks[size_t(full)], copy);
    c.blocks.push_back(copy);
  }
  c.hashes = p.hashes;
  c.length = length;
  return child;
}

void hybrid_memory::free(seq_id id) {
  sequence& s = seq(id);
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) pool_.release(*it);
  states_.release(s.slot);
  s = sequence{};
  free_seq_ids_.push_back(id);
}

float* hybrid_memory::state(seq_id s, int64_t layer) {
  return states_.layer(seq(s).slot, state_index(layer));
}

kda_state_view hybrid_memory::kda(seq_id s, int64_t layer) {
  MOXI_ASSERT(spec_.layers.at(size_t(layer)) == formats::attn_kind::KDA,
              "KDA access to a layer that is not KDA");
  return kda_view(state(s, layer), spec_.conv_floats());
}

void hybrid_memory::write_latents(seq_id id, int64_t layer, int64_t pos, int64_t n, const float* latent,
                                  const float* index) {
  const sequence& s = seq(id);
  MOXI_ASSERT(pos >= s.length, "rows below length() are immutable (shared with the prefix cache)");
  MOXI_ASSERT(pos + n <= capacity(id), "write beyond the reserved positions");
  latents_.scatter(paged_index(layer), s.blocks, pos, n, latent, index);
}

void hybrid_memory::read_latents(seq_id id, int64_t layer, int64_t begin, int64_t end, float* latent,
                                 float* index) const {
  latents_.gather(paged_index(layer), seq(id).blocks, begin, end, latent, index);
}

memory_stats hybrid_memory::stats() const {
  memory_stats st;
  st.num_blocks = pool_.num_blocks();
  st.free_blocks = pool_.num_free();
  st.cached_blocks = pool_.num_cached();
  st.num_state_slots = states_.num_slots();
  st.free_state_slots = states_.num_free();
  st.num_snapshot_slots = snapshots_.num_slots();
  st.used_snapshot_slots = snapshots_.num_slots() - snapshots_.num_free();
  st.live_sequences = int32_t(seqs_.size() - free_seq_ids_.size());
  return st;
}

void hybrid_memory::check_invariants() const {
  pool_.check_invariants();
  std::vector<int32_t> holders(size_t(pool_.num_blocks()), 0);
  std::vector<int32_t> slot_owner(size_t(states_.num_slots()), 0);
  for (const auto& s : seqs_) {
    if (!s.live) continue;
    for (block_id b : s.blocks) ++holders[size_t(b)];
    ++slot_owner[size_t(s.slot)];
    MOXI_ASSERT(s.length <= int64_t(s.blocks.size()) * opts_.block_size);
    MOXI_ASSERT(int64_t(s.hashes.size()) == s.length / opts_.block_size);
  }
  for (block_id b = 0; b < pool_.num_blocks(); ++b)
    MOXI_ASSERT(holders[size_t(b)] == pool_.ref_count(b), "block holder count != live block tables");
  for (slot_id i = 0; i < states_.num_slots(); ++i)
    MOXI_ASSERT(slot_owner[size_t(i)] == int32_t(states_.in_use(i)), "state slot ownership out of sync");
  for (slot_id i = 0; i < snapshots_.num_slots(); ++i) {
    const block_id b = snapshot_block_[size_t(i)];
    MOXI_ASSERT((b >= 0) == snapshots_.in_use(i));
    if (b >= 0)
      MOXI_ASSERT(block_snapshot_[size_t(b)] == i && pool_.is_cached(b), "snapshot of an uncached block");
  }
}

}  // namespace moxi::memory
