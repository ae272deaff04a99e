// model::process_group over MPI communicators, and the process's MPI session.
#include "moxi/dist/mpi.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "moxi/base/error.h"

namespace moxi::dist {
namespace {

bool g_started = false;
traffic g_traffic;  // only the thread that calls MPI touches it (MPI_THREAD_SERIALIZED)
int g_world_rank = 0;

// The hang detector's view of the MPI-calling thread: when its current call began (steady clock ns, 0
// while outside MPI), and the limit (ns, 0: off).
std::atomic<int64_t> g_call_start{0};
std::atomic<int64_t> g_call_limit{0};
std::mutex g_hang_m;
std::function<void(const std::string&)> g_on_hang;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void watchdog() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const int64_t start = g_call_start.load(), limit = g_call_limit.load();
    if (start == 0 || limit == 0) continue;
    const int64_t waited = now_ns() - start;
    if (waited <= limit) continue;
    char msg[256];
    std::snprintf(msg, sizeof msg,
                  "rank %d: an MPI call has waited %.0f s for the other ranks (one of them died, hangs or was "
                  "stopped; --rank-timeout)",
                  g_world_rank, double(waited) / 1e9);
    std::fprintf(stderr, "moxi: %s; ending the job\n", msg);
    std::fflush(stderr);
    std::function<void(const std::string&)> hook;
    {
      std::lock_guard<std::mutex> l(g_hang_m);
      hook = g_on_hang;
    }
    if (hook) hook(msg);
    std::_Exit(75);  // mpirun ends the other ranks when one exits without MPI_Finalize
  }
}

// Counts one MPI call: payload bytes sent to other ranks and the time inside it.
class counted {
 public:
  explicit counted(uint64_t bytes) : t0_(std::chrono::steady_clock::now()) {
    g_traffic.bytes_sent += bytes;
    ++g_traffic.calls;
    g_call_start.store(now_ns());
  }
  ~counted() {
    g_call_start.store(0);
    g_traffic.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  counted(const counted&) = delete;
  counted& operator=(const counted&) = delete;

 private:
  std::chrono::steady_clock::time_point t0_;
};

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw error(std::string("MPI ") + what + " failed: " + std::string(msg, size_t(len)));
}

int to_int(int64_t n, const char* what) {
  if (n < 0 || n > INT_MAX)
    throw error(std::string("MPI ") + what + ": a count of " + std::to_string(n) + " does not fit an int");
  return int(n);
}

std::vector<int> ints(std::span<const int64_t> v, const char* what) {
  std::vector<int> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_int(v[i], what);
  return out;
}

std::vector<int> offsets(const std::vector<int>& counts, const char* what) {
  std::vector<int> out(counts.size());
  int64_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    out[i] = to_int(at, what);
    at += counts[i];
  }
  return out;
}

class mpi_group final : public model::process_group {
 public:
  explicit mpi_group(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~mpi_group() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
  }
  mpi_group(const mpi_group&) = delete;
  mpi_group& operator=(const mpi_group&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(float* data, int64_t n) const override {
    const counted c{size_ > 1 ? uint64_t(n) * 4 : 0};
    check(MPI_Allreduce(MPI_IN_PLACE, data, to_int(n, "all-reduce"), MPI_FLOAT, MPI_SUM, comm_), "all-reduce");
  }
  void all_gather_v(const float* send, std::span<const int64_t> counts, float* recv) const override {
    const auto n = ints(counts, "all-gather");
    const auto o = offsets(n, "all-gather");
    const counted c{uint64_t(n[size_t(rank_)]) * 4 * uint64_t(size_ - 1)};
    check(MPI_Allgatherv(send, n[size_t(rank_)], MPI_FLOAT, recv, n.data(), o.data(), MPI_FLOAT, comm_),
          "all-gather");
  }
  void all_to_all(const int64_t* send, int64_t* recv) const override {
    const counted c{uint64_t(size_ - 1) * 8};
    check(MPI_Alltoall(send, 1, MPI_INT64_T, recv, 1, MPI_INT64_T, comm_), "all-to-all");
  }
  void all_to_all_v(const void* send, std::span<const int64_t> send_counts, void* recv,
                    std::span<const int64_t> recv_counts) const override {
    const auto sc = ints(send_counts, "all-to-all"), rc = ints(recv_counts, "all-to-all");
    const auto so = offsets(sc, "all-to-all"), ro = offsets(rc, "all-to-all");
    const counted c{uint64_t(std::accumulate(sc.begin(), sc.end(), int64_t(0)) - sc[size_t(rank_)])};
    check(MPI_Alltoallv(send, sc.data(), so.data(), MPI_BYTE, recv, rc.data(), ro.data(), MPI_BYTE, comm_),
          "all-to-all");
  }
  void broadcast(void* data, int64_t bytes, int root) const override {
    const counted c{rank_ == root ? uint64_t(bytes) * uint64_t(size_ - 1) : 0};
    check(MPI_Bcast(data, to_int(bytes, "broadcast"), MPI_BYTE, root, comm_), "broadcast");
  }
  void send(const void* data, int64_t bytes, int peer) const override {
    const counted c{uint64_t(bytes)};
    check(MPI_Send(data, to_int(bytes, "send"), MPI_BYTE, peer, 0, comm_), "send");
  }
  void recv(void* data, int64_t bytes, int peer) const override {
    const counted c{0};
    check(MPI_Recv(data, to_int(bytes, "recv"), MPI_BYTE, peer, 0, comm_, MPI_STATUS_IGNORE), "recv");
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::shared_ptr<const model::process_group> split(int color, int key) {
  MPI_Comm comm;
  check(MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm), "communicator split");
  return std::make_shared<mpi_group>(comm);
}

}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

bool running() { return g_started; }

traffic traffic_so_far() { return g_traffic; }

void barrier() {
  if (g_started) check(MPI_Barrier(MPI_COMM_WORLD), "barrier");
}

void watch_calls(double seconds) {
  if (!g_started) return;
  static std::once_flag started;
  std::call_once(started, [] { std::thread(watchdog).detach(); });
  g_call_limit.store(seconds > 0 ? int64_t(seconds * 1e9) : 0);
}

void on_hang(std::function<void(const std::string&)> fn) {
  std::lock_guard<std::mutex> l(g_hang_m);
  g_on_hang = std::move(fn);
}

std::shared_ptr<const model::parallel_layout> start(const model::parallel_sizes& sizes) {
  if (!g_started) {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "init");
    g_started = true;
    std::atexit(finalize_at_exit);
    if (provided < MPI_THREAD_SERIALIZED)
      throw error("MPI: the library gives thread level " + std::to_string(provided) +
                  ", moxi needs MPI_THREAD_SERIALIZED");
  }
  int world = 1, rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  g_world_rank = rank;
  if (world % sizes.pp || (world / sizes.pp) % sizes.tp || (world / sizes.pp) % sizes.ep)
    throw error("layout " + sizes.to_string() + " does not fit " + std::to_string(world) +
                " MPI ranks: the ranks must split into pp stages whose size tp and ep divide (mpirun -np " +
                std::to_string(sizes.pp * std::lcm(sizes.tp, sizes.ep)) + " runs it)");
  const int per_stage = world / sizes.pp;
  auto l = std::make_shared<model::parallel_layout>(model::parallel_layout::place(sizes, world, rank));
  l->world = std::make_shared<mpi_group>(MPI_COMM_WORLD);
  // Colors: a block is identified by its stage and its index within the stage.
  l->tp = split(l->stage * per_stage + l->stage_rank / sizes.tp, l->world_rank);
  l->ep = split(l->stage * per_stage + l->stage_rank / sizes.ep, l->world_rank);
  return l;
}

void abort_job(int code) {
  if (!g_started) return;
  int size = 1, finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

}  // namespace moxi::dist
