// PrefillAdder: one step's admission decisions (see prefill_adder.h for the rules).
#include "scheduler/prefill_adder.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "core/check.h"
#include "kv_cache/page_pool.h"

namespace penstock::scheduler {

std::string_view stop_reason_name(StopReason r) {
    switch (r) {
        case StopReason::kQueueEmpty:
            return "queue_empty";
        case StopReason::kTokenBudget:
            return "token_budget";
        case StopReason::kCostBudget:
            return "cost_budget";
        case StopReason::kNoPages:
            return "no_pages";
        case StopReason::kRunningCap:
            return "running_cap";
        case StopReason::kMicroBatchCap:
            return "micro_batch_cap";
        case StopReason::kChunkSlotBusy:
            return "chunk_slot_busy";
    }
    return "?";
}

// What is left of one step's budgets while the plan is built.
struct PrefillAdder::StepBudget {
    int64_t tokens_left = 0;
    double cost_left = std::numeric_limits<double>::infinity();
    int64_t entries_left = 0;
    int64_t free_pages = 0;  // free pages minus the watermark
    bool has_prefill = false;
    bool mid_chunk_after = false;  // some request stays mid-chunk after this plan
};

PrefillAdder::PrefillAdder(const SchedulerConfig& config, std::optional<ChunkCostModel> cost_model) : config_(config) {
    PENSTOCK_CHECK(validate(config).ok()) << validate(config).to_string();
    if (config.enable_dynamic_chunking && chunking_enabled(config)) {
        PENSTOCK_CHECK(cost_model.has_value()) << "dynamic chunking needs a cost model";
        cost_model_ = std::move(cost_model);
        cost_budget_ = cost_model_->budget(config.dynamic_chunking_budget_tokens.value_or(config.chunked_prefill_size));
    }
}

PrefillAdder::Cut PrefillAdder::next_cut(const Request& r, const StepBudget& b) const {
    const int64_t start = r.scheduled_len();
    const int64_t remaining = r.prompt_len() - start;
    PENSTOCK_CHECK_GT(remaining, 0);
    if (!chunking_enabled(config_)) {
        // Never split; the first prefill of a step runs whole even beyond max_prefill_tokens (SGLang).
        return {.n_tokens = (!b.has_prefill || remaining <= b.tokens_left) ? remaining : 0};
    }
    const int64_t by_tokens = page_aligned_cut(start, remaining, b.tokens_left);
    if (!cost_model_) return {.n_tokens = by_tokens};
    const int64_t fits = cost_model_->max_tokens_within(start, b.cost_left, remaining);
    const int64_t by_cost = page_aligned_cut(start, remaining, std::min(fits, b.tokens_left));
    if (by_cost > 0 || by_tokens == 0) return {.n_tokens = by_cost, .cost_bound = by_cost < by_tokens};
    if (!b.has_prefill) {
        // Progress guarantee: the first prefill of a step takes at least one page even when it costs more.
        return {.n_tokens = page_aligned_cut(start, remaining, std::min(b.tokens_left, kv_cache::kPageSize)),
                .cost_bound = true};
    }
    return {.n_tokens = 0, .cost_bound = true};
}

void PrefillAdder::add_prefill(const Request& r, int64_t n_tokens, bool admitted, StepBudget* b,
                               BatchPlan* plan) const {
    const int64_t start = r.scheduled_len();
    const bool final_chunk = start + n_tokens == r.prompt_len();
    PlanEntry e{.request_id = r.id(),
                .kind = EntryKind::kPrefill,
                .prefix_len = start,
                .token_ids = std::vector<int32_t>(r.prompt().begin() + start, r.prompt().begin() + start + n_tokens),
                .prompt_len = r.prompt_len(),
                .logits = final_chunk ? ChunkLogits::kLast : ChunkLogits::kNone,
                .admitted = admitted,
                .pages = {}};
    plan->entries.push_back(std::move(e));
    plan->n_prefill_tokens += n_tokens;
    b->tokens_left = std::max<int64_t>(b->tokens_left - n_tokens, 0);
    b->entries_left -= 1;
    b->has_prefill = true;
    if (!final_chunk) b->mid_chunk_after = true;
    if (cost_model_) {
        const double c = cost_model_->cost(start, n_tokens);
        b->cost_left -= c;
        plan->predicted_cost += c;
    }
}

BatchPlan PrefillAdder::operator()(const AdderInput& in) const {
    BatchPlan plan;
    const int64_t held_back = watermark_pages(config_, in.n_total_pages);
    StepBudget b{.tokens_left = step_token_budget(config_),
                 .cost_left = cost_model_ ? cost_budget_ : std::numeric_limits<double>::infinity(),
                 .entries_left = micro_batch_cap(config_),
                 .free_pages = in.n_free_pages - held_back};

    // 1. Decode steps: one token each.
    std::vector<PlanEntry> decodes;
    for (const Request* r : in.decodable) {
        PENSTOCK_CHECK(r->is_decodable()) << "request " << r->id();
        const int64_t pos = r->prefix_len();
        const double c = cost_model_ ? cost_model_->cost(pos, 1) : 0.0;
        if (b.entries_left <= 0 || b.tokens_left < 1 || c > b.cost_left) break;
        decodes.push_back({.request_id = r->id(),
                           .kind = EntryKind::kDecode,
                           .prefix_len = pos,
                           .token_ids = {r->generated().back()},
                           .prompt_len = r->prompt_len(),
                           .logits = ChunkLogits::kLast,
                           .admitted = false,
                           .pages = {}});
        plan.n_decode_tokens += 1;
        plan.predicted_cost += c;
        b.tokens_left -= 1;
        b.cost_left -= c;
        b.entries_left -= 1;
    }

    // 2. The mid-chunk request continues first.
    if (in.mid_chunk != nullptr) {
        const Request& r = *in.mid_chunk;
        PENSTOCK_CHECK(r.is_mid_chunk()) << "request " << r.id() << " is not mid-chunk";
        const Cut cut = b.entries_left > 0 ? next_cut(r, b) : Cut{};
        if (cut.n_tokens > 0) {
            add_prefill(r, cut.n_tokens, /*admitted=*/false, &b, &plan);
        } else {
            b.mid_chunk_after = true;
        }
    }

    // 3. Admissions from the waiting queue.
    int64_t n_admitted = 0;
    plan.stop = StopReason::kQueueEmpty;
    for (const Request* rp : in.waiting) {
        const Request& r = *rp;
        PENSTOCK_CHECK(r.state() == RequestState::kWaiting) << "request " << r.id();
        const int64_t need = kv_cache::pages_for_tokens(r.reserved_kv_tokens());
        if (need > in.n_total_pages - held_back) {
            plan.rejected.push_back(
                {.request_id = r.id(),
                 .status = out_of_range("request " + std::to_string(r.id()) + " needs " + std::to_string(need) +
                                        " KV pages (prompt " + std::to_string(r.prompt_len()) + " + max_new_tokens " +
                                        std::to_string(r.sampling().max_new_tokens) +
                                        " tokens) but the pool can give at most " +
                                        std::to_string(in.n_total_pages - held_back) + " pages")});
            continue;
        }
        if (in.n_running + n_admitted >= config_.max_running_requests) {
            plan.stop = StopReason::kRunningCap;
            break;
        }
        if (b.entries_left <= 0) {
            plan.stop = StopReason::kMicroBatchCap;
            break;
        }
        if (need > b.free_pages) {
            plan.stop = StopReason::kNoPages;
            break;
        }
        const Cut cut = next_cut(r, b);
        if (cut.n_tokens == 0) {
            plan.stop = cut.cost_bound ? StopReason::kCostBudget : StopReason::kTokenBudget;
            break;
        }
        if (cut.n_tokens < r.prompt_len() && b.mid_chunk_after) {
            plan.stop = StopReason::kChunkSlotBusy;
            break;
        }
        add_prefill(r, cut.n_tokens, /*admitted=*/true, &b, &plan);
        b.free_pages -= need;
        plan.n_pages_reserved += need;
        ++n_admitted;
    }
    plan.n_admitted = n_admitted;
    for (PlanEntry& e : decodes) plan.entries.push_back(std::move(e));
    return plan;
}

}  // namespace penstock::scheduler
