// kernels::Fork: work issued on a second queue that may overlap the work its parent context issues after it (CUDA:
// Context::side_stream), e.g. an MoE block's shared expert beside its router and permutation, or a DSA layer's
// selection-free sparse-attention inputs beside its indexer.
//
//   kernels::Fork fork(ctx);                  // the fork's work starts after everything ctx queued so far
//   shared.forward_partial(x, out, fork.ctx());
//   ... more work on ctx, independent of out ...
//   fork.join();                              // ctx's later work starts after everything issued on the fork
//
// Memory: the CUDA caching allocator is not stream-aware (a freed block is handed out again at once), so what the
// fork's work frees goes back to the parent's allocator only at the join, when the parent's queue has waited for it.
// Tensors allocated on the fork must be freed before the join (checked); buffers the fork's work writes for later use
// (out above) are allocated on the parent and kept alive until the join. Issue the fork's work right after the fork,
// before the parent frees anything: its blocks then come from frees whose users the fork already waits for. The
// fork's work and the parent's work issued before the join may not write what the other reads or writes.
// In line (ctx() is the parent's context and join() does nothing) on the CPU, without a side stream, and with a
// profiler (its nested scopes time one queue), so profiled breakdowns stay serial and sum to the layer.
#pragma once

#include <memory>

#include "kernels/ops.h"

namespace penstock::kernels {

class Fork final {
public:
    explicit Fork(const Context& parent);
    ~Fork();  // joins when join() was not called
    Fork(const Fork&) = delete;
    Fork& operator=(const Fork&) = delete;

    // The context to issue the fork's work on (the parent's own when the fork runs in line).
    const Context& ctx() const { return ctx_; }
    // True when the fork's work goes to the side stream (until the join).
    bool overlaps() const { return held_ != nullptr; }
    // Orders the parent's later work after the fork's and returns the fork's freed memory to the parent's allocator.
    // ctx() is the parent's context afterwards. Idempotent.
    void join();

private:
    class HeldFrees;
    Context parent_;
    Context ctx_;
    std::unique_ptr<HeldFrees> held_;
};

}  // namespace penstock::kernels
