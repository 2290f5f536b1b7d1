// ModelRunner: executes ForwardBatches for one model stage on one rank: owns the model, its cache, the page pool and
// the request page tables, and the CPU thread pool. Single-threaded API (the scheduler thread calls it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "kv_cache/page_pool.h"
#include "models/model.h"

namespace penstock::runtime {

struct RunnerOptions {
    int64_t n_pages = 1024;  // KV pages of kv_cache::kPageSize tokens
    int n_threads = 0;       // CPU threads for reference kernels; 0 = all cores
    // The device the model was placed on (ModelOptions::placement must come from the same backend); null = the host.
    const kernels::Backend* backend = nullptr;
    // Context parallelism: the cp group (null = none). Layouts then hold this rank's interleaved rows
    // (BatchLayout::build_cp); the model gathers what needs the whole batch.
    parallel::Communicator* cp = nullptr;
};

class ModelRunner final {
public:
    ModelRunner(std::unique_ptr<models::Model> model, const RunnerOptions& options);

    const models::Model& model() const { return *model_; }
    kv_cache::PagePool& page_pool() { return pool_; }
    kv_cache::RequestTables& tables() { return tables_; }
    models::ModelCache& cache() { return *cache_; }
    kernels::Context context() const;
    // Opt-in per-scope timing (kernels/profile.h) of everything run through context() from now on; null = off (the
    // default). Not owned; its device must be this runner's; the caller reads it after synchronize().
    void set_profiler(kernels::Profiler* profiler) { profiler_ = profiler; }
    // Blocks until the work queued on this runner's device stream has finished (no-op on the host).
    void synchronize() const {
        if (backend_ != nullptr) backend_->synchronize();
    }
    // The batch's metadata on this runner's device.
    models::BatchLayout make_layout(const models::ForwardBatch& batch) const;

    // A whole-model forward (this runner must hold every layer): embed, layers, logits for the batch's logit rows.
    Tensor forward(const models::ForwardBatch& batch);

    // Pipeline-stage steps (any layer range). admit() reserves a request's KV pages for total_tokens positions and
    // its non-paged cache state, all or nothing; it is idempotent and grows an existing reservation.
    [[nodiscard]] Status admit(int64_t request_id, int64_t total_tokens);
    void release(int64_t request_id);
    // Admits (or grows) every sequence of the batch on this stage and points its page table at this stage's.
    [[nodiscard]] Status bind(models::ForwardBatch* batch);
    // Runs this stage's layers on act (the first stage embeds the batch tokens into act first).
    void run_layers(const models::ForwardBatch& batch, const models::BatchLayout& layout, models::Activations* act);
    // The last stage's logits for the batch's logit rows, on the host.
    Tensor logits(const models::BatchLayout& layout, const models::Activations& act);

    // Prefills each prompt as a new request (ids 0..n-1 offset by first_request_id), all of them advancing together in
    // a ragged batch: every step takes the next chunk of at most chunk_size tokens (0 = whole prompt) of every
    // unfinished prompt. Returns the logits of every position of every prompt ([len, vocab] each) and releases the
    // requests' pages and cache state. Fails (nothing leaked) when the prompts do not fit in the page pool or the
    // cache's state slots (ModelCache::admit), or an id is out of range.
    [[nodiscard]] Result<std::vector<Tensor>> prefill_all_logits(std::span<const std::vector<int32_t>> prompts,
                                                                 int64_t chunk_size, int64_t first_request_id = 0);

    // The same driver with the step delegated: `step` runs one ForwardBatch (already bound to this runner's pages)
    // wherever the model lives (e.g. down a pipeline) and returns its logits rows (batch logit-row order).
    using StepFn = std::function<Result<Tensor>(const models::ForwardBatch&)>;
    [[nodiscard]] Result<std::vector<Tensor>> prefill_all_logits(std::span<const std::vector<int32_t>> prompts,
                                                                 int64_t chunk_size, int64_t first_request_id,
                                                                 const StepFn& step);

private:
    std::unique_ptr<models::Model> model_;
    std::unique_ptr<models::ModelCache> cache_;
    std::unique_ptr<ThreadPool> threads_;
    const kernels::Backend* backend_;
    parallel::Communicator* cp_;
    kernels::Profiler* profiler_ = nullptr;
    kv_cache::PagePool pool_;
    kv_cache::RequestTables tables_;
};

}  // namespace penstock::runtime
