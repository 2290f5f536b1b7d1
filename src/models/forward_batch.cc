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

void BatchLayout::place(const kernels::Context& ctx) {
    if (ctx.device == Device::kCPU) return;
    for (Tensor* t : {&token_ids, &positions, &cu_seqlens_q, &cu_seqlens_k, &q_pos0, &k_pos0, &page_table,
                      &logit_index}) {
        Tensor d = Tensor::empty(t->view().shape_vec(), t->dtype(), kernels::allocator_of(ctx));
        kernels::transfer({.out = d, .in = *t}, ctx);
        *t = std::move(d);
    }
}

}  // namespace penstock::models
