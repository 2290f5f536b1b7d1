// StageKvSender (stage_sender.h).
#include "disagg/stage_sender.h"

#include <algorithm>

namespace penstock::disagg {

size_t transfer_queue_of(uint64_t room, size_t n_queues) {
    uint64_t h = room + 0x9e3779b97f4a7c15ull;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    return static_cast<size_t>((h ^ (h >> 31)) % n_queues);
}

Result<std::unique_ptr<StageKvSender>> StageKvSender::create(const std::string& backend, KvLayout layout,
                                                             uint32_t stage,
                                                             std::vector<std::vector<uint8_t>> report_to) {
    if (report_to.empty()) return invalid_argument("a stage KV sender needs stage 0's transfer queues");
    if (stage == 0) return invalid_argument("stage 0 sends through its engine's transfer queues");
    std::unique_ptr<StageKvSender> s(new StageKvSender(stage));
    for (std::vector<uint8_t>& address : report_to) {
        auto q = std::make_unique<Queue>();
        PENSTOCK_ASSIGN_OR_RETURN(q->engine, make_transfer_engine(backend));
        q->sender = std::make_unique<KvSender>(q->engine.get(), layout);
        q->report_to = std::move(address);
        s->queues_.push_back(std::move(q));
    }
    for (auto& q : s->queues_) {
        Queue* raw = q.get();
        q->thread = std::thread([p = s.get(), raw] { p->run(raw); });
    }
    return s;
}

StageKvSender::~StageKvSender() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    for (auto& q : queues_) {
        if (q->thread.joinable()) q->thread.join();
    }
}

void StageKvSender::submit(StageSendJob job) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        ++pending_[job.request_id];
        queues_[transfer_queue_of(job.room, queues_.size())]->jobs.push_back(std::move(job));
    }
    cv_.notify_all();
}

void StageKvSender::wait_idle(std::span<const int64_t> request_ids) {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [&] {
        return std::none_of(request_ids.begin(), request_ids.end(), [&](int64_t id) { return pending_.contains(id); });
    });
}

int64_t StageKvSender::n_sent() const {
    std::lock_guard<std::mutex> lock(mu_);
    return n_sent_;
}

int64_t StageKvSender::n_failed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return n_failed_;
}

void StageKvSender::run(Queue* q) {
    for (;;) {
        StageSendJob job;
        {
            std::unique_lock<std::mutex> lock(mu_);
            cv_.wait(lock, [&] { return stopping_ || !q->jobs.empty(); });
            if (q->jobs.empty()) return;  // stopping, every job done
            job = std::move(q->jobs.front());
            q->jobs.pop_front();
        }
        const TimePoint deadline = Clock::now() + job.timeout;
        Status st = ok_status();
        Result<KvDestination> dst = KvDestination::decode(job.destination);
        if (!dst.ok()) {
            st = dst.status();
        } else if (dst->room != job.room) {
            st = invalid_argument("the destination is for room " + std::to_string(dst->room));
        } else {
            st = q->sender->put_pages(*dst, job.pages, job.slot, deadline);
        }
        // The report goes even after a failure (stage 0 then fails the room at once instead of at its deadline).
        const StageReport report{.room = job.room, .stage = stage_, .code = st.code(), .message = st.message()};
        const Status reported =
            q->sender->report(q->report_to, report, std::max(deadline, Clock::now() + std::chrono::seconds(2)));
        {
            std::lock_guard<std::mutex> lock(mu_);
            ++(st.ok() && reported.ok() ? n_sent_ : n_failed_);
            if (--pending_[job.request_id] == 0) pending_.erase(job.request_id);
        }
        idle_cv_.notify_all();
    }
}

}  // namespace penstock::disagg
