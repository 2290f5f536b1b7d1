// Backend dispatch: the only place that chooses between the CPU reference and the CUDA kernels.
#include "kernels/ops.h"

#include "kernels/ref/ref_ops.h"

#if PENSTOCK_ENABLE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace penstock::kernels {

// Each op: CPU -> ref::op(p, pool); CUDA -> cuda::op(p, stream) when that backend was built and implements it.
#if PENSTOCK_ENABLE_CUDA
#define PENSTOCK_DISPATCH(op, p, ctx)                                  \
    switch ((ctx).device) {                                           \
        case Device::kCPU: ref::op((p), (ctx).pool); return;          \
        case Device::kCUDA: cuda::op((p), (ctx).stream); return;      \
    }
#else
#define PENSTOCK_DISPATCH(op, p, ctx)                                                              \
    switch ((ctx).device) {                                                                       \
        case Device::kCPU: ref::op((p), (ctx).pool); return;                                      \
        case Device::kCUDA: PENSTOCK_CHECK(false) << #op ": this build has no CUDA backend"; return; \
    }
#endif

Allocator& allocator_of(const Context& ctx) {
    if (ctx.alloc != nullptr) return *ctx.alloc;
    PENSTOCK_CHECK(ctx.device == Device::kCPU) << "a CUDA context needs an allocator";
    return cpu_allocator();
}

DeviceMemory device_memory(const Context& ctx) {
    switch (ctx.device) {
        case Device::kCPU:
            return {};
        case Device::kCUDA:
#if PENSTOCK_ENABLE_CUDA
            return cuda::device_memory(ctx.alloc);
#else
            PENSTOCK_CHECK(false) << "device_memory: this build has no CUDA backend";
#endif
    }
    return {};
}

void transfer(const TransferParams& p, const Context& ctx) { PENSTOCK_DISPATCH(transfer, p, ctx); }
void copy(const CopyParams& p, const Context& ctx) { PENSTOCK_DISPATCH(copy, p, ctx); }
void fill(const FillParams& p, const Context& ctx) { PENSTOCK_DISPATCH(fill, p, ctx); }
void fill_random(const FillRandomParams& p, const Context& ctx) { PENSTOCK_DISPATCH(fill_random, p, ctx); }
void gather_rows(const GatherRowsParams& p, const Context& ctx) { PENSTOCK_DISPATCH(gather_rows, p, ctx); }
void grouped_gemm(const GroupedGemmParams& p, const Context& ctx) { PENSTOCK_DISPATCH(grouped_gemm, p, ctx); }
void paged_write(const PagedWriteParams& p, const Context& ctx) { PENSTOCK_DISPATCH(paged_write, p, ctx); }
void paged_gather(const PagedGatherParams& p, const Context& ctx) { PENSTOCK_DISPATCH(paged_gather, p, ctx); }
void fp8_act_quant(const Fp8ActQuantParams& p, const Context& ctx) { PENSTOCK_DISPATCH(fp8_act_quant, p, ctx); }
void fp8_gemm(const Fp8GemmParams& p, const Context& ctx) { PENSTOCK_DISPATCH(fp8_gemm, p, ctx); }
void fp8_grouped_gemm(const Fp8GroupedGemmParams& p, const Context& ctx) {
    PENSTOCK_DISPATCH(fp8_grouped_gemm, p, ctx);
}
void grouped_gemm_glu(const GroupedGluGemmParams& p, const Context& ctx) {
    PENSTOCK_DISPATCH(grouped_gemm_glu, p, ctx);
}
void fp8_grouped_gemm_glu(const Fp8GroupedGluGemmParams& p, const Context& ctx) {
    PENSTOCK_DISPATCH(fp8_grouped_gemm_glu, p, ctx);
}
bool grouped_gemm_glu_needs_scratch(const GroupedGluGemmParams& p, const Context& ctx) {
#if PENSTOCK_ENABLE_CUDA
    if (ctx.device == Device::kCUDA) return cuda::grouped_gemm_glu_needs_scratch(p, ctx.stream);
#endif
    (void)p;
    PENSTOCK_CHECK(ctx.device == Device::kCPU) << "grouped_gemm_glu_needs_scratch: this build has no CUDA backend";
    return true;  // the reference always computes [gate ; up] first
}
bool fp8_grouped_gemm_glu_needs_scratch(const Fp8GroupedGluGemmParams& p, const Context& ctx) {
#if PENSTOCK_ENABLE_CUDA
    if (ctx.device == Device::kCUDA) return cuda::fp8_grouped_gemm_glu_needs_scratch(p, ctx.stream);
#endif
    (void)p;
    PENSTOCK_CHECK(ctx.device == Device::kCPU) << "fp8_grouped_gemm_glu_needs_scratch: this build has no CUDA backend";
    return true;
}
void fp8_quantize_tensor(const Fp8TensorScaleParams& p, const Context& ctx) {
    PENSTOCK_DISPATCH(fp8_quantize_tensor, p, ctx);
}
void fp8_dequantize_tensor(const Fp8TensorScaleParams& p, const Context& ctx) {
    PENSTOCK_DISPATCH(fp8_dequantize_tensor, p, ctx);
}
void fp8_quantize_heads(const Fp8HeadQuantParams& p, const Context& ctx) {
    PENSTOCK_DISPATCH(fp8_quantize_heads, p, ctx);
}
void embedding(const EmbeddingParams& p, const Context& ctx) { PENSTOCK_DISPATCH(embedding, p, ctx); }
void rms_norm(const RmsNormParams& p, const Context& ctx) { PENSTOCK_DISPATCH(rms_norm, p, ctx); }
void layer_norm(const LayerNormParams& p, const Context& ctx) { PENSTOCK_DISPATCH(layer_norm, p, ctx); }
void rope(const RopeParams& p, const Context& ctx) { PENSTOCK_DISPATCH(rope, p, ctx); }
void gemm(const GemmParams& p, const Context& ctx) { PENSTOCK_DISPATCH(gemm, p, ctx); }
void silu_mul(const SiluMulParams& p, const Context& ctx) { PENSTOCK_DISPATCH(silu_mul, p, ctx); }
void add(const AddParams& p, const Context& ctx) { PENSTOCK_DISPATCH(add, p, ctx); }
void softmax(const SoftmaxParams& p, const Context& ctx) { PENSTOCK_DISPATCH(softmax, p, ctx); }
void attention(const AttentionParams& p, const Context& ctx) { PENSTOCK_DISPATCH(attention, p, ctx); }
void merge_attention(const MergeAttentionParams& p, const Context& ctx) { PENSTOCK_DISPATCH(merge_attention, p, ctx); }
void moe_routing(const MoeRoutingParams& p, const Context& ctx) { PENSTOCK_DISPATCH(moe_routing, p, ctx); }
void moe_align(const MoeAlignParams& p, const Context& ctx) { PENSTOCK_DISPATCH(moe_align, p, ctx); }
void moe_permute(const MoePermuteParams& p, const Context& ctx) { PENSTOCK_DISPATCH(moe_permute, p, ctx); }
void moe_unpermute(const MoeUnpermuteParams& p, const Context& ctx) { PENSTOCK_DISPATCH(moe_unpermute, p, ctx); }

}  // namespace penstock::kernels
