// Stage-0 lanes: command broadcast and the follower loop.
#include "engine/lane_executor.h"

#include <cstring>
#include <vector>

#include "parallel/pipeline.h"

namespace penstock::engine {

namespace {

enum class Command : uint8_t { kSubmit = 1, kRelease = 2, kStop = 3, kCollect = 4 };
constexpr int64_t kMaxCommandBytes = int64_t{256} << 20;

TensorView bytes_view(std::vector<uint8_t>* v) {
    const auto n = static_cast<int64_t>(v->size());
    return TensorView::contiguous(v->data(), DType::kU8, std::span<const int64_t>(&n, 1));
}

// Broadcasts `bytes` from rank 0 of `comm` (resized on the receivers).
Status broadcast_bytes(parallel::Communicator* comm, std::vector<uint8_t>* bytes) {
    if (comm == nullptr || comm->size() == 1) return ok_status();
    Tensor size = Tensor::empty({1}, DType::kI64);
    size.ptr<int64_t>()[0] = static_cast<int64_t>(bytes->size());
    PENSTOCK_RETURN_IF_ERROR(comm->broadcast(size, 0));
    const int64_t n = size.ptr<int64_t>()[0];
    if (n < 1 || n > kMaxCommandBytes) return data_loss("lane command of " + std::to_string(n) + " bytes");
    bytes->resize(static_cast<size_t>(n));
    return comm->broadcast(bytes_view(bytes), 0);
}

// Leader and followers alike: the cp level (tp rank 0 only), then the tp level.
Status relay(parallel::Communicator* cp, parallel::Communicator* tp, std::vector<uint8_t>* bytes) {
    if (tp == nullptr || tp->rank() == 0) PENSTOCK_RETURN_IF_ERROR(broadcast_bytes(cp, bytes));
    return broadcast_bytes(tp, bytes);
}

std::vector<uint8_t> encode(Command kind, std::span<const uint8_t> payload) {
    std::vector<uint8_t> out(1 + payload.size());
    out[0] = static_cast<uint8_t>(kind);
    if (!payload.empty()) std::memcpy(out.data() + 1, payload.data(), payload.size());
    return out;
}

}  // namespace

LaneLeaderExecutor::LaneLeaderExecutor(std::unique_ptr<StepExecutor> inner, parallel::Communicator* cp,
                                       parallel::Communicator* tp)
    : inner_(std::move(inner)), cp_(cp), tp_(tp) {
    PENSTOCK_CHECK((cp == nullptr || cp->rank() == 0) && (tp == nullptr || tp->rank() == 0))
        << "the lane leader is cp rank 0, tp rank 0";
}

Status LaneLeaderExecutor::submit(const StepInput& in) {
    parallel::StagePlan plan;
    plan.batch = in.batch;
    plan.sampling = in.sampling;
    plan.return_logits = in.return_logits;
    std::vector<uint8_t> bytes = encode(Command::kSubmit, parallel::encode_plan(plan));
    PENSTOCK_RETURN_IF_ERROR(relay(cp_, tp_, &bytes));
    return inner_->submit(in);
}

Result<runtime::StepOutput> LaneLeaderExecutor::collect() {
    std::vector<uint8_t> bytes = encode(Command::kCollect, {});
    PENSTOCK_RETURN_IF_ERROR(relay(cp_, tp_, &bytes));
    return inner_->collect();
}

Status LaneLeaderExecutor::release(std::span<const int64_t> request_ids) {
    std::vector<uint8_t> payload(request_ids.size() * sizeof(int64_t));
    if (!payload.empty()) std::memcpy(payload.data(), request_ids.data(), payload.size());
    std::vector<uint8_t> bytes = encode(Command::kRelease, payload);
    PENSTOCK_RETURN_IF_ERROR(relay(cp_, tp_, &bytes));
    return inner_->release(request_ids);
}

Status LaneLeaderExecutor::stop() {
    std::vector<uint8_t> bytes = encode(Command::kStop, {});
    PENSTOCK_RETURN_IF_ERROR(relay(cp_, tp_, &bytes));
    return inner_->stop();
}

Status run_lane_follower(runtime::ModelRunner* runner, StepExecutor* inner, parallel::Communicator* cp,
                         parallel::Communicator* tp) {
    while (true) {
        std::vector<uint8_t> bytes(1);
        PENSTOCK_RETURN_IF_ERROR(relay(cp, tp, &bytes));
        const auto kind = static_cast<Command>(bytes[0]);
        const std::span<const uint8_t> payload(bytes.data() + 1, bytes.size() - 1);
        switch (kind) {
            case Command::kSubmit: {
                PENSTOCK_ASSIGN_OR_RETURN(parallel::StagePlan plan, parallel::decode_plan(payload));
                PENSTOCK_RETURN_IF_ERROR(runner->bind(&plan.batch));
                StepInput in{.batch = std::move(plan.batch),
                             .sampling = std::move(plan.sampling),
                             .return_logits = plan.return_logits};
                PENSTOCK_RETURN_IF_ERROR(inner->submit(in));
                break;
            }
            case Command::kCollect:
                if (inner->in_flight() == 0) return data_loss("lane collect command with nothing in flight");
                PENSTOCK_RETURN_IF_ERROR(inner->collect().status());
                break;
            case Command::kRelease: {
                if (payload.size() % sizeof(int64_t) != 0) return data_loss("lane release command of odd length");
                std::vector<int64_t> ids(payload.size() / sizeof(int64_t));
                if (!ids.empty()) std::memcpy(ids.data(), payload.data(), payload.size());
                for (int64_t id : ids) runner->release(id);
                PENSTOCK_RETURN_IF_ERROR(inner->release(ids));
                break;
            }
            case Command::kStop:
                return inner->stop();
            default:
                return data_loss("unknown lane command " + std::to_string(static_cast<int>(bytes[0])));
        }
    }
}

}  // namespace penstock::engine
