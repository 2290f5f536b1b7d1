// gemm and grouped_gemm through cuBLASLt. Row-major out[m, n] = a[m, k] @ op(b) is computed as the column-major
// out^T[n, m] = op(b)^T a^T: cuBLAS's A is b's memory (transposed when trans_b), its B is a's memory, and row strides
// become leading dimensions. Compute type CUBLAS_COMPUTE_32F for every dtype (f32 stays true fp32, never TF32, so it
// matches the reference to ~1e-5; bf16 multiplies with fp32 accumulation and rounds the output once).
// Supported: a and b both f32 or both bf16; out the same dtype as a, or f32.
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/cuda/cublas_handles.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_kda.h"
#include "kernels/cuda/grouped_gemm.h"
#include "kernels/cuda/launch_util.cuh"

namespace penstock::cuda {

namespace {

// The thread's (device, stream) -> context cache. See cublas_handles.h for the lifetime.
class LtCache {
public:
    LtCache() = default;
    LtCache(const LtCache&) = delete;
    LtCache& operator=(const LtCache&) = delete;
    ~LtCache() {
        for (auto& [key, ctx] : entries_) {
            // Errors ignored: at process exit the driver may already be shutting down.
            (void)cudaSetDevice(key.first);
            if (ctx.workspace != nullptr) (void)cudaFree(ctx.workspace);
            if (ctx.handle != nullptr) (void)cublasLtDestroy(ctx.handle);
        }
    }
    LtContext& get(cudaStream_t stream) {
        int device = 0;
        PENSTOCK_CUDA_CHECK(cudaGetDevice(&device));
        auto [it, inserted] = entries_.try_emplace({device, stream});
        if (inserted) {
            PENSTOCK_CUBLAS_CHECK(cublasLtCreate(&it->second.handle));
            PENSTOCK_CUDA_CHECK(cudaMalloc(&it->second.workspace, kLtWorkspaceBytes));
            it->second.workspace_bytes = kLtWorkspaceBytes;
        }
        return it->second;
    }

private:
    std::map<std::pair<int, cudaStream_t>, LtContext> entries_;
};

__global__ void scale_kernel(float* out, int64_t m, int64_t n, int64_t ld, float beta) {
    const int64_t total = m * n;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        float& x = out[(i / n) * ld + i % n];
        x = beta == 0.0f ? 0.0f : beta * x;
    }
}

__global__ void scale_kernel_bf16(bf16* out, int64_t m, int64_t n, int64_t ld, float beta) {
    const int64_t total = m * n;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        bf16& x = out[(i / n) * ld + i % n];
        x = __float2bfloat16_rn(beta == 0.0f ? 0.0f : beta * __bfloat162float(x));
    }
}

cudaDataType_t cuda_type(DType d) { return d == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF; }

uint32_t alignment_of(const void* p) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    uint32_t align = 256;
    while (align > 1 && a % align != 0) align /= 2;
    return align;
}

// Leading dimension of a row-major [rows, cols] view: its row stride, clamped for single-row views (any stride).
int64_t ld_of(const TensorView& v) {
    const int64_t cols = v.size(1) > 1 ? v.size(1) : 1;
    if (v.size(0) <= 1) return cols;
    return v.stride(0) > cols ? v.stride(0) : cols;
}

struct LtDesc {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~LtDesc() {
        if (pref) (void)cublasLtMatmulPreferenceDestroy(pref);
        if (c) (void)cublasLtMatrixLayoutDestroy(c);
        if (b) (void)cublasLtMatrixLayoutDestroy(b);
        if (a) (void)cublasLtMatrixLayoutDestroy(a);
        if (op) (void)cublasLtMatmulDescDestroy(op);
    }
};

// One thread per output element, fp32 accumulation in k order. Only for layouts cuBLASLt has no algorithm for
// (e.g. bf16 operands that are not 4-byte aligned); never the fast path.
template <class TI, class TO>
__global__ void fallback_gemm_kernel(TO* out, const TI* a, const TI* b, int64_t m, int64_t n, int64_t k, int64_t lda,
                                     int64_t ldb, int64_t ldo, bool trans_b, float alpha, float beta) {
    const int64_t i = static_cast<int64_t>(blockIdx.y) * 16 + threadIdx.y;
    const int64_t j = static_cast<int64_t>(blockIdx.x) * 16 + threadIdx.x;
    if (i >= m || j >= n) return;
    float acc = 0.0f;
    for (int64_t kk = 0; kk < k; ++kk) {
        acc = fmaf(to_f32(a[i * lda + kk]), to_f32(trans_b ? b[j * ldb + kk] : b[kk * ldb + j]), acc);
    }
    TO& o = out[i * ldo + j];
    o = from_f32<TO>(beta == 0.0f ? alpha * acc : alpha * acc + beta * to_f32(o));
}

void fallback_gemm(void* out, DType out_dtype, int64_t ld_out, const void* a, int64_t ld_a, const void* b, int64_t ld_b,
                   DType in_dtype, int64_t m, int64_t n, int64_t k, bool trans_b, float alpha, float beta,
                   cudaStream_t stream) {
    const dim3 block(16, 16);
    const dim3 grid(static_cast<unsigned>((n + 15) / 16), static_cast<unsigned>((m + 15) / 16));
    dispatch_float(in_dtype, "gemm", [&](auto ti) {
        dispatch_float(out_dtype, "gemm out", [&](auto to) {
            using TI = decltype(ti);
            using TO = decltype(to);
            fallback_gemm_kernel<TI, TO><<<grid, block, 0, stream>>>(static_cast<TO*>(out), static_cast<const TI*>(a),
                                                                     static_cast<const TI*>(b), m, n, k, ld_a, ld_b,
                                                                     ld_out, trans_b, alpha, beta);
        });
    });
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

// out[m, n] (row major, ld_out) = alpha * a[m, k] (ld_a) @ op(b) + beta * out. b is [n, k] (ld_b) when trans_b.
// Falls back to fallback_gemm when cuBLASLt's heuristic offers no algorithm for the layout.
// Batched (batch > 1): batch products, operand i at a + i * batch_a elements (b, out likewise).
struct LtBatch {
    int64_t count = 1;
    int64_t a = 0, b = 0, out = 0;  // element strides between batch entries
};

void set_batch(cublasLtMatrixLayout_t layout, int64_t count, int64_t stride) {
    const auto c = static_cast<int32_t>(count);
    PENSTOCK_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &c, sizeof(c)));
    PENSTOCK_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
}

// One cuBLASLt problem as the plan cache keys it: everything the descriptors and the heuristic see (the handle stands
// for the device). Pointers, alpha and beta are not part of it: they are passed at launch.
struct LtKey {
    uintptr_t handle = 0;
    int out_dtype = 0, in_dtype = 0;
    int64_t m = 0, n = 0, k = 0, ld_a = 0, ld_b = 0, ld_out = 0;
    bool trans_b = false;
    uint32_t align_a = 0, align_b = 0, align_c = 0;
    int64_t batch_count = 1, batch_a = 0, batch_b = 0, batch_out = 0;
    auto operator<=>(const LtKey&) const = default;
};

// The descriptors and the heuristic's first algorithm (none: the fallback kernel) of one problem.
struct LtPlan {
    LtDesc d;
    bool has_algo = false;
    cublasLtMatmulAlgo_t algo{};
};

// The calling thread's plans. The heuristic query and the five descriptor creations cost host time on every call
// otherwise, which the GPU sees when the calls are short and many: grouped_gemm's cuBLASLt path makes one call per
// group (256 per expert GEMM for DeepSeek-V3). Bounded: at kMaxLtPlans entries the cache starts over (varying group
// sizes make new keys forward after forward).
constexpr size_t kMaxLtPlans = 4096;

const LtPlan& lt_plan(const LtKey& key, LtContext& ctx) {
    thread_local std::map<LtKey, std::unique_ptr<LtPlan>> plans;
    if (auto it = plans.find(key); it != plans.end()) return *it->second;
    if (plans.size() >= kMaxLtPlans) plans.clear();
    auto plan = std::make_unique<LtPlan>();
    LtDesc& d = plan->d;
    PENSTOCK_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = CUBLAS_OP_N;
    PENSTOCK_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    PENSTOCK_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    const cudaDataType_t it = cuda_type(static_cast<DType>(key.in_dtype));
    const auto m = static_cast<uint64_t>(key.m), n = static_cast<uint64_t>(key.n), k = static_cast<uint64_t>(key.k);
    // cuBLAS A: b's memory, column-major [k, n] when trans_b else [n, k].
    PENSTOCK_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, it, key.trans_b ? k : n, key.trans_b ? n : k, key.ld_b));
    // cuBLAS B: a's memory, column-major [k, m].
    PENSTOCK_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, it, k, m, key.ld_a));
    // C = D: out's memory, column-major [n, m].
    PENSTOCK_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&d.c, cuda_type(static_cast<DType>(key.out_dtype)), n, m, key.ld_out));
    if (key.batch_count > 1) {
        set_batch(d.a, key.batch_count, key.batch_b);  // cuBLAS A is b's memory, B is a's
        set_batch(d.b, key.batch_count, key.batch_a);
        set_batch(d.c, key.batch_count, key.batch_out);
    }
    PENSTOCK_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
    const uint64_t ws = ctx.workspace_bytes;
    PENSTOCK_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    PENSTOCK_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                               &key.align_a, sizeof(key.align_a)));
    PENSTOCK_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                               &key.align_b, sizeof(key.align_b)));
    PENSTOCK_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                               &key.align_c, sizeof(key.align_c)));
    PENSTOCK_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                               &key.align_c, sizeof(key.align_c)));
    cublasLtMatmulHeuristicResult_t result{};
    int n_results = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(ctx.handle, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &result, &n_results);
    if (st != CUBLAS_STATUS_SUCCESS) n_results = 0;  // e.g. NOT_SUPPORTED for this layout: use the fallback
    plan->has_algo = n_results > 0;
    if (plan->has_algo) plan->algo = result.algo;
    return *plans.emplace(key, std::move(plan)).first->second;
}

void lt_matmul(void* out, DType out_dtype, int64_t ld_out, const void* a, int64_t ld_a, const void* b, int64_t ld_b,
               DType in_dtype, int64_t m, int64_t n, int64_t k, bool trans_b, float alpha, float beta,
               cudaStream_t stream, const LtBatch& batch = {}) {
    LtContext& ctx = lt_context(stream);
    // Batched: every entry's address must keep the promised alignment (the batch stride in bytes counts too).
    const auto entry_align = [&](const void* base, int64_t stride, DType dt) {
        const uint32_t al = alignment_of(base);
        if (batch.count <= 1) return al;
        const uint32_t sa =
            alignment_of(reinterpret_cast<const void*>(static_cast<uintptr_t>(stride) * dtype_bytes(dt, 1)));
        return al < sa ? al : sa;
    };
    const LtKey key{.handle = reinterpret_cast<uintptr_t>(ctx.handle),
                    .out_dtype = static_cast<int>(out_dtype),
                    .in_dtype = static_cast<int>(in_dtype),
                    .m = m,
                    .n = n,
                    .k = k,
                    .ld_a = ld_a,
                    .ld_b = ld_b,
                    .ld_out = ld_out,
                    .trans_b = trans_b,
                    .align_a = entry_align(b, batch.b, in_dtype),
                    .align_b = entry_align(a, batch.a, in_dtype),
                    .align_c = entry_align(out, batch.out, out_dtype),
                    .batch_count = batch.count > 1 ? batch.count : 1,
                    .batch_a = batch.count > 1 ? batch.a : 0,
                    .batch_b = batch.count > 1 ? batch.b : 0,
                    .batch_out = batch.count > 1 ? batch.out : 0};
    const LtPlan& plan = lt_plan(key, ctx);
    if (!plan.has_algo) {
        const int64_t ib = static_cast<int64_t>(dtype_bytes(in_dtype, 1));
        const int64_t ob = static_cast<int64_t>(dtype_bytes(out_dtype, 1));
        for (int64_t i = 0; i < batch.count; ++i) {
            fallback_gemm(static_cast<char*>(out) + i * batch.out * ob, out_dtype, ld_out,
                          static_cast<const char*>(a) + i * batch.a * ib, ld_a,
                          static_cast<const char*>(b) + i * batch.b * ib, ld_b, in_dtype, m, n, k, trans_b, alpha, beta,
                          stream);
        }
        return;
    }
    const LtDesc& d = plan.d;
    PENSTOCK_CUBLAS_CHECK(cublasLtMatmul(ctx.handle, d.op, &alpha, b, d.a, a, d.b, &beta, out, d.c, out, d.c,
                                         &plan.algo, ctx.workspace, ctx.workspace_bytes, stream));
}

void scale_out(const TensorView& out, int64_t m, int64_t n, float beta, cudaStream_t stream) {
    if (out.dtype == DType::kF32) {
        scale_kernel<<<blocks_for(m * n, 256), 256, 0, stream>>>(out.ptr<float>(), m, n, out.stride(0), beta);
    } else {
        scale_kernel_bf16<<<blocks_for(m * n, 256), 256, 0, stream>>>(out.ptr<bf16>(), m, n, out.stride(0), beta);
    }
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void check_matrix(const TensorView& v, int64_t rows, int64_t cols, const char* op, const char* name) {
    check_on_gpu(v, op, name);
    PENSTOCK_CHECK_EQ(v.ndim, 2) << op << ": " << name << " " << v.shape_string();
    PENSTOCK_CHECK(v.size(0) == rows && v.size(1) == cols)
        << op << ": " << name << " " << v.shape_string() << ", expected [" << rows << ", " << cols << "]";
    PENSTOCK_CHECK(v.stride(1) == 1 || cols <= 1) << op << ": " << name << " last dim must be contiguous";
    PENSTOCK_CHECK(v.size(0) <= 1 || v.stride(0) >= cols) << op << ": " << name << " row stride " << v.stride(0);
}

void check_dtypes(DType out, DType a, DType b, const char* op) {
    PENSTOCK_CHECK(is_float_dtype(a) && a == b)
        << op << ": a and b must both be f32 or both bf16, got " << dtype_name(a) << " and " << dtype_name(b);
    PENSTOCK_CHECK(out == a || out == DType::kF32)
        << op << ": out " << dtype_name(out) << " with inputs " << dtype_name(a);
}

}  // namespace

LtContext& lt_context(cudaStream_t stream) {
    thread_local LtCache cache;
    return cache.get(stream);
}

void gemm(const kernels::GemmParams& p, void* stream) {
    if (p.a.ndim == 3) {  // batched: one strided-batched cuBLASLt product
        PENSTOCK_CHECK(p.b.ndim == 3 && p.out.ndim == 3) << "gemm: batched a needs 3-D b and out";
        const int64_t batch = p.a.size(0);
        PENSTOCK_CHECK(p.b.size(0) == batch && p.out.size(0) == batch)
            << "gemm: batch counts " << batch << ", " << p.b.size(0) << ", " << p.out.size(0);
        const TensorView a0 = p.a.select(0, 0), b0 = p.b.select(0, 0), o0 = p.out.select(0, 0);
        const int64_t m = a0.size(0), k = a0.size(1), n = p.trans_b ? b0.size(0) : b0.size(1);
        check_matrix(a0, m, k, "gemm", "a");
        check_matrix(b0, p.trans_b ? n : k, p.trans_b ? k : n, "gemm", "b");
        check_matrix(o0, m, n, "gemm", "out");
        check_dtypes(p.out.dtype, p.a.dtype, p.b.dtype, "gemm");
        if (batch == 0 || m == 0 || n == 0) return;
        PENSTOCK_CHECK(k > 0) << "gemm: batched with k == 0";
        lt_matmul(p.out.data, p.out.dtype, ld_of(o0), p.a.data, ld_of(a0), p.b.data, ld_of(b0), p.a.dtype, m, n, k,
                  p.trans_b, p.alpha, p.beta, static_cast<cudaStream_t>(stream),
                  LtBatch{.count = batch, .a = p.a.stride(0), .b = p.b.stride(0), .out = p.out.stride(0)});
        return;
    }
    const int64_t m = p.a.size(0);
    const int64_t k = p.a.size(1);
    const int64_t n = p.trans_b ? p.b.size(0) : p.b.size(1);
    check_matrix(p.a, m, k, "gemm", "a");
    if (p.trans_b) {
        check_matrix(p.b, n, k, "gemm", "b");
    } else {
        check_matrix(p.b, k, n, "gemm", "b");
    }
    check_matrix(p.out, m, n, "gemm", "out");
    check_dtypes(p.out.dtype, p.a.dtype, p.b.dtype, "gemm");
    if (m == 0 || n == 0) return;
    const auto s = static_cast<cudaStream_t>(stream);
    if (k == 0) {
        scale_out(p.out, m, n, p.beta, s);
        return;
    }
    lt_matmul(p.out.data, p.out.dtype, ld_of(p.out), p.a.data, ld_of(p.a), p.b.data, ld_of(p.b), p.a.dtype, m, n, k,
              p.trans_b, p.alpha, p.beta, s);
}

void grouped_gemm(const kernels::GroupedGemmParams& p, void* stream) {
    grouped_gemm_variant(p, GroupedGemmVariant::kAuto, stream);
}

namespace {

// The [2 I] problem as cuda::grouped_gemm sees it (the out view only describes the shape and dtype).
kernels::GroupedGemmParams glu_full_problem(const kernels::GroupedGluGemmParams& p) {
    const std::array<int64_t, 2> full_shape{p.a.size(0), 2 * p.out.size(1)};
    return {.out = TensorView::contiguous(p.out.data, p.out.dtype, full_shape, Device::kCUDA, p.out.device_index),
            .a = p.a,
            .b = p.b,
            .offsets = p.offsets};
}

// Whether grouped_gemm_glu runs the fused device kernel for these (checked) parameters.
bool glu_fused(const kernels::GroupedGluGemmParams& p, void* stream) {
    return !grouped_glu_forced_unfused() && p.out.dtype == DType::kBF16 && p.out.size(1) % 128 == 0 &&
           p.out.stride(1) == 1 && p.out.stride(0) % 8 == 0 && reinterpret_cast<uintptr_t>(p.out.data) % 16 == 0 &&
           grouped_gemm_auto_takes_device(glu_full_problem(p), stream);
}

void check_glu(const kernels::GroupedGluGemmParams& p, const char* op) {
    check_on_gpu(p.out, op, "out");
    check_on_gpu(p.b, op, "b");
    PENSTOCK_CHECK(p.b.ndim == 3 && p.b.size(1) % 2 == 0) << op << ": b [n_groups, 2 I, k], got " << p.b.shape_string();
    PENSTOCK_CHECK(p.out.ndim == 2 && p.a.ndim == 2 && p.out.size(0) == p.a.size(0) && 2 * p.out.size(1) == p.b.size(1))
        << op << ": out " << p.out.shape_string() << ", a " << p.a.shape_string() << ", b " << p.b.shape_string();
    PENSTOCK_CHECK(is_float_dtype(p.out.dtype)) << op << ": out f32 or bf16";
}

}  // namespace

bool grouped_gemm_glu_needs_scratch(const kernels::GroupedGluGemmParams& p, void* stream) {
    check_glu(p, "grouped_gemm_glu_needs_scratch");
    if (p.a.size(0) == 0 || p.out.size(1) == 0) return false;
    return !glu_fused(p, stream);
}

void grouped_gemm_glu(const kernels::GroupedGluGemmParams& p, void* stream) {
    const char* op = "grouped_gemm_glu";
    check_glu(p, op);
    const int64_t n_rows = p.a.size(0), inter = p.out.size(1);
    if (n_rows == 0 || inter == 0) return;
    if (glu_fused(p, stream)) {
        const int sms = current_device_sms();
        grouped_gemm_glu_tma({.out = p.out, .a = p.a, .b = p.b, .offsets = p.offsets},
                             p.act == kernels::GluKind::kSilu ? GluEpilogue::kSilu : GluEpilogue::kSitu, p.situ_beta,
                             p.situ_linear_beta, sms, stream,
                             grouped_gemm_default_device_kernel() == GroupedGemmVariant::kTmaDynCluster);
        return;
    }
    // Unfused: [gate ; up] into the caller's buffer, then the activation op.
    check_on_gpu(p.gate_up, op, "gate_up");
    PENSTOCK_CHECK(p.gate_up.data != nullptr && p.gate_up.ndim == 2 && p.gate_up.size(0) == n_rows &&
                   p.gate_up.size(1) == 2 * inter && p.gate_up.dtype == p.out.dtype)
        << op << ": gate_up scratch " << p.gate_up.shape_string() << " (this call takes the unfused form)";
    kernels::GroupedGemmParams full = glu_full_problem(p);
    full.out = p.gate_up;
    grouped_gemm(full, stream);
    glu_from_gate_up(p.act, p.situ_beta, p.situ_linear_beta, p.out, p.gate_up, stream);
}

void glu_from_gate_up(kernels::GluKind act, float situ_beta, float situ_linear_beta, const TensorView& out,
                      const TensorView& gate_up, void* stream) {
    const int64_t inter = gate_up.size(1) / 2;
    const TensorView gate = gate_up.slice(1, 0, inter), up = gate_up.slice(1, inter, 2 * inter);
    switch (act) {
        case kernels::GluKind::kSilu:
            silu_mul({.out = out, .gate = gate, .up = up}, stream);
            break;
        case kernels::GluKind::kSitu:
            situ_mul({.out = out, .gate = gate, .up = up, .beta = situ_beta, .linear_beta = situ_linear_beta}, stream);
            break;
    }
}

bool grouped_glu_forced_unfused() {
    static const bool forced = [] {
        const char* e = std::getenv("PENSTOCK_GROUPED_GLU");
        return e != nullptr && std::strcmp(e, "unfused") == 0;
    }();
    return forced;
}

namespace {

bool stream_capturing(void* stream) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    PENSTOCK_CUDA_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &capture));
    return capture != cudaStreamCaptureStatusNone;
}

}  // namespace

bool grouped_gemm_auto_takes_device(const kernels::GroupedGemmParams& p, void* stream) {
    // 512: at 512 rows per expert (DeepSeek-V3 / GLM-5.3 at T = 16384) the device kernels (CTA pairs, the fused gated
    // GEMM, 16-byte epilogue stores) took 2.1-2.3 ms off the bf16 experts and 0.4-1.5 ms off the layers against
    // cuBLASLt's per-group GEMMs (docs/perf/2026-12-04-s27.md, call I); above it, not measured since session 6.
    constexpr int64_t kDeviceMaxAvgRows = 512;
    static const int env_mode = [] {
        const char* e = std::getenv("PENSTOCK_GROUPED_GEMM");
        if (e == nullptr) return 0;
        if (std::strcmp(e, "cublaslt") == 0) return 1;
        if (std::strcmp(e, "device") == 0) return 2;
        return 0;
    }();
    const int64_t n_groups = p.b.size(0), n_rows = p.a.size(0);
    const bool small_groups = n_rows <= kDeviceMaxAvgRows * n_groups;
    return grouped_gemm_device_unsupported(p) == nullptr &&
           (stream_capturing(stream) || env_mode == 2 || (env_mode == 0 && small_groups));
}

void grouped_gemm_variant(const kernels::GroupedGemmParams& p, GroupedGemmVariant variant, void* stream) {
    const char* op = "grouped_gemm";
    check_on_gpu(p.b, op, "b");
    PENSTOCK_CHECK_EQ(p.b.ndim, 3) << op << ": b " << p.b.shape_string();
    PENSTOCK_CHECK(p.b.is_contiguous()) << op << ": b must be contiguous";
    const int64_t n_groups = p.b.size(0);
    const int64_t n = p.b.size(1);
    const int64_t k = p.b.size(2);
    const int64_t n_rows = p.a.size(0);
    check_matrix(p.a, n_rows, k, op, "a");
    check_matrix(p.out, n_rows, n, op, "out");
    check_dtypes(p.out.dtype, p.a.dtype, p.b.dtype, op);
    check_on_gpu(p.offsets, op, "offsets");
    PENSTOCK_CHECK(p.offsets.dtype == DType::kI32 && p.offsets.ndim == 1 && p.offsets.numel() == n_groups + 1 &&
                   p.offsets.is_contiguous())
        << op << ": offsets [n_groups + 1] i32";
    if (n_groups == 0 || n == 0) return;
    // The device kernels (grouped_gemm_tma.cu, grouped_gemm.cu) read the offsets on the device: no host sync. kAuto
    // takes the default one (kDevice = kTmaDynCluster, docs/perf/2026-12-02-s18.md) when it is supported and either the
    // groups are small (n_rows / n_groups <= kDeviceMaxAvgRows) or the stream is being captured (the cuBLASLt path
    // cannot be). On the H200 (docs/perf/2026-12-01-grouped-gemm-dyn.md, 2026-12-01-session6-layers.md) kTmaDyn ran the
    // DeepSeek-V3 / Kimi K3 expert GEMMs at 1.00-1.52x torch._grouped_mm at T = 4096 and 16384, and cut the Kimi K3
    // layers' experts from 39-41 to 32-34 ms at T = 16384 (292 rows per expert); at 512 rows per expert (DeepSeek-V3, T
    // = 16384) cuBLASLt's per-group GEMMs were faster then (session 6: gate_up 11.5-12.8 vs 13.4-13.6 ms, the layer
    // 1.4-2.6 ms), and slower since the CTA pairs and the 16-byte epilogue stores (session 27: experts 18.3-18.5 vs
    // 20.6-20.8 ms, the layer 51.5-51.7 vs 52.1-52.3), so the limit is 512 rows per group. Calls the kernels do not
    // take (f32 operands, k % 8 != 0, ...) run on the cuBLASLt path, or fail with the reason under capture.
    // PENSTOCK_GROUPED_GEMM=cublaslt / device forces either under kAuto (capture: always device).
    if (variant != GroupedGemmVariant::kAuto && variant != GroupedGemmVariant::kCublasLt) {
        const char* why = grouped_gemm_device_unsupported(p);
        PENSTOCK_CHECK(why == nullptr) << op << ": the device kernel cannot take this call: " << why;
        grouped_gemm_device(p, variant, stream);
        return;
    }
    if (variant == GroupedGemmVariant::kAuto) {
        if (grouped_gemm_auto_takes_device(p, stream)) {
            grouped_gemm_device(p, GroupedGemmVariant::kDevice, stream);
            return;
        }
        const char* why = grouped_gemm_device_unsupported(p);
        PENSTOCK_CHECK(!stream_capturing(stream))
            << op << ": the stream is being captured, and the device kernel cannot take this call (" << why
            << "); the cuBLASLt path copies the offsets to the host";
    }
    const auto s = static_cast<cudaStream_t>(stream);
    // The cuBLASLt path: this host copy + sync is not graph capturable.
    std::vector<int32_t> off(static_cast<size_t>(n_groups + 1));
    PENSTOCK_CUDA_CHECK(
        cudaMemcpyAsync(off.data(), p.offsets.data, sizeof(int32_t) * off.size(), cudaMemcpyDeviceToHost, s));
    PENSTOCK_CUDA_CHECK(cudaStreamSynchronize(s));
    PENSTOCK_CHECK_EQ(off[0], 0) << op << ": offsets[0]";
    PENSTOCK_CHECK_LE(static_cast<int64_t>(off.back()), n_rows) << op << ": offsets[n_groups] past the rows";
    // Every offset checked before the first launch: a bad offsets tensor fails the call with nothing written.
    for (int64_t g = 0; g < n_groups; ++g) {
        PENSTOCK_CHECK_LE(off[static_cast<size_t>(g)], off[static_cast<size_t>(g) + 1])
            << op << ": offsets decrease at group " << g;
    }
    const int64_t in_elem = static_cast<int64_t>(dtype_bytes(p.a.dtype, 1));
    for (int64_t g = 0; g < n_groups; ++g) {
        const int64_t r0 = off[static_cast<size_t>(g)];
        const int64_t r1 = off[static_cast<size_t>(g) + 1];
        if (r0 == r1) continue;
        const TensorView a = p.a.slice(0, r0, r1);
        const TensorView out = p.out.slice(0, r0, r1);
        if (k == 0) {
            scale_out(out, r1 - r0, n, 0.0f, s);
            continue;
        }
        const void* b = static_cast<const char*>(p.b.data) + g * n * k * in_elem;
        lt_matmul(out.data, p.out.dtype, ld_of(out), a.data, ld_of(a), b, k, p.a.dtype, r1 - r0, n, k,
                  /*trans_b=*/true, 1.0f, 0.0f, s);
    }
}

}  // namespace penstock::cuda
