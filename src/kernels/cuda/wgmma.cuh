// sm_90a warpgroup MMA building blocks shared by the wgmma kernels (mla_wgmma.cu, mla_wgmma_pair.cu, grouped_gemm.cu,
// fp8_grouped_gemm.cu): the fences and group commit/wait, the shared-memory matrix descriptor with 128-byte swizzle,
// the bf16 m64n256k16 MMA with f32 accumulators (B K-major or N-major) and its f16 K-major twin, the bf16 m64n64k16
// MMA (both K-major) and m64n256k16 with A from registers (B N-major) of the paired sparse MLA kernel, the e4m3
// m64n128k32 / m64n192k32 / m64n256k32 MMAs (f16 and m64n256k32: dsa_indexer_wgmma.cu; m64n192k32: the wgmma probe),
// the probe's e4m3 m64n64k32, the A-from-registers e4m3 m64n128k32 (attention_fp8_wgmma.cu, the probe) and m64n64k32
// (the probe), the A-from-registers tf32 m64n128k8 and f16 m64n128k16 (dsa_indexer_wgmma_tf32.cu), and the register
// fence that keeps the compiler from moving accumulator accesses across the asynchronous window. Device-only; include
// from .cu files.
#pragma once

#include <cstdint>

// The f32 accumulators of the m64nN wgmmas below (N / 2 of them per thread: 64 for n128, 96 for n192, 128 for n256):
// their operand list inside the instruction (asm operands %0 ..) and the matching asm outputs, built from 32-operand
// pieces and shared by every MMA of that accumulator count (here and in the attention kernels).
#define PENSTOCK_WGMMA_OPS_0_31                                              \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define PENSTOCK_WGMMA_OUT_0_31(d)                                                                              \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define PENSTOCK_WGMMA_OPS_32_63                                                       \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define PENSTOCK_WGMMA_OUT_32_63(d)                                                                             \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),     \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define PENSTOCK_WGMMA_OPS_64_95                                                       \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define PENSTOCK_WGMMA_OUT_64_95(d)                                                                             \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),     \
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define PENSTOCK_WGMMA_OPS_96_127                                                                  \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define PENSTOCK_WGMMA_OUT_96_127(d)                                                                            \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]),       \
        "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]),       \
        "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]),       \
        "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define PENSTOCK_WGMMA_D64 "{" PENSTOCK_WGMMA_OPS_0_31 ", " PENSTOCK_WGMMA_OPS_32_63 "}, "
#define PENSTOCK_WGMMA_D64_OUT(d) PENSTOCK_WGMMA_OUT_0_31(d), PENSTOCK_WGMMA_OUT_32_63(d)
#define PENSTOCK_WGMMA_D96 "{" PENSTOCK_WGMMA_OPS_0_31 ", " PENSTOCK_WGMMA_OPS_32_63 ", " PENSTOCK_WGMMA_OPS_64_95 "}, "
#define PENSTOCK_WGMMA_D96_OUT(d) PENSTOCK_WGMMA_D64_OUT(d), PENSTOCK_WGMMA_OUT_64_95(d)
#define PENSTOCK_WGMMA_D128                                                                 \
    "{" PENSTOCK_WGMMA_OPS_0_31 ", " PENSTOCK_WGMMA_OPS_32_63 ", " PENSTOCK_WGMMA_OPS_64_95 \
    ", " PENSTOCK_WGMMA_OPS_96_127 "}, "
#define PENSTOCK_WGMMA_D128_OUT(d) PENSTOCK_WGMMA_D96_OUT(d), PENSTOCK_WGMMA_OUT_96_127(d)

namespace penstock::cuda::wgmma {

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Orders generic-proxy shared-memory writes (cp.async / st.shared) before the async proxy (wgmma) reads them.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Shared-memory matrix descriptor: start address, leading / stride byte offsets, 128-byte swizzle (mode 1).
__device__ __forceinline__ uint64_t desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    uint64_t d = static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4);
    d |= static_cast<uint64_t>((lbo >> 4) & 0x3FFFu) << 16;
    d |= static_cast<uint64_t>((sbo >> 4) & 0x3FFFu) << 32;
    d |= uint64_t{1} << 62;
    return d;
}
// The same with the swizzle width as a parameter: 128 (desc above), 64 or 32 bytes (layout types 1, 2, 3).
template <int kSwizzleBytes>
__device__ __forceinline__ uint64_t desc_swizzle(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    static_assert(kSwizzleBytes == 128 || kSwizzleBytes == 64 || kSwizzleBytes == 32, "swizzle width");
    constexpr uint64_t kLayout = kSwizzleBytes == 128 ? 1 : (kSwizzleBytes == 64 ? 2 : 3);
    uint64_t d = static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4);
    d |= static_cast<uint64_t>((lbo >> 4) & 0x3FFFu) << 16;
    d |= static_cast<uint64_t>((sbo >> 4) & 0x3FFFu) << 32;
    d |= kLayout << 62;
    return d;
}

// D[64 x 256] (+)= A[64 x 16] B[16 x 256], A and B from shared memory (descriptors), f32 accumulate; scale_d 0
// overwrites D. kTransB 0: B stored K-major (each of its 256 rows holds 16 k values), 1: B stored N-major.
template <int kTransB>
__device__ __forceinline__ void m64n256k16_bf16(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " PENSTOCK_WGMMA_D128
        "%128, %129, p, 1, 1, 0, %131;\n"
        "}\n"
        : PENSTOCK_WGMMA_D128_OUT(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransB));
}

// D[64 x 64] (+)= A[64 x 16] B[16 x 64], both K-major in shared memory (descriptors); scale_d 0 overwrites D.
__device__ __forceinline__ void m64n64k16_bf16(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// D[64 x 256] += A[64 x 16] B[16 x 256]: A from registers (the accumulator layout of an m64n16 tile, bf16 pairs), B
// N-major in shared memory (descriptor).
__device__ __forceinline__ void m64n256k16_bf16_rs_nmajor(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " PENSTOCK_WGMMA_D128
        "{%128, %129, %130, %131}, %132, p, 1, 1, 1;\n"
        "}\n"
        : PENSTOCK_WGMMA_D128_OUT(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

// The same in f16 with both operands K-major (dsa_indexer_wgmma.cu: e4m3 values widened exactly to f16).
__device__ __forceinline__ void m64n256k16_f16(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " PENSTOCK_WGMMA_D128
        "%128, %129, p, 1, 1, 0, 0;\n"
        "}\n"
        : PENSTOCK_WGMMA_D128_OUT(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// D[64 x 128] (+)= A[64 x 32] B[32 x 128] in float8_e4m3fn, f32 accumulate, A and B K-major from shared memory
// (descriptors; fp8 wgmma has no transpose option). scale_d 0 overwrites D. The tensor cores accumulate fp8 products
// with reduced precision (~14 mantissa bits on Hopper, the DeepSeek-V3 report), which is why the FP8 GEMMs promote
// every 128-wide k block into separate f32 accumulators.
__device__ __forceinline__ void m64n128k32_e4m3(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " PENSTOCK_WGMMA_D64
        "%64, %65, p, 1, 1;\n"
        "}\n"
        : PENSTOCK_WGMMA_D64_OUT(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// D[64 x 64] (+)= A[64 x 32] B[32 x 64] in float8_e4m3fn, as m64n128k32_e4m3 (the wgmma probe). scale_d 0
// overwrites D.
__device__ __forceinline__ void m64n64k32_e4m3(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {" PENSTOCK_WGMMA_OPS_0_31
        "}, %32, %33, p, 1, 1;\n"
        "}\n"
        : PENSTOCK_WGMMA_OUT_0_31(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// D[64 x 64] (+)= A[64 x 32] B[32 x 64] in float8_e4m3fn with A from registers, as m64n128k32_e4m3_rs (the wgmma
// probe). scale_d 0 overwrites D.
__device__ __forceinline__ void m64n64k32_e4m3_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                                  int scale_d) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {" PENSTOCK_WGMMA_OPS_0_31
        "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n"
        "}\n"
        : PENSTOCK_WGMMA_OUT_0_31(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

// D[64 x 128] (+)= A[64 x 32] B[32 x 128] in float8_e4m3fn with A from registers (four 32-bit registers per thread:
// the e4m3 bytes of rows lane / 4 and lane / 4 + 8 of the warp's 16 rows, k columns 4 (lane % 4) .. +3 and +16), B
// K-major in shared memory (the FP8 attention's Q from registers; the wgmma probe). scale_d 0 overwrites D.
__device__ __forceinline__ void m64n128k32_e4m3_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b,
                                                   int scale_d) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " PENSTOCK_WGMMA_D64
        "{%64, %65, %66, %67}, %68, p, 1, 1;\n"
        "}\n"
        : PENSTOCK_WGMMA_D64_OUT(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

// D[64 x 192] (+)= A[64 x 32] B[32 x 192] in float8_e4m3fn, f32 accumulate, A and B K-major from shared memory, as
// m64n128k32_e4m3 (the wgmma probe of bench/kernels/wgmma_probe.cu). scale_d 0 overwrites D.
__device__ __forceinline__ void m64n192k32_e4m3(float (&d)[96], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 " PENSTOCK_WGMMA_D96
        "%96, %97, p, 1, 1;\n"
        "}\n"
        : PENSTOCK_WGMMA_D96_OUT(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// D[64 x 256] (+)= A[64 x 32] B[32 x 256] in float8_e4m3fn, f32 accumulate, A and B K-major from shared memory, as
// m64n128k32_e4m3 (same reduced-precision accumulation inside the instruction). scale_d 0 overwrites D.
__device__ __forceinline__ void m64n256k32_e4m3(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 " PENSTOCK_WGMMA_D128
        "%128, %129, p, 1, 1;\n"
        "}\n"
        : PENSTOCK_WGMMA_D128_OUT(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// D[64 x 128] (+)= A[64 x 8] B[8 x 128] in tf32 with A from registers (four 32-bit registers per thread: rows
// lane / 4 and lane / 4 + 8 of the warp's 16 rows at k columns lane % 4 and lane % 4 + 4, in the order (g, t),
// (g + 8, t), (g, t + 4), (g + 8, t + 4)), B K-major in shared memory (descriptor; tf32 has no transpose option), f32
// accumulate; the tensor cores read a tf32 operand's top 19 bits (dsa_indexer_wgmma_tf32.cu's three-product f32 dot).
// scale_d 0 overwrites D.
__device__ __forceinline__ void m64n128k8_tf32_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b,
                                                  int scale_d) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " PENSTOCK_WGMMA_D64
        "{%64, %65, %66, %67}, %68, p, 1, 1;\n"
        "}\n"
        : PENSTOCK_WGMMA_D64_OUT(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

// D[64 x 128] (+)= A[64 x 16] B[16 x 128] in f16 with A from registers (four 32-bit registers of f16 pairs per thread,
// the mma.m16n8k16 A layout: (g, 2t..2t+1), (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..)), B K-major in shared
// memory (descriptor), f32 accumulate (dsa_indexer_wgmma_tf32.cu's f16 three-product dot). scale_d 0 overwrites D.
__device__ __forceinline__ void m64n128k16_f16_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b,
                                                  int scale_d) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " PENSTOCK_WGMMA_D64
        "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n"
        "}\n"
        : PENSTOCK_WGMMA_D64_OUT(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

// Keeps the compiler from moving accumulator reads / writes across the asynchronous wgmma window.
template <int kN>
__device__ __forceinline__ void reg_fence(float (&d)[kN]) {
#pragma unroll
    for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

}  // namespace penstock::cuda::wgmma
