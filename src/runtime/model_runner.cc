// ModelRunner.
#include "runtime/model_runner.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace penstock::runtime {

ModelRunner::ModelRunner(std::unique_ptr<models::Model> model, const RunnerOptions& options)
    : model_(std::move(model)),
      cache_(model_->create_cache(options.n_pages)),
      threads_(std::make_unique<ThreadPool>(options.n_threads)),
      backend_(options.backend),
      cp_(options.cp),
      pool_(options.n_pages),
      tables_(&pool_) {}

kernels::Context ModelRunner::context() const {
    kernels::Context ctx = backend_ == nullptr ? kernels::Context{.device = Device::kCPU, .pool = threads_.get()}
                                               : backend_->context(threads_.get());
    ctx.profiler = profiler_;
    return ctx;
}

models::BatchLayout ModelRunner::make_layout(const models::ForwardBatch& batch) const {
    models::BatchLayout layout = cp_ != nullptr && cp_->size() > 1 ? models::BatchLayout::build_cp(batch, cp_)
                                                                   : models::BatchLayout::build(batch);
    layout.place(context());
    return layout;
}

Tensor ModelRunner::forward(const models::ForwardBatch& batch) {
    PENSTOCK_CHECK(model_->is_first_stage() && model_->is_last_stage()) << "forward() needs the whole model";
    const models::BatchLayout layout = make_layout(batch);
    models::Activations act;
    run_layers(batch, layout, &act);
    return logits(layout, act);
}

Status ModelRunner::admit(int64_t request_id, int64_t total_tokens) {
    const bool is_new = !tables_.contains(request_id);
    PENSTOCK_RETURN_IF_ERROR(tables_.reserve(request_id, total_tokens));
    if (is_new) {
        const Status st = cache_->admit(request_id);
        if (!st.ok()) {
            tables_.release(request_id);
            return st;
        }
    }
    return ok_status();
}

void ModelRunner::release(int64_t request_id) {
    if (!tables_.contains(request_id)) return;
    tables_.release(request_id);
    cache_->release(request_id);
}

Status ModelRunner::bind(models::ForwardBatch* batch) {
    for (models::SeqChunk& c : batch->seqs) {
        PENSTOCK_RETURN_IF_ERROR(admit(c.request_id, c.prefix_len + static_cast<int64_t>(c.token_ids.size())));
        c.pages = &tables_.table(c.request_id);
    }
    return ok_status();
}

void ModelRunner::run_layers(const models::ForwardBatch& batch, const models::BatchLayout& layout,
                             models::Activations* act) {
    const kernels::Context ctx = context();
    if (model_->is_first_stage()) model_->embed(layout, act, ctx);
    model_->forward_layers(batch, layout, act, cache_.get(), ctx);
}

Tensor ModelRunner::logits(const models::BatchLayout& layout, const models::Activations& act) {
    const kernels::Context ctx = context();
    Tensor out = model_->compute_logits(layout, act, ctx);
    if (ctx.device == Device::kCPU) return out;
    Tensor host = Tensor::empty(out.view().shape_vec(), out.dtype());
    kernels::transfer({.out = host, .in = out}, ctx);
    backend_->synchronize();
    return host;
}

Result<std::vector<Tensor>> ModelRunner::prefill_all_logits(std::span<const std::vector<int32_t>> prompts,
                                                            int64_t chunk_size, int64_t first_request_id) {
    return prefill_all_logits(prompts, chunk_size, first_request_id,
                              [this](const models::ForwardBatch& batch) -> Result<Tensor> { return forward(batch); });
}

Result<std::vector<Tensor>> ModelRunner::prefill_all_logits(std::span<const std::vector<int32_t>> prompts,
                                                            int64_t chunk_size, int64_t first_request_id,
                                                            const StepFn& step) {
    const int64_t vocab = model_->config().vocab_size;
    std::vector<Tensor> logits;
    for (size_t i = 0; i < prompts.size(); ++i) {
        if (prompts[i].empty()) return invalid_argument("prompt " + std::to_string(i) + " is empty");
        for (int32_t id : prompts[i]) {
            if (id < 0 || id >= vocab) {
                return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                        std::to_string(vocab) + ")");
            }
        }
        logits.push_back(Tensor::empty({static_cast<int64_t>(prompts[i].size()), vocab}, DType::kF32));
    }
    const auto release_all = [&] {
        for (size_t i = 0; i < prompts.size(); ++i) release(first_request_id + static_cast<int64_t>(i));
    };
    // Reserve every request's whole KV and its non-paged state at admission, all or nothing.
    for (size_t i = 0; i < prompts.size(); ++i) {
        const Status st = admit(first_request_id + static_cast<int64_t>(i), static_cast<int64_t>(prompts[i].size()));
        if (!st.ok()) {
            release_all();
            return st;
        }
    }
    std::vector<int64_t> done(prompts.size(), 0);
    while (true) {
        models::ForwardBatch batch;
        std::vector<size_t> which;
        for (size_t i = 0; i < prompts.size(); ++i) {
            const auto len = static_cast<int64_t>(prompts[i].size());
            if (done[i] == len) continue;
            const int64_t take = chunk_size > 0 ? std::min(chunk_size, len - done[i]) : len - done[i];
            models::SeqChunk c;
            c.request_id = first_request_id + static_cast<int64_t>(i);
            c.token_ids.assign(prompts[i].begin() + done[i], prompts[i].begin() + done[i] + take);
            c.prefix_len = done[i];
            c.prompt_len = len;
            c.pages = &tables_.table(c.request_id);
            c.logits = models::LogitsMode::kAll;
            batch.seqs.push_back(std::move(c));
            which.push_back(i);
        }
        if (batch.seqs.empty()) break;
        Result<Tensor> out = step(batch);
        if (!out.ok()) {
            release_all();
            return out.status();
        }
        int64_t row = 0;
        for (size_t k = 0; k < which.size(); ++k) {
            const size_t i = which[k];
            const auto take = static_cast<int64_t>(batch.seqs[k].token_ids.size());
            std::memcpy(logits[i].ptr<float>() + done[i] * vocab, out->ptr<const float>() + row * vocab,
                        static_cast<size_t>(take * vocab) * sizeof(float));
            row += take;
            done[i] += take;
        }
    }
    release_all();
    return logits;
}

}  // namespace penstock::runtime
