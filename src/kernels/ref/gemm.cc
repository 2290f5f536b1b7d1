// Reference GEMM: out = alpha * a @ op(b) + beta * out through OpenBLAS cblas_sgemm (f32 in, f32 accumulation).
// Row strides of a, b and out become lda/ldb/ldc; the last dim must be contiguous. As in BLAS, beta == 0 means out is
// not read (NaN/inf already in out do not propagate). One sgemm call over the whole problem, so the result does not
// depend on `pool` (which is unused) nor on the row partitioning. It can depend on OpenBLAS's own thread count
// (OPENBLAS_NUM_THREADS, or the cores a process is bound to): on a 2-core AMD EPYC VM with OpenBLAS 0.3.21, one and
// two threads give different roundings. Runs compared bit for bit must use the same count (tests/apps/pp_cli_test.sh).
#include <cblas.h>

#include <cstdint>

#include "core/check.h"
#include "kernels/ref/ref_ops.h"

namespace penstock::ref {

namespace {

void check_matrix(const TensorView& v, int64_t rows, int64_t cols, const char* name) {
    PENSTOCK_CHECK_EQ(v.ndim, 2) << name;
    PENSTOCK_CHECK(v.dtype == DType::kF32) << "gemm: " << name << " must be f32";
    PENSTOCK_CHECK_EQ(v.size(0), rows) << name;
    PENSTOCK_CHECK_EQ(v.size(1), cols) << name;
    PENSTOCK_CHECK_EQ(v.stride(1), 1) << "gemm: last dim of " << name << " must be contiguous";
    if (rows > 1) PENSTOCK_CHECK_GE(v.stride(0), cols) << "gemm: row stride of " << name;
}

// BLAS wants ld >= max(1, cols); a single-row view may carry any row stride, so clamp it.
int ld_of(const TensorView& v, int64_t cols) {
    const int64_t ld = v.size(0) > 1 ? v.stride(0) : (cols > 1 ? cols : 1);
    return static_cast<int>(ld > 1 ? ld : 1);
}

}  // namespace

void gemm(const kernels::GemmParams& p, ThreadPool* pool) {
    if (p.a.ndim == 3) {  // batched: the 2-D product per batch index
        PENSTOCK_CHECK(p.b.ndim == 3 && p.out.ndim == 3) << "gemm: batched a needs 3-D b and out";
        const int64_t batch = p.a.size(0);
        PENSTOCK_CHECK(p.b.size(0) == batch && p.out.size(0) == batch)
            << "gemm: batch counts " << batch << ", " << p.b.size(0) << ", " << p.out.size(0);
        for (int64_t i = 0; i < batch; ++i) {
            kernels::GemmParams one = p;
            one.out = p.out.select(0, i);
            one.a = p.a.select(0, i);
            one.b = p.b.select(0, i);
            gemm(one, pool);
        }
        return;
    }
    PENSTOCK_CHECK_EQ(p.a.ndim, 2);
    PENSTOCK_CHECK_EQ(p.b.ndim, 2);
    const int64_t m = p.a.size(0);
    const int64_t k = p.a.size(1);
    const int64_t n = p.trans_b ? p.b.size(0) : p.b.size(1);
    check_matrix(p.a, m, k, "a");
    if (p.trans_b) {
        check_matrix(p.b, n, k, "b");
    } else {
        check_matrix(p.b, k, n, "b");
    }
    check_matrix(p.out, m, n, "out");
    constexpr int64_t kIntMax = 0x7fffffff;
    PENSTOCK_CHECK(m <= kIntMax && n <= kIntMax && k <= kIntMax) << "gemm: dims exceed the BLAS int range";
    if (m == 0 || n == 0) return;

    if (p.beta == 0.0f) {
        for (int64_t i = 0; i < m; ++i) {
            float* row = p.out.at<float>({i});
            for (int64_t j = 0; j < n; ++j) row[j] = 0.0f;
        }
    }
    if (k == 0) {  // out = beta * out; BLAS would reject lda for k == 0
        if (p.beta != 0.0f) {
            for (int64_t i = 0; i < m; ++i) {
                float* row = p.out.at<float>({i});
                for (int64_t j = 0; j < n; ++j) row[j] *= p.beta;
            }
        }
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, p.trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(k), p.alpha, p.a.ptr<const float>(), ld_of(p.a, k),
                p.b.ptr<const float>(), ld_of(p.b, p.trans_b ? k : n), p.beta, p.out.ptr<float>(), ld_of(p.out, n));
}

}  // namespace penstock::ref
