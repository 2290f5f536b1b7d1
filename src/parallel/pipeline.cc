// Pipeline stages over a Communicator.
#include "parallel/pipeline.h"

#include <algorithm>
#include <chrono>
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
constexpr uint32_t kMaxTopkCols = 1u << 20;
constexpr uint32_t kMaxBankRows = 4096;
constexpr uint64_t kMaxPlanBytes = 256ull << 20;
constexpr uint32_t kMaxSeqs = 1u << 20;

struct Envelope {
    uint32_t magic;
    uint32_t version;
    uint64_t plan_bytes;
};

template <class T>
void put(std::vector<uint8_t>* out, T v) {
    const size_t at = out->size();
    out->resize(at + sizeof(T));
    std::memcpy(out->data() + at, &v, sizeof(T));
}

class Reader final {
public:
    explicit Reader(std::span<const uint8_t> b) : b_(b) {}
    template <class T>
    bool get(T* v) {
        if (b_.size() - pos_ < sizeof(T)) return false;
        std::memcpy(v, b_.data() + pos_, sizeof(T));
        pos_ += sizeof(T);
        return true;
    }
    size_t left() const { return b_.size() - pos_; }

private:
    std::span<const uint8_t> b_;
    size_t pos_ = 0;
};

TensorView bytes_view(std::vector<uint8_t>* v) {
    const int64_t n = static_cast<int64_t>(v->size());
    return TensorView::contiguous(v->data(), DType::kU8, std::span<const int64_t>(&n, 1));
}

}  // namespace

std::vector<uint8_t> encode_plan(const StagePlan& plan) {
    std::vector<uint8_t> out;
    put<uint32_t>(&out, (plan.stop ? 1u : 0u) | (plan.eager_bank ? 2u : 0u));
    put<uint32_t>(&out, static_cast<uint32_t>(plan.batch.seqs.size()));
    put<uint32_t>(&out, plan.bank_total);
    put<uint32_t>(&out, plan.bank_inherited);
    put<uint32_t>(&out, plan.bank_valid);
    put<uint32_t>(&out, plan.topk_cols);
    put<uint32_t>(&out, static_cast<uint32_t>(plan.free_ids.size()));
    for (size_t i = 0; i < plan.batch.seqs.size(); ++i) {
        const models::SeqChunk& c = plan.batch.seqs[i];
        put<int64_t>(&out, c.request_id);
        put<int64_t>(&out, c.prefix_len);
        put<int64_t>(&out, c.prompt_len);
        put<uint32_t>(&out, static_cast<uint32_t>(c.token_ids.size()));
        put<uint8_t>(&out, static_cast<uint8_t>(c.logits));
        put<uint8_t>(&out, i < plan.release.size() ? plan.release[i] : 0);
        put<uint16_t>(&out, 0);
    }
    for (const models::SeqChunk& c : plan.batch.seqs) {
        for (int32_t t : c.token_ids) put<int32_t>(&out, t);
    }
    for (int64_t id : plan.free_ids) put<int64_t>(&out, id);
    return out;
}

Result<StagePlan> decode_plan(std::span<const uint8_t> bytes) {
    Reader r(bytes);
    StagePlan plan;
    uint32_t flags = 0, n_seqs = 0, n_free = 0;
    if (!r.get(&flags) || !r.get(&n_seqs) || !r.get(&plan.bank_total) || !r.get(&plan.bank_inherited) ||
        !r.get(&plan.bank_valid) || !r.get(&plan.topk_cols) || !r.get(&n_free)) {
        return data_loss("stage plan: truncated header");
    }
    if (flags > 3) return data_loss("stage plan: unknown flags " + std::to_string(flags));
    if (plan.topk_cols > kMaxTopkCols) return data_loss("stage plan: " + std::to_string(plan.topk_cols) + " top-k columns");
    if (n_seqs > kMaxSeqs) return data_loss("stage plan: " + std::to_string(n_seqs) + " sequences");
    if (n_free > kMaxSeqs) return data_loss("stage plan: " + std::to_string(n_free) + " requests to free");
    if (plan.bank_total > kMaxBankRows || plan.bank_inherited > plan.bank_valid || plan.bank_valid > plan.bank_total) {
        return data_loss("stage plan: bank rows inherited " + std::to_string(plan.bank_inherited) + ", valid " +
                         std::to_string(plan.bank_valid) + ", total " + std::to_string(plan.bank_total));
    }
    plan.stop = flags & 1u;
    plan.eager_bank = flags & 2u;
    std::vector<uint32_t> lens;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n_seqs; ++i) {
        models::SeqChunk c;
        uint32_t n = 0;
        uint8_t mode = 0, release = 0;
        uint16_t pad = 0;
        if (!r.get(&c.request_id) || !r.get(&c.prefix_len) || !r.get(&c.prompt_len) || !r.get(&n) || !r.get(&mode) ||
            !r.get(&release) || !r.get(&pad)) {
            return data_loss("stage plan: truncated sequence " + std::to_string(i));
        }
        if (mode > static_cast<uint8_t>(models::LogitsMode::kAll) || release > 1 || pad != 0 || c.prefix_len < 0 ||
            c.prompt_len < 0) {
            return data_loss("stage plan: invalid fields in sequence " + std::to_string(i));
        }
        c.logits = static_cast<models::LogitsMode>(mode);
        total += n;
        lens.push_back(n);
        plan.batch.seqs.push_back(std::move(c));
        plan.release.push_back(release);
    }
    if (r.left() != total * sizeof(int32_t) + uint64_t{n_free} * sizeof(int64_t)) {
        return data_loss("stage plan: " + std::to_string(r.left()) + " bytes for " + std::to_string(total) +
                         " tokens and " + std::to_string(n_free) + " requests to free");
    }
    for (uint32_t i = 0; i < n_seqs; ++i) {
        auto& ids = plan.batch.seqs[i].token_ids;
        ids.resize(lens[i]);
        for (uint32_t k = 0; k < lens[i]; ++k) r.get(&ids[k]);
    }
    plan.free_ids.resize(n_free);
    for (uint32_t k = 0; k < n_free; ++k) r.get(&plan.free_ids[k]);
    return plan;
}

PipelineStage::PipelineStage(runtime::ModelRunner* runner, Communicator* pp, const StageOptions& options)
    : runner_(runner),
      pp_(pp),
      data_(options.data != nullptr ? options.data : pp),
      eager_bank_(options.eager_bank),
      hidden_dtype_(options.hidden_dtype),
      release_policy_(options.release) {
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
    const auto t0 = std::chrono::steady_clock::now();
    if (wire.device == data_->device()) {
        PENSTOCK_RETURN_IF_ERROR(data_->recv(wire, peer, tag));
    } else {  // a host link into device memory: receive on the host, then copy up (pageable: staged before return)
        Tensor host = Tensor::empty(t.shape_vec(), DType::kF32);
        PENSTOCK_RETURN_IF_ERROR(data_->recv(host, peer, tag));
        kernels::transfer({.out = wire, .in = host}, ctx);
    }
    stats_.stall_ms += ms_since(t0);
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

Status PipelineStage::submit(const models::ForwardBatch& batch) {
    PENSTOCK_CHECK_EQ(pp_->rank(), 0);
    PENSTOCK_CHECK_GT(pp_->size(), 1) << "submit() needs a pipeline of at least two stages";
    const models::BatchLayout layout = runner_->make_layout(batch);
    const StagePlan plan = make_plan(batch, /*bank_inherited=*/0);
    InFlight f;
    f.logits = Tensor::empty({static_cast<int64_t>(layout.logit_rows.size()), runner_->model().config().vocab_size},
                             DType::kF32);
    PENSTOCK_ASSIGN_OR_RETURN(f.recv, pp_->irecv(f.logits, pp_->size() - 1, kTagLogits));
    in_flight_.push_back(std::move(f));
    max_in_flight_ = std::max(max_in_flight_, in_flight_.size());
    PENSTOCK_RETURN_IF_ERROR(send_plan(plan));
    models::Activations act;
    const auto t0 = std::chrono::steady_clock::now();
    runner_->run_layers(batch, layout, &act);
    stats_.busy_ms += ms_since(t0);
    ++stats_.steps;
    const bool bank = plan.bank_total > 0;
    if (bank && plan.eager_bank) PENSTOCK_RETURN_IF_ERROR(send_rows(act.bank, 0, 0, kTagBankInherited));
    PENSTOCK_RETURN_IF_ERROR(send_tensor(act.hidden, 1, kTagHidden));
    if (bank) PENSTOCK_RETURN_IF_ERROR(send_rows(act.bank, 0, plan.bank_valid, kTagBank));
    if (plan.topk_cols > 0) PENSTOCK_RETURN_IF_ERROR(send_topk(act, plan));
    return ok_status();
}

// The DSA top-k selection crosses on the host control link (i32; staged from the device when needed).
Status PipelineStage::send_topk(const models::Activations& act, const StagePlan& plan) {
    PENSTOCK_CHECK(act.dsa_topk.defined() && act.dsa_topk.size(1) == static_cast<int64_t>(plan.topk_cols))
        << "stage " << pp_->rank() << " announced a top-k selection it did not produce";
    Tensor host = act.dsa_topk;
    if (host.device() != Device::kCPU) {
        host = Tensor::empty(act.dsa_topk.view().shape_vec(), DType::kI32);
        kernels::transfer({.out = host, .in = act.dsa_topk}, runner_->context());
        runner_->synchronize();
    }
    PENSTOCK_RETURN_IF_ERROR(pp_->send(host, pp_->rank() + 1, kTagTopk));
    stats_.bytes_sent += static_cast<int64_t>(host.nbytes());
    return ok_status();
}

// rows: this stage's layout rows (a cp rank's own rows under context parallelism).
Status PipelineStage::recv_topk(const StagePlan& plan, int64_t rows, models::Activations* act) {
    const kernels::Context ctx = runner_->context();
    Tensor host = Tensor::empty({rows, static_cast<int64_t>(plan.topk_cols)}, DType::kI32);
    PENSTOCK_RETURN_IF_ERROR(pp_->recv(host, pp_->rank() - 1, kTagTopk));
    if (ctx.device == Device::kCPU) {
        act->dsa_topk = std::move(host);
    } else {
        act->dsa_topk = Tensor::empty(host.view().shape_vec(), DType::kI32, kernels::allocator_of(ctx));
        kernels::transfer({.out = act->dsa_topk, .in = host}, ctx);
    }
    return ok_status();
}

Result<Tensor> PipelineStage::collect() {
    PENSTOCK_CHECK(!in_flight_.empty()) << "collect() with nothing in flight";
    InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    const auto t0 = std::chrono::steady_clock::now();
    PENSTOCK_RETURN_IF_ERROR(f.recv->wait());
    stats_.stall_ms += ms_since(t0);
    return f.logits;
}

Result<Tensor> PipelineStage::step(const models::ForwardBatch& batch) {
    PENSTOCK_CHECK_EQ(pp_->rank(), 0);
    if (pp_->size() == 1) {
        const models::BatchLayout layout = runner_->make_layout(batch);
        models::Activations act;
        const auto t0 = std::chrono::steady_clock::now();
        runner_->run_layers(batch, layout, &act);
        Tensor logits = runner_->logits(layout, act);
        stats_.busy_ms += ms_since(t0);
        ++stats_.steps;
        return logits;
    }
    PENSTOCK_RETURN_IF_ERROR(submit(batch));
    return collect();
}

Result<std::vector<Tensor>> pipeline_prefill(runtime::ModelRunner* runner, PipelineStage* pipe,
                                             std::span<const std::vector<int32_t>> prompts,
                                             const MicroBatchOptions& options) {
    const int64_t vocab = runner->model().config().vocab_size;
    const auto n = static_cast<int64_t>(prompts.size());
    const int64_t max_running = std::max<int64_t>(1, options.micro_batch_size);
    const int64_t slots = std::max<int64_t>(1, options.slots);
    std::vector<Tensor> logits;
    for (int64_t i = 0; i < n; ++i) {
        const auto len = static_cast<int64_t>(prompts[static_cast<size_t>(i)].size());
        if (len == 0) return invalid_argument("prompt " + std::to_string(i) + " is empty");
        for (int32_t id : prompts[static_cast<size_t>(i)]) {
            if (id < 0 || id >= vocab)
                return invalid_argument("token id " + std::to_string(id) + " outside the vocabulary");
        }
        logits.push_back(Tensor::empty({len, vocab}, DType::kF32));
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
    };
    std::deque<std::vector<Piece>> pending;  // per in-flight micro-batch: where its logit rows go
    const auto drain_one = [&]() -> Status {
        PENSTOCK_ASSIGN_OR_RETURN(Tensor out, pipe->collect());
        int64_t expected = 0;
        for (const Piece& p : pending.front()) expected += p.len;
        if (out.ndim() != 2 || out.size(0) != expected || out.size(1) != vocab) {
            return data_loss("pipeline: the last stage returned logits " + out.view().shape_string() + " for " +
                             std::to_string(expected) + " rows");
        }
        int64_t row = 0;
        for (const Piece& p : pending.front()) {
            std::memcpy(logits[static_cast<size_t>(p.prompt)].ptr<float>() + p.offset * vocab,
                        out.ptr<const float>() + row * vocab, static_cast<size_t>(p.len * vocab) * sizeof(float));
            row += p.len;
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
                pieces.push_back({i, d, take});
                d += take;
                budget -= take;
                state[static_cast<size_t>(i)] = State::kInFlight;
            }
        }
        if (!batch.seqs.empty()) {
            Status st = runner->bind(&batch);
            if (st.ok()) st = pipe->submit(batch);
            if (!st.ok()) return fail(st);
            pending.push_back(std::move(pieces));
            continue;
        }
        if (pending.empty()) break;  // nothing in flight and nothing ready: every prompt is done
        const Status st = drain_one();
        if (!st.ok()) return fail(st);
    }
    return logits;
}

Status PipelineStage::release(std::span<const int64_t> request_ids) {
    PENSTOCK_CHECK_EQ(pp_->rank(), 0);
    if (pp_->size() == 1 || request_ids.empty()) return ok_status();
    StagePlan plan;
    plan.free_ids.assign(request_ids.begin(), request_ids.end());
    return send_plan(plan);
}

Status PipelineStage::stop() {
    PENSTOCK_CHECK_EQ(pp_->rank(), 0);
    if (pp_->size() == 1) return ok_status();
    StagePlan plan;
    plan.stop = true;
    return send_plan(plan);
}

Status PipelineStage::serve() {
    PENSTOCK_CHECK_GT(pp_->rank(), 0);
    const bool last = pp_->rank() == pp_->size() - 1;
    const int prev = pp_->rank() - 1;
    const int64_t hidden = runner_->model().config().hidden_size;
    const kernels::Context ctx = runner_->context();
    while (true) {
        auto t0 = std::chrono::steady_clock::now();
        PENSTOCK_ASSIGN_OR_RETURN(StagePlan in, recv_plan());
        stats_.stall_ms += ms_since(t0);
        if (in.stop) {
            if (!last) PENSTOCK_RETURN_IF_ERROR(send_plan(in));
            return ok_status();
        }
        for (int64_t id : in.free_ids) runner_->release(id);
        if (in.batch.seqs.empty()) {  // a release-only plan
            if (!last) PENSTOCK_RETURN_IF_ERROR(send_plan(in));
            continue;
        }
        PENSTOCK_RETURN_IF_ERROR(runner_->bind(&in.batch));
        const models::BatchLayout layout = runner_->make_layout(in.batch);
        models::Activations act;
        if (in.bank_total > 0) {
            act.bank = Tensor::empty({layout.n_tokens, static_cast<int64_t>(in.bank_total), hidden}, DType::kF32,
                                     kernels::allocator_of(ctx));
            kernels::fill({.out = act.bank, .value = 0.0f}, ctx);
        }
        // Our own outgoing plan goes first, so the next stage admits the batch while we wait and compute.
        StagePlan out = make_plan(in.batch, /*bank_inherited=*/in.bank_valid);
        out.release = in.release;
        out.free_ids = in.free_ids;
        if (!last) PENSTOCK_RETURN_IF_ERROR(send_plan(out));
        if (in.bank_total > 0 && in.eager_bank) {
            PENSTOCK_RETURN_IF_ERROR(recv_rows(act.bank, 0, in.bank_inherited, kTagBankInherited));
        }
        act.hidden = Tensor::empty({layout.n_tokens, hidden}, hidden_dtype_, kernels::allocator_of(ctx));
        PENSTOCK_RETURN_IF_ERROR(recv_tensor(act.hidden, prev, kTagHidden));
        if (in.bank_total > 0) {
            const uint32_t from = in.eager_bank ? in.bank_inherited : 0;
            PENSTOCK_RETURN_IF_ERROR(recv_rows(act.bank, from, in.bank_valid, kTagBank));
            // Eager: every row this stage inherited is forwarded before its own layers run.
            if (!last && out.eager_bank)
                PENSTOCK_RETURN_IF_ERROR(send_rows(act.bank, 0, in.bank_valid, kTagBankInherited));
        }
        if (in.topk_cols > 0) PENSTOCK_RETURN_IF_ERROR(recv_topk(in, layout.n_tokens, &act));
        t0 = std::chrono::steady_clock::now();
        runner_->run_layers(in.batch, layout, &act);
        if (last) {
            Tensor logits = runner_->logits(layout, act);
            stats_.busy_ms += ms_since(t0);
            PENSTOCK_RETURN_IF_ERROR(pp_->send(logits, 0, kTagLogits));
            stats_.bytes_sent += static_cast<int64_t>(logits.nbytes());
        } else {
            stats_.busy_ms += ms_since(t0);
            PENSTOCK_RETURN_IF_ERROR(send_tensor(act.hidden, pp_->rank() + 1, kTagHidden));
            if (out.bank_total > 0) {
                const uint32_t from = out.eager_bank ? out.bank_inherited : 0;
                PENSTOCK_RETURN_IF_ERROR(send_rows(act.bank, from, out.bank_valid, kTagBank));
            }
            if (out.topk_cols > 0) PENSTOCK_RETURN_IF_ERROR(send_topk(act, out));
        }
        ++stats_.steps;
        for (size_t i = 0; i < in.batch.seqs.size(); ++i) {
            if (in.release[i]) runner_->release(in.batch.seqs[i].request_id);
        }
    }
}

Result<std::vector<StageStats>> PipelineStage::gather_stats() {
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
