// Fixed-size per-request state of linear-attention layers (KDA): for each KDA layer of a stage, one recurrent state
// [n_heads, k_dim, v_dim] f32 and one short-conv state [kernel - 1, channels] f32 per slot. A request holds one slot
// (the same index in every layer) from admission to release; a slot is zero-filled when it is handed out, which is
// exactly the state a new sequence starts from. Same discipline as PagePool: all-or-nothing, ResourceExhausted when
// all n_slots are taken (a normal scheduler outcome), abort on double free. Storage grows with admissions (doubling,
// up to n_slots; a K3 slot is ~0.4 GB), so memory follows the peak number of live requests, not the limit. Host
// memory by default, or an allocator's device with the StateMemoryOps that reach it; not thread-safe (scheduler
// thread).
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace penstock::kv_cache {

struct KdaStateShape {
    int64_t n_heads = 0;
    int64_t k_dim = 0;
    int64_t v_dim = 0;
    int64_t conv_kernel = 1;    // short conv width; the conv state keeps conv_kernel - 1 rows
    int64_t conv_channels = 0;  // channels of the (fused q|k|v) short conv
};

// How a pool writes its storage: a contiguous byte copy (same nbytes) and a zero fill of a contiguous f32 view. Unset
// members mean the host (memcpy / memset); a device pool passes its device's (kernels::transfer / kernels::fill).
struct StateMemoryOps {
    std::function<void(const TensorView& dst, const TensorView& src)> copy;
    std::function<void(const TensorView& dst)> zero;
};

class KdaStatePool final {
public:
    // n_layers state tensors of each kind, for at most n_slots slots (no storage until the first admission), on
    // `alloc`'s device.
    KdaStatePool(int64_t n_slots, int64_t n_layers, const KdaStateShape& shape, Allocator& alloc = cpu_allocator(),
                 StateMemoryOps ops = {});

    int64_t n_slots() const { return n_slots_; }
    int64_t capacity() const { return capacity_; }  // slots backed by storage now (<= n_slots)
    int64_t n_layers() const { return static_cast<int64_t>(recurrent_.size()); }
    int64_t n_used() const { return capacity_ - static_cast<int64_t>(free_.size()); }
    int64_t n_free() const { return n_slots_ - n_used(); }
    const KdaStateShape& shape() const { return shape_; }
    // Bytes of one slot across all layers (recurrent + conv).
    size_t slot_bytes() const;

    // Backs every slot with storage now, so that the views (and their addresses) stay valid from here on (a
    // disaggregated transfer registers them). No-op when already full.
    void reserve_all() {
        if (capacity_ < n_slots_) grow(n_slots_);
    }
    // Takes a free slot and zero-fills its state in every layer, or returns ResourceExhausted (taking nothing).
    // May grow the storage: views from recurrent() / conv() taken before are invalidated (slot contents are kept).
    [[nodiscard]] Result<int32_t> allocate();
    // Zero-fills an allocated slot's state in every layer (a sequence restarting at position 0).
    void reset(int32_t slot);
    // Returns a slot. Releasing a slot that is not allocated aborts.
    void release(int32_t slot);

    // Layer i's (0-based among the pool's layers) recurrent state: [capacity, n_heads, k_dim, v_dim] f32.
    const TensorView& recurrent(int64_t layer) const;
    // Layer i's conv state: [capacity, conv_kernel - 1, conv_channels] f32.
    const TensorView& conv(int64_t layer) const;

private:
    void grow(int64_t new_capacity);

    int64_t n_slots_;
    int64_t capacity_ = 0;
    KdaStateShape shape_;
    std::vector<Tensor> recurrent_;
    std::vector<Tensor> conv_;
    std::vector<int32_t> free_;  // stack of free slot ids below capacity_
    Allocator* alloc_;
    StateMemoryOps ops_;
    std::vector<uint8_t> in_use_;
};

// Request id -> slot, against a shared KdaStatePool (the analogue of RequestTables).
class RequestStateSlots final {
public:
    explicit RequestStateSlots(KdaStatePool* pool) : pool_(pool) {}

    // Gives request `id` a fresh zeroed slot; a request that already holds one keeps it unchanged. All-or-nothing:
    // ResourceExhausted (nothing taken) when the pool is full.
    [[nodiscard]] Status acquire(int64_t id);
    // Frees request `id`'s slot (no-op for unknown ids).
    void release(int64_t id);
    // The slot of a known request (aborts for unknown ids).
    int32_t slot(int64_t id) const;
    bool contains(int64_t id) const { return slots_.count(id) != 0; }
    int64_t n_requests() const { return static_cast<int64_t>(slots_.size()); }

private:
    KdaStatePool* pool_;
    std::unordered_map<int64_t, int32_t> slots_;
};

}  // namespace penstock::kv_cache
