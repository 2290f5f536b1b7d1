// Weight conversions (see weight_convert.h). Loops decode a run of elements to fp32, then encode to the target.
#include "loader/weight_convert.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

namespace penstock::loader {

namespace {

constexpr int64_t kRun = 4096;  // elements decoded per step (a 16 KiB fp32 buffer)

// Decodes n elements of a float dtype starting at byte pointer p (unaligned allowed) into out.
void decode(const uint8_t* p, DType dtype, int64_t n, float* out) {
    switch (dtype) {
        case DType::kF32:
            std::memcpy(out, p, static_cast<size_t>(n) * 4);
            return;
        case DType::kBF16:
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, p + 2 * i, 2);
                out[i] = bf16_to_float(h);
            }
            return;
        case DType::kF16:
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, p + 2 * i, 2);
                out[i] = f16_to_float(h);
            }
            return;
        case DType::kF8E4M3:
        case DType::kE8M0:
        case DType::kFP4E2M1:
        case DType::kI8:
        case DType::kU8:
        case DType::kI32:
        case DType::kI64:
        case DType::kBool:
            break;
    }
    PENSTOCK_CHECK(false) << "decode: not a float source dtype: " << dtype_name(dtype);
}

// Encodes n fp32 values into the target dtype (F32 or BF16) at out.
void encode(const float* in, int64_t n, DType target, void* out) {
    if (target == DType::kF32) {
        std::memcpy(out, in, static_cast<size_t>(n) * 4);
        return;
    }
    auto* o = static_cast<uint16_t*>(out);
    for (int64_t i = 0; i < n; ++i) o[i] = float_to_bf16(in[i]);
}

// Every element of a contiguous float view (f32 / bf16 / f16) as f32.
std::vector<float> decode_all(const TensorView& v) {
    PENSTOCK_CHECK(v.is_contiguous());
    std::vector<float> out(static_cast<size_t>(v.numel()));
    decode(static_cast<const uint8_t*>(v.data), v.dtype, v.numel(), out.data());
    return out;
}

// out[r, c] = e4m3(weight[r, c]) * scale_at(r, c) in fp32, rounded once to `target` (weight: contiguous 2-D e4m3).
template <class ScaleAt>
Tensor dequantize_e4m3(const TensorView& weight, DType target, ScaleAt&& scale_at) {
    PENSTOCK_CHECK(weight.is_contiguous());
    const int64_t rows = weight.shape[0], cols = weight.shape[1];
    std::array<float, 256> lut{};
    for (int v = 0; v < 256; ++v) lut[static_cast<size_t>(v)] = e4m3_to_float(static_cast<uint8_t>(v));
    Tensor out = Tensor::empty({rows, cols}, target);
    const auto* w = static_cast<const uint8_t*>(weight.data);
    const int dst_bytes = dtype_bits(target) / 8;
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* wr = w + r * cols;
        for (int64_t c = 0; c < cols; ++c) row[static_cast<size_t>(c)] = lut[wr[c]] * scale_at(r, c);
        encode(row.data(), cols, target, out.ptr<uint8_t>() + r * cols * dst_bytes);
    }
    return out;
}

Status check_target(DType target) {
    if (target != DType::kF32 && target != DType::kBF16) {
        return invalid_argument("unsupported load target dtype " + std::string(dtype_name(target)) + " (f32 or bf16)");
    }
    return ok_status();
}

// The target dtype and a 2-D e4m3 weight, shared by both FP8 dequantisations.
Status check_fp8_weight(const TensorView& weight, DType target) {
    PENSTOCK_RETURN_IF_ERROR(check_target(target));
    if (weight.dtype != DType::kF8E4M3 || weight.ndim != 2) {
        return invalid_argument("FP8 dequantisation needs a 2-D f8_e4m3 weight, got " +
                                std::string(dtype_name(weight.dtype)) + " " + weight.shape_string());
    }
    return ok_status();
}

}  // namespace

bool is_float_source(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16; }

Tensor copy_raw(const TensorView& src) {
    PENSTOCK_CHECK(src.is_contiguous() && src.device == Device::kCPU);
    Tensor t = Tensor::empty(src.shape_vec(), src.dtype);
    if (src.nbytes() > 0) std::memcpy(t.ptr<void>(), src.data, src.nbytes());
    return t;
}

Result<Tensor> convert_float(const TensorView& src, DType target) {
    PENSTOCK_RETURN_IF_ERROR(check_target(target));
    if (!is_float_source(src.dtype)) {
        return invalid_argument("cannot convert dtype " + std::string(dtype_name(src.dtype)) + " to " +
                                std::string(dtype_name(target)));
    }
    PENSTOCK_CHECK(src.is_contiguous() && src.device == Device::kCPU);
    if (src.dtype == target) return copy_raw(src);
    Tensor out = Tensor::empty(src.shape_vec(), target);
    const int64_t n = src.numel();
    const int src_bytes = dtype_bits(src.dtype) / 8;
    const int dst_bytes = dtype_bits(target) / 8;
    const auto* in = static_cast<const uint8_t*>(src.data);
    auto* dst = out.ptr<uint8_t>();
    std::vector<float> buf(static_cast<size_t>(std::min(n, kRun)));
    for (int64_t i = 0; i < n; i += kRun) {
        const int64_t m = std::min(kRun, n - i);
        decode(in + i * src_bytes, src.dtype, m, buf.data());
        encode(buf.data(), m, target, dst + i * dst_bytes);
    }
    return out;
}

Result<Tensor> dequantize_fp8_blocks(const TensorView& weight, const TensorView& scale_inv, int64_t block_n,
                                     int64_t block_k, DType target) {
    PENSTOCK_RETURN_IF_ERROR(check_fp8_weight(weight, target));
    if (block_n <= 0 || block_k <= 0) {
        return invalid_argument("FP8 block sizes must be positive, got [" + std::to_string(block_n) + ", " +
                                std::to_string(block_k) + "]");
    }
    const int64_t rows = weight.shape[0], cols = weight.shape[1];
    const int64_t srows = (rows + block_n - 1) / block_n, scols = (cols + block_k - 1) / block_k;
    if (!is_float_source(scale_inv.dtype) || scale_inv.ndim != 2 || scale_inv.shape[0] != srows ||
        scale_inv.shape[1] != scols) {
        return invalid_argument("weight_scale_inv " + std::string(dtype_name(scale_inv.dtype)) + " " +
                                scale_inv.shape_string() + " does not match weight " + weight.shape_string() +
                                " with blocks [" + std::to_string(block_n) + ", " + std::to_string(block_k) +
                                "] (expected a float tensor [" + std::to_string(srows) + ", " + std::to_string(scols) +
                                "])");
    }
    const std::vector<float> scale = decode_all(scale_inv);
    return dequantize_e4m3(weight, target, [&](int64_t r, int64_t c) {
        return scale[static_cast<size_t>((r / block_n) * scols + c / block_k)];
    });
}

Result<Tensor> dequantize_fp8_scaled(const TensorView& weight, const TensorView& scale, int64_t block_n,
                                     int64_t block_k, DType target) {
    PENSTOCK_RETURN_IF_ERROR(check_fp8_weight(weight, target));
    const int64_t rows = weight.shape[0], cols = weight.shape[1];
    const int64_t n = scale.numel();
    const int64_t brow = block_n > 0 ? (rows + block_n - 1) / block_n : -1;
    const int64_t bcol = block_k > 0 ? (cols + block_k - 1) / block_k : -1;
    // per tensor, per output channel, or per block
    const bool per_tensor = n == 1 && scale.ndim <= 2;
    const bool per_channel = !per_tensor && ((scale.ndim == 1 && scale.shape[0] == rows) ||
                                             (scale.ndim == 2 && scale.shape[0] == rows && scale.shape[1] == 1));
    const bool per_block =
        !per_tensor && !per_channel && scale.ndim == 2 && scale.shape[0] == brow && scale.shape[1] == bcol;
    if (!is_float_source(scale.dtype) || !(per_tensor || per_channel || per_block)) {
        return invalid_argument("weight_scale " + std::string(dtype_name(scale.dtype)) + " " + scale.shape_string() +
                                " does not match weight " + weight.shape_string() +
                                " (expected a float scale [] / [1] per tensor, [" + std::to_string(rows) + "] or [" +
                                std::to_string(rows) + ", 1] per channel, or [" + std::to_string(brow) + ", " +
                                std::to_string(bcol) + "] per block)");
    }
    const std::vector<float> s = decode_all(scale);
    return dequantize_e4m3(weight, target, [&](int64_t r, int64_t c) {
        return per_tensor    ? s[0]
               : per_channel ? s[static_cast<size_t>(r)]
                             : s[static_cast<size_t>((r / block_n) * bcol + c / block_k)];
    });
}

Result<Tensor> dequantize_mxfp4(const TensorView& packed, const TensorView& scale, DType target) {
    PENSTOCK_RETURN_IF_ERROR(check_target(target));
    constexpr int64_t kGroup = 32;
    const bool nibbles = packed.dtype == DType::kFP4E2M1;                                // shape counts elements
    const auto byte_dtype = [](DType d) { return d == DType::kU8 || d == DType::kI8; };  // I8: the same bits
    if ((!byte_dtype(packed.dtype) && !nibbles) || packed.ndim < 1) {
        return invalid_argument("MXFP4 dequantisation needs a u8 (or fp4) weight_packed, got " +
                                std::string(dtype_name(packed.dtype)) + " " + packed.shape_string());
    }
    const int64_t last = packed.shape[static_cast<size_t>(packed.ndim - 1)];
    const int64_t cols = nibbles ? last : 2 * last;
    if (nibbles && cols % 2 != 0) {
        return invalid_argument("MXFP4 weight_packed " + packed.shape_string() + ": an odd number of fp4 columns");
    }
    const int64_t rows = cols == 0 ? 0 : packed.numel() / last;
    const int64_t groups = (cols + kGroup - 1) / kGroup;
    bool shape_ok = (byte_dtype(scale.dtype) || scale.dtype == DType::kE8M0) && scale.ndim == packed.ndim &&
                    scale.shape[static_cast<size_t>(scale.ndim - 1)] == groups;
    for (int d = 0; shape_ok && d + 1 < packed.ndim; ++d)
        shape_ok = scale.shape[static_cast<size_t>(d)] == packed.shape[static_cast<size_t>(d)];
    if (!shape_ok) {
        std::vector<int64_t> want = packed.shape_vec();
        want.back() = groups;
        std::string w = "[";
        for (size_t i = 0; i < want.size(); ++i) w += (i ? ", " : "") + std::to_string(want[i]);
        return invalid_argument("MXFP4 weight_scale " + std::string(dtype_name(scale.dtype)) + " " +
                                scale.shape_string() + " does not match weight_packed " + packed.shape_string() +
                                " (expected u8 or e8m0 " + w + "]: one exponent per 32 columns)");
    }
    PENSTOCK_CHECK(packed.is_contiguous() && scale.is_contiguous());
    std::vector<int64_t> out_shape = packed.shape_vec();
    out_shape.back() = cols;
    Tensor out = Tensor::empty(out_shape, target);
    std::array<float, 16> e2m1{};
    for (int v = 0; v < 16; ++v) e2m1[static_cast<size_t>(v)] = e2m1_to_float(static_cast<uint8_t>(v));
    const auto* p = static_cast<const uint8_t*>(packed.data);
    const auto* sc = static_cast<const uint8_t*>(scale.data);
    const int dst_bytes = dtype_bits(target) / 8;
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* pr = p + r * (cols / 2);
        const uint8_t* sr = sc + r * groups;
        for (int64_t gi = 0; gi < groups; ++gi) {
            if (sr[gi] == 0xff) {
                return invalid_argument("MXFP4 weight_scale row " + std::to_string(r) + " group " + std::to_string(gi) +
                                        " is 0xff (e8m0 NaN)");
            }
        }
        for (int64_t gi = 0; gi < groups; ++gi) {  // a group is 32 columns (16 bytes); cols is even
            const float f = e8m0_to_float(sr[gi]);
            for (int64_t c = kGroup * gi; c < std::min(cols, kGroup * (gi + 1)); c += 2) {
                const uint8_t b = pr[c / 2];
                row[static_cast<size_t>(c)] = e2m1[b & 0xfu] * f;
                row[static_cast<size_t>(c + 1)] = e2m1[b >> 4] * f;
            }
        }
        encode(row.data(), cols, target, out.ptr<uint8_t>() + r * cols * dst_bytes);
    }
    return out;
}

Result<Fp8Blocks> mxfp4_to_fp8_blocks(const TensorView& packed, const TensorView& scale, int64_t block_n,
                                      int64_t block_k) {
    if (block_n <= 0 || block_k <= 0) {
        return invalid_argument("FP8 block sizes must be positive, got [" + std::to_string(block_n) + ", " +
                                std::to_string(block_k) + "]");
    }
    // The exact values first (e2m1 * 2^(s - 127) is exact in f32), then one power-of-two scale per block.
    PENSTOCK_ASSIGN_OR_RETURN(const Tensor x, dequantize_mxfp4(packed, scale, DType::kF32));
    const std::vector<int64_t> shape = x.view().shape_vec();
    if (shape.size() < 2) {
        return invalid_argument("MXFP4 to block FP8 needs a matrix (or a stack of them), got weight_packed " +
                                packed.shape_string());
    }
    const int64_t rows = shape[shape.size() - 2], cols = shape.back();
    const int64_t mats = rows * cols == 0 ? 0 : x.numel() / (rows * cols);
    const int64_t sr = (rows + block_n - 1) / block_n, sc = (cols + block_k - 1) / block_k;
    std::vector<int64_t> sshape(shape.begin(), shape.end() - 2);
    sshape.push_back(sr);
    sshape.push_back(sc);
    Fp8Blocks out{.weight = Tensor::empty(shape, DType::kF8E4M3), .scale_inv = Tensor::empty(sshape, DType::kF32)};
    const float* xv = x.ptr<float>();
    auto* q = out.weight.ptr<uint8_t>();
    float* s = out.scale_inv.ptr<float>();
    for (int64_t m = 0; m < mats; ++m) {
        for (int64_t bi = 0; bi < sr; ++bi) {
            for (int64_t bj = 0; bj < sc; ++bj) {
                const int64_t r0 = bi * block_n, r1 = std::min(rows, r0 + block_n);
                const int64_t c0 = bj * block_k, c1 = std::min(cols, c0 + block_k);
                float amax = 0.0f;
                for (int64_t r = r0; r < r1; ++r) {
                    for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(xv[(m * rows + r) * cols + c]));
                }
                // 2^k with amax / 2^k <= 448: k = ceil(log2(amax / 448)), from frexp (amax = f 2^e, f in [0.5, 1)).
                int k = 0;
                if (amax > 0.0f) {
                    int e = 0;
                    (void)std::frexp(amax / 448.0f, &e);
                    k = e;  // 2^e >= amax / 448 up to the division's rounding, which the two loops settle exactly
                    while (std::ldexp(amax, -k) > 448.0f) ++k;
                    while (std::ldexp(amax, -(k - 1)) <= 448.0f) --k;
                }
                const float step = std::ldexp(1.0f, k);
                s[(m * sr + bi) * sc + bj] = step;
                for (int64_t r = r0; r < r1; ++r) {
                    for (int64_t c = c0; c < c1; ++c) {
                        const int64_t i = (m * rows + r) * cols + c;
                        const uint8_t e4 = float_to_e4m3(std::ldexp(xv[i], -k));  // exact scaling by 2^-k
                        q[i] = e4;
                        out.n_inexact += e4m3_to_float(e4) * step != xv[i] ? 1 : 0;
                    }
                }
            }
        }
    }
    return out;
}

}  // namespace penstock::loader
