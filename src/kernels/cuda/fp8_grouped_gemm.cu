// The FP8 block-scaled GEMM kernel on wgmma with cp.async loads (contract kernels/cuda/fp8_gemm.h, variant kWgmma;
// the warp-specialised TMA version is fp8_gemm_tma.cu). sm_90a.
//
// out[r, :] = sum_kb (a_scale[r, kb] * b_scale[g][n / 128, kb]) * (a[r, block kb] . b[g][:, block kb]) for the rows r
// of group g; one group of all rows when offsets is null (the dense GEMM). Scheduling is grouped_gemm.cu's: a
// persistent grid (one CTA per SM), every CTA scans the device offsets into a per-group tile prefix in shared memory
// and finds its tiles (t = CTA, CTA + grid, ...) by binary search; tiles run group-major, then n-tile, then m-tile.
//
// CTA tile 128 x 128, k-step 128 = one scale block (128 e4m3 bytes: one 128-byte swizzled row per tile row). 256
// threads = 2 warpgroups; warpgroup j computes rows [64 j, +64) x 128 columns with 4 wgmma.m64n128k32.e4m3 per
// k-step into 64 "block" registers (scale_d 0 on the first), waits for them, and promotes them into 64 f32
// accumulators: acc += block * (a_scale[row, kb] * b_scale[n0 / 128, kb]) (fmaf, in k order), DeepSeek-V3's fix for
// the tensor cores' reduced-precision fp8 accumulation. Operands arrive by cp.async (all threads load; rows past the
// group / columns past n / k past the end are zero-filled, so k need only be a multiple of 16) into a 6-stage ring,
// five k-steps ahead (a stage is reused only after both warpgroups waited for the wgmma that read it). Scales are read
// from global memory (L1/L2 resident: a_scale rows are small, b_scale is one value per tile and k-step) before the
// wgmma is issued, so their latency hides behind it. Epilogue: bf16x2 / float2 stores straight from the registers.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fp8_gemm.h"
#include "kernels/cuda/fp8_gemm_common.cuh"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/tma_util.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace penstock::cuda {

namespace {

using namespace fp8;  // NOLINT(google-build-using-namespace): the kernels' shared tiling

constexpr int kStages = 6;
constexpr int kDist = kStages - 1;  // k-steps loaded ahead (a stage is refilled once its wgmma was waited for)
constexpr int kThreads = 256;
constexpr int kPipeBytes = kStages * kStageBytes;  // 192 KiB

int smem_bytes(int n_groups) { return kPipeBytes + 1024 + 8 * (n_groups + 1); }
static_assert(kPipeBytes + 1024 + 8 * (kMaxGroups + 1) <= 227 * 1024, "shared memory");

using tile::cp_async_16;
using tile::cp_async_commit;
using tile::cp_async_wait;
// K-major, 128B-swizzled tile: LBO unused, SBO = 8 rows x 128 B.
__device__ __forceinline__ uint64_t make_desc(uint32_t saddr) { return wgmma::desc(saddr, 16, 1024); }

template <class OutT>
__global__ void __launch_bounds__(kThreads, 1) fp8_gemm_wgmma_kernel(Args p) {
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t raw = smem_u32(smem_raw);
    const uint32_t pad = (1024u - (raw & 1023u)) & 1023u;
    uint8_t* smem = smem_raw + pad;
    const uint32_t sbase = raw + pad;
    const int G = p.n_groups;
    int* prefix = reinterpret_cast<int*>(smem + kPipeBytes);
    int* offs = prefix + (G + 1);
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid & 31;
    // scan: the pipeline's first bytes, before any load is issued.
    const int total = build_tile_prefix(p, prefix, offs, reinterpret_cast<int*>(smem));
    const int bid = static_cast<int>(blockIdx.x);
    const int grid = static_cast<int>(gridDim.x);
    const int my_tiles = total > bid ? (total - 1 - bid) / grid + 1 : 0;
    const int KT = p.k_steps;
    const int64_t steps = static_cast<int64_t>(my_tiles) * KT;
    if (steps == 0) return;

    // ---------------------------------------------------------------- loader (all threads)
    const int ld_c = tid & 7;   // 16-byte chunk of a 128-byte row
    const int ld_r = tid >> 3;  // 0..31; rows ld_r + 32 pass; (row & 7) == (ld_r & 7)
    const uint32_t swz = static_cast<uint32_t>(ld_r * 128 + ((ld_c ^ (ld_r & 7)) << 4));
    int l_i = 0, l_kt = 0;
    const uint8_t* a_src[kBM / 32];
    const uint8_t* b_src[kBN / 32];
    uint32_t row_ok = 0;  // bits 0-3: A rows, 4-7: B rows
    auto load_next = [&](int64_t s) {
        if (l_kt == 0) {
            const Tile lt = decode(bid + l_i * grid, prefix, offs, G);
            const uint8_t* lb = p.b + static_cast<int64_t>(lt.group) * p.b_gstride;
            row_ok = 0;
#pragma unroll
            for (int pass = 0; pass < kBM / 32; ++pass) {
                const int row = ld_r + 32 * pass;
                const bool ok = row < lt.rows;
                a_src[pass] = (ok ? p.a + static_cast<int64_t>(lt.row0 + row) * p.lda : p.a) + 16 * ld_c;
                row_ok |= ok ? 1u << pass : 0u;
            }
#pragma unroll
            for (int pass = 0; pass < kBN / 32; ++pass) {
                const int nrow = lt.n0 + ld_r + 32 * pass;
                const bool ok = nrow < p.n;
                b_src[pass] = (ok ? lb + static_cast<int64_t>(nrow) * p.ldb : p.b) + 16 * ld_c;
                row_ok |= ok ? 1u << (4 + pass) : 0u;
            }
        }
        const uint32_t sa = sbase + static_cast<uint32_t>(s % kStages) * kStageBytes;
        const uint32_t sb = sa + kABytes;
        const int k0 = l_kt * kBK;
        const uint32_t kmask = k0 + 16 * ld_c < p.k ? 0xFFu : 0u;
        const uint32_t ok = row_ok & kmask;
#pragma unroll
        for (int pass = 0; pass < kBM / 32; ++pass) {
            cp_async_16(sa + swz + pass * 32 * 128, a_src[pass] + k0, (ok >> pass) & 1u);
        }
#pragma unroll
        for (int pass = 0; pass < kBN / 32; ++pass) {
            cp_async_16(sb + swz + pass * 32 * 128, b_src[pass] + k0, (ok >> (4 + pass)) & 1u);
        }
        if (++l_kt == KT) {
            l_kt = 0;
            ++l_i;
        }
    };
#pragma unroll
    for (int s = 0; s < kDist; ++s) {
        if (s < steps) load_next(s);
        cp_async_commit();
    }

    // ---------------------------------------------------------------- tensor cores, promotion, epilogue
    const int wg = tid >> 7;
    const int wr = (tid >> 5) & 3;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int r_lo = 64 * wg + 16 * wr + g;  // this thread's two tile rows: r_lo and r_lo + 8
    float acc[64];
    float blk[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) {
        acc[i] = 0.0f;
        blk[i] = 0.0f;
    }
    int64_t s = 0;  // the flattened (tile, k-step) counter; loads run kDist steps ahead, across tiles
    for (int c_i = 0; c_i < my_tiles; ++c_i) {
        const Tile ct = decode(bid + c_i * grid, prefix, offs, G);
        const TileScales sc = tile_scales(p, ct, r_lo);
        for (int kt = 0; kt < KT; ++kt, ++s) {
            cp_async_wait<kDist - 1>();  // step s landed (this thread's copies)
            wgmma::fence_proxy_async();  // ... visible to the tensor cores' async proxy
            __syncthreads();             // everyone's copies of step s; every wgmma of step s - 1 retired
            if (s + kDist < steps) load_next(s + kDist);  // into the stage of step s - 1
            cp_async_commit();
            const float sb = __ldg(sc.b + kt);
            const float sa_lo = __ldg(sc.a_lo + kt * p.as_col);
            const float sa_hi = __ldg(sc.a_hi + kt * p.as_col);
            const uint32_t sa = sbase + static_cast<uint32_t>(s % kStages) * kStageBytes;
            const uint32_t sbb = sa + kABytes;
            wgmma::reg_fence(blk);
            wgmma::fence();
#pragma unroll
            for (int ks = 0; ks < kBK / 32; ++ks) {
                const uint64_t da = make_desc(sa + wg * 64 * 128 + ks * 32);
                const uint64_t db = make_desc(sbb + ks * 32);
                wgmma::m64n128k32_e4m3(blk, da, db, ks != 0 ? 1 : 0);
            }
            wgmma::commit();
            wgmma::wait<0>();
            wgmma::reg_fence(blk);
            promote(acc, blk, sa_lo * sb, sa_hi * sb);
        }
        store_tile<OutT>(p, ct, r_lo, t, acc);
    }
    cp_async_wait<0>();
}

struct DeviceInfo {
    int major = 0;
    int sms = 0;
};

const DeviceInfo& device_info() {
    static thread_local DeviceInfo cache[16];
    int dev = 0;
    PENSTOCK_CUDA_CHECK(cudaGetDevice(&dev));
    DeviceInfo& d = cache[dev & 15];
    if (d.sms == 0) {
        PENSTOCK_CUDA_CHECK(cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, dev));
        PENSTOCK_CUDA_CHECK(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev));
    }
    return d;
}

bool aligned(const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

// Row stride of a [rows, cols] view (any value for a single row: the kernel never steps it).
int64_t row_stride(const TensorView& v, int d) { return v.size(d) > 1 ? v.stride(d) : v.size(d + 1); }

}  // namespace

bool fp8_wgmma_supported(const kernels::Fp8GroupedGemmParams& p) {
    if (p.out.dtype != DType::kBF16 && p.out.dtype != DType::kF32) return false;
    const int64_t n_groups = p.b.size(0), n = p.b.size(1), k = p.b.size(2), n_rows = p.a.size(0);
    if (n_groups < 1 || n_groups > kMaxGroups) return false;
    if (k <= 0 || k % 16 != 0 || n <= 0 || n % 8 != 0) return false;
    if (n_rows >= (int64_t{1} << 30) || n >= (int64_t{1} << 30) || k >= (int64_t{1} << 30)) return false;
    if ((n_rows / kBM + n_groups + 1) * ((n + kBN - 1) / kBN) >= (int64_t{1} << 30)) return false;
    if (!aligned(p.a.data, 16) || !aligned(p.b.data, 16)) return false;
    if (n_rows > 1 && (p.a.stride(0) % 16 != 0 || p.out.stride(0) % 2 != 0)) return false;
    if (n > 1 && p.b.stride(1) % 16 != 0) return false;
    if (n_groups > 1 && p.b.stride(0) % 16 != 0) return false;
    if (!aligned(p.out.data, p.out.dtype == DType::kF32 ? 8 : 4)) return false;
    return device_info().major == 9;
}

namespace fp8 {

Args make_args(const kernels::Fp8GroupedGemmParams& p) {
    const int64_t n_groups = p.b.size(0), n = p.b.size(1), k = p.b.size(2), n_rows = p.a.size(0);
    Args args{};
    args.a = p.a.ptr<const uint8_t>();
    args.b = p.b.ptr<const uint8_t>();
    args.out = p.out.data;
    args.a_scale = p.a_scale.ptr<const float>();
    args.b_scale = p.b_scale.ptr<const float>();
    args.offsets = p.offsets.data != nullptr ? p.offsets.ptr<const int32_t>() : nullptr;
    args.lda = row_stride(p.a, 0);
    args.ldo = row_stride(p.out, 0);
    args.ldb = row_stride(p.b, 1);
    args.b_gstride = p.b.stride(0);
    args.as_row = p.a_scale.stride(0);
    args.as_col = p.a_scale.stride(1);
    args.bs_row = p.b_scale.stride(1);
    args.bs_gstride = p.b_scale.stride(0);
    args.n_rows = static_cast<int>(n_rows);
    args.n = static_cast<int>(n);
    args.k = static_cast<int>(k);
    args.n_groups = static_cast<int>(n_groups);
    args.n_tiles_n = static_cast<int>((n + kBN - 1) / kBN);
    args.k_steps = static_cast<int>((k + kBK - 1) / kBK);
    args.out16 = p.out.dtype == DType::kBF16 && tile::rows_16b_aligned(p.out.data, args.ldo * 2) ? 1 : 0;
    return args;
}

int device_sms() { return device_info().sms; }
int device_major() { return device_info().major; }

bool scale_smem_ok(const Args& a) {
    static const bool off = [] {
        const char* e = std::getenv("PENSTOCK_FP8_SCALE_SMEM");
        return e != nullptr && std::strcmp(e, "0") == 0;
    }();
    return !off && (a.as_row == 1 || a.n_rows == 1) && a.as_col % 4 == 0 && a.as_col >= a.n_rows &&
           reinterpret_cast<uintptr_t>(a.a_scale) % 16 == 0;
}

CUtensorMap act_scale_map(const Args& a) {
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(a.n_rows), static_cast<cuuint64_t>(a.k_steps)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(a.as_col) * 4};
    const cuuint32_t box[2] = {static_cast<cuuint32_t>(kActScaleBox), 1u};
    return tma::encode_tiled(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, a.a_scale, 2, dims, strides, box,
                             CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
}

}  // namespace fp8

void fp8_wgmma(const kernels::Fp8GroupedGemmParams& p, void* stream) {
    const int64_t n_groups = p.b.size(0), n_rows = p.a.size(0);
    if (n_rows == 0) return;
    const Args args = make_args(p);
    const int64_t tile_bound = (n_rows / kBM + n_groups + 1) * args.n_tiles_n;
    const int grid = static_cast<int>(tile_bound < device_info().sms ? tile_bound : device_info().sms);
    const int smem = smem_bytes(args.n_groups);
    const auto s = static_cast<cudaStream_t>(stream);
    auto launch = [&](auto kernel) {
        PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        kernel<<<grid, kThreads, smem, s>>>(args);
    };
    if (p.out.dtype == DType::kF32) {
        launch(fp8_gemm_wgmma_kernel<float>);
    } else {
        launch(fp8_gemm_wgmma_kernel<bf16>);
    }
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace penstock::cuda
