// WeightReader.
#include "models/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "kernels/random_hash.h"
#include "loader/weight_convert.h"

namespace penstock::models {

namespace {
std::string shape_str(const Shape& s) {
    std::ostringstream o;
    o << "[";
    for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
    o << "]";
    return o.str();
}
}  // namespace

Tensor WeightReader::place(Tensor host) const {
    if (!host.defined()) return host;
    if (matrix_dtype_ == DType::kBF16 && host.ndim() >= 2 && host.dtype() == DType::kF32) {
        Tensor b = Tensor::empty(host.view().shape_vec(), DType::kBF16);
        for (int64_t i = 0; i < host.numel(); ++i) b.ptr<uint16_t>()[i] = float_to_bf16(host.ptr<const float>()[i]);
        host = std::move(b);
    }
    return place_f32(std::move(host));
}

Tensor WeightReader::place_f32(Tensor host) const {
    if (!host.defined() || placement_.device == Device::kCPU) return host;
    Tensor d = Tensor::empty(host.view().shape_vec(), host.dtype(), kernels::allocator_of(placement_));
    kernels::transfer({.out = d, .in = host}, placement_);
    return d;
}

Tensor WeightReader::generate(const std::string& name, const Shape& shape, uint64_t slice,
                              const kernels::Context& ctx, bool host) const {
    const bool matrix = shape.size() >= 2;
    const DType dtype = matrix && !host ? matrix_dtype_ : DType::kF32;
    Tensor t = Tensor::empty(shape, dtype, kernels::allocator_of(ctx));
    float mean = 0.0f;
    float stddev = 0.02f;
    if (matrix) {
        stddev = static_cast<float>(1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(shape.back(), 1))));
    } else if (name.find("norm") != std::string::npos) {
        mean = 1.0f;
        stddev = 0.0f;
    }
    kernels::fill_random(
        {.out = t, .seed = kernels::random_seed_for(dummy_seed_, name.c_str(), slice), .mean = mean, .stddev = stddev},
        ctx);
    return t;
}

Result<Tensor> WeightReader::take(const std::string& name, const Shape& shape) {
    if (dummy()) return generate(name, shape, 0, placement_, /*host=*/false);
    PENSTOCK_ASSIGN_OR_RETURN(Tensor t, take_host(name, shape));
    return place(std::move(t));
}

Result<Tensor> WeightReader::take_host(const std::string& name, const Shape& shape) {
    if (dummy()) return generate(name, shape, 0, kernels::Context{}, /*host=*/true);
    auto it = weights_->find(name);
    if (it == weights_->end()) return not_found("checkpoint has no tensor '" + name + "'");
    Tensor t = std::move(it->second);
    weights_->erase(it);
    if (t.dtype() == DType::kF8E4M3) {
        // A raw (native-mode) load: an FP8 weight that this use needs dense is dequantised here, as the loader would.
        auto s = weights_->find(name + "_scale_inv");
        if (s == weights_->end()) {
            return invalid_argument("FP8 tensor '" + name + "' has no '" + name + "_scale_inv'");
        }
        Result<Tensor> d =
            loader::dequantize_fp8_blocks(t.view(), s->second.view(), fp8_.block_n, fp8_.block_k, DType::kF32);
        if (!d.ok()) return d.status().with_context("tensor '" + name + "'");
        weights_->erase(s);
        t = std::move(d).value();
    }
    if (t.view().shape_vec() != shape) {
        return invalid_argument("tensor '" + name + "' has shape " + t.view().shape_string() + ", expected " +
                                shape_str(shape));
    }
    return t;
}

namespace {
Shape slice_shape(Shape shape, int dim, int64_t begin, int64_t end) {
    shape[static_cast<size_t>(dim)] = end - begin;
    return shape;
}
uint64_t slice_key(int dim, int64_t begin, int64_t end) {
    return (static_cast<uint64_t>(dim) << 56) ^ (static_cast<uint64_t>(begin) << 28) ^ static_cast<uint64_t>(end);
}
}  // namespace

Result<Tensor> WeightReader::take_host_slice(const std::string& name, const Shape& shape, int dim, int64_t begin,
                                            int64_t end) {
    if (dummy() && begin >= 0 && begin <= end && end <= shape[static_cast<size_t>(dim)]) {
        return generate(name, slice_shape(shape, dim, begin, end), slice_key(dim, begin, end), kernels::Context{},
                        /*host=*/true);
    }
    PENSTOCK_ASSIGN_OR_RETURN(Tensor t, take_host(name, shape));
    if (begin == 0 && end == shape[static_cast<size_t>(dim)]) return t;
    if (begin < 0 || begin > end || end > shape[static_cast<size_t>(dim)]) {
        return invalid_argument("tensor '" + name + "': slice [" + std::to_string(begin) + ", " + std::to_string(end) +
                                ") of dim " + std::to_string(dim) + " is outside " + shape_str(shape));
    }
    const TensorView part = t.view().slice(dim, begin, end);
    Tensor out = Tensor::empty(part.shape_vec(), t.dtype());
    kernels::copy({.out = out, .in = part}, kernels::Context{});
    return out;
}

Result<Tensor> WeightReader::take_slice(const std::string& name, const Shape& shape, int dim, int64_t begin,
                                       int64_t end) {
    if (dummy() && begin >= 0 && begin <= end && end <= shape[static_cast<size_t>(dim)]) {
        return generate(name, slice_shape(shape, dim, begin, end), slice_key(dim, begin, end), placement_, false);
    }
    PENSTOCK_ASSIGN_OR_RETURN(Tensor t, take_host_slice(name, shape, dim, begin, end));
    return place(std::move(t));
}

Result<Tensor> WeightReader::take_optional(const std::string& name, const Shape& shape) {
    if (!contains(name)) return Tensor();
    return take(name, shape);
}

}  // namespace penstock::models

namespace penstock::models {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The scale shape of an FP8 weight of `shape` ([..., n, k]).
Shape fp8_scale_shape(Shape shape, int64_t block_n, int64_t block_k) {
    const size_t nd = shape.size();
    shape[nd - 2] = ceil_div(shape[nd - 2], block_n);
    shape[nd - 1] = ceil_div(shape[nd - 1], block_k);
    return shape;
}

void copy_dims(uint8_t* dst, const int64_t* dst_strides, const uint8_t* src, const int64_t* src_strides,
               const int64_t* shape, int ndim, size_t elem) {
    if (ndim == 1) {
        if (dst_strides[0] == 1 && src_strides[0] == 1) {
            std::memcpy(dst, src, static_cast<size_t>(shape[0]) * elem);
            return;
        }
        for (int64_t i = 0; i < shape[0]; ++i) {
            std::memcpy(dst + i * dst_strides[0] * static_cast<int64_t>(elem),
                        src + i * src_strides[0] * static_cast<int64_t>(elem), elem);
        }
        return;
    }
    for (int64_t i = 0; i < shape[0]; ++i) {
        copy_dims(dst + i * dst_strides[0] * static_cast<int64_t>(elem), dst_strides + 1,
                  src + i * src_strides[0] * static_cast<int64_t>(elem), src_strides + 1, shape + 1, ndim - 1, elem);
    }
}

}  // namespace

void host_copy_into(const TensorView& dst, const TensorView& src) {
    PENSTOCK_CHECK(dst.device == Device::kCPU && src.device == Device::kCPU) << "host_copy_into: host views only";
    PENSTOCK_CHECK(dst.dtype == src.dtype && dst.shape_vec() == src.shape_vec())
        << "host_copy_into: " << dtype_name(dst.dtype) << " " << dst.shape_string() << " <- " << dtype_name(src.dtype)
        << " " << src.shape_string();
    if (dst.numel() == 0) return;
    if (dst.ndim == 0) {
        std::memcpy(dst.data, src.data, static_cast<size_t>(dtype_bits(dst.dtype) / 8));
        return;
    }
    copy_dims(static_cast<uint8_t*>(dst.data), dst.strides.data(), static_cast<const uint8_t*>(src.data),
              src.strides.data(), dst.shape.data(), dst.ndim, static_cast<size_t>(dtype_bits(dst.dtype) / 8));
}

Tensor host_contiguous_copy(const TensorView& v) {
    Tensor out = Tensor::empty(v.shape_vec(), v.dtype);
    host_copy_into(out.view(), v);
    return out;
}

bool WeightReader::fp8_native(const std::string& name) const {
    if (!fp8_.native) return false;
    if (dummy()) return true;
    auto it = weights_->find(name);
    return it != weights_->end() && it->second.dtype() == DType::kF8E4M3;
}

Fp8Tensor WeightReader::generate_fp8(const std::string& name, const Shape& shape, uint64_t slice,
                                     const kernels::Context& ctx) const {
    PENSTOCK_CHECK_GE(shape.size(), size_t{2}) << "generate_fp8: '" << name << "' needs [..., n, k]";
    Allocator& alloc = kernels::allocator_of(ctx);
    const int64_t k = shape.back();
    Fp8Tensor t{
        .weight = Tensor::empty(shape, DType::kF8E4M3, alloc),
        .scale = Tensor::empty(fp8_scale_shape(shape, kernels::kFp8Block, kernels::kFp8Block), DType::kF32, alloc)};
    const int64_t rows = k > 0 ? t.weight.numel() / k : 0;
    // Unit-variance uniform values, quantised per row and 128 columns by fp8_act_quant (so the e4m3 values use the
    // whole format), in row chunks through a bf16 staging buffer (a MoE layer's experts never exist in 16 bits).
    // With amax ~ sqrt(3) per group, e4m3 ~ x * 448 / sqrt(3): the block scales c = sqrt(3) / (448 sqrt(k))
    // (+-17%, seeded) give weights e4m3 * c of std ~ 1/sqrt(k), as the dense dummy weights.
    if (rows > 0) {
        const int64_t chunk = std::min(rows, std::max<int64_t>(1, (int64_t{1} << 26) / k));
        const int64_t kb = ceil_div(k, kernels::kFp8Block);
        Tensor staging = Tensor::empty({chunk, k}, DType::kBF16, alloc);
        Tensor row_scale = Tensor::empty({chunk, kb}, DType::kF32, alloc);
        const TensorView w2 = t.weight.view().reshape({rows, k});
        const uint64_t seed = kernels::random_seed_for(dummy_seed_, name.c_str(), slice);
        for (int64_t r0 = 0, i = 0; r0 < rows; r0 += chunk, ++i) {
            const int64_t m = std::min(chunk, rows - r0);
            const TensorView x = staging.view().slice(0, 0, m);
            kernels::fill_random(
                {.out = x, .seed = kernels::random_seed_for(seed, "fp8-rows", static_cast<uint64_t>(i))}, ctx);
            kernels::fp8_act_quant({.out = w2.slice(0, r0, r0 + m), .scale = row_scale.view().slice(0, 0, m), .in = x},
                                   ctx);
        }
    }
    const float c =
        static_cast<float>(std::sqrt(3.0) / (448.0 * std::sqrt(static_cast<double>(std::max<int64_t>(k, 1)))));
    kernels::fill_random({.out = t.scale,
                          .seed = kernels::random_seed_for(dummy_seed_, (name + "_scale_inv").c_str(), slice),
                          .mean = c,
                          .stddev = 0.1f * c},
                         ctx);
    return t;
}

Result<Fp8Tensor> WeightReader::take_host_fp8(const std::string& name, const Shape& shape) {
    if (!fp8_native(name)) {
        if (!dummy() && weights_->count(name) == 0) return not_found("checkpoint has no tensor '" + name + "'");
        return invalid_argument("tensor '" + name +
                                "' is not stored as FP8 (e4m3) while the layer's other FP8 "
                                "weights are; use --fp8-weights dequant");
    }
    if (dummy()) return generate_fp8(name, shape, 0, kernels::Context{});
    PENSTOCK_CHECK_GE(shape.size(), size_t{2});
    auto it = weights_->find(name);
    const std::string scale_name = name + "_scale_inv";
    auto s = weights_->find(scale_name);
    if (s == weights_->end()) return invalid_argument("FP8 tensor '" + name + "' has no '" + scale_name + "'");
    Fp8Tensor t{.weight = std::move(it->second), .scale = std::move(s->second)};
    weights_->erase(it);
    weights_->erase(weights_->find(scale_name));
    if (t.weight.view().shape_vec() != shape) {
        return invalid_argument("tensor '" + name + "' has shape " + t.weight.view().shape_string() + ", expected " +
                                shape_str(shape));
    }
    const Shape want = fp8_scale_shape(shape, fp8_.block_n, fp8_.block_k);
    if (t.scale.dtype() != DType::kF32 || t.scale.view().shape_vec() != want) {
        return invalid_argument("'" + scale_name + "' is " + std::string(dtype_name(t.scale.dtype())) + " " +
                                t.scale.view().shape_string() + ", expected f32 " + shape_str(want) + " for weight " +
                                shape_str(shape) + " with " + std::to_string(fp8_.block_n) + " x " +
                                std::to_string(fp8_.block_k) + " blocks");
    }
    return t;
}

Result<Fp8Tensor> WeightReader::take_fp8(const std::string& name, const Shape& shape) {
    if (dummy() && fp8_.native) return generate_fp8(name, shape, 0, placement_);
    PENSTOCK_ASSIGN_OR_RETURN(Fp8Tensor host, take_host_fp8(name, shape));
    return Fp8Tensor{.weight = place_f32(std::move(host.weight)), .scale = place_f32(std::move(host.scale))};
}

Result<Tensor> WeightReader::dense_of(const Fp8Tensor& t) const {
    PENSTOCK_CHECK(t.weight.defined() && t.scale.defined() && t.weight.dtype() == DType::kF8E4M3)
        << "dense_of: an e4m3 weight with its block scales";
    auto to_host = [&](const Tensor& x) {
        if (placement_.device == Device::kCPU) return x;
        Tensor h = Tensor::empty(x.view().shape_vec(), x.dtype());
        kernels::transfer({.out = h, .in = x}, placement_);  // device to pageable host memory: returns when copied
        return h;
    };
    const Tensor w = to_host(t.weight), s = to_host(t.scale);
    PENSTOCK_ASSIGN_OR_RETURN(
        Tensor d, loader::dequantize_fp8_blocks(w.view(), s.view(), fp8_.block_n, fp8_.block_k, DType::kF32));
    return place(std::move(d));
}

Result<Fp8Tensor> WeightReader::take_fp8_slice(const std::string& name, const Shape& shape, int dim, int64_t begin,
                                               int64_t end) {
    if (!fp8_native(name)) {
        PENSTOCK_ASSIGN_OR_RETURN(Tensor w, take_slice(name, shape, dim, begin, end));
        return Fp8Tensor{.weight = std::move(w), .scale = Tensor()};
    }
    PENSTOCK_CHECK(shape.size() == 2 && (dim == 0 || dim == 1)) << "take_fp8_slice('" << name << "'): 2-D weights";
    const int64_t full = shape[static_cast<size_t>(dim)];
    if (begin < 0 || begin > end || end > full) {
        return invalid_argument("tensor '" + name + "': slice [" + std::to_string(begin) + ", " + std::to_string(end) +
                                ") of dim " + std::to_string(dim) + " is outside " + shape_str(shape));
    }
    const int64_t block = dim == 0 ? fp8_.block_n : fp8_.block_k;
    if (begin % block != 0 || (end % block != 0 && end != full)) {
        return invalid_argument("FP8 tensor '" + name + "' " + shape_str(shape) +
                                ": the tensor/expert-parallel slice [" + std::to_string(begin) + ", " +
                                std::to_string(end) + ") of dim " + std::to_string(dim) + " cuts its " +
                                std::to_string(block) +
                                "-wide scale blocks (FP8 weights are sliced in whole blocks); choose another --tp / "
                                "--ep or use --fp8-weights dequant");
    }
    if (dummy()) {
        Shape part = shape;
        part[static_cast<size_t>(dim)] = end - begin;
        return generate_fp8(name, part, slice_key(dim, begin, end), placement_);
    }
    PENSTOCK_ASSIGN_OR_RETURN(Fp8Tensor host, take_host_fp8(name, shape));
    if (begin != 0 || end != full) {
        const int64_t sb = begin / block, se = ceil_div(end, block);
        host.weight = host_contiguous_copy(host.weight.view().slice(dim, begin, end));
        host.scale = host_contiguous_copy(host.scale.view().slice(dim, sb, se));
    }
    return Fp8Tensor{.weight = place_f32(std::move(host.weight)), .scale = place_f32(std::move(host.scale))};
}

}  // namespace penstock::models
