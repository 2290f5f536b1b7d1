// Tensor and expert parallelism inside a model: which share of heads, intermediate columns, experts and vocabulary
// this rank holds, and the collectives that complete a row-parallel result. The models module sees only the
// parallel::Communicator interface (header only); the caller (runner, CLI, server) creates the communicators.
//
// Sharding rules (Megatron-style, SPEC §4):
//   - attention heads are split into tp contiguous ranges (balanced: a rank holds floor or ceil of H / tp heads, so an
//     odd head count still splits); q/kv_b/g projections are column-parallel (their rows per head), o_proj is
//     row-parallel (its input columns per head) and its output is all-reduced. MLA's latent (q_a, kv_a, norms) and
//     the DSA indexer are replicated: every rank caches the whole latent.
//   - dense MLP and shared-expert intermediate columns are split over tp; gate/up column-parallel, down row-parallel.
//   - routed experts: EP inside TP (tp % ep == 0). moe_tp = tp / ep; ep_rank = tp_rank / moe_tp owns the expert range
//     ep_rank of ep; inside it, each expert's intermediate is split moe_tp ways (moe_tp_rank = tp_rank % moe_tp). The
//     router is replicated, every rank routes every token and computes only its experts' rows; one all-reduce over
//     the tp group combines routed experts, shared experts and the dense parts (dispatch = routing on replicated
//     tokens, combine = the all-reduce).
//   - lm_head is vocab-parallel: rank r holds vocabulary rows [r * Vp, (r + 1) * Vp) of the padded Vp = ceil(V / tp),
//     computes its logit columns, and an all-gather assembles [rows, V]. The embedding is replicated.
//   - replicated contributions inside a row-parallel sum (biases, K3 latent-MoE output) are added by tp rank 0 only.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/ops.h"
#include "models/forward_batch.h"
#include "parallel/communicator.h"

namespace penstock::models {

// A half-open index range [begin, end).
struct IndexRange {
    int64_t begin = 0, end = 0;
    int64_t size() const { return end - begin; }
    bool operator==(const IndexRange&) const = default;
};

// Part `index` of `parts` balanced contiguous parts of [0, n): sizes differ by at most one, larger parts first.
IndexRange split_range(int64_t n, int parts, int index);

struct TensorParallel {
    parallel::Communicator* tp = nullptr;  // the tensor-parallel group; null = one rank
    int ep_size = 1;                       // expert-parallel ranks inside the tp group (tp % ep == 0)

    int size() const { return tp == nullptr ? 1 : tp->size(); }
    int rank() const { return tp == nullptr ? 0 : tp->rank(); }
    bool active() const { return size() > 1; }
    int moe_tp_size() const { return size() / ep_size; }
    int moe_tp_rank() const { return rank() % moe_tp_size(); }
    int ep_rank() const { return rank() / moe_tp_size(); }

    // This rank's share of n column-parallel units (heads, intermediate columns).
    IndexRange shard(int64_t n) const { return split_range(n, size(), rank()); }
    IndexRange expert_shard(int64_t n_experts) const { return split_range(n_experts, ep_size, ep_rank()); }
    IndexRange moe_inter_shard(int64_t inter) const { return split_range(inter, moe_tp_size(), moe_tp_rank()); }
    // The padded per-rank vocabulary Vp = ceil(V / tp) and this rank's rows of it (clipped to V).
    int64_t vocab_per_rank(int64_t vocab) const { return (vocab + size() - 1) / size(); }

    // InvalidArgument unless sizes are consistent (tp % ep == 0).
    [[nodiscard]] Status validate() const;

    // In-place sum over the tp group (no-op with one rank). `buf` may live on ctx's device while the communicator
    // works on the host (MPI): it is then staged through a host copy. A failing collective aborts with the
    // communicator's message (a peer is gone; the rank cannot continue a forward).
    void all_reduce_sum(const TensorView& buf, const kernels::Context& ctx) const;
    // out [size * in.rows, ...] = concat over ranks of `in` along dim 0 (same staging rule).
    void all_gather(const TensorView& out, const TensorView& in, const kernels::Context& ctx) const;
};

// Sums `buf` over `comm` in place, staging through the host when comm works on another device. Shared by the TP and
// CP paths.
void comm_all_reduce_sum(parallel::Communicator* comm, const TensorView& buf, const kernels::Context& ctx);
void comm_all_gather(parallel::Communicator* comm, const TensorView& out, const TensorView& in,
                     const kernels::Context& ctx);

// Context parallelism (layout.cp set, see BatchLayout): every batch row in order, from each rank's local rows
// ([n_local, d] -> [n_full, d], one padded all-gather over the cp group), and this rank's rows of a whole-batch
// tensor ([n_full, d] -> [n_local, d]). 2-D row tensors (reshape wider rows first).
Tensor cp_gather_rows(const BatchLayout& layout, const TensorView& local, const kernels::Context& ctx);
Tensor cp_own_rows(const BatchLayout& layout, const TensorView& full, const kernels::Context& ctx);

}  // namespace penstock::models
