// Block-scaled FP8 GEMM launchers (contract kernels/cuda/fp8_gemm.h): shape checks, the cuBLASLt block-scaled path
// for dense calls, the CUDA-core fallback kernel, and the variant dispatch of cuda::fp8_gemm / fp8_grouped_gemm.
// The wgmma kernel is fp8_grouped_gemm.cu.
//
// cuBLASLt mapping (as gemm.cu): row-major out[m, n] = a[m, k] b[n, k]^T is the column-major out^T[n, m] =
// op(A) B with cuBLAS A = b's memory ([k, n] column major, TRANSA = T) and cuBLAS B = a's memory ([k, m] column
// major, TRANSB = N), the only FP8 operand layout Hopper's cuBLASLt takes. A's scales: BLK128x128_32F, one f32 per
// 128 x 128 block of the weight, read as the row-major [ceil(n / 128), ld] weight_scale_inv (ld = its row stride, a
// multiple of 4 floats). B's scales: VEC128_32F, one f32 per 128 k-values of each activation row, stored with the
// rows contiguous ([ceil(k / 128), m]); these are the layouts torch._scaled_mm validates for its cuBLAS
// BlockWise1x128 x BlockWise128x128 recipe. Compute CUBLAS_COMPUTE_32F, no fast accumulation.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cublas_handles.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_kda.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/fp8_gemm.h"
#include "kernels/cuda/launch_util.cuh"

namespace penstock::cuda {

namespace {

using kernels::kFp8Block;

int64_t blocks_of(int64_t n) { return (n + kFp8Block - 1) / kFp8Block; }

// Row stride of dim d of a view (its size along d + 1 when dim d has one entry: the stride is then never used).
int64_t stride_or(const TensorView& v, int d, int64_t fallback) { return v.size(d) > 1 ? v.stride(d) : fallback; }

void check_2d(const TensorView& v, int64_t rows, int64_t cols, const char* op, const char* name) {
    check_on_gpu(v, op, name);
    PENSTOCK_CHECK(v.ndim == 2 && v.size(0) == rows && v.size(1) == cols)
        << op << ": " << name << " " << v.shape_string() << ", expected [" << rows << ", " << cols << "]";
}

void check_rows_contiguous(const TensorView& v, const char* op, const char* name) {
    PENSTOCK_CHECK(v.stride(v.ndim - 1) == 1 || v.size(v.ndim - 1) <= 1)
        << op << ": " << name << " " << v.shape_string() << " last dim must be contiguous";
}

// a / a_scale / out of both forms.
void check_activation_side(const TensorView& out, const TensorView& a, const TensorView& a_scale, int64_t n_rows,
                           int64_t n, int64_t k, const char* op) {
    check_2d(a, n_rows, k, op, "a");
    check_rows_contiguous(a, op, "a");
    PENSTOCK_CHECK(a.dtype == DType::kF8E4M3) << op << ": a must be f8e4m3, got " << dtype_name(a.dtype);
    check_2d(a_scale, n_rows, blocks_of(k), op, "a_scale");
    PENSTOCK_CHECK(a_scale.dtype == DType::kF32) << op << ": a_scale must be f32, got " << dtype_name(a_scale.dtype);
    check_2d(out, n_rows, n, op, "out");
    check_rows_contiguous(out, op, "out");
    PENSTOCK_CHECK(out.dtype == DType::kF32 || out.dtype == DType::kBF16)
        << op << ": out must be f32 or bf16, got " << dtype_name(out.dtype);
    PENSTOCK_CHECK_GT(k, 0) << op << ": k (a " << a.shape_string() << ")";
}

void check_dense(const kernels::Fp8GemmParams& p) {
    const char* op = "fp8_gemm";
    PENSTOCK_CHECK_EQ(p.a.ndim, 2) << op << ": a " << p.a.shape_string();
    PENSTOCK_CHECK_EQ(p.b.ndim, 2) << op << ": b " << p.b.shape_string();
    const int64_t m = p.a.size(0), k = p.a.size(1), n = p.b.size(0);
    check_activation_side(p.out, p.a, p.a_scale, m, n, k, op);
    check_2d(p.b, n, k, op, "b");
    check_rows_contiguous(p.b, op, "b");
    PENSTOCK_CHECK(p.b.dtype == DType::kF8E4M3) << op << ": b must be f8e4m3, got " << dtype_name(p.b.dtype);
    check_2d(p.b_scale, blocks_of(n), blocks_of(k), op, "b_scale");
    check_rows_contiguous(p.b_scale, op, "b_scale");
    PENSTOCK_CHECK(p.b_scale.dtype == DType::kF32)
        << op << ": b_scale must be f32, got " << dtype_name(p.b_scale.dtype);
}

void check_grouped(const kernels::Fp8GroupedGemmParams& p) {
    const char* op = "fp8_grouped_gemm";
    check_on_gpu(p.b, op, "b");
    PENSTOCK_CHECK(p.b.ndim == 3 && p.b.is_contiguous() && p.b.dtype == DType::kF8E4M3)
        << op << ": b must be a contiguous f8e4m3 [n_groups, n, k], got " << dtype_name(p.b.dtype) << " "
        << p.b.shape_string();
    const int64_t n_groups = p.b.size(0), n = p.b.size(1), k = p.b.size(2);
    PENSTOCK_CHECK_EQ(p.a.ndim, 2) << op << ": a " << p.a.shape_string();
    check_activation_side(p.out, p.a, p.a_scale, p.a.size(0), n, k, op);
    check_on_gpu(p.b_scale, op, "b_scale");
    PENSTOCK_CHECK(p.b_scale.ndim == 3 && p.b_scale.size(0) == n_groups && p.b_scale.size(1) == blocks_of(n) &&
                   p.b_scale.size(2) == blocks_of(k) && p.b_scale.is_contiguous() && p.b_scale.dtype == DType::kF32)
        << op << ": b_scale " << p.b_scale.shape_string() << ", expected contiguous f32 [" << n_groups << ", "
        << blocks_of(n) << ", " << blocks_of(k) << "]";
    check_on_gpu(p.offsets, op, "offsets");
    PENSTOCK_CHECK(p.offsets.dtype == DType::kI32 && p.offsets.ndim == 1 && p.offsets.numel() == n_groups + 1 &&
                   p.offsets.is_contiguous())
        << op << ": offsets " << p.offsets.shape_string() << ", expected [" << n_groups + 1 << "] i32";
}

// The dense call in the kernels' grouped form: one group, offsets null, b / b_scale as [1, ...] views.
kernels::Fp8GroupedGemmParams as_grouped(const kernels::Fp8GemmParams& p) {
    const int64_t n = p.b.size(0), k = p.b.size(1), nb = p.b_scale.size(0), kb = p.b_scale.size(1);
    const int64_t ldb = stride_or(p.b, 0, k), lds = stride_or(p.b_scale, 0, kb);
    return {.out = p.out,
            .a = p.a,
            .a_scale = p.a_scale,
            .b = p.b.as_strided(0, {1, n, k}, {n * ldb, ldb, 1}),
            .b_scale = p.b_scale.as_strided(0, {1, nb, kb}, {nb * lds, lds, 1}),
            .offsets = TensorView{}};
}

// ------------------------------------------------------------------------------------------------ CUDA-core fallback

struct CoreArgs {
    const uint8_t* a;
    const uint8_t* b;
    void* out;
    const float* a_scale;
    const float* b_scale;
    const int32_t* offsets;  // null: one group of all rows
    int64_t lda, ldo, ldb, b_gstride, as_row, as_col, bs_row, bs_gstride;
    int64_t n_rows, n, k;
    int n_groups;
};

// One thread per output element (16 x 16 blocks over (column, row); rows grid-strided). The row's group is found by
// binary search over the device offsets (clamped to [0, n_rows]); rows at or past offsets[n_groups] are skipped.
// Per 128-wide k block, the exact e4m3 products are summed in f32 in k order, then acc += partial * (sa * sb).
template <class OutT>
__global__ void fp8_cuda_core_kernel(CoreArgs p) {
    const int64_t j = static_cast<int64_t>(blockIdx.x) * 16 + threadIdx.x;
    if (j >= p.n) return;
    const auto clamp_off = [&](int i) {
        int64_t v = p.offsets != nullptr ? p.offsets[i] : (i == 0 ? 0 : p.n_rows);
        return v < 0 ? int64_t{0} : (v > p.n_rows ? p.n_rows : v);
    };
    const int64_t end = clamp_off(p.n_groups);
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * 16 + threadIdx.y; r < end;
         r += static_cast<int64_t>(gridDim.y) * 16) {
        int lo = 0, hi = p.n_groups;  // off[lo] <= r < off[hi]
        while (hi - lo > 1) {
            const int mid = (lo + hi) >> 1;
            if (clamp_off(mid) <= r) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        const uint8_t* a = p.a + r * p.lda;
        const uint8_t* b = p.b + lo * p.b_gstride + j * p.ldb;
        const float* bs = p.b_scale + lo * p.bs_gstride + (j / kFp8Block) * p.bs_row;
        float acc = 0.0f;
        for (int64_t k0 = 0; k0 < p.k; k0 += kFp8Block) {
            const int64_t k1 = k0 + kFp8Block < p.k ? k0 + kFp8Block : p.k;
            float partial = 0.0f;
            for (int64_t kk = k0; kk < k1; ++kk)
                partial = fmaf(e4m3_to_f32_exact(a[kk]), e4m3_to_f32_exact(b[kk]), partial);
            const int64_t kb = k0 / kFp8Block;
            acc = fmaf(partial, p.a_scale[r * p.as_row + kb * p.as_col] * bs[kb], acc);
        }
        static_cast<OutT*>(p.out)[r * p.ldo + j] = from_f32<OutT>(acc);
    }
}

// ------------------------------------------------------------------------------------------------ cuBLASLt

struct LtFp8Desc {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~LtFp8Desc() {
        if (pref) (void)cublasLtMatmulPreferenceDestroy(pref);
        if (c) (void)cublasLtMatrixLayoutDestroy(c);
        if (b) (void)cublasLtMatrixLayoutDestroy(b);
        if (a) (void)cublasLtMatrixLayoutDestroy(a);
        if (op) (void)cublasLtMatmulDescDestroy(op);
    }
};

uint32_t alignment_of(const void* p) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    uint32_t align = 256;
    while (align > 1 && a % align != 0) align /= 2;
    return align;
}

int device_major() {
    static thread_local int cache[16] = {};
    int dev = 0;
    PENSTOCK_CUDA_CHECK(cudaGetDevice(&dev));
    int& major = cache[dev & 15];
    if (major == 0) PENSTOCK_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    return major;
}

// The layout conditions of fp8_gemm.h's kCublasLt (everything but the heuristic).
bool lt_layout_ok(const kernels::Fp8GemmParams& p) {
    const int64_t m = p.a.size(0), k = p.a.size(1), n = p.b.size(0), kb = blocks_of(k), nb = blocks_of(n);
    const int64_t lda = stride_or(p.a, 0, k), ldb = stride_or(p.b, 0, k), ldo = stride_or(p.out, 0, n);
    const int64_t out_bytes = p.out.dtype == DType::kF32 ? 4 : 2;
    if (k % 16 != 0 || n % 16 != 0) return false;
    // m % 4: the activation scales are m-contiguous columns ([kb][m] floats) that cuBLAS reads 16 bytes at a time;
    // on the H200 (cuBLAS 13.0) its heuristic declined every m % 4 != 0 tried (1, 77, 257) and took 200 and 300.
    if (m % 4 != 0) return false;
    if (lda % 16 != 0 || ldb % 16 != 0 || (ldo * out_bytes) % 16 != 0) return false;
    if (alignment_of(p.a.data) < 16 || alignment_of(p.b.data) < 16 || alignment_of(p.out.data) < 16) return false;
    if (!(m == 1 || p.a_scale.stride(0) == 1) || !(kb == 1 || p.a_scale.stride(1) == m)) return false;
    if (alignment_of(p.a_scale.data) < 16 || alignment_of(p.b_scale.data) < 16) return false;
    // cuBLAS takes no leading dimension for the block scales: rows of round_up(kb, 4) floats (16 bytes), as
    // torch._scaled_mm requires of its 128x128 scales.
    if (nb > 1 && p.b_scale.stride(0) != ((kb + 3) / 4) * 4) return false;
    return device_major() == 9;
}

bool lt_fp8_gemm(const kernels::Fp8GemmParams& p, cudaStream_t stream) {
    if (!lt_layout_ok(p)) return false;
    const int64_t m = p.a.size(0), k = p.a.size(1), n = p.b.size(0);
    const int64_t lda = stride_or(p.a, 0, k), ldb = stride_or(p.b, 0, k), ldo = stride_or(p.out, 0, n);
    LtContext& ctx = lt_context(stream);
    LtFp8Desc d;
    PENSTOCK_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    PENSTOCK_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    PENSTOCK_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    const int32_t mode_a = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const int32_t mode_b = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    PENSTOCK_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a, sizeof(mode_a)));
    PENSTOCK_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b, sizeof(mode_b)));
    const void* scale_a = p.b_scale.data;
    const void* scale_b = p.a_scale.data;
    PENSTOCK_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_a, sizeof(scale_a)));
    PENSTOCK_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_b, sizeof(scale_b)));
    PENSTOCK_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&d.a, CUDA_R_8F_E4M3, static_cast<uint64_t>(k), static_cast<uint64_t>(n), ldb));
    PENSTOCK_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&d.b, CUDA_R_8F_E4M3, static_cast<uint64_t>(k), static_cast<uint64_t>(m), lda));
    const cudaDataType_t ot = p.out.dtype == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
    PENSTOCK_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&d.c, ot, static_cast<uint64_t>(n), static_cast<uint64_t>(m), ldo));
    PENSTOCK_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
    const uint64_t ws = ctx.workspace_bytes;
    PENSTOCK_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t result{};
    int n_results = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(ctx.handle, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &result, &n_results);
    if (st != CUBLAS_STATUS_SUCCESS || n_results == 0) return false;
    const float alpha = 1.0f, beta = 0.0f;
    PENSTOCK_CUBLAS_CHECK(cublasLtMatmul(ctx.handle, d.op, &alpha, p.b.data, d.a, p.a.data, d.b, &beta, p.out.data, d.c,
                                         p.out.data, d.c, &result.algo, ctx.workspace, ctx.workspace_bytes, stream));
    return true;
}

}  // namespace

const char* fp8_gemm_variant_name(Fp8GemmVariant v) {
    switch (v) {
        case Fp8GemmVariant::kAuto:
            return "auto";
        case Fp8GemmVariant::kCublasLt:
            return "cublaslt";
        case Fp8GemmVariant::kWgmma:
            return "wgmma";
        case Fp8GemmVariant::kWgmmaTma:
            return "wgmma_tma";
        case Fp8GemmVariant::kWgmmaTmaWide:
            return "wgmma_tma_wide";
        case Fp8GemmVariant::kWgmmaTmaPair:
            return "wgmma_tma_pair";
        case Fp8GemmVariant::kWgmmaTmaN192:
            return "wgmma_tma_n192";
        case Fp8GemmVariant::kCudaCore:
            return "cuda_core";
    }
    return "?";
}

void fp8_cuda_core(const kernels::Fp8GroupedGemmParams& p, void* stream) {
    const int64_t n_groups = p.b.size(0), n = p.b.size(1), k = p.b.size(2), n_rows = p.a.size(0);
    if (n_rows == 0 || n == 0) return;
    CoreArgs a{};
    a.a = p.a.ptr<const uint8_t>();
    a.b = p.b.ptr<const uint8_t>();
    a.out = p.out.data;
    a.a_scale = p.a_scale.ptr<const float>();
    a.b_scale = p.b_scale.ptr<const float>();
    a.offsets = p.offsets.data != nullptr ? p.offsets.ptr<const int32_t>() : nullptr;
    a.lda = stride_or(p.a, 0, k);
    a.ldo = stride_or(p.out, 0, n);
    a.ldb = stride_or(p.b, 1, k);
    a.b_gstride = p.b.stride(0);
    a.as_row = p.a_scale.stride(0);
    a.as_col = p.a_scale.stride(1);
    a.bs_row = p.b_scale.stride(1);
    a.bs_gstride = p.b_scale.stride(0);
    a.n_rows = n_rows;
    a.n = n;
    a.k = k;
    a.n_groups = static_cast<int>(n_groups);
    const dim3 block(16, 16);
    const int64_t gy = (n_rows + 15) / 16;
    const dim3 grid(static_cast<unsigned>((n + 15) / 16), static_cast<unsigned>(gy < 65535 ? gy : 65535));
    const auto s = static_cast<cudaStream_t>(stream);
    if (p.out.dtype == DType::kF32) {
        fp8_cuda_core_kernel<float><<<grid, block, 0, s>>>(a);
    } else {
        fp8_cuda_core_kernel<bf16><<<grid, block, 0, s>>>(a);
    }
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

namespace {

// kAuto's TMA tile width (fp8_gemm.h).
int auto_tile_n(int64_t n) {
    static const bool narrow = [] {
        const char* e = std::getenv("PENSTOCK_FP8_TILE_N");
        return e != nullptr && std::strcmp(e, "128") == 0;
    }();
    return narrow || n <= 128 ? 128 : 256;
}

}  // namespace

bool fp8_n192_default() {
    static const bool on = [] {
        const char* e = std::getenv("PENSTOCK_FP8_N192");
        return e != nullptr && std::strcmp(e, "0") != 0;
    }();
    return on;
}

namespace {

// The kernels' form (validated): kWgmma / kWgmmaTma / kWgmmaTmaWide / kWgmmaTmaPair / kWgmmaTmaN192 when supported
// (false otherwise), kCudaCore always, kAuto the TMA kernel where supported (for 256-wide tiles kWgmmaTmaN192 when
// fp8_n192_default() and it runs, else the pair kernel when fp8_pair_default(rows, groups)), else the CUDA-core kernel.
bool run_grouped_form(const kernels::Fp8GroupedGemmParams& p, Fp8GemmVariant v, void* stream) {
    switch (v) {
        case Fp8GemmVariant::kCublasLt:
            return false;
        case Fp8GemmVariant::kWgmma:
            if (!fp8_wgmma_supported(p)) return false;
            fp8_wgmma(p, stream);
            return true;
        case Fp8GemmVariant::kWgmmaTma:
        case Fp8GemmVariant::kWgmmaTmaWide:
            if (!fp8_wgmma_supported(p)) return false;
            fp8_wgmma_tma(p, v == Fp8GemmVariant::kWgmmaTmaWide ? 256 : 128, stream);
            return true;
        case Fp8GemmVariant::kWgmmaTmaPair:
            if (!fp8_wgmma_supported(p)) return false;
            fp8_wgmma_tma_pair(p, stream);
            return true;
        case Fp8GemmVariant::kWgmmaTmaN192:
            return fp8_wgmma_supported(p) && fp8_wgmma_tma_n192(p, stream);
        case Fp8GemmVariant::kCudaCore:
            fp8_cuda_core(p, stream);
            return true;
        case Fp8GemmVariant::kAuto:
            if (fp8_wgmma_supported(p)) {
                const int tile_n = auto_tile_n(p.b.size(1));
                if (tile_n == 256 && fp8_n192_default() && fp8_wgmma_tma_n192(p, stream)) return true;
                if (tile_n == 256 && fp8_pair_default(p.a.size(0), p.b.size(0))) {
                    fp8_wgmma_tma_pair(p, stream);
                } else {
                    fp8_wgmma_tma(p, tile_n, stream);
                }
            } else {
                fp8_cuda_core(p, stream);
            }
            return true;
    }
    return false;
}

}  // namespace

bool fp8_gemm_variant(const kernels::Fp8GemmParams& p, Fp8GemmVariant v, void* stream) {
    check_dense(p);
    if (p.a.size(0) == 0 || p.b.size(0) == 0) return true;
    if (v == Fp8GemmVariant::kCublasLt) return lt_fp8_gemm(p, static_cast<cudaStream_t>(stream));
    if (v == Fp8GemmVariant::kAuto && lt_fp8_gemm(p, static_cast<cudaStream_t>(stream))) return true;
    return run_grouped_form(as_grouped(p), v, stream);
}

bool fp8_grouped_gemm_variant(const kernels::Fp8GroupedGemmParams& p, Fp8GemmVariant v, void* stream) {
    check_grouped(p);
    if (p.b.size(0) == 0 || p.b.size(1) == 0) return true;
    if (v == Fp8GemmVariant::kCublasLt) return false;
    return run_grouped_form(p, v, stream);
}

namespace {

// Checks the parameters (gate_up's shape and dtype; its data only where the unfused form writes it) and returns
// whether fp8_grouped_gemm_glu runs the fused TMA kernel.
bool check_fp8_glu(const kernels::Fp8GroupedGluGemmParams& p, const char* op) {
    check_on_gpu(p.b, op, "b");
    PENSTOCK_CHECK(p.b.ndim == 3 && p.b.size(1) % 2 == 0) << op << ": b [n_groups, 2 I, k], got " << p.b.shape_string();
    const int64_t n_rows = p.a.size(0), inter = p.b.size(1) / 2;
    PENSTOCK_CHECK(p.gate_up.ndim == 2 && p.gate_up.size(0) == n_rows && p.gate_up.size(1) == 2 * inter &&
                   (p.gate_up.dtype == DType::kF32 || p.gate_up.dtype == DType::kBF16))
        << op << ": gate_up scratch " << p.gate_up.shape_string() << " " << dtype_name(p.gate_up.dtype)
        << ", expected f32 or bf16 [" << n_rows << ", " << 2 * inter << "]";
    check_on_gpu(p.out, op, "out");
    check_on_gpu(p.out_scale, op, "out_scale");
    PENSTOCK_CHECK(p.out.ndim == 2 && p.out.size(0) == n_rows && p.out.size(1) == inter &&
                   p.out.dtype == DType::kF8E4M3 && p.out.stride(1) == 1)
        << op << ": out " << dtype_name(p.out.dtype) << " " << p.out.shape_string() << ", expected f8e4m3 [" << n_rows
        << ", " << inter << "] with contiguous rows";
    PENSTOCK_CHECK(p.out_scale.ndim == 2 && p.out_scale.size(0) == n_rows && p.out_scale.size(1) == blocks_of(inter) &&
                   p.out_scale.dtype == DType::kF32)
        << op << ": out_scale " << p.out_scale.shape_string() << ", expected f32 [" << n_rows << ", "
        << blocks_of(inter) << "]";
    const kernels::Fp8GroupedGemmParams gp{
        .out = p.gate_up, .a = p.a, .a_scale = p.a_scale, .b = p.b, .b_scale = p.b_scale, .offsets = p.offsets};
    check_grouped(gp);
    const bool out_aligned =
        reinterpret_cast<uintptr_t>(p.out.data) % 2 == 0 && (n_rows == 1 || p.out.stride(0) % 2 == 0);
    return !grouped_glu_forced_unfused() && p.gate_up.dtype == DType::kBF16 && inter % 128 == 0 && out_aligned &&
           fp8_wgmma_supported(gp);
}

}  // namespace

bool fp8_grouped_gemm_glu_needs_scratch(const kernels::Fp8GroupedGluGemmParams& p, void* /*stream*/) {
    const bool fused = check_fp8_glu(p, "fp8_grouped_gemm_glu_needs_scratch");
    return p.a.size(0) != 0 && p.b.size(1) != 0 && !fused;
}

void fp8_grouped_gemm_glu(const kernels::Fp8GroupedGluGemmParams& p, void* stream) {
    const char* op = "fp8_grouped_gemm_glu";
    const bool fused = check_fp8_glu(p, op);
    const int64_t n_rows = p.a.size(0), inter = p.b.size(1) / 2;
    if (n_rows == 0 || inter == 0) return;
    if (fused) {
        fp8_wgmma_tma_glu(p, stream);
        return;
    }
    // Unfused: the GEMM into gate_up, the activation over its gate half, the quantisation of that half.
    check_on_gpu(p.gate_up, op, "gate_up");
    PENSTOCK_CHECK(p.gate_up.data != nullptr) << op << ": this call takes the unfused form, which needs gate_up";
    fp8_grouped_gemm(
        {.out = p.gate_up, .a = p.a, .a_scale = p.a_scale, .b = p.b, .b_scale = p.b_scale, .offsets = p.offsets},
        stream);
    const TensorView gate = p.gate_up.slice(1, 0, inter);
    glu_from_gate_up(p.act, p.situ_beta, p.situ_linear_beta, gate, p.gate_up, stream);
    fp8_act_quant({.out = p.out, .scale = p.out_scale, .in = gate}, stream);
}

void fp8_gemm(const kernels::Fp8GemmParams& p, void* stream) {
    (void)fp8_gemm_variant(p, Fp8GemmVariant::kAuto, stream);
}

void fp8_grouped_gemm(const kernels::Fp8GroupedGemmParams& p, void* stream) {
    (void)fp8_grouped_gemm_variant(p, Fp8GemmVariant::kAuto, stream);
}

}  // namespace penstock::cuda
