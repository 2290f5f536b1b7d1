// The bulk-transfer engine adapter of disaggregation (SPEC §5: an existing engine, never a home-made wire protocol for
// bulk KV). A TransferEngine writes local memory into a peer's registered memory (one-sided puts), waits until the
// writes are complete at the peer (flush), and carries small fixed-size messages ordered after them (the aux record).
// The implementation is UCX (ucp: RMA over shared memory, TCP or RDMA, whichever UCX selects); builds without UCX have
// none, and make_transfer_engine says so. One engine belongs to one thread: nothing here is thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace penstock::disagg {

// A registered memory region as a peer needs it: its base address in the owner's address space and the engine's
// packed remote key.
struct RemoteRegion {
    uint64_t base = 0;
    uint64_t bytes = 0;
    std::vector<uint8_t> rkey;
};

// Every message has exactly this many bytes; a message of another length is counted as malformed and dropped.
inline constexpr size_t kMessageBytes = 64;

class TransferEngine {
public:
    virtual ~TransferEngine() = default;
    virtual std::string name() const = 0;
    // This engine's address, for a peer's connect().
    virtual std::vector<uint8_t> address() const = 0;
    // Registers [ptr, ptr + bytes) for peers' puts. The memory must outlive the engine.
    [[nodiscard]] virtual Result<RemoteRegion> register_region(void* ptr, size_t bytes) = 0;
    // Connects to a peer's address (the same address twice gives the same peer index).
    [[nodiscard]] virtual Result<int> connect(std::span<const uint8_t> peer_address) = 0;
    // Starts writing `bytes` from `src` to `remote_addr`, which must lie inside `region` (a region of that peer).
    [[nodiscard]] virtual Status put(int peer, const void* src, size_t bytes, uint64_t remote_addr,
                                     const RemoteRegion& region) = 0;
    // Returns once every put to `peer` is complete at the peer, or DeadlineExceeded / Unavailable (peer gone).
    [[nodiscard]] virtual Status flush(int peer, std::chrono::steady_clock::time_point deadline) = 0;
    // Sends one kMessageBytes message to `peer` (after a flush it arrives after the flushed writes).
    [[nodiscard]] virtual Status send_message(int peer, std::span<const uint8_t> message,
                                              std::chrono::steady_clock::time_point deadline) = 0;
    // The messages that have arrived since the last call (non-blocking; progresses the engine).
    virtual std::vector<std::vector<uint8_t>> poll_messages() = 0;
    // Messages of a wrong length dropped so far.
    virtual int64_t n_malformed() const = 0;
};

// "ucx" where the build has UCX; Unavailable naming what is missing otherwise, or when UCX finds no transport.
[[nodiscard]] Result<std::unique_ptr<TransferEngine>> make_transfer_engine(const std::string& backend);
// The backends this build has ("ucx" or none).
std::vector<std::string> transfer_backends();

}  // namespace penstock::disagg
