// Scalar dtype conversions (see dtype.h for the rounding contract).
#include "core/dtype.h"

#include <cmath>

namespace penstock {

int dtype_bits(DType dtype) {
    switch (dtype) {
        case DType::kF32: return 32;
        case DType::kBF16: return 16;
        case DType::kF16: return 16;
        case DType::kF8E4M3: return 8;
        case DType::kE8M0: return 8;
        case DType::kFP4E2M1: return 4;
        case DType::kI8: return 8;
        case DType::kU8: return 8;
        case DType::kI32: return 32;
        case DType::kI64: return 64;
        case DType::kBool: return 8;
    }
    return 0;
}

size_t dtype_bytes(DType dtype, size_t n) { return (n * static_cast<size_t>(dtype_bits(dtype)) + 7) / 8; }

std::string_view dtype_name(DType dtype) {
    switch (dtype) {
        case DType::kF32: return "f32";
        case DType::kBF16: return "bf16";
        case DType::kF16: return "f16";
        case DType::kF8E4M3: return "f8_e4m3";
        case DType::kE8M0: return "e8m0";
        case DType::kFP4E2M1: return "fp4_e2m1";
        case DType::kI8: return "i8";
        case DType::kU8: return "u8";
        case DType::kI32: return "i32";
        case DType::kI64: return "i64";
        case DType::kBool: return "bool";
    }
    return "?";
}

bool dtype_from_safetensors(std::string_view name, DType* out) {
    struct Entry {
        std::string_view name;
        DType dtype;
    };
    static constexpr Entry kTable[] = {
        {"F32", DType::kF32},         {"BF16", DType::kBF16}, {"F16", DType::kF16},
        {"F8_E4M3", DType::kF8E4M3},  {"F8_E8M0", DType::kE8M0}, {"E8M0", DType::kE8M0},
        {"F4", DType::kFP4E2M1},      {"I8", DType::kI8},     {"U8", DType::kU8},
        {"I32", DType::kI32},         {"I64", DType::kI64},   {"BOOL", DType::kBool},
    };
    for (const auto& e : kTable) {
        if (e.name == name) {
            *out = e.dtype;
            return true;
        }
    }
    return false;
}

float f16_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        const float mag = std::ldexp(static_cast<float>(man), -24);
        return sign ? -mag : mag;
    }
    if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));
    return bits_float(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t float_to_f16(float f) {
    const uint32_t u = float_bits(f);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | 0x7e00u;
    if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520 -> inf
    if (abs < 0x38800000u) {                         // below the smallest normal 2^-14: subnormal grid 2^-24
        const float mag = bits_float(abs);
        const float q = std::nearbyint(mag * 16777216.0f);  // exact in float: mag < 2^-14 so mag*2^24 < 1024
        return sign | static_cast<uint16_t>(q);
    }
    uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
    return sign | static_cast<uint16_t>(((rounded >> 13) - (112u << 10)) & 0x7fffu);
}

float e4m3_to_float(uint8_t v) {
    const bool neg = v & 0x80u;
    const uint32_t exp = (v >> 3) & 0xfu;
    const uint32_t man = v & 0x7u;
    float mag;
    if (exp == 15 && man == 7) {
        mag = NAN;
    } else if (exp == 0) {
        mag = std::ldexp(static_cast<float>(man), -9);
    } else {
        mag = std::ldexp(static_cast<float>(8 + man), static_cast<int>(exp) - 10);
    }
    return neg ? -mag : mag;
}

uint8_t float_to_e4m3(float f) {
    const uint32_t u = float_bits(f);
    const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
    const uint32_t abs = u & 0x7fffffffu;
    // NaN, inf and |x| > 464 (0x43e80000) saturate to the NaN pattern.
    if (abs > 0x43e80000u) return sign | 0x7fu;
    // Subnormal range of e4m3: |x| < 2^-6 (0x3c800000). Grid step 2^-9; exact arithmetic in float.
    if (abs < 0x3c800000u) {
        const float q = std::nearbyint(bits_float(abs) * 512.0f);  // 0..8 (8 = smallest normal 2^-6)
        return sign | static_cast<uint8_t>(q);
    }
    // Normal range: keep 3 mantissa bits, round to nearest even on the 20 dropped bits.
    const uint32_t rounded = abs + 0x7ffffu + ((abs >> 20) & 1u);
    const uint32_t exp = (rounded >> 23) - 127 + 7;  // e4m3 exponent field, >= 1 here
    const uint32_t man = (rounded >> 20) & 0x7u;
    return sign | static_cast<uint8_t>((exp << 3) | man);
}

float e8m0_to_float(uint8_t e) {
    if (e == 0xffu) return NAN;
    return std::ldexp(1.0f, static_cast<int>(e) - 127);
}

float e2m1_to_float(uint8_t nibble) {
    static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float mag = kValues[nibble & 0x7u];
    return (nibble & 0x8u) ? -mag : mag;
}

}  // namespace penstock
