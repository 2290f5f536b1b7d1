// Tensor (owning) and TensorView (non-owning): shape, strides in elements, dtype, device. Row major; the last dim is
// contiguous unless a view says otherwise. Kernels take TensorViews only; engines own Tensors.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"

namespace penstock {

enum class Device : uint8_t { kCPU, kCUDA };

inline constexpr int kMaxDims = 6;

using Shape = std::vector<int64_t>;

struct TensorView {
    void* data = nullptr;
    DType dtype = DType::kF32;
    Device device = Device::kCPU;
    int device_index = 0;
    int ndim = 0;
    std::array<int64_t, kMaxDims> shape{};
    std::array<int64_t, kMaxDims> strides{};  // in elements

    // A contiguous view over `data` with `shape`.
    static TensorView contiguous(void* data, DType dtype, std::span<const int64_t> shape,
                                 Device device = Device::kCPU, int device_index = 0);

    int64_t size(int d) const { return shape[static_cast<size_t>(d < 0 ? d + ndim : d)]; }
    int64_t stride(int d) const { return strides[static_cast<size_t>(d < 0 ? d + ndim : d)]; }
    int64_t numel() const;
    size_t nbytes() const { return dtype_bytes(dtype, static_cast<size_t>(numel())); }
    bool is_contiguous() const;
    bool empty() const { return numel() == 0; }
    Shape shape_vec() const { return Shape(shape.begin(), shape.begin() + ndim); }
    std::string shape_string() const;

    template <class T>
    T* ptr() const {
        return static_cast<T*>(data);
    }
    // Typed element pointer at a multi-index prefix (remaining dims at 0).
    template <class T>
    T* at(std::initializer_list<int64_t> idx) const {
        int64_t off = 0;
        int d = 0;
        for (int64_t i : idx) off += i * strides[static_cast<size_t>(d++)];
        return static_cast<T*>(data) + off;
    }

    // [start, end) along dim d; shares memory.
    TensorView slice(int d, int64_t start, int64_t end) const;
    // Removes dim d by fixing its index.
    TensorView select(int d, int64_t index) const;
    // A view over the same memory starting `offset` elements in, with explicit shape and strides (elements).
    TensorView as_strided(int64_t offset, std::initializer_list<int64_t> new_shape,
                          std::initializer_list<int64_t> new_strides) const;
    // Reshape of a contiguous view (one -1 allowed).
    TensorView reshape(std::initializer_list<int64_t> new_shape) const;
    TensorView reshape(std::span<const int64_t> new_shape) const;
};

// Memory provider for a device. The CPU allocator is stateless; the CUDA backend supplies its own.
class Allocator {
public:
    virtual ~Allocator() = default;
    virtual void* allocate(size_t bytes) = 0;
    virtual void deallocate(void* p, size_t bytes) = 0;
    virtual Device device() const = 0;
    virtual int device_index() const { return 0; }
};

// The process-wide host allocator (64-byte aligned, stateless).
Allocator& cpu_allocator();

// An owning tensor: storage shared between copies (copying a Tensor aliases it; use clone() to copy data).
class Tensor final {
public:
    Tensor() = default;
    // Uninitialised storage for `shape` on `alloc`'s device.
    static Tensor empty(const Shape& shape, DType dtype, Allocator& alloc = cpu_allocator());
    // Zero-filled host tensor.
    static Tensor zeros(const Shape& shape, DType dtype);
    // Host tensor that copies `values` (f32/i32/i64 helpers for tests and small metadata).
    static Tensor from_f32(const Shape& shape, std::span<const float> values);
    static Tensor from_i32(const Shape& shape, std::span<const int32_t> values);

    const TensorView& view() const { return view_; }
    operator const TensorView&() const { return view_; }  // NOLINT(google-explicit-constructor)
    bool defined() const { return storage_ != nullptr; }
    DType dtype() const { return view_.dtype; }
    Device device() const { return view_.device; }
    int ndim() const { return view_.ndim; }
    int64_t size(int d) const { return view_.size(d); }
    int64_t numel() const { return view_.numel(); }
    size_t nbytes() const { return view_.nbytes(); }
    template <class T>
    T* ptr() const {
        return view_.ptr<T>();
    }
    // Host tensors only: a deep copy.
    Tensor clone() const;
    // A reshaped alias of this contiguous tensor.
    Tensor reshape(const Shape& new_shape) const;

private:
    struct Storage;
    std::shared_ptr<Storage> storage_;
    TensorView view_;
};

// Copies a host view of dtype f32/bf16/f16/f8/e8m0 into a new contiguous host f32 tensor.
Tensor to_f32(const TensorView& src);

}  // namespace penstock
