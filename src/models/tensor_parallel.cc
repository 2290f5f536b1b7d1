// Tensor-parallel shares and collectives with host staging.
#include "models/tensor_parallel.h"

#include "core/check.h"
#include "models/linear.h"

namespace penstock::models {

IndexRange split_range(int64_t n, int parts, int index) {
    PENSTOCK_CHECK(parts >= 1 && 0 <= index && index < parts) << "split_range: part " << index << " of " << parts;
    const int64_t base = n / parts;
    const int64_t extra = n % parts;
    const int64_t begin = index * base + std::min<int64_t>(index, extra);
    return {begin, begin + base + (index < extra ? 1 : 0)};
}

Status TensorParallel::validate() const {
    if (ep_size < 1 || size() % ep_size != 0) {
        return invalid_argument("expert parallel size " + std::to_string(ep_size) + " must divide the tensor parallel size " +
                                std::to_string(size()));
    }
    return ok_status();
}

namespace {

// A collective on the communicator's device: `run(view)` on buf itself when it already lives there (and is
// contiguous), else on an f32 host copy that is written back afterwards.
template <class Run>
void staged(parallel::Communicator* comm, const TensorView& buf, const kernels::Context& ctx, bool write_back,
            const Run& run) {
    if (comm->device() == buf.device && buf.is_contiguous() &&
        (buf.dtype == DType::kF32 || comm->device() != Device::kCPU)) {
        const Status st = run(buf);
        PENSTOCK_CHECK(st.ok()) << comm->name() << ": " << st.to_string();
        return;
    }
    // Contiguous f32 copy on ctx's device, then to the host.
    Tensor dense = scratch(ctx, buf.shape_vec(), DType::kF32);
    kernels::copy({.out = dense, .in = buf}, ctx);
    Tensor host = dense;
    if (buf.device != Device::kCPU) {
        host = Tensor::empty(buf.shape_vec(), DType::kF32);
        kernels::transfer({.out = host, .in = dense}, ctx);
    }
    const Status st = run(host.view());
    PENSTOCK_CHECK(st.ok()) << comm->name() << ": " << st.to_string();
    if (!write_back) return;
    if (buf.device != Device::kCPU) kernels::transfer({.out = dense, .in = host}, ctx);
    kernels::copy({.out = buf, .in = dense}, ctx);
}

}  // namespace

void comm_all_reduce_sum(parallel::Communicator* comm, const TensorView& buf, const kernels::Context& ctx) {
    if (comm == nullptr || comm->size() == 1 || buf.numel() == 0) return;
    staged(comm, buf, ctx, /*write_back=*/true,
           [&](const TensorView& v) { return comm->all_reduce(v, parallel::ReduceOp::kSum); });
}

void comm_all_gather(parallel::Communicator* comm, const TensorView& out, const TensorView& in,
                     const kernels::Context& ctx) {
    if (comm == nullptr || comm->size() == 1) {
        kernels::copy({.out = out, .in = in}, ctx);
        return;
    }
    PENSTOCK_CHECK_EQ(out.size(0), in.size(0) * comm->size()) << "all_gather: out rows";
    if (comm->device() == in.device && in.is_contiguous() && out.is_contiguous() && in.dtype == out.dtype &&
        (in.dtype == DType::kF32 || comm->device() != Device::kCPU)) {
        const Status st = comm->all_gather(out, in);
        PENSTOCK_CHECK(st.ok()) << comm->name() << ": " << st.to_string();
        return;
    }
    // Stage both through f32 host tensors.
    Tensor in_dense = scratch(ctx, in.shape_vec(), DType::kF32);
    kernels::copy({.out = in_dense, .in = in}, ctx);
    Tensor in_host = in_dense;
    if (in.device != Device::kCPU) {
        in_host = Tensor::empty(in.shape_vec(), DType::kF32);
        kernels::transfer({.out = in_host, .in = in_dense}, ctx);
    }
    Tensor out_host = Tensor::empty(out.shape_vec(), DType::kF32);
    const Status st = comm->all_gather(out_host, in_host);
    PENSTOCK_CHECK(st.ok()) << comm->name() << ": " << st.to_string();
    Tensor out_dense = out_host;
    if (out.device != Device::kCPU) {
        out_dense = scratch(ctx, out.shape_vec(), DType::kF32);
        kernels::transfer({.out = out_dense, .in = out_host}, ctx);
    }
    kernels::copy({.out = out, .in = out_dense}, ctx);
}

void TensorParallel::all_reduce_sum(const TensorView& buf, const kernels::Context& ctx) const {
    comm_all_reduce_sum(tp, buf, ctx);
}

void TensorParallel::all_gather(const TensorView& out, const TensorView& in, const kernels::Context& ctx) const {
    comm_all_gather(tp, out, in, ctx);
}

Tensor cp_gather_rows(const BatchLayout& layout, const TensorView& local, const kernels::Context& ctx) {
    PENSTOCK_CHECK(layout.cp != nullptr) << "cp_gather_rows on a layout without context parallelism";
    const CpLayout& cp = *layout.cp;
    PENSTOCK_CHECK_EQ(local.size(0), layout.n_tokens);
    const int64_t d = local.size(1);
    Tensor padded = scratch_filled(ctx, {cp.rows_per_rank, d}, 0.0f, local.dtype);
    if (layout.n_tokens > 0) kernels::copy({.out = padded.view().slice(0, 0, layout.n_tokens), .in = local}, ctx);
    Tensor gathered = scratch(ctx, {cp.comm->size() * cp.rows_per_rank, d}, local.dtype);
    comm_all_gather(cp.comm, gathered, padded, ctx);
    Tensor full = scratch(ctx, {cp.full.n_tokens, d}, local.dtype);
    if (cp.full.n_tokens > 0) kernels::gather_rows({.out = full, .in = gathered, .index = cp.gather_index}, ctx);
    return full;
}

Tensor cp_own_rows(const BatchLayout& layout, const TensorView& full, const kernels::Context& ctx) {
    PENSTOCK_CHECK(layout.cp != nullptr) << "cp_own_rows on a layout without context parallelism";
    Tensor own = scratch(ctx, {layout.n_tokens, full.size(1)}, full.dtype);
    if (layout.n_tokens > 0) kernels::gather_rows({.out = own, .in = full, .index = layout.cp->own_rows}, ctx);
    return own;
}

}  // namespace penstock::models
