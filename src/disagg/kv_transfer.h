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
// [base + p * page_stride, + page_bytes). `key` names what it holds (kv_key: layer and kind), so a sender holding some
// layers (one pipeline stage) finds each buffer's counterpart at a receiver holding all of them.
struct KvBuffer {
    uint64_t key = 0;
    void* base = nullptr;
    uint64_t page_bytes = 0;
    uint64_t page_stride = 0;
    int64_t n_pages = 0;
    // Indexed by the request's state slot instead of its pages (KDA's recurrent / conv state: one "page" per slot).
    bool per_slot = false;
};

// A buffer's key: its layer and what kind of rows it holds (kv_cache::BufferKind's value, < 8).
constexpr uint64_t kv_key(int64_t layer, uint8_t kind) { return static_cast<uint64_t>(layer) * 8 + kind; }

struct KvLayout {
    std::vector<KvBuffer> buffers;
    // What both ends must agree on: the set of buffers by key, each with its page bytes and whether it is per slot
    // (the order of the list, pool sizes and strides may differ).
    uint64_t fingerprint() const;
    std::string describe() const;  // "3 buffers: 73728, 73728, 8448 bytes per page"
    // The keys' descriptions alone, as a byte string (what pipeline stages send stage 0 at start-up), and back: a
    // layout of the same shape with no memory (base null, no pages). InvalidArgument for a malformed string.
    std::vector<uint8_t> encode_shape() const;
    [[nodiscard]] static Result<KvLayout> decode_shape(std::span<const uint8_t> bytes);
};

// Where a room's KV goes; made by the receiver, sent to the sender (encode / decode: a bounds-checked byte format).
struct KvDestination {
    uint64_t room = 0;
    uint64_t layout_fingerprint = 0;
    int64_t n_tokens = 0;
    std::vector<uint8_t> engine_address;
    struct Region {
        uint64_t key = 0;  // KvBuffer::key
        uint64_t page_bytes = 0;
        bool per_slot = false;
        RemoteRegion region;
        uint64_t page_stride = 0;
        int64_t n_pages = 0;
    };
    std::vector<Region> regions;  // one per KvBuffer
    // The receiver's page ids that hold the room's n_tokens positions, in position order (the pages the request
    // reserved beyond them, for its decode, are not written).
    std::vector<int32_t> pages;
    int32_t slot = -1;  // the receiver's state slot (per-slot buffers), -1 without them

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

// A pipeline stage's report to stage 0 that its part of a room's KV is at the decode end (or why not): one
// kMessageBytes message on the transfer engine, checksummed like the aux record.
struct StageReport {
    static constexpr size_t kTextBytes = 30;
    uint64_t room = 0;
    uint32_t stage = 0;
    StatusCode code = StatusCode::kOk;
    std::string message;  // the failure, cut to kTextBytes

    std::vector<uint8_t> encode() const;
    [[nodiscard]] static Result<StageReport> decode(std::span<const uint8_t> bytes);
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

    // Writes `src_pages` (this end's page ids, position order, at least as many as dst.pages) of every paged buffer
    // and `src_slot` of every per-slot buffer to the destination, flushes, and sends the aux record with
    // `first_token`. FailedPrecondition when the layouts differ (naming both), InvalidArgument for page counts or ids
    // out of range, DeadlineExceeded / Unavailable from the engine (a dead or stalled receiver).
    [[nodiscard]] Status send(const KvDestination& dst, std::span<const int32_t> src_pages, int32_t src_slot,
                              int32_t first_token, TimePoint deadline);
    // send()'s parts, for a sender that holds some of the destination's buffers (a pipeline stage): put_pages checks
    // that each of this layout's buffers has a counterpart in the destination (same key, page bytes and kind: else
    // FailedPrecondition naming it) and the page ids, writes them and flushes; send_aux sends the aux record with the
    // whole deployment's layout fingerprint once every stage's pages are there.
    [[nodiscard]] Status put_pages(const KvDestination& dst, std::span<const int32_t> src_pages, int32_t src_slot,
                                   TimePoint deadline);
    [[nodiscard]] Status send_aux(const KvDestination& dst, int32_t first_token, uint64_t layout_fingerprint,
                                  TimePoint deadline);
    // A StageReport to the peer at `address` (stage 0's transfer queue).
    [[nodiscard]] Status report(std::span<const uint8_t> address, const StageReport& r, TimePoint deadline);

    // Puts issued so far (contiguous page runs coalesce into one put).
    int64_t n_puts() const { return n_puts_; }

private:
    TransferEngine* engine_;
    KvLayout layout_;
    int64_t n_puts_ = 0;
};

}  // namespace penstock::disagg
