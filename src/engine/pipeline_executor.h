// PipelineExecutor: the engine's StepExecutor on pipeline stage 0 (global rank 0 under mpirun): each step goes down
// the pipeline (parallel::PipelineStage::step) and the logit rows come back from the last stage; requests are freed on
// the other stages only when the engine ends them (ReleasePolicy::kExplicit: a request lives on through its decode
// steps), by release-only plans ordered with the steps. The other stages run PipelineStage::serve() until stop().
#pragma once

#include <cstdint>
#include <span>

#include "engine/step_executor.h"
#include "parallel/communicator.h"
#include "parallel/pipeline.h"

namespace penstock::engine {

class PipelineExecutor final : public StepExecutor {
public:
    // `runner` holds stage 0's layers (the engine's runner); `pp` is the pipeline group with this rank as stage 0.
    // Both must outlive the executor. eager_bank: --pp-eager-bank-forward (agreed across the stages).
    PipelineExecutor(runtime::ModelRunner* runner, parallel::Communicator* pp, bool eager_bank);

    [[nodiscard]] Result<Tensor> step(const models::ForwardBatch& batch) override { return stage_.step(batch); }
    [[nodiscard]] Status release(std::span<const int64_t> request_ids) override { return stage_.release(request_ids); }
    [[nodiscard]] Status stop() override { return stage_.stop(); }
    bool isolates_failures() const override { return false; }

    // Stage 0's counters (read after the engine thread has stopped).
    const parallel::StageStats& stats() const { return stage_.stats(); }

private:
    parallel::PipelineStage stage_;
};

}  // namespace penstock::engine
