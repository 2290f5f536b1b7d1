// Tensor storage and view arithmetic.
#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

namespace penstock {

namespace {

class CpuAllocator final : public Allocator {
public:
    void* allocate(size_t bytes) override {
        const size_t rounded = (bytes + 63) / 64 * 64;
        void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
        PENSTOCK_CHECK(p != nullptr) << "host allocation of " << bytes << " bytes failed";
        return p;
    }
    void deallocate(void* p, size_t) override { std::free(p); }
    Device device() const override { return Device::kCPU; }
};

}  // namespace

Allocator& cpu_allocator() {
    static CpuAllocator alloc;
    return alloc;
}

TensorView TensorView::contiguous(void* data, DType dtype, std::span<const int64_t> shape, Device device,
                                  int device_index) {
    PENSTOCK_CHECK_LE(shape.size(), static_cast<size_t>(kMaxDims));
    TensorView v;
    v.data = data;
    v.dtype = dtype;
    v.device = device;
    v.device_index = device_index;
    v.ndim = static_cast<int>(shape.size());
    int64_t stride = 1;
    for (int d = v.ndim - 1; d >= 0; --d) {
        v.shape[static_cast<size_t>(d)] = shape[static_cast<size_t>(d)];
        v.strides[static_cast<size_t>(d)] = stride;
        stride *= shape[static_cast<size_t>(d)];
    }
    return v;
}

int64_t TensorView::numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[static_cast<size_t>(d)];
    return n;
}

bool TensorView::is_contiguous() const {
    int64_t expect = 1;
    for (int d = ndim - 1; d >= 0; --d) {
        const auto i = static_cast<size_t>(d);
        if (shape[i] != 1 && strides[i] != expect) return false;
        expect *= shape[i];
    }
    return true;
}

std::string TensorView::shape_string() const {
    std::ostringstream s;
    s << "[";
    for (int d = 0; d < ndim; ++d) s << (d ? ", " : "") << shape[static_cast<size_t>(d)];
    s << "]";
    return s.str();
}

TensorView TensorView::slice(int d, int64_t start, int64_t end) const {
    if (d < 0) d += ndim;
    const auto i = static_cast<size_t>(d);
    PENSTOCK_CHECK(0 <= start && start <= end && end <= shape[i])
        << "slice [" << start << ", " << end << ") of dim " << d << " size " << shape[i];
    PENSTOCK_CHECK(dtype_bits(dtype) >= 8) << "slicing packed sub-byte tensors is not supported";
    TensorView v = *this;
    v.shape[i] = end - start;
    v.data = static_cast<char*>(data) + start * strides[i] * static_cast<int64_t>(dtype_bits(dtype) / 8);
    return v;
}

TensorView TensorView::select(int d, int64_t index) const {
    if (d < 0) d += ndim;
    TensorView v = slice(d, index, index + 1);
    for (int k = d; k + 1 < ndim; ++k) {
        v.shape[static_cast<size_t>(k)] = v.shape[static_cast<size_t>(k + 1)];
        v.strides[static_cast<size_t>(k)] = v.strides[static_cast<size_t>(k + 1)];
    }
    v.ndim -= 1;
    return v;
}

TensorView TensorView::as_strided(int64_t offset, std::initializer_list<int64_t> new_shape,
                                  std::initializer_list<int64_t> new_strides) const {
    PENSTOCK_CHECK_EQ(new_shape.size(), new_strides.size());
    PENSTOCK_CHECK_LE(new_shape.size(), static_cast<size_t>(kMaxDims));
    PENSTOCK_CHECK(dtype_bits(dtype) >= 8) << "as_strided on packed sub-byte tensors is not supported";
    TensorView v = *this;
    v.data = static_cast<char*>(data) + offset * static_cast<int64_t>(dtype_bits(dtype) / 8);
    v.ndim = static_cast<int>(new_shape.size());
    size_t i = 0;
    for (int64_t x : new_shape) v.shape[i++] = x;
    i = 0;
    for (int64_t x : new_strides) v.strides[i++] = x;
    return v;
}

TensorView TensorView::reshape(std::initializer_list<int64_t> new_shape) const {
    return reshape(std::span<const int64_t>(new_shape.begin(), new_shape.size()));
}

TensorView TensorView::reshape(std::span<const int64_t> new_shape) const {
    PENSTOCK_CHECK(is_contiguous()) << "reshape of a non-contiguous view " << shape_string();
    Shape s(new_shape.begin(), new_shape.end());
    int64_t known = 1;
    int infer = -1;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == -1) {
            PENSTOCK_CHECK_EQ(infer, -1) << "only one -1 in reshape";
            infer = static_cast<int>(i);
        } else {
            known *= s[i];
        }
    }
    if (infer >= 0) s[static_cast<size_t>(infer)] = known == 0 ? 0 : numel() / known;
    int64_t n = 1;
    for (int64_t x : s) n *= x;
    PENSTOCK_CHECK_EQ(n, numel()) << "reshape " << shape_string();
    return contiguous(data, dtype, s, device, device_index);
}

struct Tensor::Storage {
    Allocator* alloc = nullptr;
    void* data = nullptr;
    size_t bytes = 0;
    ~Storage() {
        if (data) alloc->deallocate(data, bytes);
    }
};

Tensor Tensor::empty(const Shape& shape, DType dtype, Allocator& alloc) {
    Tensor t;
    t.storage_ = std::make_shared<Storage>();
    int64_t n = 1;
    for (int64_t x : shape) {
        PENSTOCK_CHECK_GE(x, 0);
        n *= x;
    }
    t.storage_->alloc = &alloc;
    t.storage_->bytes = dtype_bytes(dtype, static_cast<size_t>(n));
    t.storage_->data = alloc.allocate(t.storage_->bytes);
    t.view_ = TensorView::contiguous(t.storage_->data, dtype, shape, alloc.device(), alloc.device_index());
    return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
    Tensor t = empty(shape, dtype);
    std::memset(t.view_.data, 0, t.nbytes());
    return t;
}

Tensor Tensor::from_f32(const Shape& shape, std::span<const float> values) {
    Tensor t = empty(shape, DType::kF32);
    PENSTOCK_CHECK_EQ(static_cast<int64_t>(values.size()), t.numel());
    std::memcpy(t.view_.data, values.data(), values.size() * sizeof(float));
    return t;
}

Tensor Tensor::from_i32(const Shape& shape, std::span<const int32_t> values) {
    Tensor t = empty(shape, DType::kI32);
    PENSTOCK_CHECK_EQ(static_cast<int64_t>(values.size()), t.numel());
    std::memcpy(t.view_.data, values.data(), values.size() * sizeof(int32_t));
    return t;
}

Tensor Tensor::clone() const {
    PENSTOCK_CHECK(view_.device == Device::kCPU) << "clone() is host-only";
    PENSTOCK_CHECK(view_.is_contiguous()) << "clone() of a non-contiguous tensor";
    Tensor t = empty(view_.shape_vec(), view_.dtype);
    std::memcpy(t.view_.data, view_.data, nbytes());
    return t;
}

Tensor Tensor::reshape(const Shape& new_shape) const {
    Tensor t = *this;
    t.view_ = view_.reshape(new_shape);
    return t;
}

Tensor to_f32(const TensorView& src) {
    PENSTOCK_CHECK(src.device == Device::kCPU);
    PENSTOCK_CHECK(src.is_contiguous()) << "to_f32 of a non-contiguous view " << src.shape_string();
    Tensor out = Tensor::empty(src.shape_vec(), DType::kF32);
    const int64_t n = src.numel();
    float* dst = out.ptr<float>();
    switch (src.dtype) {
        case DType::kF32: std::memcpy(dst, src.data, static_cast<size_t>(n) * 4); break;
        case DType::kBF16: {
            const auto* s = src.ptr<const uint16_t>();
            for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
            break;
        }
        case DType::kF16: {
            const auto* s = src.ptr<const uint16_t>();
            for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_float(s[i]);
            break;
        }
        case DType::kF8E4M3: {
            const auto* s = src.ptr<const uint8_t>();
            for (int64_t i = 0; i < n; ++i) dst[i] = e4m3_to_float(s[i]);
            break;
        }
        case DType::kE8M0: {
            const auto* s = src.ptr<const uint8_t>();
            for (int64_t i = 0; i < n; ++i) dst[i] = e8m0_to_float(s[i]);
            break;
        }
        case DType::kFP4E2M1:
        case DType::kI8:
        case DType::kU8:
        case DType::kI32:
        case DType::kI64:
        case DType::kBool:
            PENSTOCK_CHECK(false) << "to_f32 does not convert " << dtype_name(src.dtype);
    }
    return out;
}

}  // namespace penstock
