// PipelineExecutor and LocalExecutor.
#include "engine/pipeline_executor.h"

#include <algorithm>
#include <chrono>

namespace penstock::engine {

Status LocalExecutor::submit(const StepInput& in) {
    using Clock = std::chrono::steady_clock;
    const auto ms = [](Clock::time_point a, Clock::time_point b) {
        return std::chrono::duration<double, std::milli>(b - a).count();
    };
    // ModelRunner::forward, phase by phase.
    const auto t0 = Clock::now();
    const models::BatchLayout layout = runner_->make_layout(in.batch);
    const auto t1 = Clock::now();
    models::Activations act;
    runner_->run_layers(in.batch, layout, &act);
    const auto t2 = Clock::now();
    Tensor logits = runner_->logits(layout, act);
    const auto t3 = Clock::now();
    PENSTOCK_ASSIGN_OR_RETURN(runtime::StepOutput out,
                              runtime::sample_step(in.batch, in.sampling, std::move(logits),
                                                   runner_->model().config().vocab_size, in.return_logits));
    const auto t4 = Clock::now();
    layout_ms_ += ms(t0, t1);
    layers_ms_ += ms(t1, t2);
    head_ms_ += ms(t2, t3);
    sample_ms_ += ms(t3, t4);
    stats_.busy_ms += ms(t0, t4);
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
                         .stages = {stats_},
                         .phase_ms = {{"layout", layout_ms_},
                                      {"layers_enqueue", layers_ms_},
                                      {"head_and_wait", head_ms_},
                                      {"sample", sample_ms_}}};
}

PipelineExecutor::PipelineExecutor(runtime::ModelRunner* runner, parallel::Communicator* pp,
                                   const PipelineExecutorOptions& options)
    : stage_(runner, pp,
             parallel::StageOptions{.data = options.data,
                                    .eager_bank = options.eager_bank,
                                    .hidden_dtype = options.hidden_dtype,
                                    .release = parallel::ReleasePolicy::kExplicit}),
      slots_(options.slots_override > 0 ? options.slots_override
                                        : pp->size() + std::max<int64_t>(0, options.async_depth)),
      stage_count_(pp->size()) {
    PENSTOCK_CHECK_EQ(pp->rank(), 0) << "the engine drives pipeline stage 0";
}

Status PipelineExecutor::submit(const StepInput& in) { return stage_.submit(in.batch, in.sampling, in.return_logits); }

ExecutorStats PipelineExecutor::stats() const {
    return ExecutorStats{.slots = slots_,
                         .in_flight = in_flight(),
                         .max_in_flight = static_cast<int64_t>(stage_.max_in_flight()),
                         .submitted = stage_.submitted(),
                         .active_ms = stage_.active_ms(),
                         .stages = stage_.pipeline_stats(),
                         .phase_ms = {}};
}

}  // namespace penstock::engine
