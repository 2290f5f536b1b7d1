// The plain data a model forward consumes: a ragged batch of sequence chunks, each continuing from the prefix already
// in its request's KV cache. Built by the scheduler (BatchPlan) or by `penstock forward`; travels with activations
// between pipeline stages, so every stage runs the same batch without scheduling decisions of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "kernels/ops.h"
#include "kv_cache/page_pool.h"
#include "parallel/communicator.h"

namespace penstock::models {

// Which rows of a chunk produce logits on the last stage.
enum class LogitsMode : uint8_t { kNone, kLast, kAll };

struct SeqChunk {
    int64_t request_id = 0;
    std::vector<int32_t> token_ids;              // this chunk's tokens, positions prefix_len + i
    int64_t prefix_len = 0;                      // tokens of this request already in the KV cache
    const kv_cache::PageTable* pages = nullptr;  // reserved for >= prefix_len + token_ids.size() positions
    LogitsMode logits = LogitsMode::kLast;
    // The request's whole prompt length when the batch builder knows it (0 = unknown). Read only by the DSA CPU
    // reference, to break exact ties in the indexer top-k as the unchunked transformers forward does (see
    // kernels::DsaTopkParams::torch_row_len); results never depend on it otherwise.
    int64_t prompt_len = 0;
};

struct ForwardBatch {
    std::vector<SeqChunk> seqs;

    int64_t n_tokens() const;
    int64_t n_logit_rows() const;
};

struct CpLayout;

// Per-forward metadata derived once from a ForwardBatch: i32 tensors on the host, moved to the device by place().
// Host-side logic reads the ForwardBatch and the plain members, never the tensors.
struct BatchLayout {
    int64_t n_tokens = 0;
    int64_t n_seqs = 0;
    Tensor token_ids;     // [n_tokens] i32
    Tensor positions;     // [n_tokens] i32, absolute positions
    Tensor cu_seqlens_q;  // [n_seqs + 1] i32: chunk row ranges
    Tensor cu_seqlens_k;  // [n_seqs + 1] i32: cumulative prefix_len + chunk length (the keys each sequence sees)
    Tensor q_pos0;        // [n_seqs] i32: prefix_len
    Tensor k_pos0;        // [n_seqs] i32: 0
    Tensor page_table;    // [n_seqs, max_pages] i32: each sequence's KV page ids (-1 past its reservation)
    Tensor logit_index;   // [n_logit_rows] i32: logit_rows as a tensor
    std::vector<int64_t> logit_rows;  // rows (into n_tokens) whose logits are produced, in batch order
    int64_t total_keys = 0;           // cu_seqlens_k[n_seqs]
    // Host copies of this layout's per-sequence query rows and the position of each sequence's first row (both differ
    // from the batch under context parallelism: rows = ceil((len - rank) / cp), first position = prefix_len + rank).
    std::vector<int64_t> seq_rows;
    std::vector<int64_t> seq_pos0;
    // Query row i of sequence s is at position q_pos0[s] + i * q_pos_step (> 1 only for a context-parallel layout).
    int32_t q_pos_step = 1;
    // Context parallelism (SPEC §4, interleave split): when set, this layout describes only this rank's rows: row i
    // of every sequence chunk belongs to cp rank i % cp_size, so token_ids, positions, cu_seqlens_q and q_pos0 (=
    // prefix_len + rank) are this rank's, with q_pos_step = cp_size; keys, pages and total_keys are the whole batch's.
    // logit_rows / logit_index are the whole batch's: the last stage gathers the hidden rows back into order first.
    std::shared_ptr<CpLayout> cp;

    static BatchLayout build(const ForwardBatch& batch);
    // This cp rank's layout of `batch` (cp set; comm is stored for the model's collectives).
    static BatchLayout build_cp(const ForwardBatch& batch, parallel::Communicator* comm);
    // Moves the tensors to ctx's device (a no-op on the CPU).
    void place(const kernels::Context& ctx);
};

// The whole-batch side of a context-parallel layout.
struct CpLayout {
    parallel::Communicator* comm = nullptr;  // the cp group
    int64_t rows_per_rank = 0;               // padded rows of each rank in a gather (max over ranks)
    Tensor gather_index;                     // [full.n_tokens] i32: batch row j's row in the gathered [cp * rpr]
    Tensor own_rows;                         // [n_local] i32: this rank's rows in batch order
    BatchLayout full;                        // the whole batch
};

// Activations crossing layer (and pipeline stage) boundaries.
struct Activations {
    Tensor hidden;  // [n_tokens, hidden] f32 or bf16 (the model's activation dtype): the residual stream
    Tensor bank;    // [n_tokens, n_blocks, hidden] hidden's dtype, K3 only: AttnRes completed block sums (rows in layer
                    // order; copies of the stream, so bf16 storage is exact)
    // DSA sparse path only: the key positions [n_tokens, index_topk] i32 (this layout's rows: a cp rank's own rows
    // under context parallelism) selected by the latest full indexer layer, carried to a pipeline stage that starts
    // at a `shared` indexer layer.
    Tensor dsa_topk;
};

}  // namespace penstock::models
