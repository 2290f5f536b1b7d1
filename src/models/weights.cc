// WeightReader.
#include "models/weights.h"

#include <sstream>

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

Result<Tensor> WeightReader::take(const std::string& name, const Shape& shape) {
    PENSTOCK_ASSIGN_OR_RETURN(Tensor t, take_host(name, shape));
    return place(std::move(t));
}

Result<Tensor> WeightReader::take_host(const std::string& name, const Shape& shape) {
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

Result<Tensor> WeightReader::take_host_slice(const std::string& name, const Shape& shape, int dim, int64_t begin,
                                            int64_t end) {
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
    PENSTOCK_ASSIGN_OR_RETURN(Tensor t, take_host_slice(name, shape, dim, begin, end));
    return place(std::move(t));
}

Result<Tensor> WeightReader::take_optional(const std::string& name, const Shape& shape) {
    if (!contains(name)) return Tensor();
    return take(name, shape);
}

}  // namespace penstock::models
