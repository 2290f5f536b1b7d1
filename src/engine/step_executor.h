// StepExecutor: the engine's seam between planning a step and running it. The engine thread builds one ForwardBatch
// per iteration (bound to its runner's pages) and hands it to an executor, which runs it wherever the model lives and
// returns the logit rows. LocalExecutor runs the whole model in this process; PipelineExecutor
// (engine/pipeline_executor.h) drives pipeline stage 0 and the stages on other ranks. Contract: docs/design/engine.md,
// "Step executors".
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/status.h"
#include "core/tensor.h"
#include "models/forward_batch.h"
#include "runtime/model_runner.h"

namespace penstock::engine {

// Called from the engine thread only (one thread; the executor may own communicators that are not thread-safe).
class StepExecutor {
public:
    virtual ~StepExecutor() = default;

    // Runs one step of `batch`, whose page tables point at the engine runner's pages. Returns the logit rows
    // [n_logit_rows, vocab] f32 on the host, in batch logit-row order.
    [[nodiscard]] virtual Result<Tensor> step(const models::ForwardBatch& batch) = 0;
    // These requests ended (finished, aborted, timed out, failed): the engine has already freed them in its own
    // runner; the executor frees whatever other ranks hold for them. Ids never stepped are ignored.
    [[nodiscard]] virtual Status release(std::span<const int64_t> request_ids) = 0;
    // The engine thread is ending: stop the other ranks' loops. Called once, after the last release().
    [[nodiscard]] virtual Status stop() = 0;
    // Whether a failed step left every rank consistent, so that the engine may re-run its sequences one by one to
    // isolate the failing request (RELIABILITY T3). A pipeline whose stages are out of step cannot: its failures are
    // fatal.
    virtual bool isolates_failures() const = 0;
};

// The whole model in this process: step() is ModelRunner::forward; release() and stop() have nothing to do.
class LocalExecutor final : public StepExecutor {
public:
    // `runner` (the engine's, holding every layer) must outlive the executor.
    explicit LocalExecutor(runtime::ModelRunner* runner) : runner_(runner) {}
    [[nodiscard]] Result<Tensor> step(const models::ForwardBatch& batch) override { return runner_->forward(batch); }
    [[nodiscard]] Status release(std::span<const int64_t>) override { return ok_status(); }
    [[nodiscard]] Status stop() override { return ok_status(); }
    bool isolates_failures() const override { return true; }

private:
    runtime::ModelRunner* runner_;
};

}  // namespace penstock::engine
