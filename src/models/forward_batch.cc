// ForwardBatch bookkeeping.
#include "models/forward_batch.h"

#include <algorithm>

#include "core/check.h"

namespace penstock::models {

int64_t ForwardBatch::n_tokens() const {
    int64_t n = 0;
    for (const auto& s : seqs) n += static_cast<int64_t>(s.token_ids.size());
    return n;
}

int64_t ForwardBatch::n_logit_rows() const {
    int64_t n = 0;
    for (const auto& s : seqs) {
        switch (s.logits) {
            case LogitsMode::kNone: break;
            case LogitsMode::kLast: n += s.token_ids.empty() ? 0 : 1; break;
            case LogitsMode::kAll: n += static_cast<int64_t>(s.token_ids.size()); break;
        }
    }
    return n;
}

BatchLayout BatchLayout::build(const ForwardBatch& batch) {
    BatchLayout l;
    l.n_tokens = batch.n_tokens();
    l.n_seqs = static_cast<int64_t>(batch.seqs.size());
    l.token_ids = Tensor::empty({l.n_tokens}, DType::kI32);
    l.positions = Tensor::empty({l.n_tokens}, DType::kI32);
    l.cu_seqlens_q = Tensor::empty({l.n_seqs + 1}, DType::kI32);
    l.cu_seqlens_k = Tensor::empty({l.n_seqs + 1}, DType::kI32);
    l.q_pos0 = Tensor::empty({l.n_seqs}, DType::kI32);
    l.k_pos0 = Tensor::empty({l.n_seqs}, DType::kI32);
    int32_t* ids = l.token_ids.ptr<int32_t>();
    int32_t* pos = l.positions.ptr<int32_t>();
    int32_t* cq = l.cu_seqlens_q.ptr<int32_t>();
    int32_t* ck = l.cu_seqlens_k.ptr<int32_t>();
    cq[0] = 0;
    ck[0] = 0;
    int64_t row = 0;
    for (int64_t s = 0; s < l.n_seqs; ++s) {
        const SeqChunk& c = batch.seqs[static_cast<size_t>(s)];
        const auto n = static_cast<int64_t>(c.token_ids.size());
        PENSTOCK_CHECK_GE(c.prefix_len, 0);
        PENSTOCK_CHECK(c.pages != nullptr) << "sequence " << c.request_id << " has no page table";
        PENSTOCK_CHECK_GE(c.pages->capacity_tokens(), c.prefix_len + n) << "request " << c.request_id;
        for (int64_t i = 0; i < n; ++i) {
            ids[row + i] = c.token_ids[static_cast<size_t>(i)];
            pos[row + i] = static_cast<int32_t>(c.prefix_len + i);
        }
        if (c.logits == LogitsMode::kAll) {
            for (int64_t i = 0; i < n; ++i) l.logit_rows.push_back(row + i);
        } else if (c.logits == LogitsMode::kLast && n > 0) {
            l.logit_rows.push_back(row + n - 1);
        }
        row += n;
        cq[s + 1] = static_cast<int32_t>(row);
        ck[s + 1] = static_cast<int32_t>(ck[s] + c.prefix_len + n);
        l.q_pos0.ptr<int32_t>()[s] = static_cast<int32_t>(c.prefix_len);
        l.k_pos0.ptr<int32_t>()[s] = 0;
        l.seq_rows.push_back(n);
        l.seq_pos0.push_back(c.prefix_len);
    }
    l.total_keys = ck[l.n_seqs];
    size_t max_pages = 1;
    for (const SeqChunk& c : batch.seqs) max_pages = std::max(max_pages, c.pages->pages.size());
    l.page_table = Tensor::empty({l.n_seqs, static_cast<int64_t>(max_pages)}, DType::kI32);
    for (int64_t s = 0; s < l.n_seqs; ++s) {
        const std::vector<int32_t>& pages = batch.seqs[static_cast<size_t>(s)].pages->pages;
        int32_t* row = l.page_table.ptr<int32_t>() + s * static_cast<int64_t>(max_pages);
        for (size_t k = 0; k < max_pages; ++k) row[k] = k < pages.size() ? pages[k] : -1;
    }
    l.logit_index = Tensor::empty({static_cast<int64_t>(l.logit_rows.size())}, DType::kI32);
    for (size_t i = 0; i < l.logit_rows.size(); ++i) {
        l.logit_index.ptr<int32_t>()[i] = static_cast<int32_t>(l.logit_rows[i]);
    }
    return l;
}

BatchLayout BatchLayout::build_cp(const ForwardBatch& batch, parallel::Communicator* comm) {
    PENSTOCK_CHECK(comm != nullptr);
    const int p = comm->size();
    const int rank = comm->rank();
    auto cp = std::make_shared<CpLayout>();
    cp->comm = comm;
    cp->full = build(batch);
    BatchLayout l;
    l.n_seqs = cp->full.n_seqs;
    l.cu_seqlens_k = cp->full.cu_seqlens_k;
    l.k_pos0 = cp->full.k_pos0;
    l.page_table = cp->full.page_table;
    l.total_keys = cp->full.total_keys;
    l.q_pos_step = p;
    l.logit_rows = cp->full.logit_rows;  // rows of the whole batch: the head gathers the rows first
    l.logit_index = cp->full.logit_index;
    // Rows of each rank per sequence: ceil((len - r) / p) for r < len.
    auto rows_of = [&](int64_t len, int r) { return len > r ? (len - r + p - 1) / p : 0; };
    std::vector<int64_t> rank_total(static_cast<size_t>(p), 0);
    for (const SeqChunk& c : batch.seqs) {
        for (int r = 0; r < p; ++r) rank_total[static_cast<size_t>(r)] += rows_of(static_cast<int64_t>(c.token_ids.size()), r);
    }
    cp->rows_per_rank = *std::max_element(rank_total.begin(), rank_total.end());
    l.n_tokens = rank_total[static_cast<size_t>(rank)];
    l.token_ids = Tensor::empty({l.n_tokens}, DType::kI32);
    l.positions = Tensor::empty({l.n_tokens}, DType::kI32);
    l.cu_seqlens_q = Tensor::empty({l.n_seqs + 1}, DType::kI32);
    l.q_pos0 = Tensor::empty({l.n_seqs}, DType::kI32);
    cp->own_rows = Tensor::empty({l.n_tokens}, DType::kI32);
    cp->gather_index = Tensor::empty({cp->full.n_tokens}, DType::kI32);
    std::vector<int64_t> next(static_cast<size_t>(p), 0);  // per rank: rows placed so far
    int64_t full_row = 0;
    l.cu_seqlens_q.ptr<int32_t>()[0] = 0;
    for (int64_t s = 0; s < l.n_seqs; ++s) {
        const SeqChunk& c = batch.seqs[static_cast<size_t>(s)];
        const auto len = static_cast<int64_t>(c.token_ids.size());
        for (int64_t i = 0; i < len; ++i) {
            const int r = static_cast<int>(i % p);
            const int64_t local = next[static_cast<size_t>(r)] + i / p;
            cp->gather_index.ptr<int32_t>()[full_row + i] = static_cast<int32_t>(r * cp->rows_per_rank + local);
            if (r == rank) {
                l.token_ids.ptr<int32_t>()[local] = c.token_ids[static_cast<size_t>(i)];
                l.positions.ptr<int32_t>()[local] = static_cast<int32_t>(c.prefix_len + i);
                cp->own_rows.ptr<int32_t>()[local] = static_cast<int32_t>(full_row + i);
            }
        }
        for (int r = 0; r < p; ++r) next[static_cast<size_t>(r)] += rows_of(len, r);
        full_row += len;
        l.cu_seqlens_q.ptr<int32_t>()[s + 1] = static_cast<int32_t>(next[static_cast<size_t>(rank)]);
        l.q_pos0.ptr<int32_t>()[s] = static_cast<int32_t>(c.prefix_len + rank);
        l.seq_rows.push_back(rows_of(len, rank));
        l.seq_pos0.push_back(c.prefix_len + rank);
    }
    l.cp = std::move(cp);
    return l;
}

void BatchLayout::place(const kernels::Context& ctx) {
    if (ctx.device == Device::kCPU) return;
    for (Tensor* t : {&token_ids, &positions, &cu_seqlens_q, &cu_seqlens_k, &q_pos0, &k_pos0, &page_table,
                      &logit_index}) {
        Tensor d = Tensor::empty(t->view().shape_vec(), t->dtype(), kernels::allocator_of(ctx));
        kernels::transfer({.out = d, .in = *t}, ctx);
        *t = std::move(d);
    }
    if (cp) {
        cp->full.place(ctx);
        for (Tensor* t : {&cp->gather_index, &cp->own_rows}) {
            Tensor d = Tensor::empty(t->view().shape_vec(), t->dtype(), kernels::allocator_of(ctx));
            kernels::transfer({.out = d, .in = *t}, ctx);
            *t = std::move(d);
        }
        // The shared key-side tensors are the full layout's placed copies.
        cu_seqlens_k = cp->full.cu_seqlens_k;
        k_pos0 = cp->full.k_pos0;
        page_table = cp->full.page_table;
    }
}

}  // namespace penstock::models
