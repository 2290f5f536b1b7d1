// Pipeline stages over a Communicator.
#include "parallel/pipeline.h"

#include <cstring>
#include <string>

namespace penstock::parallel {

namespace {

constexpr int kTagEnvelope = 100;
constexpr int kTagPlan = 101;
constexpr int kTagHidden = 102;
constexpr int kTagLogits = 103;
constexpr int kTagBank = 104;
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
    put<uint32_t>(&out, plan.stop ? 1u : 0u);
    put<uint32_t>(&out, static_cast<uint32_t>(plan.batch.seqs.size()));
    put<uint32_t>(&out, plan.bank_rows);
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
    return out;
}

Result<StagePlan> decode_plan(std::span<const uint8_t> bytes) {
    Reader r(bytes);
    StagePlan plan;
    uint32_t flags = 0, n_seqs = 0;
    if (!r.get(&flags) || !r.get(&n_seqs) || !r.get(&plan.bank_rows)) return data_loss("stage plan: truncated header");
    if (plan.bank_rows > kMaxBankRows) return data_loss("stage plan: " + std::to_string(plan.bank_rows) + " bank rows");
    if (flags > 1) return data_loss("stage plan: unknown flags " + std::to_string(flags));
    if (n_seqs > kMaxSeqs) return data_loss("stage plan: " + std::to_string(n_seqs) + " sequences");
    plan.stop = flags & 1u;
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
    if (r.left() != total * sizeof(int32_t)) {
        return data_loss("stage plan: " + std::to_string(r.left()) + " token bytes for " + std::to_string(total) +
                         " tokens");
    }
    for (uint32_t i = 0; i < n_seqs; ++i) {
        auto& ids = plan.batch.seqs[i].token_ids;
        ids.resize(lens[i]);
        for (uint32_t k = 0; k < lens[i]; ++k) r.get(&ids[k]);
    }
    return plan;
}

PipelineStage::PipelineStage(runtime::ModelRunner* runner, Communicator* pp) : runner_(runner), pp_(pp) {}

Status PipelineStage::send_step(const StagePlan& plan, const models::Activations* act) {
    std::vector<uint8_t> bytes = encode_plan(plan);
    Envelope env{kStageMagic, kStageVersion, bytes.size()};
    const int64_t env_bytes = sizeof(Envelope);
    const TensorView env_view = TensorView::contiguous(&env, DType::kU8, std::span<const int64_t>(&env_bytes, 1));
    const int next = pp_->rank() + 1;
    PENSTOCK_RETURN_IF_ERROR(pp_->send(env_view, next, kTagEnvelope));
    PENSTOCK_RETURN_IF_ERROR(pp_->send(bytes_view(&bytes), next, kTagPlan));
    if (plan.stop) return ok_status();
    PENSTOCK_RETURN_IF_ERROR(pp_->send(act->hidden, next, kTagHidden));
    if (plan.bank_rows > 0) PENSTOCK_RETURN_IF_ERROR(pp_->send(act->bank, next, kTagBank));
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
    if (env.plan_bytes > kMaxPlanBytes)
        return data_loss("stage message: plan of " + std::to_string(env.plan_bytes) + " bytes");
    std::vector<uint8_t> bytes(env.plan_bytes);
    PENSTOCK_RETURN_IF_ERROR(pp_->recv(bytes_view(&bytes), prev, kTagPlan));
    return decode_plan(bytes);
}

Result<Tensor> PipelineStage::step(const models::ForwardBatch& batch) {
    PENSTOCK_CHECK_EQ(pp_->rank(), 0);
    const models::BatchLayout layout = runner_->make_layout(batch);
    models::Activations act;
    runner_->run_layers(batch, layout, &act);
    if (pp_->size() == 1) return runner_->logits(layout, act);
    StagePlan plan;
    plan.batch = batch;
    for (const models::SeqChunk& c : batch.seqs) {
        plan.release.push_back(c.prefix_len + static_cast<int64_t>(c.token_ids.size()) >= c.prompt_len ? 1 : 0);
    }
    plan.bank_rows = act.bank.defined() ? static_cast<uint32_t>(act.bank.size(1)) : 0;
    PENSTOCK_RETURN_IF_ERROR(send_step(plan, &act));
    Tensor logits = Tensor::empty(
        {static_cast<int64_t>(layout.logit_rows.size()), runner_->model().config().vocab_size}, DType::kF32);
    PENSTOCK_RETURN_IF_ERROR(pp_->recv(logits, pp_->size() - 1, kTagLogits));
    return logits;
}

Status PipelineStage::stop() {
    PENSTOCK_CHECK_EQ(pp_->rank(), 0);
    if (pp_->size() == 1) return ok_status();
    StagePlan plan;
    plan.stop = true;
    return send_step(plan, nullptr);
}

Status PipelineStage::serve() {
    PENSTOCK_CHECK_GT(pp_->rank(), 0);
    const bool last = pp_->rank() == pp_->size() - 1;
    const int64_t hidden = runner_->model().config().hidden_size;
    while (true) {
        PENSTOCK_ASSIGN_OR_RETURN(StagePlan plan, recv_plan());
        if (plan.stop) {
            if (!last) PENSTOCK_RETURN_IF_ERROR(send_step(plan, nullptr));
            return ok_status();
        }
        PENSTOCK_RETURN_IF_ERROR(runner_->bind(&plan.batch));
        const models::BatchLayout layout = runner_->make_layout(plan.batch);
        models::Activations act;
        act.hidden = Tensor::empty({layout.n_tokens, hidden}, DType::kF32);
        PENSTOCK_RETURN_IF_ERROR(pp_->recv(act.hidden, pp_->rank() - 1, kTagHidden));
        if (plan.bank_rows > 0) {
            act.bank = Tensor::empty({layout.n_tokens, static_cast<int64_t>(plan.bank_rows), hidden}, DType::kF32);
            PENSTOCK_RETURN_IF_ERROR(pp_->recv(act.bank, pp_->rank() - 1, kTagBank));
        }
        runner_->run_layers(plan.batch, layout, &act);
        if (last) {
            Tensor logits = runner_->logits(layout, act);
            PENSTOCK_RETURN_IF_ERROR(pp_->send(logits, 0, kTagLogits));
        } else {
            PENSTOCK_RETURN_IF_ERROR(send_step(plan, &act));
        }
        for (size_t i = 0; i < plan.batch.seqs.size(); ++i) {
            if (plan.release[i]) runner_->release(plan.batch.seqs[i].request_id);
        }
    }
}

}  // namespace penstock::parallel
