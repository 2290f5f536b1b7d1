// Communicator: the collective and point-to-point interface every distributed path uses. Implementations: MPI (host
// tensors; mpirun launch, one rank per process) and NCCL (device tensors; unique id broadcast over MPI). Chosen by
// the factory (parallel/comm_factory.h) from the backend, nowhere else.
// All calls are blocking for the caller's view of `buf` (the NCCL implementation is stream-ordered on its stream).
// Collectives must be called by every rank of the group in the same order. A failing peer is an expected failure:
// calls return Status, never abort.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace penstock::parallel {

enum class ReduceOp { kSum, kMax };

// A pending non-blocking send or receive; wait() completes it. Destroying an incomplete request waits for it.
class PendingOp {
public:
    virtual ~PendingOp() = default;
    [[nodiscard]] virtual Status wait() = 0;
};

class Communicator {
public:
    virtual ~Communicator() = default;

    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual Device device() const = 0;
    virtual std::string name() const = 0;  // e.g. "mpi:tp"

    // In place over the group. Reductions support f32, i32, i64 (and bf16 on NCCL).
    [[nodiscard]] virtual Status all_reduce(const TensorView& buf, ReduceOp op) = 0;
    // out = concat over ranks (in rank order) of each rank's `in` along dim 0; out.size(0) = size() * in.size(0).
    [[nodiscard]] virtual Status all_gather(const TensorView& out, const TensorView& in) = 0;
    // out = this rank's dim-0 slice of the reduction of every rank's `in`; in.size(0) = size() * out.size(0).
    [[nodiscard]] virtual Status reduce_scatter(const TensorView& out, const TensorView& in, ReduceOp op) = 0;
    // Equal splits: rank r's in slice j (dim 0, in.size(0) / size() rows) goes to rank j's out slice r.
    [[nodiscard]] virtual Status all_to_all(const TensorView& out, const TensorView& in) = 0;
    [[nodiscard]] virtual Status broadcast(const TensorView& buf, int root) = 0;
    [[nodiscard]] virtual Status send(const TensorView& buf, int peer, int tag) = 0;
    [[nodiscard]] virtual Status recv(const TensorView& buf, int peer, int tag) = 0;
    [[nodiscard]] virtual Status barrier() = 0;
    // Non-blocking point-to-point: `buf` must stay alive and untouched until the returned op's wait() returns.
    [[nodiscard]] virtual Result<std::unique_ptr<PendingOp>> isend(const TensorView& buf, int peer, int tag) = 0;
    [[nodiscard]] virtual Result<std::unique_ptr<PendingOp>> irecv(const TensorView& buf, int peer, int tag) = 0;
};

}  // namespace penstock::parallel
