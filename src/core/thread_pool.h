// A fixed-size thread pool for CPU reference kernels. parallel_for splits [0, n) into contiguous ranges; the calling
// thread takes part, so a pool of size 1 runs inline. One parallel_for at a time per pool (calls are serialised);
// a parallel_for issued from inside a worker runs inline.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace penstock {

class ThreadPool final {
public:
    // n_threads <= 0 means std::thread::hardware_concurrency().
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return static_cast<int>(workers_.size()) + 1; }
    // Calls fn(begin, end) over disjoint ranges covering [0, n), each at least `grain` long (except the last).
    void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

private:
    void worker_loop(int index);

    std::vector<std::thread> workers_;
    std::mutex call_mu_;  // serialises parallel_for callers
    std::mutex mu_;
    std::condition_variable cv_work_;
    std::condition_variable cv_done_;
    const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
    int64_t n_ = 0;
    int64_t chunk_ = 0;
    int64_t next_ = 0;
    int pending_ = 0;
    uint64_t generation_ = 0;
    bool stop_ = false;
};

// Runs fn over [0, n) on `pool` when given, else inline.
void parallel_for(ThreadPool* pool, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace penstock
