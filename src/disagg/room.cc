// The room state machine (room.h).
#include "disagg/room.h"

namespace penstock::disagg {

std::string_view room_state_name(RoomState s) {
    switch (s) {
        case RoomState::kBootstrapping:
            return "Bootstrapping";
        case RoomState::kWaitingForInput:
            return "WaitingForInput";
        case RoomState::kTransferring:
            return "Transferring";
        case RoomState::kSuccess:
            return "Success";
        case RoomState::kFailed:
            return "Failed";
    }
    return "?";
}

bool is_terminal(RoomState s) { return s == RoomState::kSuccess || s == RoomState::kFailed; }

Status validate(const RoomTimeouts& t) {
    for (auto [name, v] : {std::pair{"bootstrap", t.bootstrap}, {"waiting", t.waiting}, {"transfer", t.transfer}}) {
        if (v.count() < 1) return invalid_argument(std::string("disaggregation ") + name + " timeout must be >= 1 ms");
    }
    return ok_status();
}

std::chrono::milliseconds RoomTable::timeout_of(RoomState s) const {
    switch (s) {
        case RoomState::kBootstrapping:
            return timeouts_.bootstrap;
        case RoomState::kWaitingForInput:
            return timeouts_.waiting;
        case RoomState::kTransferring:
            return timeouts_.transfer;
        default:
            return std::chrono::milliseconds::max();
    }
}

Status RoomTable::open(uint64_t id, TimePoint now) {
    if (rooms_.contains(id)) return invalid_argument("room " + std::to_string(id) + " already exists");
    Room r;
    r.id = id;
    r.entered = now;
    r.deadline = now + timeouts_.bootstrap;
    rooms_.emplace(id, std::move(r));
    return ok_status();
}

Status RoomTable::move(uint64_t id, RoomState from, RoomState to, TimePoint now) {
    auto it = rooms_.find(id);
    if (it == rooms_.end()) return not_found("room " + std::to_string(id) + " is unknown");
    Room& r = it->second;
    if (r.state != from) {
        return failed_precondition("room " + std::to_string(id) + " is " + std::string(room_state_name(r.state)) +
                                   ", not " + std::string(room_state_name(from)));
    }
    r.state = to;
    r.entered = now;
    r.deadline = is_terminal(to) ? TimePoint::max() : now + timeout_of(to);
    return ok_status();
}

Status RoomTable::bootstrapped(uint64_t id, TimePoint now) {
    return move(id, RoomState::kBootstrapping, RoomState::kWaitingForInput, now);
}

Status RoomTable::start_transfer(uint64_t id, TimePoint now) {
    return move(id, RoomState::kWaitingForInput, RoomState::kTransferring, now);
}

Status RoomTable::succeed(uint64_t id, TimePoint now) {
    return move(id, RoomState::kTransferring, RoomState::kSuccess, now);
}

Status RoomTable::fail(uint64_t id, const std::string& why) {
    auto it = rooms_.find(id);
    if (it == rooms_.end()) return not_found("room " + std::to_string(id) + " is unknown");
    Room& r = it->second;
    if (is_terminal(r.state)) {
        return failed_precondition("room " + std::to_string(id) + " is already " +
                                   std::string(room_state_name(r.state)));
    }
    r.failed_in = r.state;
    r.state = RoomState::kFailed;
    r.failure = why;
    r.deadline = TimePoint::max();
    return ok_status();
}

std::vector<uint64_t> RoomTable::expire(TimePoint now) {
    std::vector<uint64_t> out;
    for (auto& [id, r] : rooms_) {
        if (is_terminal(r.state) || r.deadline > now) continue;
        r.failed_in = r.state;
        r.failure = "deadline passed in " + std::string(room_state_name(r.state));
        r.state = RoomState::kFailed;
        r.deadline = TimePoint::max();
        out.push_back(id);
    }
    return out;
}

Status RoomTable::erase(uint64_t id) {
    auto it = rooms_.find(id);
    if (it == rooms_.end()) return not_found("room " + std::to_string(id) + " is unknown");
    if (!is_terminal(it->second.state)) {
        return failed_precondition("room " + std::to_string(id) + " is still " +
                                   std::string(room_state_name(it->second.state)));
    }
    rooms_.erase(it);
    return ok_status();
}

const Room* RoomTable::find(uint64_t id) const {
    auto it = rooms_.find(id);
    return it == rooms_.end() ? nullptr : &it->second;
}

Room* RoomTable::find_mut(uint64_t id) {
    auto it = rooms_.find(id);
    return it == rooms_.end() ? nullptr : &it->second;
}

size_t RoomTable::n_live() const {
    size_t n = 0;
    for (const auto& [id, r] : rooms_) n += is_terminal(r.state) ? 0 : 1;
    return n;
}

size_t RoomTable::count(RoomState s) const {
    size_t n = 0;
    for (const auto& [id, r] : rooms_) n += r.state == s ? 1 : 0;
    return n;
}

}  // namespace penstock::disagg
