// The leader's broadcasts to the other ranks of a serving group, and a follower's engine loop (group.h).
// Messages: a header broadcast {kind, payload bytes}, then the payload broadcast (when not empty). The
// payload is a flat little-endian byte string written and read field by field below; every rank runs the
// same binary, so no versioning is needed.
#include "moxi/serve/group.h"

#include <cstdio>
#include <cstring>
#include <type_traits>

#include "moxi/base/error.h"
#include "moxi/base/splitmix.h"
#include "moxi/memory/cache-spec.h"
#include "moxi/serve/engine-core.h"

namespace moxi::serve {
namespace {

enum kind : int64_t { ENGINE = 1, EVENTS = 2, HEARTBEAT = 3, SAMPLES = 4, STOP = 5 };

class writer {
 public:
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  template <class T>
  void put_vector(const std::vector<T>& v) {
    put(uint64_t(v.size()));
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    bytes.insert(bytes.end(), p, p + v.size() * sizeof(T));
  }
  std::vector<uint8_t> bytes;
};

class reader {
 public:
  explicit reader(const std::vector<uint8_t>& b) : b_(b) {}
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    take(&v, sizeof(T));
    return v;
  }
  template <class T>
  std::vector<T> get_vector() {
    const uint64_t n = get<uint64_t>();
    if (n > (b_.size() - at_) / sizeof(T)) throw error("serving group: a truncated message");
    std::vector<T> v(static_cast<size_t>(n));
    take(v.data(), v.size() * sizeof(T));
    return v;
  }
  bool done() const { return at_ == b_.size(); }

 private:
  void take(void* out, size_t n) {
    if (n > b_.size() - at_) throw error("serving group: a truncated message");
    std::memcpy(out, b_.data() + at_, n);
    at_ += n;
  }
  const std::vector<uint8_t>& b_;
  size_t at_ = 0;
};

// The running hash with one more value folded in (a step of SplitMix64 from their combination).
uint64_t mix(uint64_t h, uint64_t v) {
  uint64_t state = h ^ (v + (h << 6) + (h >> 2));
  return splitmix64(state);
}

// A follower's runner: the forward of the step on this rank's slice, then the leader's samples.
class follower_runner final : public model_runner {
 public:
  follower_runner(executor& exec, const group_channel& channel) : exec_(exec), channel_(channel) {}
  sampled_tokens execute(const scheduler_output& step) override {
    try {
      exec_.forward(step);
      group_samples s = channel_.receive_samples();
      if (s.schedule_hash != schedule_hash(step))
        channel_.fail("rank " + std::to_string(channel_.rank()) +
                      ": this rank's schedule differs from the leader's (the replicas diverged)");
      ended_ = std::move(s.ended);
      return std::move(s.sampled);
    } catch (const std::exception& e) {
      channel_.fail("rank " + std::to_string(channel_.rank()) + ": step failed: " + e.what());
    }
  }
  const std::set<request_id>& ended() const override { return ended_; }

 private:
  executor& exec_;
  const group_channel& channel_;
  std::set<request_id> ended_;
};

}  // namespace

uint64_t schedule_hash(const scheduler_output& out) {
  uint64_t h = 0x6d6f78692d677270ULL;
  for (const auto& s : out.scheduled) {
    h = mix(h, s.id);
    h = mix(h, uint64_t(s.seq));
    h = mix(h, uint64_t(s.start));
    h = mix(h, uint64_t(s.n_tokens()));
    h = mix(h, s.sample);
    for (request_id f : s.forks) h = mix(h, f);
  }
  h = mix(h, 0xffff);
  for (request_id id : out.preempted) h = mix(h, id);
  h = mix(h, 0xfffe);
  for (request_id id : out.aborted) h = mix(h, id);
  return h;
}

group_channel::group_channel(std::shared_ptr<const model::process_group> world,
                             std::function<void(const std::string&)> fatal)
    : world_(std::move(world)), fatal_(std::move(fatal)) {
  MOXI_ASSERT(world_, "serving group: no world group");
}

void group_channel::fail(const std::string& why) const {
  std::fprintf(stderr, "moxi serve: %s; ending the serving group\n", why.c_str());
  std::fflush(stderr);
  if (fatal_) fatal_(why);
  std::_Exit(75);
}

void group_channel::send(int64_t kind, const std::vector<uint8_t>& payload) const {
  MOXI_ASSERT(leader(), "serving group: only rank 0 sends");
  int64_t header[2] = {kind, int64_t(payload.size())};
  world_->broadcast(header, sizeof header, 0);
  if (!payload.empty()) world_->broadcast(const_cast<uint8_t*>(payload.data()), int64_t(payload.size()), 0);
  // A heartbeat is answered by every rank: a broadcast alone may complete without a stopped receiver.
  if (kind == HEARTBEAT) {
    float one = 1;
    world_->all_reduce_sum(&one, 1);
  }
}

int64_t group_channel::receive(std::vector<uint8_t>& payload) const {
  int64_t header[2] = {0, 0};
  world_->broadcast(header, sizeof header, 0);
  if (header[1] < 0) fail("a malformed message from the leader");
  payload.assign(size_t(header[1]), 0);
  if (!payload.empty()) world_->broadcast(payload.data(), int64_t(payload.size()), 0);
  if (header[0] == HEARTBEAT) {
    float one = 1;
    world_->all_reduce_sum(&one, 1);
  }
  return header[0];
}

void group_channel::send_engine(const group_engine& e) const {
  // Drafting runs in the leader's executor only: the other ranks could not follow its verify steps.
  if (e.scheduler.num_speculative_tokens > 0)
    throw error("serving group: speculative decoding (--draft-tokens) runs in one process only");
  writer w;
  w.put(e.memory);
  w.put(e.scheduler);
  w.put(e.mode);
  send(ENGINE, w.bytes);
}

std::vector<uint8_t> group_channel::receive_kind(int64_t kind, const char* what) const {
  std::vector<uint8_t> b;
  if (receive(b) != kind) fail(std::string("expected ") + what + " from the leader");
  return b;
}

group_engine group_channel::receive_engine() const {
  const auto b = receive_kind(ENGINE, "the engine settings");
  reader r(b);
  group_engine e;
  e.memory = r.get<memory::memory_options>();
  e.scheduler = r.get<scheduler_config>();
  e.mode = r.get<executor_mode>();
  return e;
}

void group_channel::send_events(const group_events& ev) const {
  if (ev.empty()) return send(HEARTBEAT, {});
  writer w;
  w.put(uint64_t(ev.adds.size()));
  for (const auto& a : ev.adds) {
    w.put(a.id);
    w.put_vector(a.forks);
    w.put_vector(a.params.prompt);
    w.put(a.params.max_tokens);
    w.put_vector(a.params.stop_tokens);
    w.put_vector(a.params.cache_key);
    w.put_vector(a.media ? *a.media : std::vector<float>{});
  }
  w.put_vector(ev.cancels);
  send(EVENTS, w.bytes);
}

bool group_channel::receive_events(group_events& ev) const {
  ev = {};
  std::vector<uint8_t> b;
  const int64_t k = receive(b);
  if (k == STOP) return false;
  if (k == HEARTBEAT) return true;
  if (k != EVENTS) fail("expected a step's events from the leader");
  reader r(b);
  const auto n = r.get<uint64_t>();
  for (uint64_t i = 0; i < n; ++i) {
    group_add a;
    a.id = r.get<request_id>();
    a.forks = r.get_vector<request_id>();
    a.params.prompt = r.get_vector<token_id>();
    a.params.max_tokens = r.get<int64_t>();
    a.params.stop_tokens = r.get_vector<token_id>();
    a.params.cache_key = r.get_vector<token_id>();
    auto media = r.get_vector<float>();
    if (!media.empty()) a.media = std::make_shared<const std::vector<float>>(std::move(media));
    ev.adds.push_back(std::move(a));
  }
  ev.cancels = r.get_vector<request_id>();
  if (!r.done()) fail("a malformed message from the leader");
  return true;
}

void group_channel::send_samples(const group_samples& s) const {
  writer w;
  w.put(s.schedule_hash);
  w.put(uint64_t(s.sampled.size()));
  for (const auto& [id, ts] : s.sampled) w.put(id), w.put_vector(ts);
  w.put_vector(std::vector<request_id>(s.ended.begin(), s.ended.end()));
  send(SAMPLES, w.bytes);
}

group_samples group_channel::receive_samples() const {
  const auto b = receive_kind(SAMPLES, "a step's samples");
  reader r(b);
  group_samples s;
  s.schedule_hash = r.get<uint64_t>();
  const auto n = r.get<uint64_t>();
  for (uint64_t i = 0; i < n; ++i) {
    const auto id = r.get<request_id>();
    s.sampled[id] = r.get_vector<token_id>();
  }
  for (request_id id : r.get_vector<request_id>()) s.ended.insert(id);
  if (!r.done()) fail("a malformed message from the leader");
  return s;
}

void group_channel::send_stop() const { send(STOP, {}); }

sampled_tokens group_leader_runner::execute(const scheduler_output& step) {
  try {
    group_samples s;
    s.sampled = exec_.execute(step);
    s.schedule_hash = schedule_hash(step);
    s.ended = exec_.ended();
    channel_.send_samples(s);
    return std::move(s.sampled);
  } catch (const std::exception& e) {
    channel_.fail(std::string("rank 0: step failed: ") + e.what());
  }
}

void run_follower(const model::model& m, const group_channel& channel) {
  const group_engine settings = channel.receive_engine();
  memory::hybrid_memory memory(cache_spec_of(m), settings.memory);
  scheduler sched(memory, settings.scheduler);
  executor exec(m, memory, settings.mode);
  follower_runner runner(exec, channel);
  engine_core engine(sched, runner);
  group_events ev;
  for (;;) {
    if (!channel.receive_events(ev)) break;
    try {
      for (auto& a : ev.adds) {
        for (size_t k = 0; k <= a.forks.size(); ++k)
          exec.add(k == 0 ? a.id : a.forks[k - 1], runtime::sampling_params{}, a.params.prompt, -1, std::nullopt,
                   a.media);
        sched.add_request(a.id, std::move(a.params), a.forks);
      }
    } catch (const std::exception& e) {
      channel.fail("rank " + std::to_string(channel.rank()) + ": a request the leader admitted failed here: " +
                   e.what());
    }
    for (request_id id : ev.cancels) sched.cancel(id);
    if (!sched.has_unfinished()) continue;
    const step_result r = engine.step();
    for (const auto& out : r.outputs)
      if (out.finished != finish_reason::NONE) exec.remove(out.id);
  }
}

}  // namespace moxi::serve
