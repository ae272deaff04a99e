// Data parallelism over c10d's ProcessGroupGloo (see dist.h).
#include "moxi/train/dist.h"

#if MOXI_HAVE_GLOO
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "moxi/base/error.h"

namespace moxi::train {

namespace fs = std::filesystem;

namespace {

// A c10d or Gloo exception as one readable line (c10::Error's what() may carry a backtrace).
[[maybe_unused]] std::string reason(const std::exception& e) {
  std::string s;
  if (const auto* c = dynamic_cast<const c10::Error*>(&e))
    s = c->what_without_backtrace();
  else
    s = e.what();
  if (const auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  return s;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int parse_int(const std::string& text, const std::string& what) {
  size_t used = 0;
  long v = 0;
  try {
    v = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || v < 0 || v > 1'000'000)
    throw error(what + ": '" + text + "' is not a non-negative integer");
  return int(v);
}

struct store_address {
  bool file = false;
  std::string path;  // file
  std::string host;  // tcp
  uint16_t port = 0;
};

store_address parse_store(const std::string& s) {
  store_address a;
  if (s.rfind("file:", 0) == 0 && s.size() > 5) {
    a.file = true;
    a.path = fs::absolute(s.substr(5)).lexically_normal().string();
    return a;
  }
  if (s.rfind("tcp:", 0) == 0) {
    const auto colon = s.rfind(':');
    if (colon > 4) {
      a.host = s.substr(4, colon - 4);
      const std::string port = s.substr(colon + 1);
      size_t used = 0;
      long p = 0;
      try {
        p = std::stol(port, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (!a.host.empty() && used == port.size() && used > 0 && p > 0 && p < 65536) {
        a.port = uint16_t(p);
        return a;
      }
    }
  }
  throw error("distributed store '" + s + "': expected file:PATH or tcp:HOST:PORT");
}

[[maybe_unused]] bool loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// A rank or world size: the flag when given (>= 0), else MOXI's variable, else mpirun's; -1 when none. `from`
// names where it came from, for messages.
int layout_number(int flag, const char* flag_name, const char* moxi_var, const char* mpirun_var,
                  std::string& from) {
  if (flag >= 0) {
    from = flag_name;
    return flag;
  }
  for (const char* var : {moxi_var, mpirun_var})
    if (const char* v = env(var)) {
      from = var == mpirun_var ? std::string(var) + " (mpirun)" : std::string(var);
      return parse_int(v, var);
    }
  return -1;
}

}  // namespace

dist_layout resolve_dist_layout(int flag_rank, int flag_world, const std::string& flag_store,
                                double flag_timeout_s) {
  dist_layout l;
  std::string rank_from, world_from;
  int rank = layout_number(flag_rank, "--dist-rank", "MOXI_DIST_RANK", "OMPI_COMM_WORLD_RANK", rank_from);
  const int world =
      layout_number(flag_world, "--dist-world", "MOXI_DIST_WORLD", "OMPI_COMM_WORLD_SIZE", world_from);
  l.store = !flag_store.empty() ? flag_store : env("MOXI_DIST_STORE") ? env("MOXI_DIST_STORE") : "";
  if (flag_timeout_s >= 0) {
    l.timeout_s = flag_timeout_s;
  } else if (const char* t = env("MOXI_DIST_TIMEOUT")) {
    l.timeout_s = parse_int(t, "MOXI_DIST_TIMEOUT");
  }
  if (world < 0 && rank < 0) return l;  // a single process
  if (world < 0)
    throw error("a rank (" + rank_from + " = " + std::to_string(rank) +
                ") needs the world size: --dist-world N or MOXI_DIST_WORLD");
  if (world < 1)
    throw error("world size " + std::to_string(world) + " (" + world_from + ") must be at least 1");
  if (rank < 0) {
    if (world > 1)
      throw error("a world of " + std::to_string(world) + " ranks (" + world_from +
                  ") needs this process's rank: --dist-rank R or MOXI_DIST_RANK");
    rank = 0;
  }
  if (rank >= world)
    throw error("rank " + std::to_string(rank) + " (" + rank_from + ") is outside a world of " +
                std::to_string(world) + " (" + world_from + "): ranks are 0.." + std::to_string(world - 1));
  if (world > 1 && l.store.empty())
    throw error("a data-parallel run (" + std::to_string(world) +
                " ranks) needs a store where the ranks meet: --dist-store file:PATH or tcp:HOST:PORT "
                "(or MOXI_DIST_STORE)");
  if (world > 1) parse_store(l.store);  // checked now, before any work
  if (l.timeout_s <= 0) throw error("--dist-timeout must be positive");
  l.rank = rank;
  l.world = world;
  l.origin = rank_from.empty() ? world_from : rank_from;
  return l;
}

bool environment_asks_for_ranks() {
  for (const char* name : {"MOXI_DIST_WORLD", "OMPI_COMM_WORLD_SIZE"})
    if (const char* v = env(name); v && std::atoi(v) > 1) return true;
  return false;
}

// ---- the group --------------------------------------------------------------------------------------------

#if MOXI_HAVE_GLOO

struct dist_group::impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
};

dist_group::dist_group(int rank, int world, std::unique_ptr<impl> p)
    : rank_(rank), world_(world), p_(std::move(p)) {}
dist_group::~dist_group() = default;

std::unique_ptr<dist_group> dist_group::join(const dist_layout& l) {
  if (l.world <= 1) return nullptr;
  const auto a = parse_store(l.store);
  const auto timeout = std::chrono::milliseconds(int64_t(l.timeout_s * 1000));
  const std::string me = "rank " + std::to_string(l.rank) + " of " + std::to_string(l.world);
  auto p = std::make_unique<impl>();
  try {
    if (a.file) {
      const auto dir = fs::path(a.path).parent_path();
      if (!fs::is_directory(dir))
        throw error(me + ": the store's directory " + dir.string() + " does not exist (--dist-store " +
                    l.store + ")");
      p->store = c10::make_intrusive<c10d::FileStore>(a.path, l.world);
    } else {
      c10d::TCPStoreOptions o;
      o.port = a.port;
      o.isServer = l.rank == 0;  // rank 0 serves the store; everyone (rank 0 too) connects to HOST:PORT
      o.waitWorkers = false;     // the join below counts the ranks, with a message
      o.timeout = timeout;
      p->store = c10::make_intrusive<c10d::TCPStore>(a.host, o);
    }
    p->store->setTimeout(timeout);
  } catch (const moxi::error&) {
    throw;
  } catch (const std::exception& e) {
    throw error(me + ": cannot reach the store " + l.store + " within " + std::to_string(int(l.timeout_s)) +
                " s (--dist-timeout): " + reason(e));
  }
  // Every rank adds itself; a count above the world means the store holds an earlier launch's keys (a
  // FileStore file left behind by a killed run: c10d removes it only when all ranks close it).
  const std::string key = "moxi/joined";
  // A store of another launch is left alone: c10d's FileStore deletes its file when as many processes have
  // closed it as its world has, which would let a rank that comes later start a fresh file and wait there
  // for ranks that have already given up. The store object is leaked on purpose (the process is ending).
  auto stale = [&](const std::string& message) {
    (void)p->store.release();
    return error(message);
  };
  int64_t joined = 0;
  try {
    joined = p->store->add(key, 1);
    if (joined > l.world)
      throw stale(me + ": the store " + l.store + " already holds " + std::to_string(joined - 1) +
                  " joins for a world of " + std::to_string(l.world) +
                  ": it is left over from an earlier launch; give every launch a fresh store path");
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while ((joined = p->store->add(key, 0)) < l.world) {
      if (std::chrono::steady_clock::now() > deadline)
        throw error(me + ": only " + std::to_string(joined) + " of " + std::to_string(l.world) +
                    " ranks joined the store " + l.store + " within " + std::to_string(int(l.timeout_s)) +
                    " s (--dist-timeout); start every rank with the same --dist-world and --dist-store");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (joined > l.world)
      throw stale(me + ": more than " + std::to_string(l.world) + " ranks joined the store " + l.store +
                  " (two launches share it?)");
  } catch (const moxi::error&) {
    throw;
  } catch (const std::exception& e) {
    throw error(me + ": the store " + l.store + " failed while the ranks joined: " + reason(e));
  }
  try {
    // Collectives wait as long as another rank works alone (rank 0's pass-rate evaluation, its exports); a
    // rank that dies closes its connections, which the others notice at once.
    auto o = c10d::ProcessGroupGloo::Options::create(std::chrono::hours(24));
    const char* host = env("MOXI_DIST_HOST");
    if (host)
      o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(host));
    else if (a.file || loopback(a.host))
      o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    else
      o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    o->threads = 1;
    p->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(p->store, l.rank, l.world, o);
  } catch (const std::exception& e) {
    throw error(me + ": building the Gloo process group failed: " + reason(e));
  }
  return std::unique_ptr<dist_group>(new dist_group(l.rank, l.world, std::move(p)));
}

namespace {

template <class F>
void collective(int rank, int world, const char* what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    throw error("rank " + std::to_string(rank) + " of " + std::to_string(world) + ": " + what +
                ": lost the other ranks (" + reason(e) +
                "); a rank that stopped says why in its own messages");
  }
}

}  // namespace

void dist_group::all_reduce_sum(torch::Tensor& t, const char* what) {
  collective(rank_, world_, what, [&] {
    std::vector<at::Tensor> v{t};
    p_->pg->allreduce(v)->wait();
  });
}

void dist_group::all_reduce_max(torch::Tensor& t, const char* what) {
  collective(rank_, world_, what, [&] {
    std::vector<at::Tensor> v{t};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::MAX;
    p_->pg->allreduce(v, o)->wait();
  });
}

void dist_group::broadcast(torch::Tensor& t, const char* what) {
  collective(rank_, world_, what, [&] {
    std::vector<at::Tensor> v{t};
    c10d::BroadcastOptions o;
    o.rootRank = 0;
    p_->pg->broadcast(v, o)->wait();
  });
}

void dist_group::barrier(const char* what) {
  collective(rank_, world_, what, [&] { p_->pg->barrier()->wait(); });
}

#else  // built without Gloo's headers: one process only

struct dist_group::impl {};

dist_group::dist_group(int rank, int world, std::unique_ptr<impl> p)
    : rank_(rank), world_(world), p_(std::move(p)) {}
dist_group::~dist_group() = default;

std::unique_ptr<dist_group> dist_group::join(const dist_layout& l) {
  if (l.world <= 1) return nullptr;
  throw error(
      "this moxi-train was built without Gloo's headers (apt-get install libgloo-dev, then rebuild): it "
      "cannot train data-parallel");
}

void dist_group::all_reduce_sum(torch::Tensor&, const char*) {}
void dist_group::all_reduce_max(torch::Tensor&, const char*) {}
void dist_group::broadcast(torch::Tensor&, const char*) {}
void dist_group::barrier(const char*) {}

#endif

// ---- training helpers -------------------------------------------------------------------------------------

namespace {

constexpr int64_t kBucketElements = int64_t(16) << 20;  // 64 MB of float per collective

// Consecutive runs of tensors of one dtype of at most kBucketElements elements (a larger tensor alone).
template <class F>
void for_buckets(const std::vector<torch::Tensor>& ts, F&& f) {
  size_t i = 0;
  while (i < ts.size()) {
    size_t j = i;
    int64_t n = 0;
    while (j < ts.size() && ts[j].scalar_type() == ts[i].scalar_type() &&
           (j == i || n + ts[j].numel() <= kBucketElements))
      n += ts[j++].numel();
    f(i, j, n);
    i = j;
  }
}

}  // namespace

void all_reduce_gradients(dist_group* g, const std::vector<torch::Tensor>& params) {
  if (!g) return;
  torch::NoGradGuard no_grad;
  auto has = torch::zeros({int64_t(params.size())}, torch::kFloat32);
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].grad().defined()) has[int64_t(i)] = 1.0f;
  g->all_reduce_sum(has, "summing which gradients exist");
  const auto any = has.gt(0);
  const auto* any_p = any.data_ptr<bool>();
  for_buckets(params, [&](size_t b, size_t e, int64_t n) {
    auto flat = torch::zeros({n}, params[b].options().requires_grad(false));
    int64_t at = 0;
    for (size_t i = b; i < e; ++i) {
      const int64_t k = params[i].numel();
      if (params[i].grad().defined()) flat.slice(0, at, at + k).copy_(params[i].grad().reshape({-1}));
      at += k;
    }
    g->all_reduce_sum(flat, "summing the gradients");
    at = 0;
    for (size_t i = b; i < e; ++i) {
      const int64_t k = params[i].numel();
      if (any_p[i]) {
        const auto sum = flat.slice(0, at, at + k).view(params[i].sizes());
        auto& grad = params[i].mutable_grad();
        if (grad.defined())
          grad.copy_(sum);
        else
          grad = sum.clone();
      }
      at += k;
    }
  });
}

void broadcast_tensors(dist_group* g, const std::vector<torch::Tensor>& tensors, const char* what) {
  if (!g) return;
  torch::NoGradGuard no_grad;
  for_buckets(tensors, [&](size_t b, size_t e, int64_t n) {
    auto flat = torch::empty({n}, tensors[b].options().requires_grad(false));
    int64_t at = 0;
    for (size_t i = b; i < e; ++i) {
      flat.slice(0, at, at + tensors[i].numel()).copy_(tensors[i].detach().reshape({-1}));
      at += tensors[i].numel();
    }
    g->broadcast(flat, what);
    at = 0;
    for (size_t i = b; i < e; ++i) {
      auto t = tensors[i].detach();
      t.copy_(flat.slice(0, at, at + t.numel()).view(t.sizes()));
      at += t.numel();
    }
  });
}

void check_same_on_all_ranks(dist_group* g, const std::vector<torch::Tensor>& tensors, const char* what) {
  if (!g) return;
  torch::NoGradGuard no_grad;
  auto mine = torch::empty({int64_t(tensors.size()), 2}, torch::kFloat64);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto d = tensors[i].detach().to(torch::kFloat64);
    mine[int64_t(i)][0] = d.sum();
    mine[int64_t(i)][1] = d.pow(2).sum();
  }
  auto lead = mine.clone();
  g->broadcast(lead, what);
  auto differ = torch::zeros({1}, torch::kFloat32);
  if (!torch::equal(lead, mine)) differ[0] = 1.0f;
  g->all_reduce_max(differ, what);
  if (differ.item<float>() > 0)
    throw error("rank " + std::to_string(g->rank()) + " of " + std::to_string(g->world()) + ": " + what +
                ": the ranks no longer hold the same values (rank 0's differ from another rank's)");
}

void check_same_text(dist_group* g, const std::string& text, const char* what) {
  if (!g) return;
  const auto h = int64_t(fnv1a(text));
  auto lead = torch::full({1}, h, torch::kInt64);
  g->broadcast(lead, what);
  auto differ = torch::zeros({1}, torch::kFloat32);
  if (lead.item<int64_t>() != h) differ[0] = 1.0f;
  g->all_reduce_max(differ, what);
  if (differ.item<float>() > 0)
    throw error("rank " + std::to_string(g->rank()) + " of " + std::to_string(g->world()) + ": the " + what +
                " differs between the ranks; start every rank with the same command (only --dist-rank and "
                "--threads may differ)");
}

void check_same_recipe(dist_group* g, nlohmann::json recipe, bool override_recipe, bool force_export) {
  recipe.erase("threads");
  recipe["--override"] = override_recipe;
  recipe["--force"] = force_export;
  check_same_text(g, recipe.dump(), "recipe (with its command-line overrides)");
}

int agree_on_interrupt(dist_group* g, int sig) {
  if (!g) return sig;
  auto any = torch::full({1}, float(sig), torch::kFloat32);
  g->all_reduce_max(any, "agreeing on interrupts");
  return int(any.item<float>());
}

std::pair<size_t, size_t> rank_slice(size_t rows, int rank, int world) {
  return {rows * size_t(rank) / size_t(world), rows * size_t(rank + 1) / size_t(world)};
}

}  // namespace moxi::train
