// A pipeline stage's share of a disaggregated prefill (SPEC §5 under PP; docs/design/disagg.md "Pipeline stages").
// Stage 0 owns the rooms: it resolves each room's destination at the decode end, hands it to every other stage with
// the request's id (a StageCommand, ordered with the steps), writes its own layers' pages, and sends the aux record
// only once every stage has reported. A StageKvSender is the other stages' side: `submit` queues the request's pages
// of this stage's layers (hash(room) % n queues, each a thread with its own transfer engine); the thread writes them,
// flushes, and reports to stage 0's queue of the same index (a StageReport: done, or why not). Pages being read are
// never freed under it: `wait_idle` blocks until the requests' sends are over (each bounded by its deadline).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "disagg/kv_transfer.h"

namespace penstock::disagg {

// The transfer queue of a room: splitmix64 of its id, so rooms spread over the queues whatever their numbering.
size_t transfer_queue_of(uint64_t room, size_t n_queues);

struct StageSendJob {
    int64_t request_id = 0;
    uint64_t room = 0;
    std::vector<uint8_t> destination;  // the decode end's encoded KvDestination
    std::vector<int32_t> pages;        // this stage's pages of the request, position order
    int32_t slot = -1;                 // this stage's state slot of the request (-1: none)
    std::chrono::milliseconds timeout{0};
};

class StageKvSender final {
public:
    // `layout`: this stage's buffers (their memory must outlive the sender); `report_to`: stage 0's transfer queues'
    // engine addresses (one thread here per queue there). Unavailable when the backend is missing.
    [[nodiscard]] static Result<std::unique_ptr<StageKvSender>> create(const std::string& backend, KvLayout layout,
                                                                       uint32_t stage,
                                                                       std::vector<std::vector<uint8_t>> report_to);
    ~StageKvSender();
    StageKvSender(const StageKvSender&) = delete;
    StageKvSender& operator=(const StageKvSender&) = delete;

    void submit(StageSendJob job);
    // Returns once no job of these requests is queued or running.
    void wait_idle(std::span<const int64_t> request_ids);
    int64_t n_sent() const;
    int64_t n_failed() const;

private:
    struct Queue {
        std::unique_ptr<TransferEngine> engine;
        std::unique_ptr<KvSender> sender;
        std::vector<uint8_t> report_to;
        std::deque<StageSendJob> jobs;  // under mu_
        std::thread thread;
    };
    explicit StageKvSender(uint32_t stage) : stage_(stage) {}
    void run(Queue* q);

    uint32_t stage_;
    std::vector<std::unique_ptr<Queue>> queues_;
    mutable std::mutex mu_;
    std::condition_variable cv_;                // new jobs, stopping
    std::condition_variable idle_cv_;           // a job ended
    std::unordered_map<int64_t, int> pending_;  // request id -> jobs queued or running
    int64_t n_sent_ = 0, n_failed_ = 0;
    bool stopping_ = false;
};

}  // namespace penstock::disagg
