// StepExecutor: the engine's seam between planning a step and running it. The engine thread builds one StepInput per
// planned step (a ForwardBatch bound to its runner's pages, plus how each sequence is sampled) and submits it to an
// executor, which runs it wherever the model lives; collect() returns the sampled tokens in submission order.
// LocalExecutor runs the whole model in this process (submit runs the step, collect hands it back); PipelineExecutor
// (engine/pipeline_executor.h) drives pipeline stage 0 and keeps up to pp + async-depth micro-batches in flight while
// the later stages work. Contract: docs/design/engine.md, "Step executors".
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "models/forward_batch.h"
#include "parallel/pipeline.h"
#include "runtime/model_runner.h"
#include "runtime/sampling.h"

namespace penstock::engine {

// One step as the engine hands it over.
struct StepInput {
    models::ForwardBatch batch;                  // page tables point at the engine runner's pages
    std::vector<runtime::SeqSampling> sampling;  // per sequence: whether and how its next token is sampled
    bool return_logits = false;                  // also return the logit rows [n_logit_rows, vocab] f32 (tests)
};

// What an executor reports for /metrics and /get_server_info.
struct ExecutorStats {
    int64_t slots = 1;          // steps that may be in flight at once (pipeline: pp + async depth)
    int64_t in_flight = 0;      // submitted, not yet collected
    int64_t max_in_flight = 0;  // the most at once so far
    int64_t submitted = 0;      // steps (micro-batches) submitted so far
    double active_ms = 0;       // wall time with at least one step in flight (pipeline) / running steps (local)
    std::vector<parallel::StageStats> stages;  // per pipeline stage (one entry for the whole model in one process)
    // One process (LocalExecutor): host wall time of each phase of its steps, in order: building and uploading the
    // batch layout, enqueuing the layers (asynchronous on a GPU: the host's launch cost), the head (lm_head, then the
    // copy of the logit rows to the host: on a GPU it waits for the layers to finish), sampling. Empty elsewhere.
    std::vector<std::pair<std::string, double>> phase_ms;
};

// Called from the engine thread only (one thread; the executor may own communicators that are not thread-safe).
class StepExecutor {
public:
    virtual ~StepExecutor() = default;

    // Starts one step. The result comes back from collect(), in submission order; at most slots() steps should be in
    // flight (the engine submits while in_flight() < slots()). A failed submit of an executor that does not isolate
    // failures leaves the ranks out of step (the engine treats it as fatal).
    [[nodiscard]] virtual Status submit(const StepInput& in) = 0;
    // Waits for the oldest step in flight: one token (and its log-probability) per sampled sequence, batch order; the
    // logit rows when the step asked for them.
    [[nodiscard]] virtual Result<runtime::StepOutput> collect() = 0;
    virtual int64_t in_flight() const = 0;
    virtual int64_t slots() const = 0;
    // submit + collect (nothing else may be in flight).
    [[nodiscard]] Result<runtime::StepOutput> step(const StepInput& in) {
        PENSTOCK_RETURN_IF_ERROR(submit(in));
        return collect();
    }
    // These requests ended (finished, aborted, timed out, failed): the engine has already freed them in its own
    // runner; the executor frees whatever other ranks hold for them, after any step in flight that holds them. Ids
    // never stepped are ignored.
    [[nodiscard]] virtual Status release(std::span<const int64_t> request_ids) = 0;
    // The engine thread is ending: stop the other ranks' loops. Called once, after the last collect() and release().
    [[nodiscard]] virtual Status stop() = 0;
    // Whether a failed step left every rank consistent, so that the engine may re-run its sequences one by one to
    // isolate the failing request (RELIABILITY T3). A pipeline whose stages are out of step cannot: its failures are
    // fatal.
    virtual bool isolates_failures() const = 0;
    virtual ExecutorStats stats() const = 0;
    // Pipeline stages the model runs over (1: the whole model is here), and a way to hand the other stages work
    // outside the steps (a disaggregated prefill's KV sends), ordered with the steps. Unimplemented without stages.
    virtual int64_t n_stages() const { return 1; }
    [[nodiscard]] virtual Status send_stage_commands(std::span<const parallel::StageCommand>) {
        return unimplemented("this executor has no other pipeline stages");
    }
};

// The whole model in this process: submit() runs ModelRunner::forward and samples; collect() returns the result.
// release() and stop() have nothing to do.
class LocalExecutor final : public StepExecutor {
public:
    // `runner` (the engine's, holding every layer) must outlive the executor.
    explicit LocalExecutor(runtime::ModelRunner* runner) : runner_(runner) {}
    [[nodiscard]] Status submit(const StepInput& in) override;
    [[nodiscard]] Result<runtime::StepOutput> collect() override;
    int64_t in_flight() const override { return static_cast<int64_t>(done_.size()); }
    int64_t slots() const override { return 1; }
    [[nodiscard]] Status release(std::span<const int64_t>) override { return ok_status(); }
    [[nodiscard]] Status stop() override { return ok_status(); }
    bool isolates_failures() const override { return true; }
    ExecutorStats stats() const override;

private:
    runtime::ModelRunner* runner_;
    std::deque<runtime::StepOutput> done_;
    parallel::StageStats stats_;
    int64_t submitted_ = 0;
    double layout_ms_ = 0, layers_ms_ = 0, head_ms_ = 0, sample_ms_ = 0;  // ExecutorStats::phase_ms
};

}  // namespace penstock::engine
