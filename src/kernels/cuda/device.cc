// Device queries, Stream/Event RAII and copies over the CUDA runtime.
#include "kernels/cuda/device.h"

#include <cuda_runtime.h>

#include <utility>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"

namespace penstock::cuda {

namespace {

Status unavailable(const std::string& what, cudaError_t err) {
    return Status(StatusCode::kUnavailable, what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace

Result<int> device_count() {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();  // clear it so a later PENSTOCK_CUDA_LAUNCH_CHECK does not report it
        return unavailable("no usable CUDA device", err);
    }
    if (n == 0) return Status(StatusCode::kUnavailable, "no CUDA device");
    return n;
}

Result<DeviceProperties> device_properties(int device) {
    PENSTOCK_ASSIGN_OR_RETURN(const int n, device_count());
    if (device < 0 || device >= n) {
        return out_of_range("CUDA device " + std::to_string(device) + " of " + std::to_string(n));
    }
    cudaDeviceProp prop{};
    if (const cudaError_t err = cudaGetDeviceProperties(&prop, device); err != cudaSuccess) {
        (void)cudaGetLastError();
        return unavailable("cudaGetDeviceProperties", err);
    }
    DeviceProperties p;
    p.index = device;
    p.name = prop.name;
    p.n_sms = prop.multiProcessorCount;
    p.total_memory_bytes = prop.totalGlobalMem;
    p.cc_major = prop.major;
    p.cc_minor = prop.minor;
    p.l2_cache_bytes = static_cast<size_t>(prop.l2CacheSize);
    p.smem_per_block_optin = prop.sharedMemPerBlockOptin;
    if (cudaDriverGetVersion(&p.driver_version) != cudaSuccess) p.driver_version = 0;
    if (cudaRuntimeGetVersion(&p.runtime_version) != cudaSuccess) p.runtime_version = 0;
    return p;
}

DeviceGuard::DeviceGuard(int device) {
    PENSTOCK_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) PENSTOCK_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() { PENSTOCK_CUDA_CHECK(cudaSetDevice(previous_)); }

Stream::Stream(int device) : Stream(device, Priority::kDefault) {}

Stream::Stream(int device, Priority priority) : device_(device) {
    DeviceGuard guard(device);
    int least = 0, greatest = 0;
    PENSTOCK_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t s = nullptr;
    PENSTOCK_CUDA_CHECK(
        cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority == Priority::kHigh ? greatest : least));
    stream_ = s;
}

Stream::~Stream() {
    if (stream_ != nullptr) PENSTOCK_CUDA_CHECK(cudaStreamDestroy(stream_));
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)), device_(other.device_) {}

Stream& Stream::operator=(Stream&& other) noexcept {
    if (this != &other) {
        if (stream_ != nullptr) PENSTOCK_CUDA_CHECK(cudaStreamDestroy(stream_));
        stream_ = std::exchange(other.stream_, nullptr);
        device_ = other.device_;
    }
    return *this;
}

void Stream::synchronize() const {
    PENSTOCK_CHECK(stream_ != nullptr) << "synchronize() on a moved-from Stream";
    PENSTOCK_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Event::Event(int device) : device_(device) {
    DeviceGuard guard(device);
    cudaEvent_t e = nullptr;
    PENSTOCK_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDefault));
    event_ = e;
}

Event::~Event() {
    if (event_ != nullptr) PENSTOCK_CUDA_CHECK(cudaEventDestroy(event_));
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)), device_(other.device_) {}

Event& Event::operator=(Event&& other) noexcept {
    if (this != &other) {
        if (event_ != nullptr) PENSTOCK_CUDA_CHECK(cudaEventDestroy(event_));
        event_ = std::exchange(other.event_, nullptr);
        device_ = other.device_;
    }
    return *this;
}

void Event::record(const Stream& stream) {
    PENSTOCK_CHECK_EQ(stream.device(), device_) << "event and stream on different devices";
    PENSTOCK_CUDA_CHECK(cudaEventRecord(event_, static_cast<cudaStream_t>(stream.handle())));
}

void Event::wait_on(const Stream& stream) const {
    PENSTOCK_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle()), event_, 0));
}

void stream_wait(void* waiter, void* signaler) {
    cudaEvent_t e = nullptr;
    PENSTOCK_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    PENSTOCK_CUDA_CHECK(cudaEventRecord(e, static_cast<cudaStream_t>(signaler)));
    PENSTOCK_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(waiter), e, 0));
    PENSTOCK_CUDA_CHECK(cudaEventDestroy(e));  // released once the wait has passed it
}

void Event::synchronize() const { PENSTOCK_CUDA_CHECK(cudaEventSynchronize(event_)); }

float Event::elapsed_ms(const Event& start, const Event& end) {
    float ms = 0.0f;
    PENSTOCK_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, end.event_));
    return ms;
}

void copy_async(const TensorView& dst, const TensorView& src, const Stream& stream) {
    PENSTOCK_CHECK(dst.is_contiguous()) << "copy_async: dst " << dst.shape_string() << " is not contiguous";
    PENSTOCK_CHECK(src.is_contiguous()) << "copy_async: src " << src.shape_string() << " is not contiguous";
    PENSTOCK_CHECK_EQ(dst.nbytes(), src.nbytes())
        << "copy_async: " << dst.shape_string() << " " << dtype_name(dst.dtype) << " <- " << src.shape_string() << " "
        << dtype_name(src.dtype);
    if (src.nbytes() == 0) return;
    const bool dst_dev = dst.device == Device::kCUDA;
    const bool src_dev = src.device == Device::kCUDA;
    const cudaMemcpyKind kind = dst_dev ? (src_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                        : (src_dev ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    PENSTOCK_CUDA_CHECK(
        cudaMemcpyAsync(dst.data, src.data, src.nbytes(), kind, static_cast<cudaStream_t>(stream.handle())));
}

void fill_bytes_async(const TensorView& dst, int byte, const Stream& stream) {
    PENSTOCK_CHECK(dst.device == Device::kCUDA) << "fill_bytes_async needs a device view";
    PENSTOCK_CHECK(dst.is_contiguous()) << "fill_bytes_async: " << dst.shape_string() << " is not contiguous";
    if (dst.nbytes() == 0) return;
    PENSTOCK_CUDA_CHECK(cudaMemsetAsync(dst.data, byte, dst.nbytes(), static_cast<cudaStream_t>(stream.handle())));
}

Tensor to_device(const TensorView& src, Allocator& alloc, const Stream& stream) {
    PENSTOCK_CHECK(src.device == Device::kCPU) << "to_device: the source must be a host view";
    PENSTOCK_CHECK(alloc.device() == Device::kCUDA) << "to_device: the allocator must be a CUDA allocator";
    Tensor out = Tensor::empty(src.shape_vec(), src.dtype, alloc);
    copy_async(out, src, stream);
    return out;
}

Tensor to_host(const TensorView& src, const Stream& stream) {
    PENSTOCK_CHECK(src.device == Device::kCUDA) << "to_host: the source must be a device view";
    Tensor out = Tensor::empty(src.shape_vec(), src.dtype);
    copy_async(out, src, stream);
    stream.synchronize();
    return out;
}

}  // namespace penstock::cuda
