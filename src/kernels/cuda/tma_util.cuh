// TMA (the bulk tensor copy engine) and mbarrier building blocks shared by the warp-specialised wgmma kernels
// (fp8_gemm_tma.cu, grouped_gemm_tma.cu, dsa_indexer_wgmma.cu) and attn_res_mix's (kda.cu): mbarrier init / expect_tx /
// arrive (local or on a cluster peer) / parity wait (spinning or sleeping), 1-d bulk loads, 2-d and 3-d tensor loads
// completing on an mbarrier (the 3-d one optionally multicast to the CTAs of a cluster), 2-d tensor stores in bulk
// groups and a warpgroup's TMA-store epilogue (store_wg_tile_bf16), the cluster rank and barrier, named barriers, and
// the host-side encoders of tiled tensor maps. sm_90. Include from .cu files only.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only: the encoder comes through the runtime)
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/tile_util.cuh"

namespace penstock::cuda::tma {

// ---------------------------------------------------------------------------------------------- device: mbarriers
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the inits visible to the async proxy and to the other CTAs of the cluster.
__device__ __forceinline__ void fence_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival plus `bytes` expected transaction bytes (the TMA loads of the phase complete them).
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival on the barrier at the same shared-memory offset in cluster CTA `cta` (this CTA included), with
// cluster-scope release: the arriving thread's earlier writes (e.g. st.shared::cluster into the peer) are visible to
// a cluster-scope acquire of that phase. The release is a fence: freeing a pipeline stage this way at every k-step
// cost a CTA-pair FP8 GEMM 35% (docs/perf/2026-12-02-s17.md section 6); a consumer that only read the stage (its
// wgmmas retired) needs no more than the default CTA-scope semantics (mbarrier.arrive.shared::cluster).
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t cta) {
    asm volatile(
        "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
        "r"(cta)
        : "memory");
}
// One arrival on the barrier at the same offset in cluster CTA `cta` with the default semantics (release at CTA
// scope, no cluster-wide fence): what a consumer that frees a pipeline stage for a peer's TMA needs.
__device__ __forceinline__ void mbar_arrive_remote(uint32_t bar, uint32_t cta) {
    asm volatile(
        "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
        "r"(cta)
        : "memory");
}
// Waits until the phase of parity `parity` completed (a fresh barrier counts its phase "before 0", parity 1, done).
// A parity names one of two phases, so a waiter must never fall two phases behind: once the phase it waits for and
// the next have both completed, the barrier shows its parity as the current phase again, and the wait never ends.
// Warps that skip: where one thread frees a stage for its whole warpgroup (an "empty" barrier counting warpgroups),
// the other warps are held within a phase only by something that makes the warpgroup meet. wgmma's .sync.aligned
// instructions do; a warpgroup that passes stages on without products must meet at a named barrier on each stage
// before the release, or a warp that lags while the stage is refilled twice waits on a parity that has come round
// again. (Serving GLM-5.3 with FP8 experts hung this way, in fp8_gemm_tma's tail skip, after 1-10 steps.)
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (done == 0);
}

// mbar_wait for waits that may be long (a whole DRAM round trip): each try asks to be suspended until the phase
// completes or `suspend_ns` pass, instead of returning at once, so that waiting warps leave the issue slots to the
// warps that have work.
__device__ __forceinline__ void mbar_wait_sleep(uint32_t bar, uint32_t parity, uint32_t suspend_ns = 20000) {
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity), "r"(suspend_ns)
            : "memory");
    } while (done == 0);
}

// mbar_wait with cluster-scope acquire: what a waiter needs whose phase a peer completed with mbar_arrive_cluster, to
// see the peer's writes into this CTA (st_remote_u32) that came before that arrive.
__device__ __forceinline__ void mbar_wait_cluster(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (done == 0);
}
// A 32-bit store to the same shared-memory offset `addr` in cluster CTA `cta` (published by mbar_arrive_cluster).
__device__ __forceinline__ void st_remote_u32(uint32_t addr, uint32_t cta, uint32_t v) {
    asm volatile(
        "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\nst.shared::cluster.u32 [remote], %2;\n}\n" ::
            "r"(addr),
        "r"(cta), "r"(v)
        : "memory");
}

// ---------------------------------------------------------------------------------------------- device: TMA loads
// Box at coordinates (c0 innermost, c1[, c2]) of `map` into shared memory at dst; completes `bytes` of bar's phase
// (the whole box, out-of-bounds elements zero-filled).
__device__ __forceinline__ void load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
            "r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}
__device__ __forceinline__ void load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
        "[%5];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
}
// load_2d's box written to dst of every CTA in cta_mask (bit i: cluster rank i), each completing its own barrier at
// offset bar.
__device__ __forceinline__ void load_2d_multicast(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar,
                                                  uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
        "[%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(cta_mask)
        : "memory");
}
// The same box written to dst of every CTA in cta_mask (bit i: cluster rank i), each completing its own barrier at
// offset bar.
__device__ __forceinline__ void load_3d_multicast(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2,
                                                  uint32_t bar, uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
        "[%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "h"(cta_mask)
        : "memory");
}

// `bytes` (a multiple of 16; src and dst 16-byte aligned) from global src into shared memory at dst, completing that
// many bytes of bar's phase (a 1-d bulk copy: no tensor map).
__device__ __forceinline__ void load_1d(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
                 : "memory");
}

// Pulls a tensor map (a __grid_constant__ kernel parameter) into the TMA unit's descriptor cache before first use.
__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---------------------------------------------------------------------------------------------- device: TMA stores
// The box at coordinates (c0 innermost, c1) of `map` from shared memory at src (the map's swizzle) into global memory;
// elements outside the map's dims are not written. Joins the issuing thread's open bulk group (bulk_commit).
__device__ __forceinline__ void store_2d(const CUtensorMap* map, uint32_t src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(c0), "r"(c1), "r"(src)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until this thread's committed bulk groups have read their shared-memory sources (the buffer may be rewritten).
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
// Until this thread's committed bulk groups are complete (their global writes done).
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
// Orders this thread's generic-proxy shared-memory writes before later async-proxy reads (a TMA store's source).
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---------------------------------------------------------------------------------------------- device: clusters
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r = 0;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
// Every thread of every CTA of the cluster arrives and waits (release / acquire: orders shared-memory accesses).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// ---------------------------------------------------------------------------------------------- device: named barriers
// Named barrier `id` (1..15; 0 is __syncthreads) over `n` threads: sync waits, arrive does not.
__device__ __forceinline__ void named_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

// The TMA-store epilogue of one consumer warpgroup (threads 128 cw .. + 127) of a GEMM tile: its 64 rows x 64 kBoxes
// bf16 columns into its staging tile `stg` (1024-byte aligned, 8 KiB per box) as kBoxes 64-column boxes of 64 rows x
// 128 bytes in TMA's 128-byte swizzle (16-byte chunk c of row r at chunk c ^ (r % 8)), then one thread stores the boxes
// that start inside n by TMA (map `tm_out`: bf16 [rows, n], 64 x 64 boxes, 128-byte swizzle, encode_bf16_store_map;
// columns past n are clipped) at (n0 + 64 b, row0) and commits them as one bulk group; the warpgroup goes on while the
// stores drain. The previous tile's group must have read the staging tile before it is rewritten: bulk_wait_read by
// the committing thread, then the warpgroup's named barrier 1 + cw. word(i, hf) = the bf16x2 word of columns 8 i + 2 t
// (+1), i < 8 kBoxes, of the thread's row 16 wr + lane / 4 + 8 hf (a wgmma m64nN fragment, N = 64 kBoxes); the row's
// lane quad trades its words (tile::quad_transpose) so that each lane writes 16 contiguous bytes. Every thread of the
// warpgroup calls it; the committing thread must bulk_wait before the CTA exits.
template <int kBoxes, class Word>
__device__ __forceinline__ void store_wg_tile_bf16(const CUtensorMap* tm_out, uint32_t stg, int n0, int row0, int n,
                                                   int cw, int wr, int lane, Word&& word) {
    const int t = lane & 3;
    if ((threadIdx.x & 127) == 0) bulk_wait_read();
    named_sync(1 + cw, 128);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int r = 16 * wr + (lane >> 2) + 8 * hf;  // the row within the warpgroup's 64
#pragma unroll
        for (int jb = 0; jb < 2 * kBoxes; ++jb) {  // 32-column block: words 4 jb .. 4 jb + 3 of the quad
            uint32_t w[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) w[q] = word(4 * jb + q, hf);
            const uint4 v = tile::quad_transpose(w, t);  // columns 32 jb + 8 t .. + 7
            // box jb / 2 of 64 columns, chunk 4 (jb % 2) + t of its 128-byte row
            const int chunk = 4 * (jb & 1) + t;
            const uint32_t addr =
                stg + static_cast<uint32_t>((jb >> 1) * 8192 + r * 128) + (static_cast<uint32_t>(chunk ^ (r & 7)) << 4);
            asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z),
                         "r"(v.w)
                         : "memory");
        }
    }
    fence_proxy_async_smem();
    named_sync(1 + cw, 128);
    if ((threadIdx.x & 127) == 0) {
#pragma unroll
        for (int b = 0; b < kBoxes; ++b) {
            if (n0 + 64 * b < n) store_2d(tm_out, stg + 8192u * b, n0 + 64 * b, row0);
        }
        bulk_commit();
    }
}

// ---------------------------------------------------------------------------------------------- host
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* f = nullptr;
        cudaDriverEntryPointQueryResult q{};
        PENSTOCK_CUDA_CHECK(
            cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
        PENSTOCK_CHECK(f != nullptr && q == cudaDriverEntryPointSuccess) << "cuTensorMapEncodeTiled not found";
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
    }();
    return fn;
}

// A rank-`rank` (2 or 3) tiled tensor map over `base`, out-of-bounds elements zero-filled: dims innermost first,
// byte strides of dims 1.., box sizes in elements (box[0] * element bytes <= the swizzle width), the given shared
// memory swizzle (the layout the wgmma descriptors read) and L2 promotion of the misses.
inline CUtensorMap encode_tiled(CUtensorMapDataType dtype, const void* base, int rank, const cuuint64_t* dims,
                                const cuuint64_t* strides, const cuuint32_t* box, CUtensorMapSwizzle swizzle,
                                CUtensorMapL2promotion promotion) {
    CUtensorMap map{};
    const cuuint32_t elem_strides[3] = {1u, 1u, 1u};
    const CUresult r = tensor_map_encoder()(&map, dtype, static_cast<cuuint32_t>(rank), const_cast<void*>(base), dims,
                                            strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                            promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    PENSTOCK_CHECK(r == CUDA_SUCCESS) << "cuTensorMapEncodeTiled failed (" << static_cast<int>(r) << "), rank " << rank
                                      << " dims " << dims[0] << " x " << dims[1];
    return map;
}
// 128-byte swizzle, 256-byte L2 promotion.
inline CUtensorMap encode_tiled(CUtensorMapDataType dtype, const void* base, int rank, const cuuint64_t* dims,
                                const cuuint64_t* strides, const cuuint32_t* box) {
    return encode_tiled(dtype, base, rank, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
}

// The map store_wg_tile_bf16 writes through: bf16 [rows, cols] at `base` with rows `ld` elements apart (base and
// 2 ld 16-byte aligned), 64 x 64 boxes of 128-byte rows in the staging tile's 128-byte swizzle.
inline CUtensorMap encode_bf16_store_map(void* base, int64_t rows, int64_t cols, int64_t ld) {
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * 2};
    const cuuint32_t box[2] = {64u, 64u};
    return encode_tiled(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, base, 2, dims, strides, box);
}

// A uint8 map with 128-byte swizzle and 256-byte L2 promotion (the DSA indexer's e4m3 key and query tiles).
inline CUtensorMap encode_u8_sw128(const void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                                   const cuuint32_t* box) {
    return encode_tiled(CU_TENSOR_MAP_DATA_TYPE_UINT8, base, rank, dims, strides, box);
}

}  // namespace penstock::cuda::tma
