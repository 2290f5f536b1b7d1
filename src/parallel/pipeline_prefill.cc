// Stage 0's micro-batched pipeline prefill driver (SPEC §4 scheduling rules; contract in pipeline.h).
#include <algorithm>
#include <cstring>
#include <deque>
#include <string>

#include "parallel/pipeline.h"

namespace penstock::parallel {

Result<PrefillOutput> pipeline_prefill_sampled(runtime::ModelRunner* runner, PipelineStage* pipe,
                                               std::span<const std::vector<int32_t>> prompts,
                                               const MicroBatchOptions& options) {
    const int64_t vocab = runner->model().config().vocab_size;
    const auto n = static_cast<int64_t>(prompts.size());
    const int64_t max_running = std::max<int64_t>(1, options.micro_batch_size);
    const int64_t slots = std::max<int64_t>(1, options.slots);
    PrefillOutput result;
    result.next.resize(static_cast<size_t>(n));
    std::vector<Tensor>& logits = result.logits;
    runtime::SeqSampling sampling = options.sampling;
    sampling.sample = true;
    sampling.token_index = 0;
    PENSTOCK_RETURN_IF_ERROR(runtime::validate(sampling));
    for (int64_t i = 0; i < n; ++i) {
        const auto len = static_cast<int64_t>(prompts[static_cast<size_t>(i)].size());
        if (len == 0) return invalid_argument("prompt " + std::to_string(i) + " is empty");
        for (int32_t id : prompts[static_cast<size_t>(i)]) {
            if (id < 0 || id >= vocab)
                return invalid_argument("token id " + std::to_string(id) + " outside the vocabulary");
        }
        if (options.return_logits) logits.push_back(Tensor::empty({len, vocab}, DType::kF32));
    }
    // Request state: waiting (not admitted), running and ready for its next chunk, running with a chunk in flight,
    // finished (pages freed here; the other stages free theirs after the step that ends the prompt).
    enum class State : uint8_t { kWaiting, kReady, kInFlight, kFinished };
    std::vector<State> state(static_cast<size_t>(n), State::kWaiting);
    std::vector<int64_t> done(static_cast<size_t>(n), 0);     // tokens scheduled so far
    std::vector<int64_t> arrived(static_cast<size_t>(n), 0);  // tokens whose logits came back
    int64_t next_waiting = 0, running = 0;
    const auto release_all = [&] {
        for (int64_t i = 0; i < n; ++i) {
            if (state[static_cast<size_t>(i)] != State::kWaiting) runner->release(i);
        }
    };
    struct Piece {
        int64_t prompt, offset, len;
        bool last;  // the chunk ends the prompt: the last stage sampled the next token
    };
    std::deque<std::vector<Piece>> pending;  // per in-flight micro-batch: where its logit rows go
    const auto drain_one = [&]() -> Status {
        PENSTOCK_ASSIGN_OR_RETURN(runtime::StepOutput out, pipe->collect());
        int64_t expected = 0, n_last = 0;
        for (const Piece& p : pending.front()) {
            expected += p.len;
            n_last += p.last ? 1 : 0;
        }
        if (static_cast<int64_t>(out.tokens.size()) != n_last) {
            return data_loss("pipeline: the last stage returned " + std::to_string(out.tokens.size()) + " tokens for " +
                             std::to_string(n_last) + " prompts");
        }
        if (options.return_logits &&
            (out.logits.ndim() != 2 || out.logits.size(0) != expected || out.logits.size(1) != vocab)) {
            return data_loss("pipeline: the last stage returned logits " + out.logits.view().shape_string() + " for " +
                             std::to_string(expected) + " rows");
        }
        int64_t row = 0;
        size_t sampled = 0;
        for (const Piece& p : pending.front()) {
            if (options.return_logits) {
                std::memcpy(logits[static_cast<size_t>(p.prompt)].ptr<float>() + p.offset * vocab,
                            out.logits.ptr<const float>() + row * vocab,
                            static_cast<size_t>(p.len * vocab) * sizeof(float));
            }
            row += p.len;
            if (p.last) {
                result.next[static_cast<size_t>(p.prompt)] = {
                    .token = out.tokens[sampled],
                    .logprob = out.logprobs[sampled],
                    .top = sampled < out.top.size() ? out.top[sampled] : std::vector<runtime::TopLogprob>{}};
                ++sampled;
            }
            auto& a = arrived[static_cast<size_t>(p.prompt)];
            a += p.len;
            if (a == static_cast<int64_t>(prompts[static_cast<size_t>(p.prompt)].size())) {
                state[static_cast<size_t>(p.prompt)] = State::kFinished;
                runner->release(p.prompt);
                --running;
            } else {
                state[static_cast<size_t>(p.prompt)] = State::kReady;
            }
        }
        pending.pop_front();
        return ok_status();
    };
    const auto fail = [&](Status st) {
        release_all();
        return st;
    };
    while (true) {
        // Admission (SPEC §4): at most pp_max_micro_batch_size requests run at once.
        while (running < max_running && next_waiting < n) {
            const int64_t i = next_waiting++;
            const Status st = runner->admit(i, static_cast<int64_t>(prompts[static_cast<size_t>(i)].size()));
            if (!st.ok()) return fail(st);
            state[static_cast<size_t>(i)] = State::kReady;
            ++running;
        }
        // A micro-batch: the next chunk of every ready request, in admission order, within the token budget.
        models::ForwardBatch batch;
        std::vector<runtime::SeqSampling> seq_sampling;
        std::vector<Piece> pieces;
        if (pipe->in_flight() < static_cast<size_t>(slots)) {
            int64_t budget = options.chunk_size > 0 ? options.chunk_size : INT64_MAX;
            for (int64_t i = 0; i < n && budget > 0; ++i) {
                if (state[static_cast<size_t>(i)] != State::kReady) continue;
                const std::vector<int32_t>& p = prompts[static_cast<size_t>(i)];
                const auto len = static_cast<int64_t>(p.size());
                int64_t& d = done[static_cast<size_t>(i)];
                const int64_t take = std::min(budget, len - d);
                models::SeqChunk c;
                c.request_id = i;
                c.token_ids.assign(p.begin() + d, p.begin() + d + take);
                c.prefix_len = d;
                c.prompt_len = len;
                c.logits = models::LogitsMode::kAll;
                batch.seqs.push_back(std::move(c));
                const bool last = d + take == len;
                pieces.push_back({i, d, take, last});
                runtime::SeqSampling s = sampling;
                s.sample = last;
                seq_sampling.push_back(s);
                d += take;
                budget -= take;
                state[static_cast<size_t>(i)] = State::kInFlight;
            }
        }
        if (!batch.seqs.empty()) {
            Status st = runner->bind(&batch);
            if (st.ok()) st = pipe->submit(batch, seq_sampling, options.return_logits);
            if (!st.ok()) return fail(st);
            pending.push_back(std::move(pieces));
            continue;
        }
        if (pending.empty()) break;  // nothing in flight and nothing ready: every prompt is done
        const Status st = drain_one();
        if (!st.ok()) return fail(st);
    }
    return result;
}

Result<std::vector<Tensor>> pipeline_prefill(runtime::ModelRunner* runner, PipelineStage* pipe,
                                             std::span<const std::vector<int32_t>> prompts,
                                             const MicroBatchOptions& options) {
    MicroBatchOptions o = options;
    o.return_logits = true;
    PENSTOCK_ASSIGN_OR_RETURN(PrefillOutput out, pipeline_prefill_sampled(runner, pipe, prompts, o));
    return std::move(out.logits);
}

}  // namespace penstock::parallel
