// Pipeline stages over a Communicator.
#include "parallel/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

namespace penstock::parallel {

namespace {

constexpr int kTagEnvelope = 100;
constexpr int kTagPlan = 101;
constexpr int kTagHidden = 102;
constexpr int kTagLogits = 103;
constexpr int kTagBank = 104;
constexpr int kTagBankInherited = 105;
constexpr int kTagTopk = 106;
constexpr int kTagTokens = 107;
constexpr int kTagLogprobs = 108;
constexpr int kTagCounters = 109;
constexpr int kTagTopIds = 110;
constexpr int kTagTopLogprobs = 111;
constexpr int kTagPromptLogprobs = 112;
constexpr int kTagPromptTopIds = 113;
constexpr int kTagPromptTopLogprobs = 114;
constexpr uint64_t kMaxPlanBytes = 256ull << 20;
constexpr int64_t kCounterFields = 5;

struct Envelope {
    uint32_t magic;
    uint32_t version;
    uint64_t plan_bytes;
};

TensorView bytes_view(std::vector<uint8_t>* v) {
    const int64_t n = static_cast<int64_t>(v->size());
    return TensorView::contiguous(v->data(), DType::kU8, std::span<const int64_t>(&n, 1));
}

int64_t n_sampled(std::span<const runtime::SeqSampling> sampling) {
    int64_t n = 0;
    for (const runtime::SeqSampling& s : sampling) n += s.sample ? 1 : 0;
    return n;
}

// The prompt tokens sequence i of `batch` scores (SeqSampling::prompt_logprobs), in order.
std::vector<int32_t> prompt_targets(const models::SeqChunk& c, const runtime::SeqSampling& s) {
    std::vector<int32_t> t;
    if (!s.prompt_logprobs || c.token_ids.empty()) return t;
    t.assign(c.token_ids.begin() + 1, c.token_ids.end());
    if (s.next_token >= 0) t.push_back(s.next_token);
    return t;
}

// Flattens alternatives for the wire: `per` entries per scored token, padded with id -1.
void flatten_top(const std::vector<runtime::TopLogprob>& alt, int32_t per, std::vector<int32_t>* ids,
                 std::vector<float>* lps) {
    for (int32_t k = 0; k < per; ++k) {
        const bool have = static_cast<size_t>(k) < alt.size();
        ids->push_back(have ? alt[static_cast<size_t>(k)].token : -1);
        lps->push_back(have ? alt[static_cast<size_t>(k)].logprob : 0.0f);
    }
}

// Alternatives the last stage returns: the sampled sequences' top_logprobs summed.
int64_t n_top(std::span<const runtime::SeqSampling> sampling) {
    int64_t n = 0;
    for (const runtime::SeqSampling& s : sampling) n += s.sample ? s.top_logprobs : 0;
    return n;
}

}  // namespace

PipelineStage::PipelineStage(runtime::ModelRunner* runner, Communicator* pp, const StageOptions& options)
    : runner_(runner),
      pp_(pp),
      data_(options.data != nullptr ? options.data : pp),
      eager_bank_(options.eager_bank),
      hidden_dtype_(options.hidden_dtype),
      release_policy_(options.release),
      on_command_(options.on_command),
      before_free_(options.before_free),
      busy_clock_(runner->context().device),
      stall_clock_(runner->context().device) {
    PENSTOCK_CHECK(pp_->device() == Device::kCPU) << "the pipeline's control link must work on host tensors";
    PENSTOCK_CHECK(data_->rank() == pp_->rank() && data_->size() == pp_->size())
        << "the pipeline's data link must span the control link's ranks";
}

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

StagePlan PipelineStage::make_plan(const models::ForwardBatch& batch, uint32_t bank_inherited) const {
    const models::Model& m = runner_->model();
    StagePlan plan;
    plan.batch = batch;
    for (const models::SeqChunk& c : batch.seqs) {
        const bool prompt_end = c.prefix_len + static_cast<int64_t>(c.token_ids.size()) >= c.prompt_len;
        plan.release.push_back(release_policy_ == ReleasePolicy::kAtPromptEnd && prompt_end ? 1 : 0);
    }
    plan.bank_total = static_cast<uint32_t>(m.bank_rows_before(m.config().num_hidden_layers));
    plan.bank_inherited = bank_inherited;
    plan.bank_valid = static_cast<uint32_t>(m.bank_rows_before(m.layer_range().end));
    plan.topk_cols = static_cast<uint32_t>(m.topk_cols_after(batch));
    plan.eager_bank = eager_bank_;
    return plan;
}

Status PipelineStage::send_plan(const StagePlan& plan) {
    std::vector<uint8_t> bytes = encode_plan(plan);
    Envelope env{kStageMagic, kStageVersion, bytes.size()};
    const int64_t env_bytes = sizeof(Envelope);
    const TensorView env_view = TensorView::contiguous(&env, DType::kU8, std::span<const int64_t>(&env_bytes, 1));
    const int next = pp_->rank() + 1;
    PENSTOCK_RETURN_IF_ERROR(pp_->send(env_view, next, kTagEnvelope));
    PENSTOCK_RETURN_IF_ERROR(pp_->send(bytes_view(&bytes), next, kTagPlan));
    stats_.bytes_sent += static_cast<int64_t>(sizeof(Envelope) + bytes.size());
    return ok_status();
}

Result<StagePlan> PipelineStage::recv_plan() {
    Envelope env{};
    const int64_t env_bytes = sizeof(Envelope);
    const int prev = pp_->rank() - 1;
    PENSTOCK_RETURN_IF_ERROR(pp_->recv(
        TensorView::contiguous(&env, DType::kU8, std::span<const int64_t>(&env_bytes, 1)), prev, kTagEnvelope));
    if (env.magic != kStageMagic) return data_loss("stage message: bad magic from stage " + std::to_string(prev));
    if (env.version != kStageVersion) {
        return data_loss("stage message: protocol version " + std::to_string(env.version) + ", expected " +
                         std::to_string(kStageVersion));
    }
    if (env.plan_bytes > kMaxPlanBytes) {
        return data_loss("stage message: plan of " + std::to_string(env.plan_bytes) + " bytes");
    }
    std::vector<uint8_t> bytes(env.plan_bytes);
    PENSTOCK_RETURN_IF_ERROR(pp_->recv(bytes_view(&bytes), prev, kTagPlan));
    return decode_plan(bytes);
}

Status PipelineStage::send_tensor(const TensorView& t, int peer, int tag) {
    const kernels::Context ctx = runner_->context();
    TensorView wire = t;
    Tensor dense;
    if (t.dtype != DType::kF32 || !t.is_contiguous()) {
        dense = Tensor::empty(t.shape_vec(), DType::kF32, kernels::allocator_of(ctx));
        kernels::copy({.out = dense, .in = t}, ctx);
        wire = dense.view();
    }
    Tensor host;
    if (wire.device != data_->device()) {  // a device tensor on a host link: stage it
        host = Tensor::empty(t.shape_vec(), DType::kF32);
        kernels::transfer({.out = host, .in = wire}, ctx);
        runner_->synchronize();
        wire = host.view();
    }
    // A device link enqueues the send on the stream that `dense` is used on, so dropping it at return is safe.
    PENSTOCK_RETURN_IF_ERROR(data_->send(wire, peer, tag));
    stats_.bytes_sent += static_cast<int64_t>(wire.nbytes());
    return ok_status();
}

Status PipelineStage::recv_tensor(const TensorView& t, int peer, int tag) {
    const kernels::Context ctx = runner_->context();
    const bool direct = t.dtype == DType::kF32 && t.is_contiguous();
    Tensor dense;
    TensorView wire = t;
    if (!direct) {
        dense = Tensor::empty(t.shape_vec(), DType::kF32, kernels::allocator_of(ctx));
        wire = dense.view();
    }
    // Not counted as stall here: the caller (serve()'s timed_recv) times the whole receive.
    if (wire.device == data_->device()) {
        PENSTOCK_RETURN_IF_ERROR(data_->recv(wire, peer, tag));
    } else {  // a host link into device memory: receive on the host, then copy up (pageable: staged before return)
        Tensor host = Tensor::empty(t.shape_vec(), DType::kF32);
        PENSTOCK_RETURN_IF_ERROR(data_->recv(host, peer, tag));
        kernels::transfer({.out = wire, .in = host}, ctx);
    }
    if (!direct) kernels::copy({.out = t, .in = wire}, ctx);
    return ok_status();
}

// Rows [begin, end) of bank [n_tokens, total, hidden] as one message (packed when not the whole tensor).
Status PipelineStage::send_rows(const Tensor& bank, uint32_t begin, uint32_t end, int tag) {
    const int64_t before = stats_.bytes_sent;
    PENSTOCK_RETURN_IF_ERROR(send_tensor(bank.view().slice(1, begin, end), pp_->rank() + 1, tag));
    stats_.bank_bytes_sent += stats_.bytes_sent - before;
    return ok_status();
}

Status PipelineStage::recv_rows(const Tensor& bank, uint32_t begin, uint32_t end, int tag) {
    return recv_tensor(bank.view().slice(1, begin, end), pp_->rank() - 1, tag);
}

Status PipelineStage::submit(const models::ForwardBatch& batch, std::span<const runtime::SeqSampling> sampling,
                             bool return_logits) {
    PENSTOCK_CHECK_EQ(pp_->rank(), 0);
    PENSTOCK_CHECK_GT(pp_->size(), 1) << "submit() needs a pipeline of at least two stages";
    PENSTOCK_CHECK(sampling.empty() || sampling.size() == batch.seqs.size())
        << sampling.size() << " sampling entries for " << batch.seqs.size() << " sequences";
    const models::BatchLayout layout = runner_->make_layout(batch);
    StagePlan plan = make_plan(batch, /*bank_inherited=*/0);
    plan.sampling.assign(sampling.begin(), sampling.end());
    plan.return_logits = return_logits;
    // The result receives go first, so the last stage's sends always find them posted (no ring deadlock).
    const int last = pp_->size() - 1;
    InFlight f;
    f.counters = Tensor::empty({last, kCounterFields}, DType::kI64);
    PENSTOCK_ASSIGN_OR_RETURN(std::unique_ptr<PendingOp> op, pp_->irecv(f.counters, last, kTagCounters));
    f.recvs.push_back(std::move(op));
    const int64_t n = n_sampled(sampling);
    f.tokens = Tensor::empty({n}, DType::kI32);
    f.logprobs = Tensor::empty({n}, DType::kF32);
    if (n > 0) {
        PENSTOCK_ASSIGN_OR_RETURN(op, pp_->irecv(f.tokens, last, kTagTokens));
        f.recvs.push_back(std::move(op));
        PENSTOCK_ASSIGN_OR_RETURN(op, pp_->irecv(f.logprobs, last, kTagLogprobs));
        f.recvs.push_back(std::move(op));
    }
    int64_t n_scored = 0, n_scored_top = 0;
    for (size_t i = 0; i < sampling.size(); ++i) {
        if (!sampling[i].prompt_logprobs) continue;
        f.prompt_targets.push_back(prompt_targets(batch.seqs[i], sampling[i]));
        f.prompt_top.push_back(sampling[i].top_logprobs);
        n_scored += static_cast<int64_t>(f.prompt_targets.back().size());
        n_scored_top += static_cast<int64_t>(f.prompt_targets.back().size()) * sampling[i].top_logprobs;
    }
    if (!f.prompt_targets.empty()) {
        f.prompt_logprobs = Tensor::empty({n_scored}, DType::kF32);
        PENSTOCK_ASSIGN_OR_RETURN(op, pp_->irecv(f.prompt_logprobs, last, kTagPromptLogprobs));
        f.recvs.push_back(std::move(op));
        if (n_scored_top > 0) {
            f.prompt_top_ids = Tensor::empty({n_scored_top}, DType::kI32);
            f.prompt_top_logprobs = Tensor::empty({n_scored_top}, DType::kF32);
            PENSTOCK_ASSIGN_OR_RETURN(op, pp_->irecv(f.prompt_top_ids, last, kTagPromptTopIds));
            f.recvs.push_back(std::move(op));
            PENSTOCK_ASSIGN_OR_RETURN(op, pp_->irecv(f.prompt_top_logprobs, last, kTagPromptTopLogprobs));
            f.recvs.push_back(std::move(op));
        }
    }
    if (const int64_t top = n_top(sampling); top > 0) {
        for (const runtime::SeqSampling& s : sampling) {
            if (s.sample) f.top_per_token.push_back(s.top_logprobs);
        }
        f.top_ids = Tensor::empty({top}, DType::kI32);
        f.top_logprobs = Tensor::empty({top}, DType::kF32);
        PENSTOCK_ASSIGN_OR_RETURN(op, pp_->irecv(f.top_ids, last, kTagTopIds));
        f.recvs.push_back(std::move(op));
        PENSTOCK_ASSIGN_OR_RETURN(op, pp_->irecv(f.top_logprobs, last, kTagTopLogprobs));
        f.recvs.push_back(std::move(op));
    }
    if (return_logits) {
        f.logits = Tensor::empty({static_cast<int64_t>(layout.logit_rows.size()), runner_->model().config().vocab_size},
                                 DType::kF32);
        PENSTOCK_ASSIGN_OR_RETURN(op, pp_->irecv(f.logits, last, kTagLogits));
        f.recvs.push_back(std::move(op));
    }
    if (in_flight_.empty()) active_since_ = std::chrono::steady_clock::now();
    in_flight_.push_back(std::move(f));
    max_in_flight_ = std::max(max_in_flight_, in_flight_.size());
    ++submitted_;
    PENSTOCK_RETURN_IF_ERROR(send_plan(plan));
    models::Activations act;
    const kernels::Context ctx = runner_->context();
    busy_clock_.begin(ctx);
    runner_->run_layers(batch, layout, &act);
    busy_clock_.end(ctx);
    refresh_stats();
    ++stats_.steps;
    const bool bank = plan.bank_total > 0;
    if (bank && plan.eager_bank) PENSTOCK_RETURN_IF_ERROR(send_rows(act.bank, 0, 0, kTagBankInherited));
    PENSTOCK_RETURN_IF_ERROR(send_tensor(act.hidden, 1, kTagHidden));
    if (bank) PENSTOCK_RETURN_IF_ERROR(send_rows(act.bank, 0, plan.bank_valid, kTagBank));
    if (plan.topk_cols > 0) PENSTOCK_RETURN_IF_ERROR(send_topk(act, plan));
    return ok_status();
}

// The DSA top-k selection crosses on the data link after the hidden and bank rows, as the i32 positions themselves:
// with a device link (NCCL) device to device, stream-ordered like the hidden, so no stage waits for its GPU to send
// it; with a host link (MPI) a device selection is staged through host memory first.
Status PipelineStage::send_topk(const models::Activations& act, const StagePlan& plan) {
    PENSTOCK_CHECK(act.dsa_topk.defined() && act.dsa_topk.size(1) == static_cast<int64_t>(plan.topk_cols))
        << "stage " << pp_->rank() << " announced a top-k selection it did not produce";
    const kernels::Context ctx = runner_->context();
    Tensor wire = act.dsa_topk;
    if (!wire.view().is_contiguous()) {
        wire = Tensor::empty(act.dsa_topk.view().shape_vec(), DType::kI32, kernels::allocator_of(ctx));
        kernels::copy({.out = wire, .in = act.dsa_topk}, ctx);
    }
    if (wire.device() != data_->device()) {  // a device selection on a host link
        Tensor host = Tensor::empty(wire.view().shape_vec(), DType::kI32);
        kernels::transfer({.out = host, .in = wire}, ctx);
        runner_->synchronize();
        wire = std::move(host);
    }
    PENSTOCK_RETURN_IF_ERROR(data_->send(wire.view(), pp_->rank() + 1, kTagTopk));
    stats_.bytes_sent += static_cast<int64_t>(wire.nbytes());
    return ok_status();
}

// rows: this stage's layout rows (a cp rank's own rows under context parallelism).
Status PipelineStage::recv_topk(const StagePlan& plan, int64_t rows, models::Activations* act) {
    const kernels::Context ctx = runner_->context();
    const Shape shape = {rows, static_cast<int64_t>(plan.topk_cols)};
    if (ctx.device == data_->device()) {  // straight into the stage's tensor (a device link, or the CPU backend)
        act->dsa_topk = Tensor::empty(shape, DType::kI32, kernels::allocator_of(ctx));
        return data_->recv(act->dsa_topk.view(), pp_->rank() - 1, kTagTopk);
    }
    Tensor host = Tensor::empty(shape, DType::kI32);  // a host link into device memory
    PENSTOCK_RETURN_IF_ERROR(data_->recv(host.view(), pp_->rank() - 1, kTagTopk));
    act->dsa_topk = Tensor::empty(shape, DType::kI32, kernels::allocator_of(ctx));
    kernels::transfer({.out = act->dsa_topk, .in = host}, ctx);
    return ok_status();
}

Result<runtime::StepOutput> PipelineStage::collect() {
    PENSTOCK_CHECK(!in_flight_.empty()) << "collect() with nothing in flight";
    InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    const auto t0 = std::chrono::steady_clock::now();
    Status waited;
    for (std::unique_ptr<PendingOp>& op : f.recvs) {
        const Status st = op->wait();
        if (waited.ok() && !st.ok()) waited = st;
    }
    stats_.stall_ms += ms_since(t0);
    if (in_flight_.empty()) active_ms_ += ms_since(active_since_);
    refresh_stats();  // this micro-batch's results are back: stage 0's layers for it have long finished
    PENSTOCK_RETURN_IF_ERROR(waited);
    const int64_t vocab = runner_->model().config().vocab_size;
    runtime::StepOutput out;
    const int32_t* tokens = f.tokens.ptr<const int32_t>();
    const float* logprobs = f.logprobs.ptr<const float>();
    for (int64_t i = 0; i < f.tokens.size(0); ++i) {
        if (tokens[i] < 0 || tokens[i] >= vocab) {
            return data_loss("pipeline: the last stage returned token id " + std::to_string(tokens[i]) +
                             " outside the vocabulary");
        }
        out.tokens.push_back(tokens[i]);
        out.logprobs.push_back(logprobs[i]);
    }
    if (!f.top_per_token.empty()) {
        const int32_t* ids = f.top_ids.ptr<const int32_t>();
        const float* lp = f.top_logprobs.ptr<const float>();
        for (int32_t n : f.top_per_token) {
            std::vector<runtime::TopLogprob>& alt = out.top.emplace_back();
            for (int32_t k = 0; k < n; ++k, ++ids, ++lp) {
                if (*ids < -1 || *ids >= vocab) {
                    return data_loss("pipeline: the last stage returned alternative token id " + std::to_string(*ids) +
                                     " outside the vocabulary");
                }
                if (*ids >= 0) alt.push_back({.token = *ids, .logprob = *lp});
            }
        }
    }
    if (!f.prompt_targets.empty()) {
        const float* lp = f.prompt_logprobs.ptr<const float>();
        const int32_t* tid = f.prompt_top_ids.defined() ? f.prompt_top_ids.ptr<const int32_t>() : nullptr;
        const float* tlp = f.prompt_top_logprobs.defined() ? f.prompt_top_logprobs.ptr<const float>() : nullptr;
        for (size_t q = 0; q < f.prompt_targets.size(); ++q) {
            std::vector<runtime::Sampled>& scored = out.prompt.emplace_back();
            for (int32_t target : f.prompt_targets[q]) {
                runtime::Sampled& e =
                    scored.emplace_back(runtime::Sampled{.token = target, .logprob = *lp++, .top = {}});
                for (int32_t k = 0; k < f.prompt_top[q]; ++k, ++tid, ++tlp) {
                    if (*tid < -1 || *tid >= vocab) {
                        return data_loss("pipeline: the last stage returned alternative token id " +
                                         std::to_string(*tid) + " outside the vocabulary");
                    }
                    if (*tid >= 0) e.top.push_back({.token = *tid, .logprob = *tlp});
                }
            }
        }
    }
    const int64_t* c = f.counters.ptr<const int64_t>();
    std::vector<StageStats> remote;
    for (int64_t s = 0; s < f.counters.size(0); ++s, c += kCounterFields) {
        if (c[0] < 0 || c[1] < 0 || c[2] < 0 || c[3] < 0 || c[4] < 0) {
            return data_loss("pipeline: negative counters of stage " + std::to_string(s + 1));
        }
        remote.push_back(StageStats{.steps = c[0],
                                    .busy_ms = static_cast<double>(c[1]) / 1000.0,
                                    .stall_ms = static_cast<double>(c[2]) / 1000.0,
                                    .bytes_sent = c[3],
                                    .bank_bytes_sent = c[4]});
    }
    remote_stats_ = std::move(remote);
    out.logits = std::move(f.logits);
    return out;
}

double PipelineStage::active_ms() const { return active_ms_ + (in_flight_.empty() ? 0.0 : ms_since(active_since_)); }

std::vector<StageStats> PipelineStage::pipeline_stats() const {
    std::vector<StageStats> all{stats_};
    for (int s = 1; s < pp_->size(); ++s) {
        all.push_back(static_cast<size_t>(s) <= remote_stats_.size() ? remote_stats_[static_cast<size_t>(s - 1)]
                                                                     : StageStats{});
    }
    return all;
}

Result<runtime::StepOutput> PipelineStage::step(const models::ForwardBatch& batch,
                                                std::span<const runtime::SeqSampling> sampling, bool return_logits) {
    PENSTOCK_CHECK_EQ(pp_->rank(), 0);
    if (pp_->size() == 1) {
        const models::BatchLayout layout = runner_->make_layout(batch);
        models::Activations act;
        const kernels::Context ctx = runner_->context();
        busy_clock_.begin(ctx);
        runner_->run_layers(batch, layout, &act);
        Tensor logits = runner_->logits(layout, act);
        busy_clock_.end(ctx);
        ++stats_.steps;
        std::vector<runtime::SeqSampling> none;
        if (sampling.empty()) none.resize(batch.seqs.size());
        Result<runtime::StepOutput> out =
            runtime::sample_step(batch, sampling.empty() ? std::span<const runtime::SeqSampling>(none) : sampling,
                                 std::move(logits), runner_->model().config().vocab_size, return_logits);
        refresh_stats();  // sampling read the logits back: the bracket has finished
        return out;
    }
    PENSTOCK_RETURN_IF_ERROR(submit(batch, sampling, return_logits));
    return collect();
}

Status PipelineStage::release(std::span<const int64_t> request_ids) {
    PENSTOCK_CHECK_EQ(pp_->rank(), 0);
    if (pp_->size() == 1 || request_ids.empty()) return ok_status();
    StagePlan plan;
    plan.free_ids.assign(request_ids.begin(), request_ids.end());
    return send_plan(plan);
}

Status PipelineStage::send_commands(std::span<const StageCommand> commands) {
    PENSTOCK_CHECK_EQ(pp_->rank(), 0);
    if (pp_->size() == 1 || commands.empty()) return ok_status();
    StagePlan plan;
    plan.commands.assign(commands.begin(), commands.end());
    return send_plan(plan);
}

Status PipelineStage::stop() {
    PENSTOCK_CHECK_EQ(pp_->rank(), 0);
    if (pp_->size() == 1) return ok_status();
    StagePlan plan;
    plan.stop = true;
    return send_plan(plan);
}

// The last stage: the head, sampling, then the results to stage 0 (counters first, in the order stage 0 posted).
Status PipelineStage::send_results(const StagePlan& plan, const models::BatchLayout& layout,
                                   const models::Activations& act) {
    Tensor logits = runner_->logits(layout, act);
    busy_clock_.end(runner_->context());
    PENSTOCK_ASSIGN_OR_RETURN(runtime::StepOutput out,
                              runtime::sample_step(plan.batch, plan.sampling, std::move(logits),
                                                   runner_->model().config().vocab_size, plan.return_logits));
    refresh_stats();  // sampling read the logits back: this step's brackets have finished
    ++stats_.steps;
    std::vector<StageStats> all = plan.counters;
    all.push_back(stats_);
    Tensor counters = Tensor::empty({static_cast<int64_t>(all.size()), kCounterFields}, DType::kI64);
    int64_t* c = counters.ptr<int64_t>();
    for (const StageStats& st : all) {
        *c++ = st.steps;
        *c++ = static_cast<int64_t>(std::llround(st.busy_ms * 1000.0));
        *c++ = static_cast<int64_t>(std::llround(st.stall_ms * 1000.0));
        *c++ = st.bytes_sent;
        *c++ = st.bank_bytes_sent;
    }
    PENSTOCK_RETURN_IF_ERROR(pp_->send(counters, 0, kTagCounters));
    int64_t bytes = static_cast<int64_t>(counters.nbytes());
    if (!out.tokens.empty()) {
        const auto n = static_cast<int64_t>(out.tokens.size());
        const int64_t shape[1] = {n};
        PENSTOCK_RETURN_IF_ERROR(
            pp_->send(TensorView::contiguous(out.tokens.data(), DType::kI32, shape), 0, kTagTokens));
        PENSTOCK_RETURN_IF_ERROR(
            pp_->send(TensorView::contiguous(out.logprobs.data(), DType::kF32, shape), 0, kTagLogprobs));
        bytes += n * 8;
    }
    if (const int64_t top = n_top(plan.sampling); top > 0) {
        // Each sampled sequence's top_logprobs entries in turn; a row with fewer finite logits pads with id -1.
        std::vector<int32_t> ids;
        std::vector<float> lps;
        ids.reserve(static_cast<size_t>(top));
        lps.reserve(static_cast<size_t>(top));
        size_t token = 0;
        for (const runtime::SeqSampling& s : plan.sampling) {
            if (!s.sample) continue;
            flatten_top(out.top[token++], s.top_logprobs, &ids, &lps);
        }
        const int64_t shape[1] = {top};
        PENSTOCK_RETURN_IF_ERROR(pp_->send(TensorView::contiguous(ids.data(), DType::kI32, shape), 0, kTagTopIds));
        PENSTOCK_RETURN_IF_ERROR(pp_->send(TensorView::contiguous(lps.data(), DType::kF32, shape), 0, kTagTopLogprobs));
        bytes += top * 8;
    }
    if (!out.prompt.empty()) {
        std::vector<float> lps;
        std::vector<int32_t> top_ids;
        std::vector<float> top_lps;
        size_t q = 0;
        for (const runtime::SeqSampling& s : plan.sampling) {
            if (!s.prompt_logprobs) continue;
            for (const runtime::Sampled& e : out.prompt[q]) {
                lps.push_back(e.logprob);
                flatten_top(e.top, s.top_logprobs, &top_ids, &top_lps);
            }
            ++q;
        }
        const int64_t shape[1] = {static_cast<int64_t>(lps.size())};
        PENSTOCK_RETURN_IF_ERROR(
            pp_->send(TensorView::contiguous(lps.data(), DType::kF32, shape), 0, kTagPromptLogprobs));
        bytes += shape[0] * 4;
        if (!top_ids.empty()) {
            const int64_t tshape[1] = {static_cast<int64_t>(top_ids.size())};
            PENSTOCK_RETURN_IF_ERROR(
                pp_->send(TensorView::contiguous(top_ids.data(), DType::kI32, tshape), 0, kTagPromptTopIds));
            PENSTOCK_RETURN_IF_ERROR(
                pp_->send(TensorView::contiguous(top_lps.data(), DType::kF32, tshape), 0, kTagPromptTopLogprobs));
            bytes += tshape[0] * 8;
        }
    }
    if (plan.return_logits) {
        PENSTOCK_RETURN_IF_ERROR(pp_->send(out.logits, 0, kTagLogits));
        bytes += static_cast<int64_t>(out.logits.nbytes());
    }
    stats_.bytes_sent += bytes;
    return ok_status();
}

Status PipelineStage::serve() {
    PENSTOCK_CHECK_GT(pp_->rank(), 0);
    const bool last = pp_->rank() == pp_->size() - 1;
    const int prev = pp_->rank() - 1;
    const int64_t hidden = runner_->model().config().hidden_size;
    const kernels::Context ctx = runner_->context();
    while (true) {
        // Waiting for the next plan is not a stall: the pipeline may be idle, or stage 0 holding back (full slots);
        // the busy fraction shows that time. Stall is the wait for a planned micro-batch's inputs (below).
        PENSTOCK_ASSIGN_OR_RETURN(StagePlan in, recv_plan());
        if (in.stop) {
            if (!last) PENSTOCK_RETURN_IF_ERROR(send_plan(in));
            return ok_status();
        }
        if (!in.free_ids.empty() && before_free_) before_free_(in.free_ids);
        for (int64_t id : in.free_ids) runner_->release(id);
        if (!in.commands.empty() && !on_command_) {
            return data_loss("stage plan: " + std::to_string(in.commands.size()) + " commands at stage " +
                             std::to_string(pp_->rank()) + ", which takes none");
        }
        if (in.batch.seqs.empty()) {  // a plan that only frees and carries commands
            if (!last) PENSTOCK_RETURN_IF_ERROR(send_plan(in));
            for (const StageCommand& c : in.commands) PENSTOCK_RETURN_IF_ERROR(on_command_(c));
            continue;
        }
        for (const StageCommand& c : in.commands) PENSTOCK_RETURN_IF_ERROR(on_command_(c));
        if (in.counters.size() != static_cast<size_t>(pp_->rank() - 1)) {
            return data_loss("stage plan: counters of " + std::to_string(in.counters.size()) + " stages at stage " +
                             std::to_string(pp_->rank()));
        }
        PENSTOCK_RETURN_IF_ERROR(runner_->bind(&in.batch));
        const models::BatchLayout layout = runner_->make_layout(in.batch);
        models::Activations act;
        if (in.bank_total > 0) {
            // The stream's dtype, as the model's own bank (the link carries f32 rows either way).
            act.bank = Tensor::empty({layout.n_tokens, static_cast<int64_t>(in.bank_total), hidden}, hidden_dtype_,
                                     kernels::allocator_of(ctx));
            kernels::fill({.out = act.bank, .value = 0.0f}, ctx);
        }
        // Our own outgoing plan goes first, so the next stage admits the batch while we wait and compute.
        StagePlan out = make_plan(in.batch, /*bank_inherited=*/in.bank_valid);
        out.release = in.release;
        out.free_ids = in.free_ids;
        out.sampling = in.sampling;
        out.return_logits = in.return_logits;
        out.counters = in.counters;
        out.commands = in.commands;
        refresh_stats();
        out.counters.push_back(stats_);
        if (!last) PENSTOCK_RETURN_IF_ERROR(send_plan(out));
        // Boundary stall: blocked receiving this micro-batch's activations from the previous stage (its compute and
        // the link; with a device data link the receive is stream-ordered and returns once enqueued).
        const auto timed_recv = [this, &ctx](const auto& recv) -> Status {
            stall_clock_.begin(ctx);
            const Status st = recv();
            stall_clock_.end(ctx);
            return st;
        };
        if (in.bank_total > 0 && in.eager_bank) {
            PENSTOCK_RETURN_IF_ERROR(
                timed_recv([&] { return recv_rows(act.bank, 0, in.bank_inherited, kTagBankInherited); }));
        }
        act.hidden = Tensor::empty({layout.n_tokens, hidden}, hidden_dtype_, kernels::allocator_of(ctx));
        PENSTOCK_RETURN_IF_ERROR(timed_recv([&] { return recv_tensor(act.hidden, prev, kTagHidden); }));
        if (in.bank_total > 0) {
            const uint32_t from = in.eager_bank ? in.bank_inherited : 0;
            PENSTOCK_RETURN_IF_ERROR(timed_recv([&] { return recv_rows(act.bank, from, in.bank_valid, kTagBank); }));
            // Eager: every row this stage inherited is forwarded before its own layers run.
            if (!last && out.eager_bank)
                PENSTOCK_RETURN_IF_ERROR(send_rows(act.bank, 0, in.bank_valid, kTagBankInherited));
        }
        if (in.topk_cols > 0) {
            PENSTOCK_RETURN_IF_ERROR(timed_recv([&] { return recv_topk(in, layout.n_tokens, &act); }));
        }
        busy_clock_.begin(ctx);
        runner_->run_layers(in.batch, layout, &act);
        if (last) {
            PENSTOCK_RETURN_IF_ERROR(send_results(in, layout, act));
        } else {
            busy_clock_.end(ctx);
            ++stats_.steps;
            refresh_stats();
            PENSTOCK_RETURN_IF_ERROR(send_tensor(act.hidden, pp_->rank() + 1, kTagHidden));
            if (out.bank_total > 0) {
                const uint32_t from = out.eager_bank ? out.bank_inherited : 0;
                PENSTOCK_RETURN_IF_ERROR(send_rows(act.bank, from, out.bank_valid, kTagBank));
            }
            if (out.topk_cols > 0) PENSTOCK_RETURN_IF_ERROR(send_topk(act, out));
        }
        for (size_t i = 0; i < in.batch.seqs.size(); ++i) {
            if (in.release[i]) runner_->release(in.batch.seqs[i].request_id);
        }
    }
}

void PipelineStage::refresh_stats() {
    stats_.busy_ms = busy_clock_.poll();
    if (pp_->rank() > 0) stats_.stall_ms = stall_clock_.poll();
}

Result<std::vector<StageStats>> PipelineStage::gather_stats() {
    refresh_stats();
    Tensor mine = Tensor::empty({1, 5}, DType::kI64);
    int64_t* m = mine.ptr<int64_t>();
    m[0] = stats_.steps;
    m[1] = static_cast<int64_t>(stats_.busy_ms * 1000.0);
    m[2] = static_cast<int64_t>(stats_.stall_ms * 1000.0);
    m[3] = stats_.bytes_sent;
    m[4] = stats_.bank_bytes_sent;
    Tensor all = Tensor::empty({pp_->size(), 5}, DType::kI64);
    PENSTOCK_RETURN_IF_ERROR(pp_->all_gather(all, mine));
    std::vector<StageStats> out;
    for (int r = 0; r < pp_->size(); ++r) {
        const int64_t* a = all.ptr<const int64_t>() + r * 5;
        out.push_back(StageStats{.steps = a[0],
                                 .busy_ms = a[1] / 1000.0,
                                 .stall_ms = a[2] / 1000.0,
                                 .bytes_sent = a[3],
                                 .bank_bytes_sent = a[4]});
    }
    return out;
}

}  // namespace penstock::parallel
