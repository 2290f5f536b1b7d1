// WeightReader.
#include "models/weights.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kernels/random_hash.h"

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
