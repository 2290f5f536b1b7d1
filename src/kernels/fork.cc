// kernels::Fork (contract: kernels/fork.h).
#include "kernels/fork.h"

#include <utility>
#include <vector>

#include "core/check.h"

#if PENSTOCK_ENABLE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace penstock::kernels {

// The fork's allocator: allocations pass through to the parent's; frees are held until release().
class Fork::HeldFrees final : public Allocator {
public:
    explicit HeldFrees(Allocator& backing) : backing_(backing) {}
    void* allocate(size_t bytes) override {
        void* p = backing_.allocate(bytes);
        ++live_;
        return p;
    }
    void deallocate(void* p, size_t bytes) override {
        --live_;
        held_.emplace_back(p, bytes);
    }
    Device device() const override { return backing_.device(); }
    int device_index() const override { return backing_.device_index(); }
    int64_t live() const { return live_; }
    void release() {
        for (const auto& [p, bytes] : held_) backing_.deallocate(p, bytes);
        held_.clear();
    }

private:
    Allocator& backing_;
    std::vector<std::pair<void*, size_t>> held_;
    int64_t live_ = 0;
};

namespace {

// `waiter`'s later work waits for everything queued on `signaler` so far.
void stream_wait([[maybe_unused]] void* waiter, [[maybe_unused]] void* signaler) {
#if PENSTOCK_ENABLE_CUDA
    cuda::stream_wait(waiter, signaler);
#else
    PENSTOCK_CHECK(false) << "kernels::Fork: a side stream in a build without CUDA";
#endif
}

}  // namespace

Fork::Fork(const Context& parent) : parent_(parent), ctx_(parent) {
    if (parent.device != Device::kCUDA || parent.side_stream == nullptr || parent.profiler != nullptr) return;
    held_ = std::make_unique<HeldFrees>(allocator_of(parent));
    ctx_.stream = parent.side_stream;
    ctx_.side_stream = nullptr;  // no nested forks on the side stream: they run in line there
    ctx_.alloc = held_.get();
    stream_wait(ctx_.stream, parent_.stream);
}

Fork::~Fork() { join(); }

void Fork::join() {
    if (held_ == nullptr) return;
    PENSTOCK_CHECK_EQ(held_->live(), 0) << "kernels::Fork: a tensor allocated on the fork outlived its join";
    stream_wait(parent_.stream, ctx_.stream);
    held_->release();
    held_.reset();
    ctx_ = parent_;
}

}  // namespace penstock::kernels
