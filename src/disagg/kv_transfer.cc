// KV sender / receiver and their record formats (kv_transfer.h).
#include "disagg/kv_transfer.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/byte_io.h"

namespace penstock::disagg {

namespace {

constexpr uint32_t kDestinationMagic = 0x444B5350;  // "PSKD"
constexpr uint32_t kAuxMagic = 0x414B5350;          // "PSKA"
constexpr uint32_t kReportMagic = 0x524B5350;       // "PSKR"
constexpr uint32_t kShapeMagic = 0x534B5350;        // "PSKS"
// 2: buffers carry keys (layer, kind), regions their key, page bytes and kind; the destination lists only the pages
// that hold the room's tokens.
constexpr uint16_t kVersion = 2;
constexpr int64_t kTokensPerPage = 64;  // kv_cache::kPageSize
constexpr size_t kMaxAddressBytes = 1 << 16, kMaxRkeyBytes = 1 << 14, kMaxRegions = 1 << 12, kMaxPages = 1 << 24;

uint64_t fnv1a(const uint8_t* p, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

}  // namespace

uint64_t KvLayout::fingerprint() const {
    std::vector<std::pair<uint64_t, uint64_t>> keyed;
    for (const KvBuffer& b : buffers) keyed.emplace_back(b.key, b.page_bytes * 2 + (b.per_slot ? 1 : 0));
    std::sort(keyed.begin(), keyed.end());
    std::vector<uint8_t> w;
    w.reserve(8 + 16 * keyed.size());
    put_le<uint64_t>(&w, keyed.size());
    for (const auto& [key, bytes] : keyed) {
        put_le<uint64_t>(&w, key);
        put_le<uint64_t>(&w, bytes);
    }
    return fnv1a(w.data(), w.size());
}

std::string KvLayout::describe() const {
    std::ostringstream os;
    os << buffers.size() << " buffers:";
    for (size_t i = 0; i < buffers.size(); ++i) {
        os << (i ? ", " : " ") << buffers[i].page_bytes << (buffers[i].per_slot ? " per slot" : "");
    }
    os << " bytes per page";
    return os.str();
}

std::vector<uint8_t> KvLayout::encode_shape() const {
    std::vector<uint8_t> w;
    put_le<uint32_t>(&w, kShapeMagic);
    put_le<uint16_t>(&w, kVersion);
    put_le<uint16_t>(&w, 0);
    put_le<uint32_t>(&w, static_cast<uint32_t>(buffers.size()));
    for (const KvBuffer& b : buffers) {
        put_le<uint64_t>(&w, b.key);
        put_le<uint64_t>(&w, b.page_bytes);
        put_le<uint8_t>(&w, b.per_slot ? 1 : 0);
    }
    return w;
}

Result<KvLayout> KvLayout::decode_shape(std::span<const uint8_t> bytes) {
    ByteReader r(bytes);
    uint32_t magic = 0, n = 0;
    uint16_t version = 0, reserved = 0;
    if (!r.get(&magic) || magic != kShapeMagic || !r.get(&version) || version != kVersion || !r.get(&reserved) ||
        !r.get(&n) || n > kMaxRegions) {
        return invalid_argument("KV layout shape: bad header");
    }
    KvLayout out;
    for (uint32_t i = 0; i < n; ++i) {
        KvBuffer b;
        uint8_t per_slot = 0;
        if (!r.get(&b.key) || !r.get(&b.page_bytes) || !r.get(&per_slot) || per_slot > 1 || b.page_bytes == 0) {
            return invalid_argument("KV layout shape: bad buffer " + std::to_string(i));
        }
        b.per_slot = per_slot != 0;
        out.buffers.push_back(b);
    }
    if (!r.done()) return invalid_argument("KV layout shape: trailing bytes");
    return out;
}

std::vector<uint8_t> KvDestination::encode() const {
    std::vector<uint8_t> w;
    w.reserve(256);
    put_le<uint32_t>(&w, kDestinationMagic);
    put_le<uint16_t>(&w, kVersion);
    put_le<uint16_t>(&w, 0);
    put_le<uint64_t>(&w, room);
    put_le<uint64_t>(&w, layout_fingerprint);
    put_le<int64_t>(&w, n_tokens);
    put_bytes(&w, engine_address);
    put_le<uint32_t>(&w, static_cast<uint32_t>(regions.size()));
    for (const Region& r : regions) {
        put_le<uint64_t>(&w, r.key);
        put_le<uint64_t>(&w, r.page_bytes);
        put_le<uint8_t>(&w, r.per_slot ? 1 : 0);
        put_le<uint64_t>(&w, r.region.base);
        put_le<uint64_t>(&w, r.region.bytes);
        put_bytes(&w, r.region.rkey);
        put_le<uint64_t>(&w, r.page_stride);
        put_le<int64_t>(&w, r.n_pages);
    }
    put_le<uint32_t>(&w, static_cast<uint32_t>(pages.size()));
    for (int32_t p : pages) put_le<int32_t>(&w, p);
    put_le<int32_t>(&w, slot);
    return w;
}

Result<KvDestination> KvDestination::decode(std::span<const uint8_t> bytes) {
    ByteReader r(bytes);
    const auto bad = [](const std::string& what) { return invalid_argument("KV destination record: " + what); };
    uint32_t magic = 0, n_regions = 0, n_pages = 0;
    uint16_t version = 0, reserved = 0;
    if (!r.get(&magic) || magic != kDestinationMagic) return bad("bad magic");
    if (!r.get(&version) || version != kVersion) {
        return bad("protocol version " + std::to_string(version) + ", not " + std::to_string(kVersion));
    }
    KvDestination d;
    if (!r.get(&reserved) || !r.get(&d.room) || !r.get(&d.layout_fingerprint) || !r.get(&d.n_tokens) ||
        !r.bytes(&d.engine_address, kMaxAddressBytes) || !r.get(&n_regions)) {
        return bad("truncated header");
    }
    if (n_regions > kMaxRegions) return bad(std::to_string(n_regions) + " regions");
    for (uint32_t i = 0; i < n_regions; ++i) {
        Region g;
        uint8_t per_slot = 0;
        if (!r.get(&g.key) || !r.get(&g.page_bytes) || !r.get(&per_slot) || !r.get(&g.region.base) ||
            !r.get(&g.region.bytes) || !r.bytes(&g.region.rkey, kMaxRkeyBytes) || !r.get(&g.page_stride) ||
            !r.get(&g.n_pages)) {
            return bad("truncated region " + std::to_string(i));
        }
        if (per_slot > 1 || g.page_bytes == 0 || g.page_stride < g.page_bytes || g.n_pages < 1) {
            return bad("region " + std::to_string(i));
        }
        g.per_slot = per_slot != 0;
        d.regions.push_back(std::move(g));
    }
    if (!r.get(&n_pages) || n_pages > kMaxPages) return bad("page count");
    d.pages.resize(n_pages);
    for (int32_t& p : d.pages) {
        if (!r.get(&p)) return bad("truncated page list");
    }
    if (!r.get(&d.slot) || d.slot < -1) return bad("state slot");
    if (!r.done()) return bad("trailing bytes");
    if (d.n_tokens < 0 || d.n_tokens > static_cast<int64_t>(n_pages) * kTokensPerPage) return bad("token count");
    return d;
}

std::vector<uint8_t> AuxRecord::encode() const {
    std::vector<uint8_t> w;
    w.reserve(256);
    put_le<uint32_t>(&w, kAuxMagic);
    put_le<uint16_t>(&w, kVersion);
    put_le<uint16_t>(&w, 0);
    put_le<uint64_t>(&w, room);
    put_le<int64_t>(&w, n_tokens);
    put_le<int32_t>(&w, first_token);
    put_le<uint32_t>(&w, n_pages);
    put_le<uint64_t>(&w, layout_fingerprint);
    put_le<uint64_t>(&w, fnv1a(w.data(), w.size()));
    std::vector<uint8_t> message(kMessageBytes, 0);
    std::memcpy(message.data(), w.data(), std::min(w.size(), kMessageBytes));
    return message;
}

Result<AuxRecord> AuxRecord::decode(std::span<const uint8_t> bytes) {
    const auto bad = [](const std::string& what) { return invalid_argument("KV aux record: " + what); };
    if (bytes.size() != kMessageBytes) return bad(std::to_string(bytes.size()) + " bytes");
    ByteReader r(bytes);
    uint32_t magic = 0;
    uint16_t version = 0, reserved = 0;
    AuxRecord a;
    uint64_t sum = 0;
    if (!r.get(&magic) || magic != kAuxMagic) return bad("bad magic");
    if (!r.get(&version) || version != kVersion) {
        return bad("protocol version " + std::to_string(version) + ", not " + std::to_string(kVersion));
    }
    if (!r.get(&reserved) || !r.get(&a.room) || !r.get(&a.n_tokens) || !r.get(&a.first_token) || !r.get(&a.n_pages) ||
        !r.get(&a.layout_fingerprint) || !r.get(&sum)) {
        return bad("truncated");
    }
    constexpr size_t kSummed = 40;  // everything before the checksum
    if (fnv1a(bytes.data(), kSummed) != sum) return bad("checksum");
    for (size_t i = kSummed + 8; i < kMessageBytes; ++i) {
        if (bytes[i] != 0) return bad("non-zero padding");
    }
    return a;
}

std::vector<uint8_t> StageReport::encode() const {
    std::vector<uint8_t> w;
    w.reserve(kMessageBytes);
    put_le<uint32_t>(&w, kReportMagic);
    put_le<uint16_t>(&w, kVersion);
    put_le<uint16_t>(&w, 0);
    put_le<uint64_t>(&w, room);
    put_le<uint32_t>(&w, stage);
    put_le<int32_t>(&w, static_cast<int32_t>(code));
    const size_t n = std::min<size_t>(message.size(), kTextBytes);
    put_le<uint8_t>(&w, static_cast<uint8_t>(n));
    for (size_t i = 0; i < kTextBytes; ++i) put_le<uint8_t>(&w, i < n ? static_cast<uint8_t>(message[i]) : 0);
    put_le<uint64_t>(&w, fnv1a(w.data(), w.size()));
    w.resize(kMessageBytes, 0);
    return w;
}

Result<StageReport> StageReport::decode(std::span<const uint8_t> bytes) {
    const auto bad = [](const std::string& what) { return invalid_argument("KV stage report: " + what); };
    if (bytes.size() != kMessageBytes) return bad(std::to_string(bytes.size()) + " bytes");
    ByteReader r(bytes);
    uint32_t magic = 0;
    uint16_t version = 0, reserved = 0;
    int32_t code = 0;
    uint8_t n = 0;
    StageReport out;
    if (!r.get(&magic) || magic != kReportMagic) return bad("bad magic");
    if (!r.get(&version) || version != kVersion || !r.get(&reserved)) return bad("protocol version");
    if (!r.get(&out.room) || !r.get(&out.stage) || !r.get(&code) || !r.get(&n) || n > kTextBytes) return bad("fields");
    constexpr size_t kSummed = 25 + kTextBytes;  // the header (25 bytes) and the text
    uint64_t sum = 0;
    std::memcpy(&sum, bytes.data() + kSummed, sizeof(sum));
    if (fnv1a(bytes.data(), kSummed) != sum) return bad("checksum");
    if (code < 0 || code > static_cast<int32_t>(StatusCode::kInternal)) return bad("status code");
    if (bytes[kSummed + sizeof(sum)] != 0) return bad("non-zero padding");
    out.code = static_cast<StatusCode>(code);
    out.message.assign(reinterpret_cast<const char*>(bytes.data()) + 25, n);
    return out;
}

Result<std::unique_ptr<KvReceiver>> KvReceiver::create(TransferEngine* engine, KvLayout layout, RoomTimeouts timeouts) {
    PENSTOCK_RETURN_IF_ERROR(validate(timeouts));
    std::unique_ptr<KvReceiver> r(new KvReceiver(engine, std::move(layout), timeouts));
    for (const KvBuffer& b : r->layout_.buffers) {
        if (b.base == nullptr || b.page_bytes == 0 || b.page_stride < b.page_bytes || b.n_pages < 1) {
            return invalid_argument("KV receiver: a buffer needs a base, page bytes, a stride >= them and pages");
        }
        PENSTOCK_ASSIGN_OR_RETURN(RemoteRegion region,
                                  engine->register_region(b.base, b.page_stride * static_cast<uint64_t>(b.n_pages)));
        r->regions_.push_back(std::move(region));
    }
    return r;
}

Result<KvDestination> KvReceiver::expect(uint64_t room, std::vector<int32_t> pages, int32_t slot, int64_t n_tokens,
                                         TimePoint now, bool bootstrapped) {
    if (pages.empty() || n_tokens < 1 || n_tokens > static_cast<int64_t>(pages.size()) * 64) {
        return invalid_argument("room " + std::to_string(room) + ": " + std::to_string(n_tokens) + " tokens in " +
                                std::to_string(pages.size()) + " pages");
    }
    for (const KvBuffer& b : layout_.buffers) {
        if (b.per_slot) {
            if (slot < 0 || slot >= b.n_pages) {
                return out_of_range("room " + std::to_string(room) + ": state slot " + std::to_string(slot) +
                                    " out of range");
            }
            continue;
        }
        for (int32_t p : pages) {
            if (p < 0 || p >= b.n_pages) return out_of_range("room " + std::to_string(room) + ": page id out of range");
        }
    }
    PENSTOCK_RETURN_IF_ERROR(rooms_.open(room, now));
    if (bootstrapped) PENSTOCK_RETURN_IF_ERROR(rooms_.bootstrapped(room, now));
    // Only the pages that hold the prompt's positions are written; the rest of the request's reservation is its
    // decode's.
    pages.resize(static_cast<size_t>((n_tokens + kTokensPerPage - 1) / kTokensPerPage));
    Room* r = rooms_.find_mut(room);
    r->pages = pages;
    r->n_tokens = n_tokens;
    KvDestination d;
    d.room = room;
    d.layout_fingerprint = layout_.fingerprint();
    d.n_tokens = n_tokens;
    d.engine_address = engine_->address();
    for (size_t i = 0; i < layout_.buffers.size(); ++i) {
        d.regions.push_back({.key = layout_.buffers[i].key,
                             .page_bytes = layout_.buffers[i].page_bytes,
                             .per_slot = layout_.buffers[i].per_slot,
                             .region = regions_[i],
                             .page_stride = layout_.buffers[i].page_stride,
                             .n_pages = layout_.buffers[i].n_pages});
    }
    d.pages = std::move(pages);
    d.slot = slot;
    return d;
}

std::vector<uint64_t> KvReceiver::poll(TimePoint now) {
    std::vector<uint64_t> done;
    for (const std::vector<uint8_t>& m : engine_->poll_messages()) {
        const Result<AuxRecord> a = AuxRecord::decode(m);
        if (!a.ok()) {
            ++dropped_;
            continue;
        }
        const Room* r = rooms_.find(a->room);
        if (r == nullptr || r->state != RoomState::kWaitingForInput ||
            a->n_pages != static_cast<uint32_t>(r->pages.size()) || a->n_tokens != r->n_tokens ||
            a->layout_fingerprint != layout_.fingerprint()) {
            ++dropped_;
            continue;
        }
        // The flush before the aux record made every page complete here: the transfer is over when it arrives.
        if (rooms_.start_transfer(a->room, now).ok() && rooms_.succeed(a->room, now).ok()) {
            rooms_.find_mut(a->room)->first_token = a->first_token;
            done.push_back(a->room);
        }
    }
    for (uint64_t id : rooms_.expire(now)) done.push_back(id);
    return done;
}

Status KvSender::send(const KvDestination& dst, std::span<const int32_t> src_pages, int32_t src_slot,
                      int32_t first_token, TimePoint deadline) {
    if (dst.layout_fingerprint != layout_.fingerprint() || dst.regions.size() != layout_.buffers.size()) {
        return failed_precondition("KV layout mismatch between prefill (" + layout_.describe() + ") and decode (" +
                                   std::to_string(dst.regions.size()) +
                                   " buffers, other layers or page sizes): the two servers must run the same model "
                                   "and KV formats");
    }
    PENSTOCK_RETURN_IF_ERROR(put_pages(dst, src_pages, src_slot, deadline));
    return send_aux(dst, first_token, layout_.fingerprint(), deadline);
}

Status KvSender::put_pages(const KvDestination& dst, std::span<const int32_t> src_pages, int32_t src_slot,
                           TimePoint deadline) {
    // Each of this end's buffers and its counterpart at the destination.
    std::vector<size_t> to_region(layout_.buffers.size());
    for (size_t b = 0; b < layout_.buffers.size(); ++b) {
        const KvBuffer& src = layout_.buffers[b];
        const auto it = std::find_if(dst.regions.begin(), dst.regions.end(),
                                     [&](const KvDestination::Region& g) { return g.key == src.key; });
        if (it == dst.regions.end() || it->page_bytes != src.page_bytes || it->per_slot != src.per_slot) {
            return failed_precondition("KV layout mismatch between prefill (" + layout_.describe() + ") and decode (" +
                                       std::to_string(dst.regions.size()) + " buffers): the prefill buffer of layer " +
                                       std::to_string(src.key / 8) + " kind " + std::to_string(src.key % 8) + " (" +
                                       std::to_string(src.page_bytes) + " bytes per " +
                                       (src.per_slot ? "slot" : "page") +
                                       ") has no counterpart; the two servers must run the same model and KV formats");
        }
        to_region[b] = static_cast<size_t>(it - dst.regions.begin());
    }
    if (src_pages.size() < dst.pages.size()) {
        return invalid_argument("room " + std::to_string(dst.room) + ": " + std::to_string(src_pages.size()) +
                                " source pages for " + std::to_string(dst.pages.size()) + " destination pages");
    }
    const size_t n_pages = dst.pages.size();
    for (size_t b = 0; b < layout_.buffers.size(); ++b) {
        const KvDestination::Region& to = dst.regions[to_region[b]];
        if (layout_.buffers[b].per_slot) {
            if (src_slot < 0 || src_slot >= layout_.buffers[b].n_pages || dst.slot < 0 || dst.slot >= to.n_pages) {
                return invalid_argument("room " + std::to_string(dst.room) + ": state slot out of range");
            }
            continue;
        }
        for (size_t i = 0; i < n_pages; ++i) {
            if (src_pages[i] < 0 || src_pages[i] >= layout_.buffers[b].n_pages || dst.pages[i] < 0 ||
                dst.pages[i] >= to.n_pages) {
                return invalid_argument("room " + std::to_string(dst.room) + ": page id out of range");
            }
        }
    }
    PENSTOCK_ASSIGN_OR_RETURN(const int peer, engine_->connect(dst.engine_address));
    for (size_t b = 0; b < layout_.buffers.size(); ++b) {
        const KvBuffer& src = layout_.buffers[b];
        const KvDestination::Region& to = dst.regions[to_region[b]];
        if (src.per_slot) {  // one "page": the request's state slot
            const auto* from =
                static_cast<const uint8_t*>(src.base) + static_cast<uint64_t>(src_slot) * src.page_stride;
            PENSTOCK_RETURN_IF_ERROR(engine_->put(peer, from, src.page_bytes,
                                                  to.region.base + static_cast<uint64_t>(dst.slot) * to.page_stride,
                                                  to.region));
            ++n_puts_;
            continue;
        }
        const bool dense = src.page_stride == src.page_bytes && to.page_stride == src.page_bytes;
        for (size_t i = 0; i < n_pages;) {
            // A run of pages consecutive at both ends is one put when both strides are the page size.
            size_t n = 1;
            while (dense && i + n < n_pages && src_pages[i + n] == src_pages[i] + static_cast<int32_t>(n) &&
                   dst.pages[i + n] == dst.pages[i] + static_cast<int32_t>(n)) {
                ++n;
            }
            const auto* from =
                static_cast<const uint8_t*>(src.base) + static_cast<uint64_t>(src_pages[i]) * src.page_stride;
            const uint64_t remote = to.region.base + static_cast<uint64_t>(dst.pages[i]) * to.page_stride;
            PENSTOCK_RETURN_IF_ERROR(engine_->put(peer, from, src.page_bytes * n, remote, to.region));
            ++n_puts_;
            i += n;
        }
    }
    return engine_->flush(peer, deadline);
}

Status KvSender::send_aux(const KvDestination& dst, int32_t first_token, uint64_t layout_fingerprint,
                          TimePoint deadline) {
    PENSTOCK_ASSIGN_OR_RETURN(const int peer, engine_->connect(dst.engine_address));
    const AuxRecord aux{.room = dst.room,
                        .n_tokens = dst.n_tokens,
                        .first_token = first_token,
                        .n_pages = static_cast<uint32_t>(dst.pages.size()),
                        .layout_fingerprint = layout_fingerprint};
    return engine_->send_message(peer, aux.encode(), deadline);
}

Status KvSender::report(std::span<const uint8_t> address, const StageReport& r, TimePoint deadline) {
    PENSTOCK_ASSIGN_OR_RETURN(const int peer, engine_->connect(address));
    return engine_->send_message(peer, r.encode(), deadline);
}

}  // namespace penstock::disagg
