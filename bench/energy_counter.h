// NVML's device energy counter for the benchmarks (bench/layer/model_bench.cc, bench/kernels: the sustained runs of
// BenchContext::sustain). At 16K tokens the real-dimension layers and their big GEMMs run at the H200's 700 W limit, so
// joules per op are compared beside milliseconds (docs/perf/2026-12-01-grouped-gemm-dyn.md).
#pragma once

#include <cuda_runtime.h>
#include <dlfcn.h>

namespace penstock::bench {

// NVML's total energy (mJ since the driver loaded) of one CUDA device, through dlopen("libnvidia-ml.so.1"). The few
// entry points used are NVML's stable C ABI: nvmlReturn_t is an int enum (0 = success), nvmlDevice_t a pointer.
class EnergyCounter {
public:
    explicit EnergyCounter(int cuda_device) {
        lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        if (lib_ == nullptr) return;
        using InitFn = int (*)();
        using ByBusFn = int (*)(const char*, void**);
        auto init = reinterpret_cast<InitFn>(dlsym(lib_, "nvmlInit_v2"));
        auto by_bus = reinterpret_cast<ByBusFn>(dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
        energy_ = reinterpret_cast<EnergyFn>(dlsym(lib_, "nvmlDeviceGetTotalEnergyConsumption"));
        char bus[32] = {};
        if (init == nullptr || by_bus == nullptr || energy_ == nullptr || init() != 0 ||
            cudaDeviceGetPCIBusId(bus, sizeof(bus), cuda_device) != cudaSuccess || by_bus(bus, &device_) != 0) {
            device_ = nullptr;
        }
    }
    EnergyCounter(const EnergyCounter&) = delete;
    EnergyCounter& operator=(const EnergyCounter&) = delete;
    ~EnergyCounter() {
        if (lib_ == nullptr) return;
        if (device_ != nullptr) {
            using ShutdownFn = int (*)();
            if (auto shutdown = reinterpret_cast<ShutdownFn>(dlsym(lib_, "nvmlShutdown"))) (void)shutdown();
        }
        dlclose(lib_);
    }
    // Millijoules, or -1 when unavailable.
    double read_mj() const {
        unsigned long long mj = 0;
        if (device_ == nullptr || energy_(device_, &mj) != 0) return -1.0;
        return static_cast<double>(mj);
    }

private:
    using EnergyFn = int (*)(void*, unsigned long long*);
    void* lib_ = nullptr;
    void* device_ = nullptr;
    EnergyFn energy_ = nullptr;
};

}  // namespace penstock::bench
