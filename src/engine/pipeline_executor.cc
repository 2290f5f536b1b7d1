// PipelineExecutor and LocalExecutor.
#include "engine/pipeline_executor.h"

#include <algorithm>
#include <chrono>

namespace penstock::engine {

Status LocalExecutor::submit(const StepInput& in) {
    const auto t0 = std::chrono::steady_clock::now();
    Tensor logits = runner_->forward(in.batch);
    PENSTOCK_ASSIGN_OR_RETURN(runtime::StepOutput out,
                              runtime::sample_step(in.batch, in.sampling, std::move(logits),
                                                   runner_->model().config().vocab_size, in.return_logits));
    stats_.busy_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++stats_.steps;
    ++submitted_;
    done_.push_back(std::move(out));
    return ok_status();
}

Result<runtime::StepOutput> LocalExecutor::collect() {
    PENSTOCK_CHECK(!done_.empty()) << "collect() with nothing submitted";
    runtime::StepOutput out = std::move(done_.front());
    done_.pop_front();
    return out;
}

ExecutorStats LocalExecutor::stats() const {
    return ExecutorStats{.slots = 1,
                         .in_flight = in_flight(),
                         .max_in_flight = submitted_ > 0 ? 1 : 0,
                         .submitted = submitted_,
                         .active_ms = stats_.busy_ms,
                         .stages = {stats_}};
}

PipelineExecutor::PipelineExecutor(runtime::ModelRunner* runner, parallel::Communicator* pp,
                                   const PipelineExecutorOptions& options)
    : stage_(runner, pp,
             parallel::StageOptions{.data = options.data,
                                    .eager_bank = options.eager_bank,
                                    .hidden_dtype = options.hidden_dtype,
                                    .release = parallel::ReleasePolicy::kExplicit}),
      slots_(options.slots_override > 0 ? options.slots_override
                                        : pp->size() + std::max<int64_t>(0, options.async_depth)) {
    PENSTOCK_CHECK_EQ(pp->rank(), 0) << "the engine drives pipeline stage 0";
}

Status PipelineExecutor::submit(const StepInput& in) { return stage_.submit(in.batch, in.sampling, in.return_logits); }

ExecutorStats PipelineExecutor::stats() const {
    return ExecutorStats{.slots = slots_,
                         .in_flight = in_flight(),
                         .max_in_flight = static_cast<int64_t>(stage_.max_in_flight()),
                         .submitted = stage_.submitted(),
                         .active_ms = stage_.active_ms(),
                         .stages = stage_.pipeline_stats()};
}

}  // namespace penstock::engine
