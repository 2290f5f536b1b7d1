// The state of one disaggregated request (a "room", SPEC §5) on either end: Bootstrapping -> WaitingForInput ->
// Transferring -> Success, or Failed from any non-terminal state. Every non-terminal state has a deadline; expire()
// turns a room whose deadline passed into Failed with the state it was stuck in. Transitions check their source
// state and return FailedPrecondition for an illegal one (a peer's message out of order is a value, not a crash).
// Host bookkeeping only; not thread-safe: each RoomTable belongs to one thread (the transfer thread of a server).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace penstock::disagg {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

enum class RoomState : uint8_t {
    kBootstrapping,    // the room exists; the peer has not answered the handshake yet
    kWaitingForInput,  // handshake done: decode waits for prefill's KV; prefill waits for its forward to finish
    kTransferring,     // pages are moving
    kSuccess,          // every page and the aux record arrived (receiver) / were delivered (sender)
    kFailed,           // deadline, peer error, abort, or a malformed message
};
std::string_view room_state_name(RoomState s);
bool is_terminal(RoomState s);

// Deadlines per non-terminal state, measured from entering it. Every one is a named server setting.
struct RoomTimeouts {
    std::chrono::milliseconds bootstrap{30000};  // --disaggregation-bootstrap-timeout-ms
    std::chrono::milliseconds waiting{300000};   // --disaggregation-waiting-timeout-ms (a long prefill waits here)
    std::chrono::milliseconds transfer{60000};   // --disaggregation-transfer-timeout-ms
};
[[nodiscard]] Status validate(const RoomTimeouts& t);

struct Room {
    uint64_t id = 0;
    RoomState state = RoomState::kBootstrapping;
    TimePoint entered{};  // when the current state began
    TimePoint deadline{};
    std::string failure;         // why it failed (empty otherwise)
    RoomState failed_in{};       // the state it was in when it failed
    std::vector<int32_t> pages;  // this end's page ids for the room's KV
    int64_t n_tokens = 0;        // KV positions the room carries
    int32_t first_token = -1;    // the aux record's first token (receiver, after Success)
};

class RoomTable final {
public:
    explicit RoomTable(RoomTimeouts timeouts) : timeouts_(timeouts) {}

    // A new room in kBootstrapping. InvalidArgument when the id is already present (live or terminal, until erased).
    [[nodiscard]] Status open(uint64_t id, TimePoint now);
    // kBootstrapping -> kWaitingForInput.
    [[nodiscard]] Status bootstrapped(uint64_t id, TimePoint now);
    // kWaitingForInput -> kTransferring.
    [[nodiscard]] Status start_transfer(uint64_t id, TimePoint now);
    // kTransferring -> kSuccess.
    [[nodiscard]] Status succeed(uint64_t id, TimePoint now);
    // Any non-terminal state -> kFailed with `why` (a terminal room is left as it is: NotFound / no-op
    // FailedPrecondition).
    [[nodiscard]] Status fail(uint64_t id, const std::string& why);
    // Fails every non-terminal room whose deadline is <= now; returns their ids.
    std::vector<uint64_t> expire(TimePoint now);
    // Forgets a terminal room (its pages are the caller's to free first). FailedPrecondition for a live one.
    [[nodiscard]] Status erase(uint64_t id);

    // nullptr when unknown.
    const Room* find(uint64_t id) const;
    Room* find_mut(uint64_t id);
    size_t size() const { return rooms_.size(); }
    size_t n_live() const;
    size_t count(RoomState s) const;  // rooms in state s
    const RoomTimeouts& timeouts() const { return timeouts_; }

private:
    Status move(uint64_t id, RoomState from, RoomState to, TimePoint now);
    std::chrono::milliseconds timeout_of(RoomState s) const;

    RoomTimeouts timeouts_;
    std::map<uint64_t, Room> rooms_;
};

}  // namespace penstock::disagg
