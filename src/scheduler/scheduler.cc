// Scheduler: queue and running-set bookkeeping around the PrefillAdder; page reservation and release.
#include "scheduler/scheduler.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/check.h"

namespace penstock::scheduler {

Result<std::unique_ptr<Scheduler>> Scheduler::create(const SchedulerConfig& config, kv_cache::PagePool* pool,
                                                     std::optional<ChunkCostModel> cost_model) {
    PENSTOCK_RETURN_IF_ERROR(validate(config));
    PENSTOCK_CHECK(pool != nullptr);
    if (config.enable_dynamic_chunking && chunking_enabled(config) && !cost_model) {
        return invalid_argument("enable_dynamic_chunking needs a cost model counted from the loaded model");
    }
    return std::unique_ptr<Scheduler>(new Scheduler(config, pool, std::move(cost_model)));
}

Scheduler::Scheduler(const SchedulerConfig& config, kv_cache::PagePool* pool, std::optional<ChunkCostModel> cost_model)
    : config_(config), pool_(pool), tables_(pool), adder_(config, std::move(cost_model)), order_(config.policy) {}

Request* Scheduler::live(int64_t id) {
    auto it = live_.find(id);
    return it == live_.end() ? nullptr : it->second.request.get();
}

const Request* Scheduler::find(int64_t id) const {
    auto it = live_.find(id);
    return it == live_.end() ? nullptr : it->second.request.get();
}

int64_t Scheduler::n_mid_chunk() const {
    return std::count_if(running_.begin(), running_.end(), [](const Request* r) { return r->is_mid_chunk(); });
}

Status Scheduler::validate_new(const NewRequest& r) const {
    const std::string who = "request " + std::to_string(r.id) + ": ";
    if (r.prompt.empty()) return invalid_argument(who + "empty prompt");
    if (r.sampling.max_new_tokens < 1) {
        return invalid_argument(who + "max_new_tokens = " + std::to_string(r.sampling.max_new_tokens) +
                                " (must be >= 1)");
    }
    const int64_t total = static_cast<int64_t>(r.prompt.size()) + r.sampling.max_new_tokens;
    if (config_.max_context_len > 0 && total > config_.max_context_len) {
        return invalid_argument(who + "prompt " + std::to_string(r.prompt.size()) + " + max_new_tokens " +
                                std::to_string(r.sampling.max_new_tokens) + " = " + std::to_string(total) +
                                " tokens exceeds the max context of " + std::to_string(config_.max_context_len));
    }
    const int64_t need = kv_cache::pages_for_tokens(total);
    const int64_t can_give = pool_->n_pages() - watermark_pages(config_, pool_->n_pages());
    if (need > can_give) {
        return out_of_range(who + "needs " + std::to_string(need) + " KV pages for " + std::to_string(total) +
                            " tokens (prompt + max_new_tokens) but the pool can give at most " +
                            std::to_string(can_give) + " pages; it can never be admitted");
    }
    if (live_.count(r.id) != 0 || held_.count(r.id) != 0) return invalid_argument(who + "id already in use");
    return ok_status();
}

Status Scheduler::add_request(NewRequest r) {
    PENSTOCK_RETURN_IF_ERROR(validate_new(r));
    const std::string who = "request " + std::to_string(r.id) + ": ";
    if (n_waiting() >= config_.max_queue_size) {
        return resource_exhausted(who + "waiting queue full (max_queue_size " + std::to_string(config_.max_queue_size) +
                                  ")");
    }
    const bool hold = r.hold_kv_on_finish;
    auto req = std::make_unique<Request>(r.id, std::move(r.prompt), std::move(r.sampling), r.arrival, r.deadline);
    waiting_.push_back(req.get());
    live_.emplace(r.id, Live{.request = std::move(req), .serial = next_serial_++, .hold_kv_on_finish = hold});
    return ok_status();
}

Status Scheduler::add_prefilled_request(NewRequest r) {
    PENSTOCK_RETURN_IF_ERROR(validate_new(r));
    const std::string who = "request " + std::to_string(r.id) + ": ";
    if (n_running() >= config_.max_running_requests) {
        return resource_exhausted(who + "max_running_requests (" + std::to_string(config_.max_running_requests) +
                                  ") requests are running");
    }
    const int64_t total = static_cast<int64_t>(r.prompt.size()) + r.sampling.max_new_tokens;
    const int64_t need = kv_cache::pages_for_tokens(total);
    if (pool_->n_free() - need < watermark_pages(config_, pool_->n_pages())) {
        return resource_exhausted(who + "needs " + std::to_string(need) + " KV pages, " +
                                  std::to_string(pool_->n_free()) + " free");
    }
    auto req = std::make_unique<Request>(r.id, std::move(r.prompt), std::move(r.sampling), r.arrival, r.deadline);
    Request* p = req.get();
    PENSTOCK_RETURN_IF_ERROR(tables_.reserve(p->id(), p->reserved_kv_tokens()));
    p->admit();
    p->schedule_prefill(p->prompt_len());  // never planned: the positions arrive from the prefill server
    running_.push_back(p);
    awaiting_kv_.insert(p->id());
    live_.emplace(p->id(), Live{.request = std::move(req), .serial = next_serial_++});
    return ok_status();
}

Result<bool> Scheduler::complete_transfer(int64_t id, int32_t first_token) {
    Request* r = live(id);
    if (r == nullptr) return not_found("request " + std::to_string(id) + " is not live");
    if (!awaiting_kv_.contains(id)) {
        return failed_precondition("request " + std::to_string(id) + " is not waiting for transferred KV");
    }
    awaiting_kv_.erase(id);
    r->complete_positions(r->prompt_len());
    if (!r->append_token(first_token)) return false;
    retire(id);
    return true;
}

Result<std::vector<int32_t>> Scheduler::held_pages(int64_t id) const {
    auto it = held_.find(id);
    if (it == held_.end()) return not_found("request " + std::to_string(id) + " holds no pages");
    return it->second.pages;
}

Status Scheduler::release_held(int64_t id) {
    auto it = held_.find(id);
    if (it == held_.end()) return not_found("request " + std::to_string(id) + " holds no pages");
    pool_->release(it->second.pages);
    held_.erase(it);
    return ok_status();
}

void Scheduler::retire(int64_t id) {
    auto it = live_.find(id);
    PENSTOCK_CHECK(it != live_.end()) << "retire unknown request " << id;
    Request* r = it->second.request.get();
    PENSTOCK_CHECK(r->is_terminal()) << "retire request " << id << " in state " << request_state_name(r->state());
    std::erase(waiting_, r);
    std::erase(running_, r);
    const bool kv_incoming = awaiting_kv_.erase(id) != 0;
    if ((it->second.hold_kv_on_finish && r->state() == RequestState::kFinished) || kv_incoming) {
        // Prefill end: the KV transfer reads them. Decode end, a request that ends while its KV is on the way: the
        // prefill server may still write them. Either way release_held() frees them once the transfer is over.
        held_.emplace(id, tables_.detach(id));
    } else {
        tables_.release(id);
    }
    finished_.push_back(std::move(it->second.request));
    live_.erase(it);
}

Status Scheduler::abort(int64_t id) {
    Request* r = live(id);
    if (r == nullptr) return not_found("request " + std::to_string(id) + " is not live");
    r->abort(FinishReason::kAbort);
    retire(id);
    return ok_status();
}

Status Scheduler::set_matched_prefix_len(int64_t id, int64_t n) {
    Request* r = live(id);
    if (r == nullptr) return not_found("request " + std::to_string(id) + " is not live");
    if (r->state() != RequestState::kWaiting) {
        return failed_precondition("request " + std::to_string(id) + " is " +
                                   std::string(request_state_name(r->state())) + ", not waiting");
    }
    if (n < 0 || n > r->prompt_len()) {
        return invalid_argument("matched prefix " + std::to_string(n) + " of a " + std::to_string(r->prompt_len()) +
                                "-token prompt");
    }
    r->set_matched_prefix_len(n);
    return ok_status();
}

std::vector<int64_t> Scheduler::expire_deadlines(TimePoint now) {
    std::vector<int64_t> expired;
    for (const auto* list : {&waiting_, &running_}) {
        for (const Request* r : *list) {
            if (r->deadline() <= now) expired.push_back(r->id());
        }
    }
    for (int64_t id : expired) {
        live(id)->abort(FinishReason::kTimeout);
        retire(id);
    }
    return expired;
}

BatchPlan Scheduler::schedule_step() {
    const std::vector<const Request*> waiting_in_order =
        order_(std::vector<const Request*>(waiting_.begin(), waiting_.end()));
    const Request* mid_chunk = nullptr;
    std::vector<const Request*> decodable;
    for (const Request* r : running_) {
        if (r->is_mid_chunk()) {
            PENSTOCK_CHECK(mid_chunk == nullptr)
                << "requests " << mid_chunk->id() << " and " << r->id() << " are both mid-chunk";
            mid_chunk = r;
        }
        if (r->is_decodable()) decodable.push_back(r);
    }
    BatchPlan plan = adder_({.waiting = waiting_in_order,
                             .mid_chunk = mid_chunk,
                             .decodable = decodable,
                             .n_running = n_running(),
                             .n_free_pages = pool_->n_free(),
                             .n_total_pages = pool_->n_pages()});
    apply_plan(&plan);
    return plan;
}

void Scheduler::apply_plan(BatchPlan* plan) {
    for (const Rejection& rej : plan->rejected) {
        live(rej.request_id)->abort(FinishReason::kRejected);
        retire(rej.request_id);
    }
    if (plan->empty()) return;
    PlannedStep step{.step_id = next_step_id_++, .entries = {}};
    plan->step_id = step.step_id;
    for (PlanEntry& e : plan->entries) {
        Request* r = live(e.request_id);
        PENSTOCK_CHECK(r != nullptr) << "plan names unknown request " << e.request_id;
        if (e.admitted) {
            const Status s = tables_.reserve(r->id(), r->reserved_kv_tokens());
            PENSTOCK_CHECK(s.ok()) << "the adder admitted request " << r->id() << " without pages: " << s.to_string();
            r->admit();
            std::erase(waiting_, r);
            running_.push_back(r);
        }
        switch (e.kind) {
            case EntryKind::kPrefill:
                r->schedule_prefill(e.n_tokens());
                break;
            case EntryKind::kDecode:
                r->schedule_decode();
                break;
        }
        const auto& pages = tables_.table(r->id()).pages;
        const auto n_pages = static_cast<size_t>(kv_cache::pages_for_tokens(e.prefix_len + e.n_tokens()));
        PENSTOCK_CHECK_LE(n_pages, pages.size());
        e.pages.assign(pages.begin(), pages.begin() + static_cast<std::ptrdiff_t>(n_pages));
        step.entries.push_back({.request_id = r->id(),
                                .serial = live_.at(r->id()).serial,
                                .prefix_len = e.prefix_len,
                                .n_tokens = e.n_tokens(),
                                .logits = e.logits});
    }
    in_flight_.push_back(std::move(step));
}

void Scheduler::on_step_done(const StepResult& result) {
    PENSTOCK_CHECK(!in_flight_.empty()) << "result for step " << result.step_id << " with no step in flight";
    PENSTOCK_CHECK_EQ(result.step_id, in_flight_.front().step_id) << "step results must come back in order";
    const PlannedStep step = std::move(in_flight_.front());
    in_flight_.pop_front();
    for (const PlannedEntry& e : step.entries) {
        auto it = live_.find(e.request_id);
        if (it == live_.end() || it->second.serial != e.serial) continue;  // aborted while in flight
        Request* r = it->second.request.get();
        PENSTOCK_CHECK_EQ(r->prefix_len(), e.prefix_len) << "request " << e.request_id;
        r->complete_positions(e.n_tokens);
        if (e.logits == ChunkLogits::kNone) continue;
        auto tok = std::find_if(result.tokens.begin(), result.tokens.end(),
                                [&](const SampledToken& t) { return t.request_id == e.request_id; });
        PENSTOCK_CHECK(tok != result.tokens.end())
            << "step " << step.step_id << " returned no token for request " << e.request_id;
        if (r->append_token(tok->token_id)) retire(e.request_id);
    }
}

std::vector<std::unique_ptr<Request>> Scheduler::take_finished() { return std::exchange(finished_, {}); }

Status Scheduler::check_invariants() const {
    auto broken = [](const std::string& what) { return internal_error("scheduler invariant: " + what); };
    int64_t held = 0;
    for (const auto& [id, t] : held_) held += static_cast<int64_t>(t.pages.size());
    if (tables_.pages_owned() + held != pool_->n_used()) {
        return broken("pages owned by requests " + std::to_string(tables_.pages_owned()) + " + held for transfers " +
                      std::to_string(held) + " != pool pages used " + std::to_string(pool_->n_used()));
    }
    if (tables_.n_requests() != n_running()) {
        return broken(std::to_string(tables_.n_requests()) + " page tables for " + std::to_string(n_running()) +
                      " running requests");
    }
    for (const Request* r : waiting_) {
        if (r->state() != RequestState::kWaiting || tables_.contains(r->id())) {
            return broken("waiting request " + std::to_string(r->id()) + " is " +
                          std::string(request_state_name(r->state())) + " or owns pages");
        }
    }
    for (const Request* r : running_) {
        const bool admitted = r->state() == RequestState::kPrefilling || r->state() == RequestState::kDecoding;
        if (!admitted || !tables_.contains(r->id()) ||
            tables_.table(r->id()).capacity_tokens() < r->reserved_kv_tokens()) {
            return broken("running request " + std::to_string(r->id()) + " is " +
                          std::string(request_state_name(r->state())) + " or lacks its reserved pages");
        }
    }
    if (n_mid_chunk() > 1) return broken(std::to_string(n_mid_chunk()) + " requests mid-chunk");
    if (n_running() > config_.max_running_requests) {
        return broken(std::to_string(n_running()) + " running > max_running_requests " +
                      std::to_string(config_.max_running_requests));
    }
    return ok_status();
}

}  // namespace penstock::scheduler
