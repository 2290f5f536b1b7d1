// KV pages from a prefill server to a decode server (SPEC §5), over a TransferEngine. The receiver (decode) allocates
// pages for a room and hands the sender (prefill) a KvDestination: its engine address, its registered KV buffers and
// the page ids in position order. The sender writes every page of every buffer with one-sided puts, flushes them, and
// then sends the 64-byte aux record (room, tokens, first token, layout fingerprint, checksum); the receiver marks the
// room Success when a valid aux record for it arrives, and drops anything else (unknown room, wrong page count,
// foreign layout, bad magic / version / checksum) without a state change. Bytes are not inspected on the way:
// the engine moves them, and the aux record is ordered after them by the flush.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "disagg/room.h"
#include "disagg/transfer_engine.h"

namespace penstock::disagg {

// One paged KV buffer of a stage (an MLA latent cache layer, a DSA index-K layer, ...): page p's bytes are
// [base + p * page_stride, + page_bytes). Both ends list their buffers in the same order.
struct KvBuffer {
    void* base = nullptr;
    uint64_t page_bytes = 0;
    uint64_t page_stride = 0;
    int64_t n_pages = 0;
    // Indexed by the request's state slot instead of its pages (KDA's recurrent / conv state: one "page" per slot).
    bool per_slot = false;
};

struct KvLayout {
    std::vector<KvBuffer> buffers;
    // What both ends must agree on: the buffer count and each buffer's page bytes (pool sizes and strides may differ).
    uint64_t fingerprint() const;
    std::string describe() const;  // "3 buffers: 73728, 73728, 8448 bytes per page"
};

// Where a room's KV goes; made by the receiver, sent to the sender (encode / decode: a bounds-checked byte format).
struct KvDestination {
    uint64_t room = 0;
    uint64_t layout_fingerprint = 0;
    int64_t n_tokens = 0;
    std::vector<uint8_t> engine_address;
    struct Region {
        RemoteRegion region;
        uint64_t page_stride = 0;
        int64_t n_pages = 0;
    };
    std::vector<Region> regions;  // one per KvBuffer
    std::vector<int32_t> pages;   // the receiver's page ids, in position order
    int32_t slot = -1;            // the receiver's state slot (per-slot buffers), -1 without them

    std::vector<uint8_t> encode() const;
    // InvalidArgument for a truncated or malformed record (bad magic / version, lengths beyond the bytes or the
    // limits).
    [[nodiscard]] static Result<KvDestination> decode(std::span<const uint8_t> bytes);
};

// The record that follows a room's pages (exactly kMessageBytes when encoded).
struct AuxRecord {
    uint64_t room = 0;
    int64_t n_tokens = 0;
    int32_t first_token = -1;
    uint32_t n_pages = 0;
    uint64_t layout_fingerprint = 0;

    std::vector<uint8_t> encode() const;
    [[nodiscard]] static Result<AuxRecord> decode(std::span<const uint8_t> bytes);
};

class KvReceiver final {
public:
    // Registers every buffer with the engine. The engine and the buffers must outlive the receiver.
    [[nodiscard]] static Result<std::unique_ptr<KvReceiver>> create(TransferEngine* engine, KvLayout layout,
                                                                    RoomTimeouts timeouts);

    // Opens `room` for `pages` (this end's page ids in position order, already allocated by the caller) and `slot`
    // (its state slot when the layout has per-slot buffers, else -1) and returns the destination to hand to the
    // sender; the room waits for input (RoomState::kWaitingForInput).
    // With `bootstrapped` false the room stays in kBootstrapping (its bootstrap deadline running) until the caller
    // reports that the sender fetched the destination (rooms().bootstrapped).
    [[nodiscard]] Result<KvDestination> expect(uint64_t room, std::vector<int32_t> pages, int32_t slot,
                                               int64_t n_tokens, TimePoint now, bool bootstrapped = true);
    // Takes the aux records that arrived, marks their rooms Success, fails rooms past their deadline; returns the
    // rooms that reached a terminal state in this call (the caller frees a failed room's pages, then erases it).
    std::vector<uint64_t> poll(TimePoint now);

    RoomTable& rooms() { return rooms_; }
    const RoomTable& rooms() const { return rooms_; }
    // Aux records dropped: malformed, for an unknown or not-waiting room, or not matching the room.
    int64_t n_dropped() const { return dropped_ + engine_->n_malformed(); }

private:
    KvReceiver(TransferEngine* engine, KvLayout layout, RoomTimeouts timeouts)
        : engine_(engine), layout_(std::move(layout)), rooms_(timeouts) {}

    TransferEngine* engine_;
    KvLayout layout_;
    std::vector<RemoteRegion> regions_;
    RoomTable rooms_;
    int64_t dropped_ = 0;
};

class KvSender final {
public:
    // The engine and the buffers must outlive the sender.
    KvSender(TransferEngine* engine, KvLayout layout) : engine_(engine), layout_(std::move(layout)) {}

    // Writes `src_pages` (this end's page ids, position order, as many as dst.pages) of every paged buffer and
    // `src_slot` of every per-slot buffer to the destination, flushes, and sends the aux record with `first_token`.
    // FailedPrecondition when the layouts differ (naming both), InvalidArgument for page counts or ids out of range,
    // DeadlineExceeded / Unavailable from the engine (a dead or stalled receiver).
    [[nodiscard]] Status send(const KvDestination& dst, std::span<const int32_t> src_pages, int32_t src_slot,
                              int32_t first_token, TimePoint deadline);

    // Puts issued so far (contiguous page runs coalesce into one put).
    int64_t n_puts() const { return n_puts_; }

private:
    TransferEngine* engine_;
    KvLayout layout_;
    int64_t n_puts_ = 0;
};

}  // namespace penstock::disagg
