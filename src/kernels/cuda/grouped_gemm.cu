// The device-side bf16 grouped GEMM (contract kernels/cuda/grouped_gemm.h; issue #7): which calls the device kernels
// take (grouped_gemm_device_unsupported), their dispatch, and the first kernel, kCpAsync (below; the warp-specialised
// default, kTmaDyn, is grouped_gemm_tma.cu). sm_90a: wgmma.
//
// out[r, :] = a[r, :] @ b[g]^T for the rows r in [offsets[g], offsets[g + 1]); b [n_groups, n, k] row-major, fp32
// accumulation, bf16 or f32 out. The offsets never leave the device: the launch is a persistent grid (one CTA per SM)
// whose CTAs each read the offsets into shared memory and scan the per-group tile counts
// (ceil(rows_g / 128) * ceil(n / 256)) into a prefix; tile t (CTA b takes t = b, b + grid, ...) is found by a binary
// search over the prefix. Tiles are ordered group-major, then n-tile, then m-tile, so CTAs running at the same time
// share one expert's weight tile and its rows (A) stay in L2 across the n-tiles (the intent; at T = 16384 the CTAs
// drift apart and about half the L2 lookups miss: docs/perf/2026-12-01-grouped-gemm-ws.md).
//
// CTA tile 128 x 256 x 64, 256 threads = 2 warpgroups; warpgroup j computes rows [64 j, +64) x 256 columns with
// wgmma.m64n256k16 (A and B K-major from shared memory, 128-byte swizzle: 16-byte chunk c of row r at chunk c ^ (r & 7)
// of a 128-byte row, 1024-byte aligned atoms), 128 fp32 accumulators per thread. Operands arrive by cp.async (all
// threads load; rows past the group / columns past n / k past the end are zero-filled) into a 4-stage ring, two
// k-steps ahead of the tensor cores; one wgmma batch stays in flight (wait_group 1) while the next is issued. The
// pipeline runs across tile boundaries: the loads of the next tile start while the current one finishes, and the
// epilogue stores the accumulators straight from registers (bf16x2 / float2).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/grouped_gemm.h"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/tile_util.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace penstock::cuda {

namespace {

constexpr int kBM = 128;
constexpr int kBN = 256;
constexpr int kBK = 64;
constexpr int kStages = 4;
constexpr int kDist = 2;  // k-steps loaded ahead of the one computed (kStages - 2: one more is still being read)
constexpr int kThreads = 256;
constexpr int kABytes = kBM * kBK * 2;  // 16 KiB
constexpr int kBBytes = kBN * kBK * 2;  // 32 KiB
constexpr int kStageBytes = kABytes + kBBytes;
constexpr int kPipeBytes = kStages * kStageBytes;  // 192 KiB
constexpr int kMaxGroups = 4096;

int smem_bytes(int n_groups) { return kPipeBytes + 1024 + 8 * (n_groups + 1); }
static_assert(kPipeBytes + 1024 + 8 * (kMaxGroups + 1) <= 227 * 1024, "shared memory");

struct GgArgs {
    const bf16* a;
    const bf16* b;
    void* out;
    const int32_t* offsets;
    int64_t lda, ldo;
    int n_rows, n, k, n_groups, n_tiles_n, k_steps;
};

using tile::cp_async_16;
using tile::cp_async_commit;
using tile::cp_async_wait;
using tile::smem_u32;
using tile::store2;
using Tile = tile::GroupTile;
// wgmma shared-memory descriptor of a K-major, 128B-swizzled tile (LBO unused: "assumed 1"; SBO 8 rows x 128 B).
__device__ __forceinline__ uint64_t make_desc(uint32_t saddr) { return wgmma::desc(saddr, 16, 1024); }

__device__ __forceinline__ Tile decode(int t, const int* prefix, const int* offs, int n_groups) {
    return tile::decode_group_tile<kBM, kBN>(t, prefix, offs, n_groups);
}

template <class OutT>
__global__ void __launch_bounds__(kThreads, 1) grouped_gemm_kernel(GgArgs p) {
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t raw = smem_u32(smem_raw);
    const uint32_t pad = (1024u - (raw & 1023u)) & 1023u;
    uint8_t* smem = smem_raw + pad;
    const uint32_t sbase = raw + pad;
    const int G = p.n_groups;
    int* prefix = reinterpret_cast<int*>(smem + kPipeBytes);
    int* offs = prefix + (G + 1);
    int* scan = reinterpret_cast<int*>(smem);  // the pipeline's first bytes, before any load is issued
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid & 31;

    // ---------------------------------------------------------------- the tile prefix over the device offsets
    const int total = tile::build_group_tile_prefix<kBM>(p.offsets, p.n_rows, G, p.n_tiles_n, prefix, offs, scan);
    const int bid = static_cast<int>(blockIdx.x);
    const int grid = static_cast<int>(gridDim.x);
    const int my_tiles = total > bid ? (total - 1 - bid) / grid + 1 : 0;
    const int KT = p.k_steps;
    const int64_t steps = static_cast<int64_t>(my_tiles) * KT;
    if (steps == 0) return;

    // ---------------------------------------------------------------- loader (all threads)
    const int ld_c = tid & 7;
    const int ld_r = tid >> 3;  // 0..31; rows ld_r + 32 pass; (row & 7) == (ld_r & 7)
    const uint32_t swz = static_cast<uint32_t>(ld_r * 128 + ((ld_c ^ (ld_r & 7)) << 4));
    int l_i = 0, l_kt = 0;
    // Per tile: this thread's 4 A-row and 8 B-row source pointers (the row's start; a valid dummy when the row is
    // past the group / n), and which are valid (bits 0-3: A, 4-11: B). A k-step then only adds its column.
    const bf16* a_src[kBM / 32];
    const bf16* b_src[kBN / 32];
    uint32_t row_ok = 0;
    auto load_next = [&](int64_t s) {
        if (l_kt == 0) {
            const Tile lt = decode(bid + l_i * grid, prefix, offs, G);
            const bf16* lb = p.b + static_cast<int64_t>(lt.group) * p.n * p.k;
            row_ok = 0;
#pragma unroll
            for (int pass = 0; pass < kBM / 32; ++pass) {
                const int row = ld_r + 32 * pass;
                const bool ok = row < lt.rows;
                a_src[pass] = (ok ? p.a + static_cast<int64_t>(lt.row0 + row) * p.lda : p.a) + 8 * ld_c;
                row_ok |= ok ? 1u << pass : 0u;
            }
#pragma unroll
            for (int pass = 0; pass < kBN / 32; ++pass) {
                const int nrow = lt.n0 + ld_r + 32 * pass;
                const bool ok = nrow < p.n;
                b_src[pass] = (ok ? lb + static_cast<int64_t>(nrow) * p.k : p.b) + 8 * ld_c;
                row_ok |= ok ? 1u << (4 + pass) : 0u;
            }
        }
        const uint32_t sa = sbase + static_cast<uint32_t>(s % kStages) * kStageBytes;
        const uint32_t sb = sa + kABytes;
        const int k0 = l_kt * kBK;
        const uint32_t kmask = k0 + 8 * ld_c < p.k ? 0xFFFu : 0u;
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

    // ---------------------------------------------------------------- tensor cores + epilogue
    const int wg = tid >> 7;
    const int wr = (tid >> 5) & 3;
    const int g = lane >> 2;
    const int t = lane & 3;
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    OutT* out = static_cast<OutT*>(p.out);
    int64_t s = 0;  // the flattened (tile, k-step) counter; loads run kDist steps ahead, across tiles
    // The k-loop holds no accumulator reads outside wgmma (a branch that reads them in the loop makes ptxas wait for
    // every batch at the back edge); the epilogue follows it.
    for (int c_i = 0; c_i < my_tiles; ++c_i) {
        for (int kt = 0; kt < KT; ++kt, ++s) {
            cp_async_wait<kDist - 1>();  // step s landed (this thread's copies)
            wgmma::fence_proxy_async();  // ... visible to the tensor cores' async proxy
            __syncthreads();             // everyone's copies of step s; every wgmma of step s - 2 retired
            if (s + kDist < steps) load_next(s + kDist);  // into the stage of step s - 2
            cp_async_commit();
            const uint32_t sa = sbase + static_cast<uint32_t>(s % kStages) * kStageBytes;
            const uint32_t sb = sa + kABytes;
            wgmma::fence();
#pragma unroll
            for (int ks = 0; ks < kBK / 16; ++ks) {
                const uint64_t da = make_desc(sa + wg * 64 * 128 + ks * 32);
                const uint64_t db = make_desc(sb + ks * 32);
                wgmma::m64n256k16_bf16<0>(acc, da, db, (kt | ks) != 0 ? 1 : 0);
            }
            wgmma::commit();
            wgmma::wait<1>();
        }
        wgmma::wait<0>();
        wgmma::reg_fence(acc);
        const Tile ct = decode(bid + c_i * grid, prefix, offs, G);
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int r = 64 * wg + 16 * wr + 8 * hf + g;
            if (r < ct.rows) {
                OutT* orow = out + static_cast<int64_t>(ct.row0 + r) * p.ldo + ct.n0 + 2 * t;
                const int lim = p.n - ct.n0 - 2 * t;  // columns 8 i + 2 t (+1) valid while 8 i < lim (n % 8 == 0)
#pragma unroll
                for (int i = 0; i < 32; ++i) {
                    if (8 * i < lim) store2<OutT>(orow + 8 * i, acc[4 * i + 2 * hf], acc[4 * i + 2 * hf + 1]);
                }
            }
        }
        wgmma::reg_fence(acc);
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

// The cp.async kernel (kCpAsync).
void grouped_gemm_cp_async(const kernels::GroupedGemmParams& p, void* stream) {
    const int64_t n_groups = p.b.size(0), n = p.b.size(1), k = p.b.size(2), n_rows = p.a.size(0);
    if (n_rows == 0) return;
    GgArgs args{};
    args.a = p.a.ptr<bf16>();
    args.b = p.b.ptr<bf16>();
    args.out = p.out.data;
    args.offsets = p.offsets.ptr<int32_t>();
    args.lda = n_rows > 1 ? p.a.stride(0) : k;
    args.ldo = n_rows > 1 ? p.out.stride(0) : n;
    args.n_rows = static_cast<int>(n_rows);
    args.n = static_cast<int>(n);
    args.k = static_cast<int>(k);
    args.n_groups = static_cast<int>(n_groups);
    args.n_tiles_n = static_cast<int>((n + kBN - 1) / kBN);
    args.k_steps = static_cast<int>((k + kBK - 1) / kBK);
    const int64_t tile_bound = (n_rows / kBM + n_groups + 1) * args.n_tiles_n;
    const int grid = static_cast<int>(tile_bound < device_info().sms ? tile_bound : device_info().sms);
    const int smem = smem_bytes(args.n_groups);
    const auto s = static_cast<cudaStream_t>(stream);
    if (p.out.dtype == DType::kF32) {
        PENSTOCK_CUDA_CHECK(
            cudaFuncSetAttribute(grouped_gemm_kernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        grouped_gemm_kernel<float><<<grid, kThreads, smem, s>>>(args);
    } else {
        PENSTOCK_CUDA_CHECK(
            cudaFuncSetAttribute(grouped_gemm_kernel<bf16>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        grouped_gemm_kernel<bf16><<<grid, kThreads, smem, s>>>(args);
    }
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace

GroupedGemmVariant grouped_gemm_default_device_kernel() {
    static const GroupedGemmVariant v = [] {
        const char* e = std::getenv("PENSTOCK_GG_PAIRS");
        return e != nullptr && std::strcmp(e, "0") == 0 ? GroupedGemmVariant::kTmaDyn
                                                        : GroupedGemmVariant::kTmaDynCluster;
    }();
    return v;
}

const char* grouped_gemm_device_unsupported(const kernels::GroupedGemmParams& p) {
    if (p.a.dtype != DType::kBF16 || p.b.dtype != DType::kBF16) return "a and b must be bf16";
    if (p.out.dtype != DType::kBF16 && p.out.dtype != DType::kF32) return "out must be bf16 or f32";
    if (p.b.ndim != 3 || p.a.ndim != 2 || p.out.ndim != 2) return "a [rows, k], b [groups, n, k], out [rows, n]";
    const int64_t n_groups = p.b.size(0), n = p.b.size(1), k = p.b.size(2), n_rows = p.a.size(0);
    if (n_groups < 1 || n_groups > kMaxGroups) return "n_groups must be in [1, 4096]";
    if (k <= 0 || k % 8 != 0) return "k must be a positive multiple of 8 (16-byte rows)";
    if (n <= 0 || n % 8 != 0) return "n must be a positive multiple of 8";
    if (n_rows >= (int64_t{1} << 30) || n >= (int64_t{1} << 30) || k >= (int64_t{1} << 30)) return "dims >= 2^30";
    // Tile count bound (int): (rows / 128 + groups) * n-tiles.
    if ((n_rows / kBM + n_groups + 1) * ((n + kBN - 1) / kBN) >= (int64_t{1} << 30)) return "too many tiles";
    if (!aligned(p.a.data, 16) || !aligned(p.b.data, 16)) return "a and b must be 16-byte aligned";
    if (n_rows > 1 && p.a.stride(0) % 8 != 0) return "a's row stride must be a multiple of 8";
    if (n_rows > 1 && p.out.stride(0) % 2 != 0) return "out's row stride must be even";
    if (p.a.stride(1) != 1 || p.out.stride(1) != 1) return "a and out rows must be contiguous";
    if (!aligned(p.out.data, p.out.dtype == DType::kF32 ? 8 : 4)) return "out must be 8-byte (f32) / 4-byte aligned";
    if (device_info().major != 9) return "needs an sm_90 device (wgmma, TMA)";
    return nullptr;
}

void grouped_gemm_device(const kernels::GroupedGemmParams& p, GroupedGemmVariant kernel, void* stream) {
    switch (kernel) {
        case GroupedGemmVariant::kTma:
            grouped_gemm_tma(p, {.cluster = 1, .k_step = 64}, device_info().sms, stream);
            return;
        case GroupedGemmVariant::kTmaCluster:
            grouped_gemm_tma(p, {.cluster = 2, .k_step = 64}, device_info().sms, stream);
            return;
        case GroupedGemmVariant::kTmaK32:
            grouped_gemm_tma(p, {.cluster = 1, .k_step = 32}, device_info().sms, stream);
            return;
        case GroupedGemmVariant::kDevice:
            if (grouped_gemm_default_device_kernel() == GroupedGemmVariant::kTmaDynCluster) {
                grouped_gemm_tma(p, {.cluster = 2, .k_step = 64, .dynamic_tiles = true}, device_info().sms, stream);
            } else {
                grouped_gemm_tma(p, {.cluster = 1, .k_step = 64, .dynamic_tiles = true}, device_info().sms, stream);
            }
            return;
        case GroupedGemmVariant::kTmaDynCluster:
            grouped_gemm_tma(p, {.cluster = 2, .k_step = 64, .dynamic_tiles = true}, device_info().sms, stream);
            return;
        case GroupedGemmVariant::kTmaDyn:
            grouped_gemm_tma(p, {.cluster = 1, .k_step = 64, .dynamic_tiles = true}, device_info().sms, stream);
            return;
        case GroupedGemmVariant::kWsCpAsync:
            grouped_gemm_tma(p, {.cluster = 1, .k_step = 64, .cp_async_producer = true}, device_info().sms, stream);
            return;
        case GroupedGemmVariant::kCpAsync:
            grouped_gemm_cp_async(p, stream);
            return;
        case GroupedGemmVariant::kAuto:
        case GroupedGemmVariant::kCublasLt:
            break;
    }
    PENSTOCK_CHECK(false) << "grouped_gemm_device: not a device kernel";
}

}  // namespace penstock::cuda
