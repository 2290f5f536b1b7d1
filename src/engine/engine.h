// Engine: the generation loop. One engine thread owns the Scheduler, the ModelRunner, the StepExecutor and every live
// request's sampling/detokenization state; each iteration admits new requests, turns the scheduler's BatchPlan into a
// ForwardBatch with each sequence's sampling parameters and submits it to the executor (this process, or down a
// pipeline, where up to pp + async-depth steps are in flight and the last stage samples); collected results (one
// token per final-chunk/decode row) go back to the scheduler and out as events to RequestHandles. Other threads
// (HTTP, tests) only call submit/abort/metrics, which are thread-safe.
// Contract (threads, ownership, limits): docs/design/engine.md, "Engine loop".
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "disagg/kv_transfer.h"
#include "engine/sampling.h"
#include "engine/step_executor.h"
#include "engine/tokenizer.h"
#include "runtime/model_runner.h"
#include "scheduler/scheduler.h"

namespace penstock::engine {

using Clock = std::chrono::steady_clock;

// Why a request was aborted (metrics label and the error a client sees).
enum class AbortReason : uint8_t { kClientDisconnect, kUser, kShutdown, kStepFailure, kTimeout };
std::string_view abort_reason_name(AbortReason r);

struct GenerateParams {
    int64_t max_new_tokens = 16;
    SamplingOptions sampling;
    std::vector<int32_t> stop_token_ids;  // besides the model's EOS ids (unless ignore_eos)
    std::vector<std::string> stop;        // stop strings, matched on the detokenized output (needs a tokenizer)
    bool ignore_eos = false;
    bool skip_special_tokens = true;  // for the output text
    // Each output token's log-probability (RequestOutput::logprobs), and with top_logprobs > 0 (at most
    // runtime::kMaxTopLogprobs) that many most likely alternatives at its position.
    // The request's stop tokens (stop_token_ids, and EOS unless ignore_eos) cannot be sampled before this many
    // outputs (SGLang min_new_tokens, OpenAI-compatible min_tokens); stop strings still stop it. At most
    // max_new_tokens.
    int64_t min_new_tokens = 0;
    bool return_logprob = false;
    int32_t top_logprobs = 0;
    // >= 0 (and below the prompt length): also the prompt's log-probabilities from this position on
    // (RequestOutput::prompt_logprobs; top_logprobs alternatives each). The chunks holding those positions compute a
    // logits row per token, [tokens, vocab] f32 each. -1: none.
    int64_t logprob_start_len = -1;
};

struct GenerateRequest {
    std::vector<int32_t> prompt;  // token ids, each in [0, vocab)
    GenerateParams params;
    std::string rid;  // optional external id for abort_rid ("" = none); unique among live ones
    Clock::duration timeout = Clock::duration::zero();  // <= 0: no deadline
    // Prefill/decode disaggregation: the room shared by the prefill and the decode request (engines in a
    // disaggregation mode only). Prefill end: the request computes its first token (max_new_tokens becomes 1) and its
    // KV goes to the decode end. Decode end: the request's KV and first token come from the prefill end.
    std::optional<uint64_t> bootstrap_room;
};

// A token and its log-probability under the model's own distribution: log-softmax of the raw logits (temperature 1,
// no filters), whatever the request's sampling parameters.
struct TokenLogprob {
    int32_t token = 0;
    // Unknown (nullopt) only for a decode end's first token, which the prefill server computed.
    std::optional<float> logprob;
    std::string text;  // the token decoded alone, special tokens kept ("" without a tokenizer)
};

// One output token's log-probability, and the most likely tokens at its position (GenerateParams::top_logprobs of
// them, by descending log-probability; empty where the log-probability is unknown).
struct OutputLogprob {
    TokenLogprob chosen;
    std::vector<TokenLogprob> top;
};

// One event of a request: new tokens (and their text), and on the last event the finish information.
struct RequestOutput {
    std::vector<int32_t> token_ids;       // tokens sampled since the previous event
    std::string text;                     // their text (complete UTF-8 characters; "" without a tokenizer)
    std::vector<OutputLogprob> logprobs;  // one per token_ids entry, with GenerateParams::return_logprob
    // With GenerateParams::logprob_start_len >= 0, on the first event with a token: one entry per prompt position from
    // logprob_start_len on, log p(prompt[i] | prompt[:i]) (position 0 has none: nullopt).
    std::vector<OutputLogprob> prompt_logprobs;
    bool finished = false;
    // "length" | "stop" | "abort" | "timeout" | "rejected" | "error" (finished events only).
    std::string finish_reason;
    std::string matched_stop;  // the stop string that matched ("" otherwise)
    std::optional<int32_t> matched_stop_token;
    Status error;  // non-OK when the request failed: the code maps to an HTTP status
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
    double ttft_s = 0;  // submit -> first token (0 until one exists)
    double e2e_s = 0;   // submit -> this event
};

// The consumer side of one request: thread-safe queue of outputs written by the engine thread.
class RequestHandle final {
public:
    explicit RequestHandle(int64_t id) : id_(id) {}
    int64_t id() const { return id_; }
    // Waits up to `timeout` for outputs and returns all that are queued (empty on timeout).
    std::vector<RequestOutput> wait(Clock::duration timeout);
    void push(RequestOutput out);

private:
    int64_t id_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<RequestOutput> q_;
};

// Prometheus-style histogram (cumulative buckets are computed when rendered).
struct Histogram {
    std::vector<double> bounds;   // upper bounds, ascending
    std::vector<int64_t> counts;  // per bucket, bounds.size() + 1 (the last is +Inf)
    double sum = 0;
    int64_t count = 0;
    explicit Histogram(std::vector<double> b = {}) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
    void observe(double v);
};

struct EngineMetrics {
    int64_t waiting = 0;  // queued (submitted, not admitted)
    int64_t running = 0;
    int64_t kv_pages_used = 0;
    int64_t kv_pages_total = 0;
    int64_t prompt_tokens_total = 0;      // prompt tokens of admitted requests
    int64_t generation_tokens_total = 0;  // sampled tokens
    int64_t steps_total = 0;
    int64_t step_failures_total = 0;
    int64_t idle_checks_total = 0;           // idle invariant checks run (EngineOptions::idle_invariant_check)
    int64_t invariant_violations_total = 0;  // ... that found a broken invariant
    std::map<std::string, int64_t> finished_by_reason;
    std::map<std::string, int64_t> rejected_by_reason;  // queue_full, invalid, too_long, draining
    std::map<std::string, int64_t> aborted_by_reason;   // abort_reason_name
    std::map<std::string, int64_t> aborted_by_phase;    // queued, prefill, decode (RELIABILITY T7)
    // Disaggregation: rooms by outcome (prefill end: sent, send_failed; decode end: received, receive_failed), and at
    // the decode end record_dropped: aux records that matched no waiting room, or malformed messages.
    std::map<std::string, int64_t> kv_transfers;
    // Decode end: open rooms by state (Bootstrapping, WaitingForInput, Transferring) and lazy claims ("claimed").
    std::map<std::string, int64_t> disagg_rooms;
    Histogram ttft_s{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
    Histogram e2e_s{{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}};
    // The step executor's view: micro-batch slots, in flight now / at most, submitted, active time, per-stage counters.
    ExecutorStats executor;
};

// Prefill/decode disaggregation (SPEC §5, docs/design/disagg.md). Both ends must serve the same model and KV formats.
struct DisaggOptions {
    enum class Mode : uint8_t { kNone, kPrefill, kDecode };
    Mode mode = Mode::kNone;
    std::string transfer_backend = "ucx";  // --disaggregation-transfer-backend
    // Prefill end: transfer queues, each a thread with its own engine; a room goes to queue hash(room) % n (SPEC §5
    // cut 3: rooms of different decode servers do not wait behind each other). --disaggregation-transfer-queues.
    int transfer_queues = 4;
    // --disaggregation-lazy-allocation (SPEC §5): the decode end claims a room's request first and reserves its pages
    // only when the prefill end asks for the destination (its forward is done), so pages are not held while the prompt
    // is still queued or computing at the prefill end. Both ends must agree: the prefill end states its setting when
    // it asks, and a mismatch fails the room naming the setting (RELIABILITY T12).
    bool lazy_allocation = false;
    disagg::RoomTimeouts timeouts = {};
    // Prefill end (required there): the decode end's destination for a room (its bootstrap). Called on the transfer
    // thread; it may block until the deadline (e.g. retrying until the decode end has allocated the room).
    std::function<Result<disagg::KvDestination>(uint64_t room, Clock::time_point deadline)> resolve_destination;
    // Prefill end under pipeline parallelism (the engine drives stage 0 of `pipeline_stages`): the other stages'
    // buffers (their shapes, disagg::KvLayout::decode_shape; no memory). Each stage sends its own layers' pages
    // (disagg/stage_sender.h) and reports to stage 0, which sends the aux record once all have.
    int64_t pipeline_stages = 1;
    disagg::KvLayout other_stages = {};
};
std::string_view disagg_mode_name(DisaggOptions::Mode m);
// The runner's KV buffers as disaggregation moves them: the paged buffers (latent rows per layer, DSA index keys and
// scales), then the per-slot state buffers (KDA), each keyed by its layer and kind. Reserves the state pool whole (its
// registered addresses must not move). Unimplemented, naming `what`, for a cache on the GPU or a model with none.
[[nodiscard]] Result<disagg::KvLayout> disagg_kv_layout(runtime::ModelRunner& runner, const std::string& what);

// What the engine does when it finds a broken invariant on becoming idle (SPEC §6).
enum class InvariantCheck : uint8_t {
    kOff,    // no check
    kWarn,   // log an error, count it (penstock_invariant_violations_total), keep serving
    kAbort,  // log and abort the process (a supervisor restarts it from a clean state)
};

struct EngineOptions {
    scheduler::SchedulerConfig scheduler = {};
    std::optional<scheduler::ChunkCostModel> cost_model = std::nullopt;  // required with dynamic chunking
    std::vector<int32_t> eos_token_ids = {};  // stop tokens of every request unless ignore_eos
    uint64_t seed = 0;                        // seeds requests that bring no seed (counter-derived)
    int64_t max_stop_strings = 16;            // per request
    int64_t max_stop_string_bytes = 256;      // per stop string
    // Each time the engine becomes idle (no live request, nothing in flight, no KV transfer): the scheduler's page
    // accounting (Scheduler::check_invariants), no KV page in use, no non-paged state slot admitted.
    InvariantCheck idle_invariant_check = InvariantCheck::kWarn;
    // Test hooks (unset in production). step_fault runs before each forward: non-OK fails only that step's
    // requests (RELIABILITY T3). logits_observer sees every sampled row (request id, [vocab] f32).
    std::function<Status(const scheduler::BatchPlan&)> step_fault = {};
    std::function<void(int64_t, std::span<const float>)> logits_observer = {};
    DisaggOptions disagg = {};
};

class Engine final {
public:
    // `tokenizer` may be null (--skip-tokenizer-init: ids only; stop strings are then refused); it must outlive the
    // engine. The runner must hold the whole model (steps run in this process: LocalExecutor). InvalidArgument for a
    // bad scheduler config.
    [[nodiscard]] static Result<std::unique_ptr<Engine>> create(std::unique_ptr<runtime::ModelRunner> runner,
                                                                const Tokenizer* tokenizer, EngineOptions options);
    // The same with the steps run by `executor` (e.g. PipelineExecutor). The runner holds the model's first layers
    // (pipeline stage 0; the scheduler's pages live in its pool); the executor may point at it (the engine destroys
    // the executor first). The executor's stop() runs when the engine thread ends, so start() the engine.
    [[nodiscard]] static Result<std::unique_ptr<Engine>> create(std::unique_ptr<runtime::ModelRunner> runner,
                                                                std::unique_ptr<StepExecutor> executor,
                                                                const Tokenizer* tokenizer, EngineOptions options);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Starts the engine thread. stop() ends every live request (error Unavailable, abort reason shutdown) and joins.
    void start();
    void stop();

    // Thread-safe. Validates (InvalidArgument: empty prompt, id outside the vocab, bad sampling or stop settings;
    // OutOfRange: prompt + max_new_tokens over the context or the KV pool), then queues. ResourceExhausted when the
    // waiting queue is full, Unavailable after stop_accepting()/stop(). Outputs arrive on the returned handle.
    [[nodiscard]] Result<std::shared_ptr<RequestHandle>> submit(GenerateRequest r);
    // Thread-safe; aborts a live request (frees its pages on the engine thread). Unknown ids are ignored.
    void abort(int64_t id, AbortReason reason);
    // Aborts the live request with this rid; false when none.
    bool abort_rid(const std::string& rid, AbortReason reason);
    // New submissions get Unavailable from now on (drain).
    void stop_accepting() { accepting_ = false; }

    // Decode end: the encoded KvDestination of a room whose request has its pages (what the bootstrap serves to the
    // prefill end). NotFound until then (with lazy allocation, asking is what makes the engine reserve them) or once
    // the room is over; FailedPrecondition outside the decode mode, or when `peer_lazy` (the asking prefill end's
    // lazy-allocation setting) differs from this end's, which also fails the room's request.
    [[nodiscard]] Result<std::vector<uint8_t>> destination(uint64_t room,
                                                           std::optional<bool> peer_lazy = std::nullopt) const;

    // Prefill end: the transfer queues' engine addresses, in queue order (the other pipeline stages report there).
    std::vector<std::vector<uint8_t>> transfer_queue_addresses() const;

    EngineMetrics metrics() const;
    // Requests submitted and not yet finished.
    int64_t n_live() const { return n_live_.load(); }
    // Last time the engine loop went round (idle or not).
    Clock::time_point last_heartbeat() const;
    const scheduler::SchedulerConfig& scheduler_config() const { return options_.scheduler; }
    const EngineOptions& options() const { return options_; }
    const loader::ModelConfig& model_config() const { return runner_->model().config(); }
    int64_t n_pages() const { return n_pages_; }
    const Tokenizer* tokenizer() const { return tokenizer_; }

private:
    struct Live;
    struct Pending {
        int64_t id;
        GenerateRequest request;
        std::shared_ptr<RequestHandle> handle;
        Clock::time_point arrival;
    };

    Engine(std::unique_ptr<runtime::ModelRunner> runner, std::unique_ptr<StepExecutor> executor,
           const Tokenizer* tokenizer, EngineOptions options, std::unique_ptr<scheduler::Scheduler> sched);
    struct InFlightStep;
    void loop();
    // Moves submissions and aborts into the scheduler; false once stop() was called.
    bool absorb_inbox();
    // Builds the step's StepInput and submits it; a step that fails before running is re-submitted one sequence at a
    // time where the executor isolates failures (RELIABILITY T3). Records the step in in_flight_.
    void submit_step(const scheduler::BatchPlan& plan);
    // One executor submission (after the step_fault hook); a thrown exception becomes Internal. A failed submission
    // on an executor that does not isolate failures is fatal.
    Status submit_part(const StepInput& in, const scheduler::BatchPlan& plan, InFlightStep* step);
    // Waits for the oldest step's results and applies them (scheduler, events, metrics).
    void collect_step();
    void fail_request(int64_t id, const Status& error);
    void count_abort_phase(const scheduler::Request& r);
    // `sampled`: the token's log-probability and alternatives as the step returned them (null: unknown, a decode
    // end's first token).
    void on_token(int64_t id, int32_t token, const runtime::Sampled* sampled);
    // Whether `token` ends `l` (its stop_token_ids, or EOS unless ignore_eos).
    [[nodiscard]] bool is_stop_token(const Live& l, int32_t token) const;
    TokenLogprob token_logprob(int32_t token, std::optional<float> logprob) const;
    // Prompt log-probabilities of one chunk: scored[j] is position first + j's.
    void store_prompt_logprobs(Live& l, int64_t first, const std::vector<runtime::Sampled>& scored);
    void publish_finished();
    // The idle invariant checks (EngineOptions::idle_invariant_check); the first broken one, or OK.
    Status check_idle_invariants() const;
    void shutdown_all();
    // Disaggregation (engine thread). Decode end: registers a prefilled request's room; polls the receiver and hands
    // arrived first tokens to the scheduler; frees pages held for rooms that are over. Prefill end: queues a finished
    // request's pages for the transfer thread and frees them when it is done.
    Status expect_room(int64_t id, uint64_t room);
    void poll_rooms();
    void queue_transfer(int64_t id, uint64_t room, int32_t first_token);
    void collect_transfers();
    void transfer_loop(size_t queue);  // the prefill end's transfer threads
    // Hands the queued KV sends to the other stages (engine thread).
    void dispatch_stage_sends();
    // Decode end with lazy allocation: reserves the pages of claimed rooms the prefill end asked for, fails claims
    // past their deadline or with a settings mismatch.
    void serve_claims();
    // Ends a request that never reached the scheduler (a lazy claim) with `out`.
    void finish_unscheduled(int64_t id, RequestOutput out);
    bool disagg_busy() const;
    // Frees a request's held pages and its state slot (a disaggregated transfer is over).
    void release_held_kv(int64_t id);
    void update_gauges();
    Status validate_request(const GenerateRequest& r) const;

    std::unique_ptr<runtime::ModelRunner> runner_;
    std::unique_ptr<StepExecutor> executor_;  // declared after runner_: destroyed first
    const Tokenizer* tokenizer_;
    EngineOptions options_;
    std::unique_ptr<scheduler::Scheduler> sched_;
    int64_t n_pages_;
    int64_t max_context_;

    // Engine-thread state.
    std::unordered_map<int64_t, std::unique_ptr<Live>> live_;
    std::deque<InFlightStep> in_flight_;  // submitted steps, oldest first

    // Shared with other threads.
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::vector<Pending> inbox_;
    std::vector<std::pair<int64_t, AbortReason>> aborts_;
    std::unordered_map<std::string, int64_t> rids_;
    int64_t n_waiting_snapshot_ = 0;
    bool stopping_ = false;
    mutable std::mutex metrics_mu_;
    EngineMetrics metrics_;
    std::atomic<int64_t> next_id_{1};
    std::atomic<int64_t> n_live_{0};
    bool busy_since_check_ = false;  // engine thread: work happened since the last idle invariant check
    std::atomic<bool> accepting_{true};
    std::atomic<int64_t> heartbeat_ns_{0};
    std::thread thread_;

    // Disaggregation. Decode end: the receiver's engine belongs to the engine thread.
    std::unique_ptr<disagg::TransferEngine> xfer_engine_;
    std::unique_ptr<disagg::KvReceiver> receiver_;                   // decode end
    std::unordered_map<uint64_t, int64_t> room_request_;             // decode end: room -> request id (engine thread)
    std::unordered_map<int64_t, uint64_t> prefill_room_;             // prefill end: request id -> room (engine thread)
    std::vector<std::pair<int64_t, disagg::TimePoint>> quarantine_;  // decode end: held pages of failed rooms
    mutable std::mutex dest_mu_;
    std::unordered_map<uint64_t, std::vector<uint8_t>> destinations_;  // decode end: encoded, for destination()
    struct TransferJob {
        // kResolve: the room's bootstrap, started when the request arrives so that it overlaps the forward (not with
        // lazy allocation: asking is what makes the decode end reserve). kSend: the finished request's pages.
        // kForget: the request ended without a first token; drop what kResolve learned.
        enum class Kind : uint8_t { kResolve, kSend, kForget };
        Kind kind = Kind::kSend;
        int64_t id = 0;
        uint64_t room = 0;
        std::vector<int32_t> pages;
        int32_t slot = -1;  // KDA state slot (-1: none)
        int32_t first_token = 0;
    };
    // Prefill end: one per transfer queue; its engine and sender belong to its thread.
    struct TransferQueue {
        std::unique_ptr<disagg::TransferEngine> engine;
        std::unique_ptr<disagg::KvSender> sender;
        // The prefill end's rooms of this queue (its thread's): Bootstrapping while the destination is resolved,
        // WaitingForInput until the forward is done, Transferring while the pages go, then Success or Failed.
        std::unique_ptr<disagg::RoomTable> rooms;
        std::unordered_map<uint64_t, disagg::KvDestination> destinations;
        // Under pipeline parallelism: the other stages' reports per room (index stage - 1), as they arrive.
        std::unordered_map<uint64_t, std::vector<std::optional<Status>>> reports;
        std::deque<TransferJob> jobs;  // under xfer_mu_
        std::thread thread;
    };
    std::vector<std::unique_ptr<TransferQueue>> xfer_queues_;
    void queue_job(TransferJob job);  // to queue hash(room) % n
    // Under pipeline parallelism (transfer thread): stage 0's pages of a room, the other stages' (through the engine
    // thread), their reports, then the aux record. Returns the room's outcome.
    Status send_staged(TransferQueue& q, const TransferJob& job, const disagg::KvDestination& dst);

    // Decode end, lazy allocation: claimed rooms (engine thread), the rooms the prefill end asked for and the
    // mismatches it reported (under dest_mu_, written by destination()).
    struct Claim {
        int64_t id = 0;
        scheduler::NewRequest request;
        disagg::TimePoint deadline{};
    };
    std::unordered_map<uint64_t, Claim> claims_;
    mutable std::unordered_set<uint64_t> claimed_rooms_, wanted_rooms_;
    mutable std::unordered_set<uint64_t> fetched_rooms_;  // decode end: destinations the prefill end has fetched
    mutable std::unordered_map<uint64_t, std::string> mismatched_rooms_;
    std::mutex xfer_mu_;
    std::condition_variable xfer_cv_;
    std::vector<std::pair<int64_t, Status>> xfer_done_;
    // Under pipeline parallelism: KV sends for the other stages, handed to them by the engine thread (executor), and
    // whether it still takes them (false once its loop ended). The whole deployment's layout fingerprint.
    std::vector<parallel::StageCommand> xfer_dispatch_;
    bool dispatch_open_ = true;
    uint64_t deployment_fingerprint_ = 0;
    size_t deployment_buffers_ = 0;
    bool xfer_stopping_ = false;
    int64_t xfer_outstanding_ = 0;  // engine thread: jobs queued and not collected
};

}  // namespace penstock::engine
