// Engine loop: inbox -> scheduler -> StepInput -> executor submit ... collect (sampled tokens) -> on_step_done ->
// events.
#include "engine/engine.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "core/check.h"
#include "core/logging.h"
#include "core/text.h"
#include "engine/engine_internal.h"

namespace penstock::engine {

using scheduler::FinishReason;

std::string_view abort_reason_name(AbortReason r) {
    switch (r) {
        case AbortReason::kClientDisconnect:
            return "client_disconnect";
        case AbortReason::kUser:
            return "abort_request";
        case AbortReason::kShutdown:
            return "shutdown";
        case AbortReason::kStepFailure:
            return "step_failure";
        case AbortReason::kTimeout:
            return "timeout";
    }
    return "unknown";
}

std::vector<RequestOutput> RequestHandle::wait(Clock::duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !q_.empty(); });
    std::vector<RequestOutput> out(std::make_move_iterator(q_.begin()), std::make_move_iterator(q_.end()));
    q_.clear();
    return out;
}

void RequestHandle::push(RequestOutput out) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        q_.push_back(std::move(out));
    }
    cv_.notify_all();
}

void Histogram::observe(double v) {
    const auto it = std::lower_bound(bounds.begin(), bounds.end(), v);
    ++counts[static_cast<size_t>(it - bounds.begin())];
    sum += v;
    ++count;
}

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<runtime::ModelRunner> runner, const Tokenizer* tokenizer,
                                               EngineOptions options) {
    PENSTOCK_CHECK(runner != nullptr);
    if (!runner->model().is_first_stage() || !runner->model().is_last_stage()) {
        return invalid_argument("the engine needs a runner that holds the whole model");
    }
    auto executor = std::make_unique<LocalExecutor>(runner.get());
    return create(std::move(runner), std::move(executor), tokenizer, std::move(options));
}

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<runtime::ModelRunner> runner,
                                               std::unique_ptr<StepExecutor> executor, const Tokenizer* tokenizer,
                                               EngineOptions options) {
    PENSTOCK_CHECK(runner != nullptr);
    PENSTOCK_CHECK(executor != nullptr);
    if (!runner->model().is_first_stage()) {
        return invalid_argument("the engine's runner must hold the model's first layers (pipeline stage 0)");
    }
    if (options.scheduler.max_context_len == 0) {
        options.scheduler.max_context_len = runner->model().config().max_position_embeddings;
    }
    std::optional<scheduler::ChunkCostModel> cost = options.cost_model;
    PENSTOCK_ASSIGN_OR_RETURN(std::unique_ptr<scheduler::Scheduler> sched,
                              scheduler::Scheduler::create(options.scheduler, &runner->page_pool(), std::move(cost)));
    const DisaggOptions::Mode mode = options.disagg.mode;
    disagg::KvLayout layout;
    uint64_t deployment_fingerprint = 0;
    if (mode != DisaggOptions::Mode::kNone) {
        const std::string what = "--disaggregation-mode " + std::string(disagg_mode_name(mode)) + ": ";
        const int64_t stages = executor->n_stages();
        if (stages != options.disagg.pipeline_stages) {
            return invalid_argument(what + "the executor runs " + std::to_string(stages) +
                                    " pipeline stages, the "
                                    "disaggregation options say " +
                                    std::to_string(options.disagg.pipeline_stages));
        }
        if (stages > 1 && mode != DisaggOptions::Mode::kPrefill) {
            return unimplemented(what + "the decode end runs as one pipeline stage (the prefill end may have several)");
        }
        if (stages == 1 && !runner->model().is_last_stage()) {
            return invalid_argument(what + "the runner holds some of the layers and there are no other stages");
        }
        PENSTOCK_ASSIGN_OR_RETURN(layout, disagg_kv_layout(*runner, what));
        // The whole deployment's buffers: each key once (the decode end holds every layer, and so checks the aux
        // record's fingerprint against its own).
        disagg::KvLayout all = layout;
        for (const disagg::KvBuffer& b : options.disagg.other_stages.buffers) all.buffers.push_back(b);
        std::vector<uint64_t> keys;
        for (const disagg::KvBuffer& b : all.buffers) keys.push_back(b.key);
        std::sort(keys.begin(), keys.end());
        if (std::adjacent_find(keys.begin(), keys.end()) != keys.end()) {
            return invalid_argument(what + "two pipeline stages list the same KV buffer (layer " +
                                    std::to_string(*std::adjacent_find(keys.begin(), keys.end()) / 8) + ")");
        }
        deployment_fingerprint = all.fingerprint();
        PENSTOCK_RETURN_IF_ERROR(disagg::validate(options.disagg.timeouts));
        if (mode == DisaggOptions::Mode::kPrefill && !options.disagg.resolve_destination) {
            return invalid_argument(what + "the prefill end needs a way to reach the decode end's bootstrap");
        }
        if (options.disagg.transfer_queues < 1 || options.disagg.transfer_queues > 64) {
            return invalid_argument(what + "--disaggregation-transfer-queues must be in [1, 64]");
        }
    }
    std::unique_ptr<Engine> e(
        new Engine(std::move(runner), std::move(executor), tokenizer, std::move(options), std::move(sched)));
    e->deployment_fingerprint_ = deployment_fingerprint;
    e->deployment_buffers_ = layout.buffers.size() + e->options_.disagg.other_stages.buffers.size();
    if (mode == DisaggOptions::Mode::kDecode) {
        PENSTOCK_ASSIGN_OR_RETURN(e->xfer_engine_, disagg::make_transfer_engine(e->options_.disagg.transfer_backend));
        PENSTOCK_ASSIGN_OR_RETURN(e->receiver_, disagg::KvReceiver::create(e->xfer_engine_.get(), std::move(layout),
                                                                           e->options_.disagg.timeouts));
    } else if (mode == DisaggOptions::Mode::kPrefill) {
        for (int q = 0; q < e->options_.disagg.transfer_queues; ++q) {
            auto queue = std::make_unique<TransferQueue>();
            PENSTOCK_ASSIGN_OR_RETURN(queue->engine, disagg::make_transfer_engine(e->options_.disagg.transfer_backend));
            queue->sender = std::make_unique<disagg::KvSender>(queue->engine.get(), layout);
            queue->rooms = std::make_unique<disagg::RoomTable>(e->options_.disagg.timeouts);
            e->xfer_queues_.push_back(std::move(queue));
        }
    }
    return e;
}

Engine::Engine(std::unique_ptr<runtime::ModelRunner> runner, std::unique_ptr<StepExecutor> executor,
               const Tokenizer* tokenizer, EngineOptions options, std::unique_ptr<scheduler::Scheduler> sched)
    : runner_(std::move(runner)),
      executor_(std::move(executor)),
      tokenizer_(tokenizer),
      options_(std::move(options)),
      sched_(std::move(sched)),
      n_pages_(runner_->page_pool().n_pages()),
      max_context_(options_.scheduler.max_context_len) {
    metrics_.kv_pages_total = n_pages_;
    heartbeat_ns_ = Clock::now().time_since_epoch().count();
}

Engine::~Engine() { stop(); }

void Engine::start() {
    PENSTOCK_CHECK(!thread_.joinable()) << "engine started twice";
    heartbeat_ns_ = Clock::now().time_since_epoch().count();
    thread_ = std::thread([this] { loop(); });
    for (size_t q = 0; q < xfer_queues_.size(); ++q) {
        xfer_queues_[q]->thread = std::thread([this, q] { transfer_loop(q); });
    }
}

void Engine::stop() {
    accepting_ = false;
    {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    {
        std::lock_guard<std::mutex> lock(xfer_mu_);
        xfer_stopping_ = true;
    }
    xfer_cv_.notify_all();
    for (auto& q : xfer_queues_) {
        if (q->thread.joinable()) q->thread.join();
    }
}

Clock::time_point Engine::last_heartbeat() const { return Clock::time_point(Clock::duration(heartbeat_ns_.load())); }

EngineMetrics Engine::metrics() const {
    std::lock_guard<std::mutex> lock(metrics_mu_);
    return metrics_;
}

Status Engine::validate_request(const GenerateRequest& r) const {
    const int64_t vocab = runner_->model().config().vocab_size;
    if (r.prompt.empty()) return invalid_argument("the prompt is empty");
    for (int32_t t : r.prompt) {
        if (t < 0 || t >= vocab) {
            return invalid_argument("token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                    std::to_string(vocab) + ")");
        }
    }
    const GenerateParams& p = r.params;
    if (p.max_new_tokens < 1) return invalid_argument("max_new_tokens must be >= 1");
    if (r.bootstrap_room && options_.disagg.mode == DisaggOptions::Mode::kNone) {
        return invalid_argument("bootstrap_room: this server is not in a disaggregation mode");
    }
    PENSTOCK_RETURN_IF_ERROR(validate(p.sampling));
    for (const auto& [t, b] : p.sampling.logit_bias) {
        if (t >= vocab) return invalid_argument("logit_bias: " + std::to_string(t) + " is not a token id");
    }
    if (p.min_new_tokens < 0 || p.min_new_tokens > p.max_new_tokens) {
        return invalid_argument("min_new_tokens must be in [0, max_new_tokens]");
    }
    if (p.top_logprobs < 0 || p.top_logprobs > runtime::kMaxTopLogprobs) {
        return invalid_argument("top_logprobs must be in [0, " + std::to_string(runtime::kMaxTopLogprobs) + "]");
    }
    if (p.logprob_start_len < -1 || p.logprob_start_len >= static_cast<int64_t>(r.prompt.size())) {
        return invalid_argument("logprob_start_len must be -1 (none) or a prompt position below " +
                                std::to_string(r.prompt.size()));
    }
    if (p.logprob_start_len >= 0 && r.bootstrap_room && options_.disagg.mode == DisaggOptions::Mode::kDecode) {
        return invalid_argument("logprob_start_len: the prefill server computes the prompt, not the decode server");
    }
    for (int32_t t : p.stop_token_ids) {
        if (t < 0 || t >= vocab) return invalid_argument("stop_token_ids: " + std::to_string(t) + " is not a token id");
    }
    if (static_cast<int64_t>(p.stop.size()) > options_.max_stop_strings) {
        return invalid_argument("at most " + std::to_string(options_.max_stop_strings) + " stop strings");
    }
    for (const std::string& s : p.stop) {
        if (s.empty()) return invalid_argument("a stop string is empty");
        if (static_cast<int64_t>(s.size()) > options_.max_stop_string_bytes) {
            return invalid_argument("a stop string is longer than " + std::to_string(options_.max_stop_string_bytes) +
                                    " bytes");
        }
    }
    if (!p.stop.empty() && tokenizer_ == nullptr) {
        return invalid_argument("stop strings need a tokenizer (the server runs with --skip-tokenizer-init)");
    }
    const int64_t total = static_cast<int64_t>(r.prompt.size()) + p.max_new_tokens;
    if (max_context_ > 0 && total > max_context_) {
        return out_of_range("prompt (" + std::to_string(r.prompt.size()) + " tokens) + max_new_tokens (" +
                            std::to_string(p.max_new_tokens) + ") exceeds the context length " +
                            std::to_string(max_context_));
    }
    const int64_t can_give = n_pages_ - scheduler::watermark_pages(options_.scheduler, n_pages_);
    if (kv_cache::pages_for_tokens(total) > can_give) {
        return out_of_range("prompt + max_new_tokens = " + std::to_string(total) + " tokens needs more KV pages than " +
                            "the server holds (" + std::to_string(can_give * kv_cache::kPageSize) + " tokens)");
    }
    return ok_status();
}

Result<std::shared_ptr<RequestHandle>> Engine::submit(GenerateRequest r) {
    const auto reject = [&](const std::string& reason, Status s) -> Status {
        std::lock_guard<std::mutex> lock(metrics_mu_);
        ++metrics_.rejected_by_reason[reason];
        return s;
    };
    if (!accepting_) return reject("draining", Status(StatusCode::kUnavailable, "the server is shutting down"));
    if (r.bootstrap_room && options_.disagg.mode == DisaggOptions::Mode::kPrefill) {
        r.params.max_new_tokens = 1;  // the prefill end computes the first token; the decode end generates the rest
    }
    if (Status v = validate_request(r); !v.ok()) {
        return reject(v.code() == StatusCode::kOutOfRange ? "too_long" : "invalid", v);
    }
    const int64_t id = next_id_++;
    auto handle = std::make_shared<RequestHandle>(id);
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return reject("draining", Status(StatusCode::kUnavailable, "the server is shutting down"));
        if (static_cast<int64_t>(inbox_.size()) + n_waiting_snapshot_ >= options_.scheduler.max_queue_size) {
            return reject("queue_full", resource_exhausted("the waiting queue is full (max_queue_size " +
                                                           std::to_string(options_.scheduler.max_queue_size) + ")"));
        }
        if (!r.rid.empty()) {
            if (rids_.count(r.rid) != 0) return reject("invalid", invalid_argument("rid is already in use"));
            rids_[r.rid] = id;
        }
        inbox_.push_back(Pending{.id = id, .request = std::move(r), .handle = handle, .arrival = Clock::now()});
        ++n_live_;
    }
    cv_.notify_all();
    return handle;
}

void Engine::abort(int64_t id, AbortReason reason) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        aborts_.emplace_back(id, reason);
    }
    cv_.notify_all();
}

bool Engine::abort_rid(const std::string& rid, AbortReason reason) {
    int64_t id = 0;
    {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = rids_.find(rid);
        if (it == rids_.end()) return false;
        id = it->second;
        aborts_.emplace_back(id, reason);
    }
    cv_.notify_all();
    return true;
}

bool Engine::absorb_inbox() {
    std::vector<Pending> inbox;
    std::vector<std::pair<int64_t, AbortReason>> aborts;
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return false;
        inbox.swap(inbox_);
        aborts.swap(aborts_);
    }
    for (Pending& p : inbox) {
        auto l = std::make_unique<Live>();
        l->handle = p.handle;
        l->params = p.request.params;
        l->seed = l->params.sampling.seed.value_or(derive_seed(options_.seed, p.id));
        if (tokenizer_ != nullptr)
            l->detok = std::make_unique<DecodeStream>(*tokenizer_, l->params.skip_special_tokens);
        l->rid = p.request.rid;
        l->arrival = p.arrival;
        l->prompt_len = static_cast<int64_t>(p.request.prompt.size());
        if (const int64_t start = l->params.logprob_start_len; start >= 0) {
            // Every entry starts as its prompt token with no value; position 0 keeps it (nothing predicts it).
            for (int64_t pos = start; pos < l->prompt_len; ++pos) {
                l->prompt_lp.push_back(
                    {.chosen = token_logprob(p.request.prompt[static_cast<size_t>(pos)], std::nullopt), .top = {}});
            }
        }
        scheduler::NewRequest nr{
            .id = p.id,
            .prompt = std::move(p.request.prompt),
            .sampling = {.max_new_tokens = l->params.max_new_tokens, .stop_token_ids = l->params.stop_token_ids},
            .arrival = p.arrival,
            .deadline =
                p.request.timeout > Clock::duration::zero() ? p.arrival + p.request.timeout : scheduler::kNoDeadline};
        if (!l->params.ignore_eos) {
            for (int32_t eos : options_.eos_token_ids) nr.sampling.stop_token_ids.push_back(eos);
        }
        const std::optional<uint64_t> room = p.request.bootstrap_room;
        const bool prefilled = room && options_.disagg.mode == DisaggOptions::Mode::kDecode;
        nr.hold_kv_on_finish = room && options_.disagg.mode == DisaggOptions::Mode::kPrefill;
        const bool hold = nr.hold_kv_on_finish;
        if (prefilled && options_.disagg.lazy_allocation) {
            // Claimed, not admitted: the pages are reserved when the prefill end asks for them (serve_claims).
            const Status claim = room_request_.contains(*room) || claims_.contains(*room)
                                     ? invalid_argument("bootstrap_room " + std::to_string(*room) + " is in use")
                                     : ok_status();
            const int64_t id = p.id;
            live_.emplace(id, std::move(l));
            if (!claim.ok()) {
                finish_unscheduled(id, finished_output("error", claim));
                continue;
            }
            claims_.emplace(*room, Claim{.id = id,
                                         .request = std::move(nr),
                                         .deadline = disagg::Clock::now() + options_.disagg.timeouts.waiting});
            std::lock_guard<std::mutex> lock(dest_mu_);
            claimed_rooms_.insert(*room);
            continue;
        }
        const Status st = prefilled ? sched_->add_prefilled_request(std::move(nr)) : sched_->add_request(std::move(nr));
        if (st.ok() && prefilled) {
            live_.emplace(p.id, std::move(l));
            if (const Status e = expect_room(p.id, *room); !e.ok()) {
                // No destination was published, so nothing can write its pages: they are freed at once, and the
                // request ends with the error.
                live_.at(p.id)->error = e;
                (void)sched_->abort(p.id);
                release_held_kv(p.id);
            }
            continue;
        }
        if (st.ok() && hold) {
            prefill_room_[p.id] = *room;
            // The bootstrap runs while the request waits and computes (lazy allocation: only once it is done).
            if (!options_.disagg.lazy_allocation) {
                TransferJob job;
                job.kind = TransferJob::Kind::kResolve;
                job.id = p.id;
                job.room = *room;
                queue_job(std::move(job));
            }
        }
        if (!st.ok()) {
            {
                std::lock_guard<std::mutex> lock(metrics_mu_);
                ++metrics_.rejected_by_reason[st.code() == StatusCode::kResourceExhausted ? "queue_full" : "invalid"];
            }
            RequestOutput out = finished_output("rejected", st);
            out.prompt_tokens = l->prompt_len;
            p.handle->push(std::move(out));
            std::lock_guard<std::mutex> lock(mu_);
            if (!l->rid.empty()) rids_.erase(l->rid);
            --n_live_;
            continue;
        }
        live_.emplace(p.id, std::move(l));
    }
    for (const auto& [id, reason] : aborts) {
        auto it = live_.find(id);
        if (it != live_.end()) {
            auto claim = std::find_if(claims_.begin(), claims_.end(), [&](const auto& c) { return c.second.id == id; });
            if (claim != claims_.end()) {
                {
                    std::lock_guard<std::mutex> lock(dest_mu_);
                    claimed_rooms_.erase(claim->first);
                    wanted_rooms_.erase(claim->first);
                }
                claims_.erase(claim);
                it->second->abort_reason = reason;
                {
                    std::lock_guard<std::mutex> lock(metrics_mu_);
                    ++metrics_.aborted_by_phase["queued"];
                    ++metrics_.aborted_by_reason[std::string(abort_reason_name(reason))];
                }
                finish_unscheduled(
                    id, finished_output("abort", reason == AbortReason::kShutdown
                                                     ? Status(StatusCode::kUnavailable, "the server is shutting down")
                                                     : Status(StatusCode::kCancelled, "the request was aborted")));
                continue;
            }
        }
        const scheduler::Request* r = sched_->find(id);
        if (it == live_.end() || r == nullptr) continue;
        it->second->abort_reason = reason;
        count_abort_phase(*r);
        (void)sched_->abort(id);
    }
    std::lock_guard<std::mutex> lock(mu_);
    n_waiting_snapshot_ = sched_->n_waiting();
    return true;
}

void Engine::loop() {
    while (absorb_inbox()) {
        serve_claims();
        poll_rooms();
        collect_transfers();
        for (int64_t id : sched_->expire_deadlines(Clock::now())) {
            live_.at(id)->abort_reason = AbortReason::kTimeout;
            std::lock_guard<std::mutex> lock(metrics_mu_);
            ++metrics_.aborted_by_phase[live_.at(id)->first_token ? "decode" : "queued_or_prefill"];
        }
        // Ended requests are freed on every rank before the next step is planned (their pages may be reused by it).
        publish_finished();
        // Fill the executor's slots (pipeline: stage 0 runs step k+1 while step k is in later stages). Requests with a
        // step in flight are not planned again until its result is back, except a long prompt's next chunk.
        bool worked = false;
        while (executor_->in_flight() < executor_->slots()) {
            const scheduler::BatchPlan plan = sched_->schedule_step();
            if (plan.empty()) break;
            submit_step(plan);
            worked = true;
        }
        if (!in_flight_.empty()) {
            {
                // What is in flight while this thread waits for the oldest result (the gauge's usual reading).
                const ExecutorStats x = executor_->stats();
                std::lock_guard<std::mutex> lock(metrics_mu_);
                metrics_.executor = x;
            }
            collect_step();
            worked = true;
        }
        publish_finished();
        update_gauges();
        heartbeat_ns_ = Clock::now().time_since_epoch().count();
        if (worked || n_live_ > 0 || disagg_busy() || !quarantine_.empty()) {
            busy_since_check_ = true;
        } else if (busy_since_check_ && options_.idle_invariant_check != InvariantCheck::kOff) {
            // Became idle: every page and state slot must be back (SPEC §6 idle invariant checks).
            busy_since_check_ = false;
            const Status st = check_idle_invariants();
            {
                std::lock_guard<std::mutex> lock(metrics_mu_);
                ++metrics_.idle_checks_total;
                if (!st.ok()) ++metrics_.invariant_violations_total;
            }
            if (!st.ok()) {
                PENSTOCK_LOG_ERROR("idle invariant check failed: {}", st.to_string());
                PENSTOCK_CHECK(options_.idle_invariant_check != InvariantCheck::kAbort)
                    << "idle invariant check failed (--idle-invariant-check abort): " << st.to_string();
            }
        }
        if (!worked) {
            // Rooms waiting for KV or transfers in flight are polled every millisecond.
            std::unique_lock<std::mutex> lock(mu_);
            cv_.wait_for(lock, std::chrono::milliseconds(disagg_busy() ? 1 : 20),
                         [&] { return stopping_ || !inbox_.empty() || !aborts_.empty(); });
        }
    }
    while (!in_flight_.empty()) collect_step();  // steps still in flight finish (every stage must be idle at stop)
    dispatch_stage_sends();
    {
        std::lock_guard<std::mutex> lock(xfer_mu_);
        dispatch_open_ = false;  // a KV send queued from now on fails at once (no stage would ever get it)
    }
    dispatch_stage_sends();
    shutdown_all();
    const Status stopped = executor_->stop();
    if (!stopped.ok()) PENSTOCK_LOG_ERROR("stopping the other ranks failed: {}", stopped.to_string());
}

Status Engine::check_idle_invariants() const {
    PENSTOCK_RETURN_IF_ERROR(sched_->check_invariants());
    if (const int64_t used = runner_->page_pool().n_used(); used != 0) {
        return internal_error(std::to_string(used) + " KV pages in use with no live request");
    }
    if (const int64_t slots = runner_->cache().n_admitted(); slots != 0) {
        return internal_error(std::to_string(slots) + " state slots admitted with no live request");
    }
    return ok_status();
}

void Engine::count_abort_phase(const scheduler::Request& r) {
    const char* phase = "decode";
    switch (r.state()) {
        case scheduler::RequestState::kWaiting:
            phase = "queued";
            break;
        case scheduler::RequestState::kPrefilling:
            phase = "prefill";
            break;
        case scheduler::RequestState::kDecoding:
        case scheduler::RequestState::kFinished:
        case scheduler::RequestState::kAborted:
            break;
    }
    std::lock_guard<std::mutex> lock(metrics_mu_);
    ++metrics_.aborted_by_phase[phase];
}

void Engine::fail_request(int64_t id, const Status& error) {
    Live& l = *live_.at(id);
    l.error = error;
    l.abort_reason = AbortReason::kStepFailure;
    if (sched_->find(id) != nullptr) (void)sched_->abort(id);
}

struct Engine::InFlightStep {
    int64_t step_id = 0;
    int64_t admitted_tokens = 0;
    bool failed = false;  // the step failed as a whole and its sequences were re-submitted one by one
    // Executor submissions holding the step's sequences, in submission order: the request id of each sampled
    // sequence (= each logit row: engine steps sample every kLast row).
    std::vector<std::vector<int64_t>> parts;
    std::vector<std::vector<std::pair<int64_t, int64_t>>> scored;  // per part: prompt-scored sequences
};

Status Engine::submit_part(const StepInput& in, const scheduler::BatchPlan& plan, InFlightStep* step) {
    if (options_.step_fault) PENSTOCK_RETURN_IF_ERROR(options_.step_fault(plan));
    if (in.batch.seqs.empty()) return ok_status();
    Status st;
    try {
        st = executor_->submit(in);
    } catch (const std::exception& ex) {
        st = internal_error(std::string("forward step failed: ") + ex.what());
    }
    PENSTOCK_CHECK(st.ok() || executor_->isolates_failures())
        << "step " << plan.step_id << " failed on a multi-rank executor, which cannot recover: " << st.to_string();
    if (!st.ok()) return st;
    std::vector<int64_t> sampled;
    std::vector<std::pair<int64_t, int64_t>> scored;  // (request, the position its chunk's first row scores)
    for (size_t i = 0; i < in.batch.seqs.size(); ++i) {
        if (in.sampling[i].sample) sampled.push_back(in.batch.seqs[i].request_id);
        if (in.sampling[i].prompt_logprobs) {
            scored.emplace_back(in.batch.seqs[i].request_id, in.batch.seqs[i].prefix_len + 1);
        }
    }
    step->parts.push_back(std::move(sampled));
    step->scored.push_back(std::move(scored));
    return ok_status();
}

void Engine::submit_step(const scheduler::BatchPlan& plan) {
    StepInput in;
    in.return_logits = static_cast<bool>(options_.logits_observer);
    std::vector<const scheduler::PlanEntry*> entry_of;  // plan entry of each batch sequence
    InFlightStep step{.step_id = plan.step_id, .admitted_tokens = 0, .failed = false, .parts = {}, .scored = {}};
    for (const scheduler::PlanEntry& e : plan.entries) {
        if (e.admitted) {
            step.admitted_tokens += e.prompt_len;
            if (Status st = runner_->cache().admit(e.request_id); !st.ok()) {
                fail_request(e.request_id, st);
                continue;
            }
        }
        models::SeqChunk c;
        c.request_id = e.request_id;
        c.token_ids = e.token_ids;
        c.prefix_len = e.prefix_len;
        c.prompt_len = e.prompt_len;
        c.pages = &sched_->page_table(e.request_id);
        c.logits = e.logits == scheduler::ChunkLogits::kLast ? models::LogitsMode::kLast : models::LogitsMode::kNone;
        // The token this row yields is the request's n_generated-th output (a request whose final chunk or decode is
        // in flight is not planned again, so the count is final).
        Live& l = *live_.at(e.request_id);
        runtime::SeqSampling sampling;
        if (c.logits == models::LogitsMode::kLast) {
            const scheduler::Request& req = *sched_->find(e.request_id);
            sampling = seq_sampling(l.params.sampling, l.seed, req.n_generated());
            sampling.top_logprobs = l.params.return_logprob ? l.params.top_logprobs : 0;
            if (sampling.presence_penalty != 0.0f || sampling.frequency_penalty != 0.0f ||
                sampling.repetition_penalty != 1.0f) {
                sampling.history = req.generated();  // the penalties count the output so far
            }
            if (req.n_generated() < l.params.min_new_tokens) sampling.banned = req.sampling().stop_token_ids;
            if (sampling.repetition_penalty != 1.0f) {
                if (l.prompt_ids.empty()) {  // the prompt's distinct ids, once per request
                    l.prompt_ids.assign(req.prompt().begin(), req.prompt().end());
                    std::sort(l.prompt_ids.begin(), l.prompt_ids.end());
                    l.prompt_ids.erase(std::unique(l.prompt_ids.begin(), l.prompt_ids.end()), l.prompt_ids.end());
                }
                sampling.prompt_tokens = l.prompt_ids;
            }
        }
        // Prompt log-probabilities: a prompt chunk whose rows score a position from logprob_start_len on computes a
        // row per token; row j scores position prefix_len + j + 1.
        const int64_t n = static_cast<int64_t>(c.token_ids.size());
        const int64_t last_scored = std::min(c.prefix_len + n, c.prompt_len - 1);
        if (l.params.logprob_start_len >= 0 && c.prefix_len < c.prompt_len &&
            last_scored >= std::max<int64_t>(l.params.logprob_start_len, 1) && last_scored > c.prefix_len) {
            c.logits = models::LogitsMode::kAll;
            sampling.prompt_logprobs = true;
            sampling.top_logprobs = l.params.top_logprobs;
            const std::span<const int32_t> prompt = sched_->find(e.request_id)->prompt();
            sampling.next_token = c.prefix_len + n < c.prompt_len ? prompt[static_cast<size_t>(c.prefix_len + n)] : -1;
        }
        in.sampling.push_back(sampling);
        in.batch.seqs.push_back(std::move(c));
        entry_of.push_back(&e);
    }
    const Status fault = submit_part(in, plan, &step);
    if (!fault.ok()) {
        // Isolate the failure: submit each sequence alone (its KV positions are rewritten with the same values), so
        // only the requests whose own forward fails are failed (RELIABILITY T3).
        PENSTOCK_LOG_WARN("step {} failed ({}); re-running its {} sequence(s) one by one", plan.step_id,
                          fault.to_string(), in.batch.seqs.size());
        step.failed = true;
        for (size_t k = 0; k < in.batch.seqs.size(); ++k) {
            StepInput one{.batch = {}, .sampling = {in.sampling[k]}, .return_logits = in.return_logits};
            one.batch.seqs.push_back(in.batch.seqs[k]);
            scheduler::BatchPlan sub;
            sub.step_id = plan.step_id;
            sub.entries.push_back(*entry_of[k]);
            const Status st = in.batch.seqs.size() > 1 ? submit_part(one, sub, &step) : fault;
            if (!st.ok()) fail_request(in.batch.seqs[k].request_id, st);
        }
    }
    in_flight_.push_back(std::move(step));
}

void Engine::collect_step() {
    InFlightStep step = std::move(in_flight_.front());
    in_flight_.pop_front();
    const int64_t vocab = runner_->model().config().vocab_size;
    scheduler::StepResult result{.step_id = step.step_id, .tokens = {}};
    std::vector<runtime::Sampled> sampled;  // per result token: its log-probability and alternatives
    for (size_t part = 0; part < step.parts.size(); ++part) {
        const std::vector<int64_t>& ids = step.parts[part];
        Result<runtime::StepOutput> out = executor_->collect();
        PENSTOCK_CHECK(out.ok()) << "collecting step " << step.step_id << " failed: " << out.status().to_string();
        PENSTOCK_CHECK_EQ(out->tokens.size(), ids.size()) << "step " << step.step_id;
        if (options_.logits_observer && out->logits.defined() && out->prompt.empty()) {  // sampled rows only
            PENSTOCK_CHECK_EQ(out->logits.size(0), static_cast<int64_t>(ids.size()));
            for (size_t i = 0; i < ids.size(); ++i) {
                options_.logits_observer(
                    ids[i], std::span<const float>(out->logits.ptr<const float>() + static_cast<int64_t>(i) * vocab,
                                                   static_cast<size_t>(vocab)));
            }
        }
        PENSTOCK_CHECK_EQ(out->prompt.size(), step.scored[part].size()) << "step " << step.step_id;
        for (size_t q = 0; q < out->prompt.size(); ++q) {
            const auto [id, first] = step.scored[part][q];
            auto it = live_.find(id);
            if (it == live_.end() || sched_->find(id) == nullptr) continue;
            store_prompt_logprobs(*it->second, first, out->prompt[q]);
        }
        for (size_t i = 0; i < ids.size(); ++i) {
            // A request that ended while its step was in flight (abort, deadline, stop string) drops its token.
            if (sched_->find(ids[i]) == nullptr) continue;
            result.tokens.push_back({.request_id = ids[i], .token_id = out->tokens[i]});
            sampled.push_back(
                {.token = out->tokens[i],
                 .logprob = out->logprobs[i],
                 .top = i < out->top.size() ? std::move(out->top[i]) : std::vector<runtime::TopLogprob>{}});
        }
    }
    sched_->on_step_done(result);
    for (size_t i = 0; i < result.tokens.size(); ++i) {
        on_token(result.tokens[i].request_id, result.tokens[i].token_id, &sampled[i]);
    }
    std::lock_guard<std::mutex> lock(metrics_mu_);
    ++metrics_.steps_total;
    if (step.failed) ++metrics_.step_failures_total;
    metrics_.prompt_tokens_total += step.admitted_tokens;
    metrics_.generation_tokens_total += static_cast<int64_t>(result.tokens.size());
}

TokenLogprob Engine::token_logprob(int32_t token, std::optional<float> logprob) const {
    return TokenLogprob{.token = token,
                        .logprob = logprob,
                        .text = tokenizer_ != nullptr ? tokenizer_->decode(std::span(&token, 1), false) : ""};
}

void Engine::store_prompt_logprobs(Live& l, int64_t first, const std::vector<runtime::Sampled>& scored) {
    const int64_t start = l.params.logprob_start_len;
    for (size_t j = 0; j < scored.size(); ++j) {
        const int64_t pos = first + static_cast<int64_t>(j);
        if (pos < start || pos >= l.prompt_len) continue;
        OutputLogprob& o = l.prompt_lp[static_cast<size_t>(pos - start)];
        o.chosen = token_logprob(scored[j].token, scored[j].logprob);
        o.top.clear();
        for (const runtime::TopLogprob& a : scored[j].top) o.top.push_back(token_logprob(a.token, a.logprob));
    }
}

bool Engine::is_stop_token(const Live& l, int32_t token) const {
    const auto has = [token](const std::vector<int32_t>& v) { return std::find(v.begin(), v.end(), token) != v.end(); };
    return has(l.params.stop_token_ids) || (!l.params.ignore_eos && has(options_.eos_token_ids));
}

void Engine::on_token(int64_t id, int32_t token, const runtime::Sampled* sampled) {
    Live& l = *live_.at(id);
    if (l.stopped_by_string) return;
    const Clock::time_point now = Clock::now();
    ++l.n_generated;
    if (!l.first_token) {
        l.first_token = now;
        std::lock_guard<std::mutex> lock(metrics_mu_);
        metrics_.ttft_s.observe(seconds(now - l.arrival));
    }
    RequestOutput out;
    out.token_ids = {token};
    if (l.params.return_logprob) {
        OutputLogprob& o = out.logprobs.emplace_back();
        o.chosen = token_logprob(token, sampled != nullptr ? std::optional<float>(sampled->logprob) : std::nullopt);
        if (sampled != nullptr) {
            for (const runtime::TopLogprob& a : sampled->top) o.top.push_back(token_logprob(a.token, a.logprob));
        }
    }
    if (l.params.logprob_start_len >= 0 && !l.prompt_lp_published) {
        out.prompt_logprobs = std::move(l.prompt_lp);
        l.prompt_lp_published = true;
    }
    if (l.detok && is_stop_token(l, token)) {
        // The token that ends the request (EOS or a stop_token_ids entry) is in output_ids but not in the text, as
        // SGLang trims it; with skip_special_tokens false its text would otherwise end every output. What is held
        // back goes out with the finish event.
    } else if (l.detok) {
        l.held += l.detok->step(token);
        const std::vector<std::string>& stops = l.params.stop;
        size_t at = std::string::npos;
        for (const std::string& s : stops) {
            const size_t pos = l.held.find(s);
            if (pos != std::string::npos && (at == std::string::npos || pos < at)) {
                at = pos;
                l.matched_stop = s;
            }
        }
        if (at != std::string::npos) {
            out.text = l.held.substr(0, at);
            l.held.clear();
            l.stopped_by_string = true;
            if (sched_->find(id) != nullptr) (void)sched_->abort(id);
        } else {
            const size_t keep = held_prefix_tail(l.held, stops);
            out.text = l.held.substr(0, l.held.size() - keep);
            l.held.erase(0, l.held.size() - keep);
        }
    }
    out.prompt_tokens = l.prompt_len;
    out.completion_tokens = l.n_generated;
    out.ttft_s = seconds(*l.first_token - l.arrival);
    out.e2e_s = seconds(now - l.arrival);
    l.handle->push(std::move(out));
}

void Engine::publish_finished() {
    std::vector<int64_t> released;
    for (std::unique_ptr<scheduler::Request>& r : sched_->take_finished()) {
        const int64_t id = r->id();
        // A request whose pages are held for a transfer keeps its state slot too (KDA state goes with the pages):
        // release_held_kv() frees both.
        const bool held = sched_->held_pages(id).ok();
        if (!held) runner_->cache().release(id);
        // Under pipeline parallelism the other stages keep a held request's pages for their own KV sends too; they
        // free them when the transfer is over (collect_transfers).
        if (!held || options_.disagg.pipeline_stages == 1) released.push_back(id);
        if (auto room = prefill_room_.find(id); room != prefill_room_.end()) {
            // Finished: its pages are held for the transfer (an aborted one freed them: the decode end times out).
            if (r->state() == scheduler::RequestState::kFinished && !r->generated().empty()) {
                queue_transfer(id, room->second, r->generated().front());
            } else if (!options_.disagg.lazy_allocation) {
                TransferJob job;
                job.kind = TransferJob::Kind::kForget;
                job.id = id;
                job.room = room->second;
                queue_job(std::move(job));
            }
            prefill_room_.erase(room);
        }
        auto it = live_.find(id);
        PENSTOCK_CHECK(it != live_.end()) << "finished request " << id << " has no engine state";
        Live& l = *it->second;
        RequestOutput out = finished_output("", ok_status());
        if (l.stopped_by_string) {
            out.finish_reason = "stop";
            out.matched_stop = l.matched_stop;
        } else {
            if (l.detok) out.text = l.held + l.detok->flush();
            switch (r->finish_reason()) {
                case FinishReason::kLength:
                    out.finish_reason = "length";
                    break;
                case FinishReason::kStop:
                    out.finish_reason = "stop";
                    if (!r->generated().empty()) out.matched_stop_token = r->generated().back();
                    break;
                case FinishReason::kTimeout:
                    out.finish_reason = "timeout";
                    out.error = Status(StatusCode::kDeadlineExceeded, "the request timed out");
                    break;
                case FinishReason::kRejected:
                    out.finish_reason = "rejected";
                    out.error = out_of_range("the request needs more KV pages than the server holds");
                    break;
                case FinishReason::kAbort:
                case FinishReason::kNone:
                    out.finish_reason = l.error.ok() ? "abort" : "error";
                    out.error = !l.error.ok() ? l.error
                                : l.abort_reason == AbortReason::kShutdown
                                    ? Status(StatusCode::kUnavailable, "the server is shutting down")
                                    : Status(StatusCode::kCancelled, "the request was aborted");
                    break;
            }
        }
        out.prompt_tokens = l.prompt_len;
        out.completion_tokens = l.n_generated;
        const Clock::time_point now = Clock::now();
        out.ttft_s = l.first_token ? seconds(*l.first_token - l.arrival) : 0.0;
        out.e2e_s = seconds(now - l.arrival);
        {
            std::lock_guard<std::mutex> lock(metrics_mu_);
            ++metrics_.finished_by_reason[out.finish_reason];
            if (l.abort_reason && !l.stopped_by_string) {
                ++metrics_.aborted_by_reason[std::string(abort_reason_name(*l.abort_reason))];
            }
            metrics_.e2e_s.observe(out.e2e_s);
        }
        l.handle->push(std::move(out));
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (!l.rid.empty()) rids_.erase(l.rid);
        }
        live_.erase(it);
        --n_live_;
    }
    if (released.empty()) return;
    const Status st = executor_->release(released);
    PENSTOCK_CHECK(st.ok()) << "freeing " << released.size()
                            << " request(s) on the other ranks failed: " << st.to_string();
}

void Engine::shutdown_all() {
    std::vector<Pending> inbox;
    {
        std::lock_guard<std::mutex> lock(mu_);
        inbox.swap(inbox_);
        for (const Pending& p : inbox) {
            if (!p.request.rid.empty()) rids_.erase(p.request.rid);
        }
    }
    for (Pending& p : inbox) {
        p.handle->push(finished_output("abort", Status(StatusCode::kUnavailable, "the server is shutting down")));
        --n_live_;
    }
    for (auto& [room, claim] : std::exchange(claims_, {})) {
        finish_unscheduled(claim.id,
                           finished_output("abort", Status(StatusCode::kUnavailable, "the server is shutting down")));
    }
    for (auto& [id, l] : live_) {
        l->abort_reason = AbortReason::kShutdown;
        if (sched_->find(id) != nullptr) (void)sched_->abort(id);
    }
    publish_finished();
    update_gauges();
}

void Engine::update_gauges() {
    int64_t inbox = 0;
    {
        std::lock_guard<std::mutex> lock(mu_);
        inbox = static_cast<int64_t>(inbox_.size());
        n_waiting_snapshot_ = sched_->n_waiting();
    }
    std::lock_guard<std::mutex> lock(metrics_mu_);
    metrics_.waiting = sched_->n_waiting() + inbox;
    metrics_.running = sched_->n_running();
    metrics_.kv_pages_used = runner_->page_pool().n_used();
    metrics_.executor = executor_->stats();
    if (receiver_ != nullptr) {
        metrics_.disagg_rooms.clear();
        metrics_.disagg_rooms["claimed"] = static_cast<int64_t>(claims_.size());
        for (const disagg::RoomState st : {disagg::RoomState::kBootstrapping, disagg::RoomState::kWaitingForInput,
                                           disagg::RoomState::kTransferring}) {
            metrics_.disagg_rooms[std::string(disagg::room_state_name(st))] =
                static_cast<int64_t>(receiver_->rooms().count(st));
        }
    }
}

}  // namespace penstock::engine
