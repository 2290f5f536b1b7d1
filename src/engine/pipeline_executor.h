// PipelineExecutor: the engine's StepExecutor on pipeline stage 0 (global rank 0 under mpirun). submit() runs stage 0's
// layers and sends the micro-batch down the pipeline (plan with each sequence's sampling parameters, then the hidden);
// the last stage samples and sends the token ids back; collect() returns them in submission order. Up to
// pp + async_depth micro-batches are in flight (SPEC §4), so stage 0 works on step k+1 while step k is in later
// stages. Requests are freed on the other stages only when the engine ends them (ReleasePolicy::kExplicit: a request
// lives on through its decode steps), by release-only plans ordered with the steps. The other stages run
// PipelineStage::serve() until stop().
#pragma once

#include <cstdint>
#include <span>

#include "engine/step_executor.h"
#include "parallel/communicator.h"
#include "parallel/pipeline.h"

namespace penstock::engine {

struct PipelineExecutorOptions {
    bool eager_bank = false;  // --pp-eager-bank-forward (agreed across the stages)
    int64_t async_depth = 0;  // --pp-async-batch-depth: micro-batch slots beyond pp
    // Test hook (hidden --test-pp-slots): > 0 replaces pp + async_depth, e.g. 1 runs one step at a time through every
    // stage (the behaviour before steps overlapped), for A/B figures. 0 in production.
    int64_t slots_override = 0;
    // The data link for hidden and bank rows (the device pp group with a CUDA backend and NCCL; null: the control
    // link `pp` carries them, device tensors staged through host memory) and the residual stream's dtype.
    parallel::Communicator* data = nullptr;
    DType hidden_dtype = DType::kF32;
};

class PipelineExecutor final : public StepExecutor {
public:
    // `runner` holds stage 0's layers (the engine's runner); `pp` is the pipeline group with this rank as stage 0.
    // Both must outlive the executor.
    PipelineExecutor(runtime::ModelRunner* runner, parallel::Communicator* pp, const PipelineExecutorOptions& options);

    [[nodiscard]] Status submit(const StepInput& in) override;
    [[nodiscard]] Result<runtime::StepOutput> collect() override { return stage_.collect(); }
    int64_t in_flight() const override { return static_cast<int64_t>(stage_.in_flight()); }
    int64_t slots() const override { return slots_; }
    [[nodiscard]] Status release(std::span<const int64_t> request_ids) override { return stage_.release(request_ids); }
    [[nodiscard]] Status stop() override { return stage_.stop(); }
    bool isolates_failures() const override { return false; }
    ExecutorStats stats() const override;
    int64_t n_stages() const override { return stage_count_; }
    [[nodiscard]] Status send_stage_commands(std::span<const parallel::StageCommand> commands) override {
        return stage_.send_commands(commands);
    }

private:
    parallel::PipelineStage stage_;
    int64_t slots_;
    int64_t stage_count_;
};

}  // namespace penstock::engine
