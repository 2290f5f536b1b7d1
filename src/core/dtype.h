// Element types and their scalar conversions. Every conversion here is the specification the CUDA kernels match
// bit for bit: bf16/f16 round to nearest even; float -> e4m3fn is PyTorch's Tensor.to(torch.float8_e4m3fn).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace penstock {

enum class DType : uint8_t {
    kF32,
    kBF16,
    kF16,
    kF8E4M3,   // float8_e4m3fn: 1-4-3, bias 7, no inf, NaN = S.1111.111, max 448
    kE8M0,     // MX scale: 8-bit exponent, value 2^(e-127), 0xff = NaN
    kFP4E2M1,  // MXFP4 element, two per byte (low nibble first); size_bits = 4
    kI8,
    kU8,
    kI32,
    kI64,
    kBool,
};

// Bits per element (4 for kFP4E2M1, else 8 * bytes).
int dtype_bits(DType dtype);
// Bytes for n elements, rounding packed sub-byte types up.
size_t dtype_bytes(DType dtype, size_t n);
std::string_view dtype_name(DType dtype);
// Parses a safetensors dtype string ("F32", "BF16", "F8_E4M3", ...). Returns false for unknown strings.
bool dtype_from_safetensors(std::string_view name, DType* out);

inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// bf16 <-> f32. float -> bf16 rounds to nearest even; NaN stays a (quiet) NaN with its sign.
inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }
inline uint16_t float_to_bf16(float f) {
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

// IEEE half <-> f32, round to nearest even.
float f16_to_float(uint16_t h);
uint16_t float_to_f16(float f);

// float8_e4m3fn <-> f32. float_to_e4m3 is bit-exact with PyTorch: round to nearest even on the e4m3 grid
// (subnormals 2^-9 step); |x| > 464 (the midpoint between 448 and the would-be 480), +-inf and NaN map to the
// signed NaN pattern 0x7f / 0xff. |x| == 464 rounds to even, i.e. to 448.
float e4m3_to_float(uint8_t v);
uint8_t float_to_e4m3(float f);

// e8m0 scale -> f32: 2^(e - 127); 0xff is NaN.
float e8m0_to_float(uint8_t e);
// fp4 e2m1 nibble (low 4 bits) -> f32: values {0, 0.5, 1, 1.5, 2, 3, 4, 6} with sign bit 3.
float e2m1_to_float(uint8_t nibble);

}  // namespace penstock
