// TransferEngine over UCX's ucp API (transfer_engine.h): one context and one single-threaded worker per engine; puts
// are ucp_put_nbx into the peer's ucp_mem_map'ed regions (remote keys unpacked once per peer and region), flush is
// ucp_ep_flush_nbx after the puts complete locally, messages are tagged sends of kMessageBytes. Endpoints use the
// peer error-handling mode, so a dead peer turns into Unavailable instead of a hang.
#include <ucp/api/ucp.h>

#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "disagg/transfer_engine.h"

namespace penstock::disagg {

namespace {

constexpr ucp_tag_t kMessageTag = 0x5053'4B56'0000'0001ull;  // "PSKV", message channel 1

Status ucx_error(const std::string& what, ucs_status_t s) {
    return Status(StatusCode::kUnavailable, "ucx: " + what + ": " + ucs_status_string(s));
}

class UcxEngine final : public TransferEngine {
public:
    ~UcxEngine() override {
        if (recv_req_ != nullptr) {
            ucp_request_cancel(worker_, recv_req_);
            ucp_request_free(recv_req_);
        }
        for (auto& [key, rkey] : rkeys_) ucp_rkey_destroy(rkey);
        for (Peer& p : peers_) {
            if (p.ep == nullptr) continue;
            ucp_request_param_t param{};
            param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            param.flags = UCP_EP_CLOSE_FLAG_FORCE;
            void* r = ucp_ep_close_nbx(p.ep, &param);
            static_cast<void>(wait(r, std::chrono::steady_clock::now() + std::chrono::seconds(1)));
        }
        for (ucp_mem_h m : mems_) ucp_mem_unmap(context_, m);
        if (address_ != nullptr) ucp_worker_release_address(worker_, address_);
        if (worker_ != nullptr) ucp_worker_destroy(worker_);
        if (context_ != nullptr) ucp_cleanup(context_);
    }

    Status init() {
        ucp_config_t* config = nullptr;
        if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK) return ucx_error("config", s);
        ucp_params_t params{};
        params.field_mask = UCP_PARAM_FIELD_FEATURES;
        params.features = UCP_FEATURE_RMA | UCP_FEATURE_TAG;
        const ucs_status_t s = ucp_init(&params, config, &context_);
        ucp_config_release(config);
        if (s != UCS_OK) return ucx_error("init", s);
        ucp_worker_params_t wp{};
        wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = UCS_THREAD_MODE_SINGLE;
        if (ucs_status_t w = ucp_worker_create(context_, &wp, &worker_); w != UCS_OK) return ucx_error("worker", w);
        size_t len = 0;
        if (ucs_status_t a = ucp_worker_get_address(worker_, &address_, &len); a != UCS_OK) {
            return ucx_error("worker address", a);
        }
        address_len_ = len;
        post_recv();
        return ok_status();
    }

    std::string name() const override { return "ucx"; }

    std::vector<uint8_t> address() const override {
        const auto* p = reinterpret_cast<const uint8_t*>(address_);
        return {p, p + address_len_};
    }

    Result<RemoteRegion> register_region(void* ptr, size_t bytes) override {
        ucp_mem_map_params_t mp{};
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
        mp.address = ptr;
        mp.length = bytes;
        ucp_mem_h mem = nullptr;
        if (ucs_status_t s = ucp_mem_map(context_, &mp, &mem); s != UCS_OK) return ucx_error("mem_map", s);
        mems_.push_back(mem);
        void* packed = nullptr;
        size_t packed_len = 0;
        if (ucs_status_t s = ucp_rkey_pack(context_, mem, &packed, &packed_len); s != UCS_OK) {
            return ucx_error("rkey_pack", s);
        }
        RemoteRegion r;
        r.base = reinterpret_cast<uint64_t>(ptr);
        r.bytes = bytes;
        const auto* b = static_cast<const uint8_t*>(packed);
        r.rkey.assign(b, b + packed_len);
        ucp_rkey_buffer_release(packed);
        return r;
    }

    Result<int> connect(std::span<const uint8_t> peer_address) override {
        std::string key(reinterpret_cast<const char*>(peer_address.data()), peer_address.size());
        if (auto it = peer_index_.find(key); it != peer_index_.end()) return it->second;
        if (peer_address.empty()) return invalid_argument("ucx: empty peer address");
        ucp_ep_params_t ep{};
        ep.field_mask =
            UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep.address = reinterpret_cast<const ucp_address_t*>(key.data());
        ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
        // Endpoints hold pointers into peers_, so it never reallocates (reserved at kMaxPeers).
        if (peers_.size() >= kMaxPeers) return resource_exhausted("ucx: more than 1024 peers");
        const int index = static_cast<int>(peers_.size());
        peers_.push_back(Peer{});
        ep.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t status) { *static_cast<ucs_status_t*>(arg) = status; };
        ep.err_handler.arg = &peers_[static_cast<size_t>(index)].error;
        if (ucs_status_t s = ucp_ep_create(worker_, &ep, &peers_[static_cast<size_t>(index)].ep); s != UCS_OK) {
            peers_.pop_back();
            return ucx_error("ep_create", s);
        }
        peer_index_.emplace(std::move(key), index);
        return index;
    }

    Status put(int peer, const void* src, size_t bytes, uint64_t remote_addr, const RemoteRegion& region) override {
        PENSTOCK_RETURN_IF_ERROR(check_peer(peer));
        if (remote_addr < region.base || remote_addr + bytes > region.base + region.bytes) {
            return out_of_range("ucx: put of " + std::to_string(bytes) + " bytes at " + std::to_string(remote_addr) +
                                " outside the peer's region");
        }
        PENSTOCK_ASSIGN_OR_RETURN(ucp_rkey_h rkey, rkey_for(peer, region));
        ucp_request_param_t param{};
        void* r = ucp_put_nbx(peers_[static_cast<size_t>(peer)].ep, src, bytes, remote_addr, rkey, &param);
        if (UCS_PTR_IS_ERR(r)) return ucx_error("put", UCS_PTR_STATUS(r));
        if (r != nullptr) peers_[static_cast<size_t>(peer)].pending.push_back(r);
        return ok_status();
    }

    Status flush(int peer, std::chrono::steady_clock::time_point deadline) override {
        PENSTOCK_RETURN_IF_ERROR(check_peer(peer));
        Peer& p = peers_[static_cast<size_t>(peer)];
        for (void*& r : p.pending) {
            const Status s = wait(std::exchange(r, nullptr), deadline);
            if (!s.ok()) return s;
        }
        p.pending.clear();
        ucp_request_param_t param{};
        PENSTOCK_RETURN_IF_ERROR(wait(ucp_ep_flush_nbx(p.ep, &param), deadline));
        return check_peer(peer);
    }

    Status send_message(int peer, std::span<const uint8_t> message,
                        std::chrono::steady_clock::time_point deadline) override {
        PENSTOCK_RETURN_IF_ERROR(check_peer(peer));
        if (message.size() != kMessageBytes) {
            return invalid_argument("ucx: a message is " + std::to_string(kMessageBytes) + " bytes, got " +
                                    std::to_string(message.size()));
        }
        std::memcpy(send_buf_, message.data(), kMessageBytes);
        ucp_request_param_t param{};
        PENSTOCK_RETURN_IF_ERROR(
            wait(ucp_tag_send_nbx(peers_[static_cast<size_t>(peer)].ep, send_buf_, kMessageBytes, kMessageTag, &param),
                 deadline));
        return check_peer(peer);
    }

    std::vector<std::vector<uint8_t>> poll_messages() override {
        if (recv_req_ == nullptr) post_recv();  // after an error left no receive posted
        for (int spins = 0; spins < 64 && ucp_worker_progress(worker_) != 0; ++spins) {
        }
        while (recv_req_ != nullptr) {
            ucp_tag_recv_info_t info{};
            const ucs_status_t s = ucp_tag_recv_request_test(recv_req_, &info);
            if (s == UCS_INPROGRESS) break;
            ucp_request_free(recv_req_);
            recv_req_ = nullptr;
            accept(s, info);
            post_recv();
        }
        return std::exchange(ready_, {});
    }

    int64_t n_malformed() const override { return malformed_; }

private:
    static constexpr size_t kMaxPeers = 1024;
    struct Peer {
        ucp_ep_h ep = nullptr;
        ucs_status_t error = UCS_OK;
        std::vector<void*> pending;
    };

    void accept(ucs_status_t s, const ucp_tag_recv_info_t& info) {
        if (s == UCS_OK && info.length == kMessageBytes) {
            ready_.emplace_back(recv_buf_, recv_buf_ + kMessageBytes);
        } else {
            ++malformed_;
        }
    }

    // Posts the next receive. It always returns a request (UCP_OP_ATTR_FLAG_NO_IMM_CMPL), even for a message already
    // waiting: UCX 1.13 completes such a receive at once without filling recv_info's length, which read as an empty
    // message and dropped a record. poll_messages takes completed requests through ucp_tag_recv_request_test, which
    // reports the length on every UCX version.
    void post_recv() {
        ucp_request_param_t param{};
        param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        void* r = ucp_tag_recv_nbx(worker_, recv_buf_, kMessageBytes, kMessageTag, ~ucp_tag_t{0}, &param);
        if (r == nullptr || UCS_PTR_IS_ERR(r)) {
            ++malformed_;  // no request to test; the next poll_messages posts again
            return;
        }
        recv_req_ = r;
    }

    Status check_peer(int peer) const {
        if (peer < 0 || static_cast<size_t>(peer) >= peers_.size()) {
            return invalid_argument("ucx: unknown peer " + std::to_string(peer));
        }
        const ucs_status_t e = peers_[static_cast<size_t>(peer)].error;
        if (e != UCS_OK) return ucx_error("peer " + std::to_string(peer) + " failed", e);
        return ok_status();
    }

    Result<ucp_rkey_h> rkey_for(int peer, const RemoteRegion& region) {
        const auto key = std::make_pair(peer, region.base);
        if (auto it = rkeys_.find(key); it != rkeys_.end()) return it->second;
        ucp_rkey_h rkey = nullptr;
        if (ucs_status_t s = ucp_ep_rkey_unpack(peers_[static_cast<size_t>(peer)].ep, region.rkey.data(), &rkey);
            s != UCS_OK) {
            return ucx_error("rkey_unpack", s);
        }
        rkeys_.emplace(key, rkey);
        return rkey;
    }

    // Progresses the worker until `request` completes (nullptr: already complete) or the deadline passes.
    Status wait(void* request, std::chrono::steady_clock::time_point deadline) {
        if (request == nullptr) return ok_status();
        if (UCS_PTR_IS_ERR(request)) return ucx_error("request", UCS_PTR_STATUS(request));
        ucs_status_t s = UCS_INPROGRESS;
        while ((s = ucp_request_check_status(request)) == UCS_INPROGRESS) {
            ucp_worker_progress(worker_);
            if (std::chrono::steady_clock::now() > deadline) {
                ucp_request_cancel(worker_, request);
                while (ucp_request_check_status(request) == UCS_INPROGRESS) ucp_worker_progress(worker_);
                ucp_request_free(request);
                return Status(StatusCode::kDeadlineExceeded, "ucx: transfer deadline passed");
            }
        }
        ucp_request_free(request);
        if (s != UCS_OK) return ucx_error("request", s);
        return ok_status();
    }

    ucp_context_h context_ = nullptr;
    ucp_worker_h worker_ = nullptr;
    ucp_address_t* address_ = nullptr;
    size_t address_len_ = 0;
    std::vector<ucp_mem_h> mems_;
    std::vector<Peer> peers_ = [] {
        std::vector<Peer> v;
        v.reserve(kMaxPeers);
        return v;
    }();
    std::map<std::string, int> peer_index_;  // peer address bytes -> index
    std::map<std::pair<int, uint64_t>, ucp_rkey_h> rkeys_;
    void* recv_req_ = nullptr;
    uint8_t recv_buf_[kMessageBytes] = {};
    uint8_t send_buf_[kMessageBytes] = {};
    std::vector<std::vector<uint8_t>> ready_;  // messages received, not yet returned by poll_messages
    int64_t malformed_ = 0;
};

}  // namespace

Result<std::unique_ptr<TransferEngine>> make_ucx_engine() {
    auto e = std::make_unique<UcxEngine>();
    PENSTOCK_RETURN_IF_ERROR(e->init());
    return std::unique_ptr<TransferEngine>(std::move(e));
}

}  // namespace penstock::disagg
