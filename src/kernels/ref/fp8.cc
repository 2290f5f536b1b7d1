// Reference block-scaled FP8 ops (kernels/ops.h: Fp8ActQuantParams, Fp8GemmParams, Fp8GroupedGemmParams): the
// DeepSeek-V3 activation quantiser, and GEMMs that dequantise both operands per block to f32 (value = e4m3 * scale)
// and run the f32 reference GEMM (OpenBLAS sgemm, fp32 accumulation); the per-tensor quantiser and dequantiser of FP8
// attention (Fp8TensorScaleParams). Host tensors only.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "kernels/ref/ref_kda.h"
#include "kernels/ref/ref_ops.h"

namespace penstock::ref {

namespace {

using kernels::kFp8Block;

int64_t blocks_of(int64_t n) { return (n + kFp8Block - 1) / kFp8Block; }

void check_2d(const TensorView& v, int64_t rows, int64_t cols, const char* op, const char* name) {
    PENSTOCK_CHECK(v.device == Device::kCPU) << op << ": " << name << " must be a host tensor";
    PENSTOCK_CHECK_EQ(v.ndim, 2) << op << ": " << name << " " << v.shape_string();
    PENSTOCK_CHECK(v.size(0) == rows && v.size(1) == cols)
        << op << ": " << name << " " << v.shape_string() << ", expected [" << rows << ", " << cols << "]";
}

void check_rows(const TensorView& v, const char* op, const char* name) {
    PENSTOCK_CHECK(v.stride(1) == 1 || v.size(1) <= 1) << op << ": " << name << " last dim must be contiguous";
}

// e4m3 [rows, cols] (row strided) times per-block scales -> a new contiguous f32 [rows, cols].
// scale(r, c) is the multiplier of element (r, c).
template <class ScaleAt>
Tensor dequantize(const TensorView& q, ScaleAt&& scale_at) {
    const int64_t rows = q.size(0), cols = q.size(1);
    Tensor out = Tensor::empty({rows, cols}, DType::kF32);
    float lut[256];
    for (int i = 0; i < 256; ++i) lut[i] = e4m3_to_float(static_cast<uint8_t>(i));
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* src = q.at<const uint8_t>({r});
        float* dst = out.ptr<float>() + r * cols;
        for (int64_t c = 0; c < cols; ++c) dst[c] = lut[src[c]] * scale_at(r, c);
    }
    return out;
}

void check_fp8_gemm(const TensorView& out, const TensorView& a, const TensorView& a_scale, const TensorView& b,
                    int64_t n_rows, int64_t n, int64_t k, const char* op) {
    check_2d(a, n_rows, k, op, "a");
    check_rows(a, op, "a");
    PENSTOCK_CHECK(a.dtype == DType::kF8E4M3) << op << ": a must be f8e4m3, got " << dtype_name(a.dtype);
    PENSTOCK_CHECK(b.dtype == DType::kF8E4M3) << op << ": b must be f8e4m3, got " << dtype_name(b.dtype);
    check_2d(a_scale, n_rows, blocks_of(k), op, "a_scale");
    PENSTOCK_CHECK(a_scale.dtype == DType::kF32) << op << ": a_scale must be f32";
    check_2d(out, n_rows, n, op, "out");
    check_rows(out, op, "out");
    PENSTOCK_CHECK(out.dtype == DType::kF32) << op << ": the reference writes f32 out, got " << dtype_name(out.dtype);
    PENSTOCK_CHECK_GT(k, 0) << op << ": k";
}

// out[rows] = dequant(a rows) @ dequant(b)^T through ref::gemm.
void dequant_gemm(const TensorView& out, const TensorView& a, const TensorView& a_scale, const TensorView& b,
                  const TensorView& b_scale) {
    const Tensor a_f = dequantize(a, [&](int64_t r, int64_t c) {
        return *a_scale.at<const float>({r, c / kFp8Block});
    });
    const Tensor b_f = dequantize(b, [&](int64_t r, int64_t c) {
        return *b_scale.at<const float>({r / kFp8Block, c / kFp8Block});
    });
    gemm({.out = out, .a = a_f, .b = b_f, .trans_b = true, .alpha = 1.0f, .beta = 0.0f}, nullptr);
}

}  // namespace

void fp8_act_quant(const kernels::Fp8ActQuantParams& p, ThreadPool* /*pool*/) {
    const char* op = "fp8_act_quant";
    PENSTOCK_CHECK_EQ(p.in.ndim, 2) << op << ": in " << p.in.shape_string();
    const int64_t m = p.in.size(0), k = p.in.size(1);
    check_2d(p.in, m, k, op, "in");
    check_rows(p.in, op, "in");
    check_2d(p.out, m, k, op, "out");
    check_rows(p.out, op, "out");
    check_2d(p.scale, m, blocks_of(k), op, "scale");
    PENSTOCK_CHECK(p.in.dtype == DType::kF32 || p.in.dtype == DType::kBF16)
        << op << ": in must be f32 or bf16, got " << dtype_name(p.in.dtype);
    PENSTOCK_CHECK(p.out.dtype == DType::kF8E4M3) << op << ": out must be f8e4m3, got " << dtype_name(p.out.dtype);
    PENSTOCK_CHECK(p.scale.dtype == DType::kF32) << op << ": scale must be f32, got " << dtype_name(p.scale.dtype);
    std::vector<float> x(static_cast<size_t>(kFp8Block));
    for (int64_t r = 0; r < m; ++r) {
        for (int64_t g = 0; g < blocks_of(k); ++g) {
            const int64_t c0 = g * kFp8Block, c1 = std::min(k, c0 + kFp8Block);
            float amax = 0.0f;
            for (int64_t c = c0; c < c1; ++c) {
                const float v = p.in.dtype == DType::kF32 ? *p.in.at<const float>({r, c})
                                                          : bf16_to_float(*p.in.at<const uint16_t>({r, c}));
                x[static_cast<size_t>(c - c0)] = v;
                amax = std::max(amax, std::fabs(v));  // NaN inputs are ignored by the max (fmax semantics)
            }
            amax = std::max(amax, 1e-4f);
            const float s = amax / 448.0f;
            for (int64_t c = c0; c < c1; ++c) {
                const float q = x[static_cast<size_t>(c - c0)] / s;
                *p.out.at<uint8_t>({r, c}) = std::isnan(q) ? uint8_t{0x7f} : float_to_e4m3(q);
            }
            *p.scale.at<float>({r, g}) = s;
        }
    }
}

void fp8_gemm(const kernels::Fp8GemmParams& p, ThreadPool* /*pool*/) {
    const char* op = "fp8_gemm";
    PENSTOCK_CHECK_EQ(p.a.ndim, 2) << op << ": a " << p.a.shape_string();
    PENSTOCK_CHECK_EQ(p.b.ndim, 2) << op << ": b " << p.b.shape_string();
    const int64_t m = p.a.size(0), k = p.a.size(1), n = p.b.size(0);
    check_fp8_gemm(p.out, p.a, p.a_scale, p.b, m, n, k, op);
    check_2d(p.b, n, k, op, "b");
    check_rows(p.b, op, "b");
    check_2d(p.b_scale, blocks_of(n), blocks_of(k), op, "b_scale");
    PENSTOCK_CHECK(p.b_scale.dtype == DType::kF32) << op << ": b_scale must be f32";
    if (m == 0 || n == 0) return;
    dequant_gemm(p.out, p.a, p.a_scale, p.b, p.b_scale);
}

void fp8_grouped_gemm(const kernels::Fp8GroupedGemmParams& p, ThreadPool* /*pool*/) {
    const char* op = "fp8_grouped_gemm";
    PENSTOCK_CHECK_EQ(p.b.ndim, 3) << op << ": b " << p.b.shape_string();
    PENSTOCK_CHECK(p.b.is_contiguous()) << op << ": b must be contiguous";
    const int64_t n_groups = p.b.size(0), n = p.b.size(1), k = p.b.size(2), n_rows = p.a.size(0);
    PENSTOCK_CHECK_EQ(p.a.ndim, 2) << op << ": a " << p.a.shape_string();
    check_fp8_gemm(p.out, p.a, p.a_scale, p.b, n_rows, n, k, op);
    PENSTOCK_CHECK(p.b_scale.ndim == 3 && p.b_scale.size(0) == n_groups && p.b_scale.size(1) == blocks_of(n) &&
                   p.b_scale.size(2) == blocks_of(k) && p.b_scale.is_contiguous() && p.b_scale.dtype == DType::kF32)
        << op << ": b_scale " << p.b_scale.shape_string() << ", expected contiguous f32 [" << n_groups << ", "
        << blocks_of(n) << ", " << blocks_of(k) << "]";
    PENSTOCK_CHECK(p.offsets.dtype == DType::kI32 && p.offsets.ndim == 1 && p.offsets.numel() == n_groups + 1)
        << op << ": offsets " << p.offsets.shape_string() << ", expected [" << n_groups + 1 << "] i32";
    const int32_t* off = p.offsets.ptr<const int32_t>();
    PENSTOCK_CHECK_EQ(off[0], 0) << op << ": offsets[0]";
    PENSTOCK_CHECK_LE(static_cast<int64_t>(off[n_groups]), n_rows) << op << ": offsets[n_groups] past the rows";
    for (int64_t g = 0; g < n_groups; ++g) {
        const int64_t r0 = off[g], r1 = off[g + 1];
        PENSTOCK_CHECK_LE(r0, r1) << op << ": offsets decrease at group " << g;
        if (r0 == r1 || n == 0) continue;
        dequant_gemm(p.out.slice(0, r0, r1), p.a.slice(0, r0, r1), p.a_scale.slice(0, r0, r1), p.b.select(0, g),
                     p.b_scale.select(0, g));
    }
}

// The specification: the three ops in sequence (kernels/ops.h Fp8GroupedGluGemmParams).
void fp8_grouped_gemm_glu(const kernels::Fp8GroupedGluGemmParams& p, ThreadPool* pool) {
    const char* op = "fp8_grouped_gemm_glu";
    PENSTOCK_CHECK(p.b.ndim == 3 && p.b.size(1) % 2 == 0) << op << ": b [n_groups, 2 I, k], got " << p.b.shape_string();
    const int64_t n_rows = p.a.size(0), inter = p.b.size(1) / 2;
    PENSTOCK_CHECK(p.gate_up.ndim == 2 && p.gate_up.size(0) == n_rows && p.gate_up.size(1) == 2 * inter &&
                   (p.gate_up.dtype == DType::kF32 || p.gate_up.dtype == DType::kBF16))
        << op << ": gate_up scratch " << p.gate_up.shape_string() << " " << dtype_name(p.gate_up.dtype)
        << ", expected f32 or bf16 [" << n_rows << ", " << 2 * inter << "]";
    PENSTOCK_CHECK(p.out.ndim == 2 && p.out.size(0) == n_rows && p.out.size(1) == inter)
        << op << ": out " << p.out.shape_string() << ", expected [" << n_rows << ", " << inter << "]";
    fp8_grouped_gemm(
        {.out = p.gate_up, .a = p.a, .a_scale = p.a_scale, .b = p.b, .b_scale = p.b_scale, .offsets = p.offsets}, pool);
    const TensorView gate = p.gate_up.slice(1, 0, inter), up = p.gate_up.slice(1, inter, 2 * inter);
    switch (p.act) {
        case kernels::GluKind::kSilu:
            silu_mul({.out = gate, .gate = gate, .up = up}, pool);
            break;
        case kernels::GluKind::kSitu:
            situ_mul({.out = gate, .gate = gate, .up = up, .beta = p.situ_beta, .linear_beta = p.situ_linear_beta},
                     pool);
            break;
    }
    fp8_act_quant({.out = p.out, .scale = p.out_scale, .in = gate}, pool);
}

namespace {

// The [1] f32 scale of a per-tensor op, on the host.
float* scale_slot(const TensorView& scale, const char* op) {
    PENSTOCK_CHECK(scale.device == Device::kCPU && scale.dtype == DType::kF32 && scale.numel() == 1 &&
                   scale.data != nullptr)
        << op << ": scale must be a [1] f32 host tensor, got " << scale.shape_string();
    return static_cast<float*>(scale.data);
}

// Calls f(index of out, index of in) for every element of two same-shaped 1- to 3-d views (last dims contiguous).
template <class F>
void for_each_pair(const TensorView& out, const TensorView& in, const char* op, F&& f) {
    PENSTOCK_CHECK(out.device == Device::kCPU && in.device == Device::kCPU) << op << ": host tensors";
    PENSTOCK_CHECK(in.ndim >= 1 && in.ndim <= 3 && out.ndim == in.ndim) << op << ": 1- to 3-d views of one shape";
    for (int d = 0; d < in.ndim; ++d) {
        PENSTOCK_CHECK_EQ(out.size(d), in.size(d))
            << op << ": out " << out.shape_string() << " vs in " << in.shape_string();
    }
    PENSTOCK_CHECK((in.stride(in.ndim - 1) == 1 || in.size(in.ndim - 1) <= 1) &&
                   (out.stride(out.ndim - 1) == 1 || out.size(out.ndim - 1) <= 1))
        << op << ": last dims must be contiguous";
    const int64_t d0 = in.ndim >= 3 ? in.size(in.ndim - 3) : 1;
    const int64_t d1 = in.ndim >= 2 ? in.size(in.ndim - 2) : 1;
    const int64_t d2 = in.size(in.ndim - 1);
    auto st = [](const TensorView& v, int back) { return v.ndim >= back ? v.stride(v.ndim - back) : 0; };
    for (int64_t i = 0; i < d0; ++i) {
        for (int64_t j = 0; j < d1; ++j) {
            for (int64_t c = 0; c < d2; ++c) {
                f(i * st(out, 3) + j * st(out, 2) + c, i * st(in, 3) + j * st(in, 2) + c);
            }
        }
    }
}

}  // namespace

void fp8_quantize_tensor(const kernels::Fp8TensorScaleParams& p, ThreadPool* /*pool*/) {
    const char* op = "fp8_quantize_tensor";
    PENSTOCK_CHECK(p.in.dtype == DType::kF32 || p.in.dtype == DType::kBF16)
        << op << ": in must be f32 or bf16, got " << dtype_name(p.in.dtype);
    PENSTOCK_CHECK(p.out.dtype == DType::kF8E4M3) << op << ": out must be f8e4m3, got " << dtype_name(p.out.dtype);
    float* scale = scale_slot(p.scale, op);
    auto value = [&](int64_t i) {
        return p.in.dtype == DType::kF32 ? static_cast<const float*>(p.in.data)[i]
                                         : bf16_to_float(static_cast<const uint16_t*>(p.in.data)[i]);
    };
    float amax = 0.0f;
    bool nan = false;
    for_each_pair(p.out, p.in, op, [&](int64_t, int64_t i) {
        const float a = std::fabs(value(i));
        nan = nan || std::isnan(a);
        amax = std::max(amax, a);
    });
    if (nan) amax = std::numeric_limits<float>::quiet_NaN();
    const float s = amax > 0.0f || nan ? amax / 448.0f : 1.0f;
    const float inv = 1.0f / s;
    auto* out = static_cast<uint8_t*>(p.out.data);
    for_each_pair(p.out, p.in, op, [&](int64_t o, int64_t i) {
        const float q = value(i) * inv;
        out[o] = std::isnan(q) ? uint8_t{0x7f} : float_to_e4m3(q);
    });
    *scale = s;
}

void fp8_dequantize_tensor(const kernels::Fp8TensorScaleParams& p, ThreadPool* /*pool*/) {
    const char* op = "fp8_dequantize_tensor";
    PENSTOCK_CHECK(p.in.dtype == DType::kF8E4M3) << op << ": in must be f8e4m3, got " << dtype_name(p.in.dtype);
    PENSTOCK_CHECK(p.out.dtype == DType::kF32 || p.out.dtype == DType::kBF16)
        << op << ": out must be f32 or bf16, got " << dtype_name(p.out.dtype);
    const float s = *scale_slot(p.scale, op);
    const auto* in = static_cast<const uint8_t*>(p.in.data);
    for_each_pair(p.out, p.in, op, [&](int64_t o, int64_t i) {
        const float v = e4m3_to_float(in[i]) * s;
        if (p.out.dtype == DType::kF32) {
            static_cast<float*>(p.out.data)[o] = v;
        } else {
            static_cast<uint16_t*>(p.out.data)[o] = float_to_bf16(v);
        }
    });
}

void fp8_quantize_heads(const kernels::Fp8HeadQuantParams& p, ThreadPool* /*pool*/) {
    const char* op = "fp8_quantize_heads";
    PENSTOCK_CHECK(p.in.device == Device::kCPU && p.out.device == Device::kCPU && p.scale.device == Device::kCPU)
        << op << ": host tensors";
    PENSTOCK_CHECK(p.in.dtype == DType::kF32 || p.in.dtype == DType::kBF16)
        << op << ": in must be f32 or bf16, got " << dtype_name(p.in.dtype);
    PENSTOCK_CHECK(p.out.dtype == DType::kF8E4M3) << op << ": out must be f8e4m3, got " << dtype_name(p.out.dtype);
    PENSTOCK_CHECK(p.scale.dtype == DType::kF32 && p.scale.ndim == 2) << op << ": scale must be [n, H] f32";
    PENSTOCK_CHECK(p.in.ndim == 3 && p.out.ndim == 3) << op << ": in and out are [n, H, d]";
    const bool tail = p.in_tail.data != nullptr;
    const int64_t n = p.in.size(0), h = p.in.size(1), d = p.in.size(2);
    const int64_t dt = tail ? p.in_tail.size(2) : 0;
    if (tail) {
        PENSTOCK_CHECK(p.in_tail.device == Device::kCPU && p.in_tail.dtype == p.in.dtype && p.in_tail.ndim == 3 &&
                       p.in_tail.size(0) == n && p.in_tail.size(1) == h)
            << op << ": in_tail must be [n, H, d_tail] of in's dtype, got " << p.in_tail.shape_string();
        PENSTOCK_CHECK(p.in_tail.stride(2) == 1 || dt <= 1) << op << ": in_tail's last dim must be contiguous";
    }
    PENSTOCK_CHECK(p.out.size(0) == n && p.out.size(1) == h && p.out.size(2) == d + dt)
        << op << ": out " << p.out.shape_string() << " vs in " << p.in.shape_string() << " + " << dt;
    PENSTOCK_CHECK(p.scale.size(0) == n && p.scale.size(1) == h) << op << ": scale " << p.scale.shape_string();
    PENSTOCK_CHECK((p.in.stride(2) == 1 || d <= 1) && (p.out.stride(2) == 1 || d + dt <= 1))
        << op << ": last dims must be contiguous";
    PENSTOCK_CHECK_GE(p.block, 1) << op << ": block";
    if (p.rope.inv_freq.data != nullptr) {
        // RoPE first, as kernels::rope on a copy of in (f32; rounded back to in's dtype), then the plain op.
        const int64_t rot = 2 * p.rope.inv_freq.size(0);
        PENSTOCK_CHECK(p.block == 1 && !tail) << op << ": RoPE with block 1 and no in_tail only";
        PENSTOCK_CHECK(p.rope_col >= 0 && p.rope_col + rot <= d) << op << ": rope columns outside in";
        Tensor xr = Tensor::empty({n, h, d}, DType::kF32);
        for (int64_t r = 0; r < n; ++r) {
            for (int64_t hh = 0; hh < h; ++hh) {
                for (int64_t c = 0; c < d; ++c) {
                    *xr.view().at<float>({r, hh, c}) = p.in.dtype == DType::kF32
                                                           ? *p.in.at<float>({r, hh, c})
                                                           : bf16_to_float(*p.in.at<uint16_t>({r, hh, c}));
                }
            }
        }
        kernels::RopeParams rp = p.rope;
        rp.x = xr.view().slice(2, p.rope_col, p.rope_col + rot);
        rope(rp, nullptr);
        if (p.in.dtype == DType::kBF16) {
            for (int64_t r = 0; r < n; ++r) {
                for (int64_t hh = 0; hh < h; ++hh) {
                    for (int64_t c = p.rope_col; c < p.rope_col + rot; ++c) {
                        float* v = xr.view().at<float>({r, hh, c});
                        *v = bf16_to_float(float_to_bf16(*v));
                    }
                }
            }
        }
        kernels::Fp8HeadQuantParams plain = p;
        plain.in = xr;
        plain.rope = {};
        fp8_quantize_heads(plain, nullptr);
        return;
    }
    std::vector<int64_t> cu = {0, n};
    if (p.cu_seqlens.data != nullptr) {
        PENSTOCK_CHECK(p.cu_seqlens.device == Device::kCPU && p.cu_seqlens.dtype == DType::kI32 &&
                       p.cu_seqlens.ndim == 1 && p.cu_seqlens.size(0) >= 1)
            << op << ": cu_seqlens must be a host [n_seqs + 1] i32 tensor";
        cu.assign(static_cast<size_t>(p.cu_seqlens.size(0)), 0);
        for (int64_t s = 0; s < p.cu_seqlens.size(0); ++s) cu[static_cast<size_t>(s)] = *p.cu_seqlens.at<int32_t>({s});
        PENSTOCK_CHECK(cu.front() == 0 && cu.back() == n) << op << ": cu_seqlens must run from 0 to n = " << n;
        for (size_t s = 1; s < cu.size(); ++s) PENSTOCK_CHECK_LE(cu[s - 1], cu[s]) << op << ": cu_seqlens";
    }
    auto value = [&](const TensorView& t, int64_t r, int64_t hh, int64_t c) {
        return t.dtype == DType::kF32 ? *t.at<float>({r, hh, c}) : bf16_to_float(*t.at<uint16_t>({r, hh, c}));
    };
    auto x = [&](int64_t r, int64_t hh, int64_t c) {
        return c < d ? value(p.in, r, hh, c) : value(p.in_tail, r, hh, c - d);
    };
    for (size_t s = 0; s + 1 < cu.size(); ++s) {
        for (int64_t r0 = cu[s]; r0 < cu[s + 1]; r0 += p.block) {
            const int64_t r1 = std::min<int64_t>(cu[s + 1], r0 + p.block);
            for (int64_t hh = 0; hh < h; ++hh) {
                float amax = 0.0f;
                bool nan = false;
                for (int64_t r = r0; r < r1; ++r) {
                    for (int64_t c = 0; c < d + dt; ++c) {
                        const float a = std::fabs(x(r, hh, c));
                        nan = nan || std::isnan(a);
                        amax = std::max(amax, a);
                    }
                }
                if (nan) amax = std::numeric_limits<float>::quiet_NaN();
                const float sc = amax > 0.0f || nan ? amax / 448.0f : 1.0f;
                const float inv = 1.0f / sc;
                for (int64_t r = r0; r < r1; ++r) {
                    auto* o = p.out.at<uint8_t>({r, hh});
                    for (int64_t c = 0; c < d + dt; ++c) {
                        const float q = x(r, hh, c) * inv;
                        o[c] = std::isnan(q) ? uint8_t{0x7f} : float_to_e4m3(q);
                    }
                    *p.scale.at<float>({r, hh}) = sc;
                }
            }
        }
    }
}

}  // namespace penstock::ref
