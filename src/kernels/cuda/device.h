// CUDA devices, streams, events and copies. Device queries return Status (a machine without a GPU or driver is an
// expected condition: tests skip, the CLI reports it); everything else treats CUDA failures as fatal. This header
// needs no CUDA headers, so host-only code (runtime, tests) compiles it with the plain C++ compiler.
#pragma once

#include <cstddef>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*
struct CUevent_st;   // cudaEvent_t is CUevent_st*

namespace penstock::cuda {

struct DeviceProperties {
    int index = 0;
    std::string name;               // "NVIDIA H200"
    int n_sms = 0;                  // streaming multiprocessors
    size_t total_memory_bytes = 0;  // global memory
    int cc_major = 0;               // compute capability, 9.0 for H100/H200
    int cc_minor = 0;
    size_t l2_cache_bytes = 0;
    size_t smem_per_block_optin = 0;  // max dynamic shared memory per block after opt-in
    int driver_version = 0;           // e.g. 13000 for CUDA 13.0
    int runtime_version = 0;
};

// Number of visible CUDA devices. kUnavailable (never an abort) when there is no device, no driver, or the driver is
// too old; the message carries CUDA's reason.
[[nodiscard]] Result<int> device_count();
// Properties of device `device` (in [0, device_count())). kUnavailable / kOutOfRange instead of aborting.
[[nodiscard]] Result<DeviceProperties> device_properties(int device);

// Makes `device` current for this thread for the guard's lifetime, then restores the previous one.
class DeviceGuard final {
  public:
    explicit DeviceGuard(int device);
    ~DeviceGuard();
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

  private:
    int previous_ = 0;
};

// An owned, non-blocking CUDA stream on one device (does not synchronise with the legacy default stream).
// Move-only; destruction waits for nothing (cudaStreamDestroy lets queued work finish asynchronously).
class Stream final {
  public:
    // Aborts on CUDA failure: create streams only after device_count() succeeded.
    explicit Stream(int device);
    // With a scheduling priority: kHigh = the device's greatest, kDefault = CUDA's default (its least). Where work of
    // two streams waits for SMs, the higher priority's thread blocks are dispatched first.
    enum class Priority { kDefault, kHigh };
    Stream(int device, Priority priority);
    ~Stream();
    Stream(Stream&& other) noexcept;
    Stream& operator=(Stream&& other) noexcept;
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    // Blocks the calling thread until all work queued on this stream has finished.
    void synchronize() const;
    // The cudaStream_t, as kernels::Context::stream and the cuda:: launchers take it.
    void* handle() const { return stream_; }
    int device() const { return device_; }

  private:
    CUstream_st* stream_ = nullptr;
    int device_ = 0;
};

// An owned CUDA event with timing enabled. Move-only.
class Event final {
  public:
    explicit Event(int device);
    ~Event();
    Event(Event&& other) noexcept;
    Event& operator=(Event&& other) noexcept;
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;

    // Records the event at the current tail of `stream` (same device).
    void record(const Stream& stream);
    // Makes `stream` wait (on the GPU, not the host) until this event has completed.
    void wait_on(const Stream& stream) const;
    // Blocks the calling thread until the event has completed.
    void synchronize() const;
    // Milliseconds between `start` and `end`, both recorded and completed (call end.synchronize() first).
    static float elapsed_ms(const Event& start, const Event& end);
    void* handle() const { return event_; }

  private:
    CUevent_st* event_ = nullptr;
    int device_ = 0;
};

// Makes `waiter`'s later work wait (on the GPU, not the host) for everything queued on `signaler` so far (cudaStream_t
// as void*, both on the current device): a throwaway event, recorded on signaler and destroyed once waited on.
void stream_wait(void* waiter, void* signaler);

// Copies src into dst on `stream` (cudaMemcpyAsync; host<->device or device<->device, from the views' devices).
// Both views contiguous with equal nbytes (dtypes may differ, e.g. u8 and f8). Asynchronous: host memory must stay
// alive and unchanged until the stream reaches the copy (pageable host memory is staged before the call returns
// for host-to-device; device-to-host into pageable memory completes before the call returns).
void copy_async(const TensorView& dst, const TensorView& src, const Stream& stream);
// Sets every byte of a contiguous device view to `byte` on `stream` (poisoning outputs in tests, L2 flushes).
void fill_bytes_async(const TensorView& dst, int byte, const Stream& stream);

// A device copy of host view `src` from `alloc` (a CUDA allocator), queued on `stream`. `src` must outlive the copy.
Tensor to_device(const TensorView& src, Allocator& alloc, const Stream& stream);
// A host copy of device view `src`; synchronises `stream` before returning.
Tensor to_host(const TensorView& src, const Stream& stream);

}  // namespace penstock::cuda
