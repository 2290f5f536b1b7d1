// ThreadPool: workers claim chunks of the current range under a mutex-protected cursor.
#include "core/thread_pool.h"

#include <algorithm>

namespace penstock {

namespace {
// True while this thread runs a parallel_for body (a worker, or the caller taking part); nested calls run inline.
thread_local bool t_in_worker = false;

struct InBodyScope {
    InBodyScope() { t_in_worker = true; }
    ~InBodyScope() { t_in_worker = false; }
    InBodyScope(const InBodyScope&) = delete;
    InBodyScope& operator=(const InBodyScope&) = delete;
};
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
    if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int i = 0; i + 1 < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    cv_work_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int) {
    t_in_worker = true;
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
        cv_work_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        while (next_ < n_) {
            const int64_t begin = next_;
            const int64_t end = std::min(n_, begin + chunk_);
            next_ = end;
            lock.unlock();
            (*fn_)(begin, end);
            lock.lock();
        }
        if (--pending_ == 0) cv_done_.notify_all();
    }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    if (workers_.empty() || t_in_worker || n <= grain) {
        fn(0, n);
        return;
    }
    std::lock_guard<std::mutex> call_lock(call_mu_);
    const InBodyScope in_body;  // fn may call parallel_for again from this thread: it must not re-lock call_mu_
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t parts = std::min<int64_t>(n / grain, static_cast<int64_t>(size()) * 4);
    fn_ = &fn;
    n_ = n;
    chunk_ = (n + parts - 1) / std::max<int64_t>(parts, 1);
    next_ = 0;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
    cv_work_.notify_all();
    while (next_ < n_) {
        const int64_t begin = next_;
        const int64_t end = std::min(n_, begin + chunk_);
        next_ = end;
        lock.unlock();
        fn(begin, end);
        lock.lock();
    }
    cv_done_.wait(lock, [&] { return pending_ == 0; });
    fn_ = nullptr;
}

void parallel_for(ThreadPool* pool, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (pool == nullptr) {
        if (n > 0) fn(0, n);
        return;
    }
    pool->parallel_for(n, grain, fn);
}

}  // namespace penstock
