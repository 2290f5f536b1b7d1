// Small device helpers shared by the elementwise and row-wise kernels: 16-byte vector packs and fp32 <-> storage
// conversions for the dtypes kernels read and write (f32, bf16).
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

namespace penstock::cuda {

// N elements of T moved as one access: 16 bytes (ld/st.global.v4) when sizeof(T) * N >= 16, else sizeof(T) * N.
// A pack of 32 bytes (8 floats) is aligned to 16 and compiles to two 16-byte accesses.
template <class T, int N>
struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) Pack {
    T v[N];
};

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
    return x;
}
// Round to nearest even (cvt.rn.bf16.f32): bit-exact with penstock::float_to_bf16 except for NaN payloads.
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

// True when p is aligned for 16-byte accesses.
inline bool is_aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace penstock::cuda
