// Scheduler: owns the waiting queue (bounded), the running set and the request page tables over a PagePool it is
// given; each schedule_step() asks the PrefillAdder for a BatchPlan and applies it (admission reserves a request's
// whole KV), on_step_done() applies a step's sampled tokens. Stage 0 runs one Scheduler on one thread; nothing here
// is thread-safe and nothing touches a GPU. Contract: docs/design/scheduler.md.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "kv_cache/page_pool.h"
#include "scheduler/config.h"
#include "scheduler/cost_model.h"
#include "scheduler/policy.h"
#include "scheduler/prefill_adder.h"
#include "scheduler/request.h"

namespace penstock::scheduler {

struct SampledToken {
    int64_t request_id = 0;
    int32_t token_id = 0;
};

// What came back from one planned step: one token per kLast entry of a live request (tokens for requests aborted in
// the meantime are ignored).
struct StepResult {
    int64_t step_id = 0;
    std::vector<SampledToken> tokens;
};

struct NewRequest {
    int64_t id = 0;  // unique among live requests (the caller assigns ids)
    std::vector<int32_t> prompt;
    SamplingParams sampling;
    TimePoint arrival{};
    TimePoint deadline = kNoDeadline;
    // Prefill/decode disaggregation, prefill end: when the request finishes (not when it is aborted), its pages are
    // held for the KV transfer instead of freed, until release_held().
    bool hold_kv_on_finish = false;
};

class Scheduler final {
public:
    // InvalidArgument for an invalid config or a missing cost model when dynamic chunking is in effect. `pool` must
    // outlive the scheduler and have no other client (the page-accounting check relies on it).
    [[nodiscard]] static Result<std::unique_ptr<Scheduler>> create(const SchedulerConfig& config,
                                                                   kv_cache::PagePool* pool,
                                                                   std::optional<ChunkCostModel> cost_model);

    // Queues a request. InvalidArgument: empty prompt, max_new_tokens < 1, prompt + max_new_tokens over
    // max_context_len, or an id already live. OutOfRange: its whole KV needs more pages than the pool can ever give
    // (rejected at once). ResourceExhausted: the waiting queue holds max_queue_size requests.
    [[nodiscard]] Status add_request(NewRequest r);

    // Disaggregation, decode end: a request whose prompt KV comes from a prefill server. It is admitted at once (its
    // whole KV reserved, pages in page_table(id)) and waits, never planned, until complete_transfer() gives it the
    // first token; then it decodes like any other. The same validation as add_request, and ResourceExhausted when the
    // free pages (minus the watermark) or the running cap do not allow it now.
    [[nodiscard]] Status add_prefilled_request(NewRequest r);
    // The transfer of a prefilled request's KV is complete: its prompt positions count as computed and `first_token`
    // is appended (finishing it when it should). Returns whether it finished. NotFound: not live; FailedPrecondition:
    // not waiting for its KV.
    [[nodiscard]] Result<bool> complete_transfer(int64_t id, int32_t first_token);
    bool awaiting_kv(int64_t id) const { return awaiting_kv_.contains(id); }

    // Disaggregation: pages held for a KV transfer, until release_held(id) frees them. Prefill end: those of finished
    // hold_kv_on_finish requests (the transfer reads them). Decode end: those of a prefilled request aborted or timed
    // out while its KV was on the way (the prefill server may still write them). NotFound for an id that holds none.
    [[nodiscard]] Result<std::vector<int32_t>> held_pages(int64_t id) const;
    [[nodiscard]] Status release_held(int64_t id);
    int64_t n_held_requests() const { return static_cast<int64_t>(held_.size()); }

    // Aborts a live request in any state and frees its pages at once (safe while a step holding it is in flight:
    // steps run in order, so a later owner of those pages writes them after the stale step did). NotFound when the
    // id is not live.
    [[nodiscard]] Status abort(int64_t id);

    // Records how many prompt tokens a prefix cache holds for a waiting request (the longest-prefix policy's key; it
    // does not change what is computed yet). NotFound: not live; FailedPrecondition: not waiting; InvalidArgument:
    // n outside [0, prompt_len].
    [[nodiscard]] Status set_matched_prefix_len(int64_t id, int64_t n);

    // Aborts (reason kTimeout) every live request whose deadline is <= now; returns their ids in queue order.
    std::vector<int64_t> expire_deadlines(TimePoint now);

    // Plans the next step and applies it (admissions reserve pages; planned positions are marked in flight). An
    // empty plan (nothing runnable) gets step_id -1 and must not be run; a non-empty one gets the next step id and
    // its result must come back through on_step_done, in step order. Several steps may be in flight (pipeline).
    BatchPlan schedule_step();

    // Applies the result of the oldest step in flight: advances prefixes, appends sampled tokens, finishes requests
    // (kLength / kStop) and frees their pages. A step id out of order or a missing token aborts (a runtime bug).
    void on_step_done(const StepResult& result);

    // Requests that reached kFinished or kAborted since the last call (ownership passes to the caller).
    std::vector<std::unique_ptr<Request>> take_finished();

    // Internal error describing the first broken invariant: pages owned by live requests + held for transfers == pool
    // pages used, a table
    // per running request covering its whole reserved KV and none for waiting ones, at most one mid-chunk request,
    // running <= max_running_requests. For idle checks (SPEC §6: the caller warns or aborts by setting).
    [[nodiscard]] Status check_invariants() const;

    const SchedulerConfig& config() const { return config_; }
    const PrefillAdder& adder() const { return adder_; }
    // A live request, or nullptr.
    const Request* find(int64_t id) const;
    const kv_cache::PageTable& page_table(int64_t id) const { return tables_.table(id); }
    int64_t n_waiting() const { return static_cast<int64_t>(waiting_.size()); }
    int64_t n_running() const { return static_cast<int64_t>(running_.size()); }
    int64_t n_steps_in_flight() const { return static_cast<int64_t>(in_flight_.size()); }
    // Requests admitted with prompt tokens not yet planned (0 or 1).
    int64_t n_mid_chunk() const;
    int64_t pages_owned() const { return tables_.pages_owned(); }

private:
    struct Live {
        std::unique_ptr<Request> request;
        uint64_t serial = 0;  // distinguishes a reused id from the request an in-flight step was planned for
        bool hold_kv_on_finish = false;
    };
    // add_request's checks of a new request (not its queue or pool state).
    Status validate_new(const NewRequest& r) const;
    // What on_step_done needs of a planned entry.
    struct PlannedEntry {
        int64_t request_id = 0;
        uint64_t serial = 0;
        int64_t prefix_len = 0;
        int64_t n_tokens = 0;
        ChunkLogits logits = ChunkLogits::kNone;
    };
    struct PlannedStep {
        int64_t step_id = 0;
        std::vector<PlannedEntry> entries;
    };

    Scheduler(const SchedulerConfig& config, kv_cache::PagePool* pool, std::optional<ChunkCostModel> cost_model);
    Request* live(int64_t id);
    void apply_plan(BatchPlan* plan);
    // Moves a terminal request out of the queue/running set, frees its pages and parks it in finished_.
    void retire(int64_t id);

    SchedulerConfig config_;
    kv_cache::PagePool* pool_;
    kv_cache::RequestTables tables_;
    PrefillAdder adder_;
    WaitingOrder order_;
    std::unordered_map<int64_t, Live> live_;
    std::vector<Request*> waiting_;  // arrival order
    std::vector<Request*> running_;  // admission order
    std::vector<std::unique_ptr<Request>> finished_;
    std::deque<PlannedStep> in_flight_;
    std::unordered_map<int64_t, kv_cache::PageTable> held_;  // finished requests' pages held for a KV transfer
    std::unordered_set<int64_t> awaiting_kv_;                // prefilled requests whose KV has not arrived
    int64_t next_step_id_ = 0;
    uint64_t next_serial_ = 0;
};

}  // namespace penstock::scheduler
