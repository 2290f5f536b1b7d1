// NCCL implementation of Communicator for device (CUDA) tensors, bootstrapped over a host communicator (MPI): rank 0
// of the group makes the ncclUniqueId, the host communicator broadcasts it, every rank calls ncclCommInitRank.
// Built only when CUDA and NCCL are found (PENSTOCK_ENABLE_NCCL); this header needs neither CUDA nor NCCL headers.
//
// Stream semantics (the meaning of "blocking" in communicator.h for this implementation): every call enqueues its
// NCCL operation on the stream given at creation (the backend context's stream) and returns once it is enqueued.
// Work the caller later enqueues on that stream sees the result; the host sees it only after synchronising the
// stream (e.g. a device-to-host transfer followed by Backend::synchronize). Buffers may be freed right after a call
// when their memory is stream-ordered with it (the caching allocator's blocks, used on that one stream). barrier() is
// the one call that waits on the host (it synchronises the stream). isend/irecv are enqueued the same way; their
// PendingOp::wait() blocks the host until the operation has completed on the GPU (a CUDA event).
//
// Because operations are stream-ordered, an irecv whose matching send depends on work enqueued later on this
// stream deadlocks the GPU: keep such receives (e.g. the pipeline's returning logits) on the host communicator.
// Tags are ignored: NCCL matches point-to-point messages between two ranks of a communicator in issue order, and
// the sizes must agree on both sides (NCCL cannot detect a length mismatch; callers agree on sizes first, e.g. over
// the host link). Zero-byte sends and receives are skipped on both sides.
// Reductions: f32, f16, bf16, i32, i64. Data movement (gather, all-to-all, broadcast, p2p): any dtype, as bytes.
// Failures of NCCL or CUDA calls are Status values carrying ncclGetErrorString / ncclGetLastError, never aborts.
// A peer that dies mid-collective makes NCCL hang rather than fail (NCCL's blocking mode); MPI start-up agreement
// before creation keeps a failed start from reaching NCCL.
#pragma once

#include <memory>
#include <string>

#include "parallel/communicator.h"
#include "parallel/mpi_communicator.h"

namespace penstock::parallel {

struct NcclOptions {
    int device = 0;          // CUDA device of this rank (made current before init and before every call)
    void* stream = nullptr;  // cudaStream_t on `device`: every NCCL operation is enqueued on it; must outlive the comm
};

// The NCCL communicator spanning the ranks of `bootstrap` (a host communicator; collective over it). Its ranks are
// bootstrap's ranks. `name` labels errors, e.g. "nccl:tp".
[[nodiscard]] Result<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator& bootstrap,
                                                                           const NcclOptions& options,
                                                                           const std::string& name);

// NCCL communicators for every group of `host` (world, pp, tp, ep, cp, created in that order over the host groups;
// collective over the world). sizes and coords are copied.
[[nodiscard]] Result<ProcessGroups> make_nccl_groups(const ProcessGroups& host, const NcclOptions& options);

}  // namespace penstock::parallel
