// KV transfer between a prefill (sender) and a decode (receiver) end over the UCX engine, in one process: the pages
// land where the destination says and nowhere else, the aux record carries the first token, hostile or stray records
// change nothing (RELIABILITY T6), a stalled sender fails the room at its deadline (T11), and a layout mismatch is
// refused naming both layouts (T12). The record formats survive every truncation and random corruption.
#include "disagg/kv_transfer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "disagg/stage_sender.h"

namespace penstock::disagg {
namespace {

using std::chrono::milliseconds;

KvDestination sample_destination() {
    KvDestination d;
    d.room = 0x1234'5678'9abcull;
    d.layout_fingerprint = 99;
    d.n_tokens = 130;
    d.engine_address = {1, 2, 3, 4, 5};
    d.regions.push_back({.key = kv_key(0, 0),
                         .page_bytes = 4096,
                         .region = {.base = 4096, .bytes = 65536, .rkey = {9, 8, 7}},
                         .page_stride = 4096,
                         .n_pages = 16});
    d.regions.push_back({.key = kv_key(3, 4),
                         .page_bytes = 1000,
                         .per_slot = true,
                         .region = {.base = 1 << 20, .bytes = 16384, .rkey = {}},
                         .page_stride = 1024,
                         .n_pages = 16});
    d.pages = {10, 11, 12};
    return d;
}

TEST(KvRecords, RoundTripAndSurviveTruncationAndCorruption) {
    const KvDestination d = sample_destination();
    const std::vector<uint8_t> bytes = d.encode();
    auto back = KvDestination::decode(bytes);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->room, d.room);
    EXPECT_EQ(back->n_tokens, 130);
    EXPECT_EQ(back->engine_address, d.engine_address);
    ASSERT_EQ(back->regions.size(), 2u);
    EXPECT_EQ(back->regions[0].region.rkey, (std::vector<uint8_t>{9, 8, 7}));
    EXPECT_EQ(back->regions[1].page_stride, 1024u);
    EXPECT_EQ(back->regions[1].key, kv_key(3, 4));
    EXPECT_EQ(back->regions[1].page_bytes, 1000u);
    EXPECT_TRUE(back->regions[1].per_slot);
    EXPECT_FALSE(back->regions[0].per_slot);
    EXPECT_EQ(back->pages, d.pages);
    for (size_t n = 0; n < bytes.size(); ++n) {
        EXPECT_FALSE(KvDestination::decode(std::span(bytes).first(n)).ok()) << "truncated to " << n;
    }
    std::vector<uint8_t> longer = bytes;
    longer.push_back(0);
    EXPECT_FALSE(KvDestination::decode(longer).ok()) << "trailing bytes";

    const AuxRecord a{.room = 5, .n_tokens = 130, .first_token = 4242, .n_pages = 3, .layout_fingerprint = 99};
    const std::vector<uint8_t> ab = a.encode();
    ASSERT_EQ(ab.size(), kMessageBytes);
    auto ar = AuxRecord::decode(ab);
    ASSERT_TRUE(ar.ok()) << ar.status().to_string();
    EXPECT_EQ(ar->first_token, 4242);
    EXPECT_EQ(ar->n_tokens, 130);
    // Any single flipped bit of the aux record is caught (magic, version, checksum or padding).
    for (size_t i = 0; i < ab.size() * 8; ++i) {
        std::vector<uint8_t> c = ab;
        c[i / 8] ^= static_cast<uint8_t>(1u << (i % 8));
        EXPECT_FALSE(AuxRecord::decode(c).ok()) << "bit " << i;
    }
    // Random corruption of the destination record never crashes; what decodes stays within the limits.
    std::mt19937 rng(5);
    for (int trial = 0; trial < 2000; ++trial) {
        std::vector<uint8_t> c = bytes;
        for (int k = 0; k < 3; ++k) c[rng() % c.size()] = static_cast<uint8_t>(rng());
        auto r = KvDestination::decode(c);
        if (r.ok()) {
            EXPECT_LE(r->pages.size(), size_t{1} << 24);
        }
    }
}

// Two ends in one process: pages of two buffers (one dense, one strided at the receiver) move from prefill page ids
// to decode page ids.
struct Ends {
    static constexpr int64_t kRecvPages = 16, kSendPages = 32;
    std::vector<uint8_t> recv_a = std::vector<uint8_t>(kRecvPages * 4096, 0);
    std::vector<uint8_t> recv_b = std::vector<uint8_t>(kRecvPages * 1024, 0);
    std::vector<uint8_t> send_a = std::vector<uint8_t>(kSendPages * 4096);
    std::vector<uint8_t> send_b = std::vector<uint8_t>(kSendPages * 1000);
    // Buffer a is layer 0's latent rows, b layer 1's (their keys); the two ends list them in different orders.
    KvLayout recv_layout() {
        return {{{kv_key(1, 0), recv_b.data(), 1000, 1024, kRecvPages},
                 {kv_key(0, 0), recv_a.data(), 4096, 4096, kRecvPages}}};
    }
    KvLayout send_layout() { return {{send_layout_a().buffers[0], send_layout_b().buffers[0]}}; }
    KvLayout send_layout_a() { return {{{kv_key(0, 0), send_a.data(), 4096, 4096, kSendPages}}}; }
    KvLayout send_layout_b() { return {{{kv_key(1, 0), send_b.data(), 1000, 1000, kSendPages}}}; }
    Ends() {
        std::mt19937 rng(11);
        for (uint8_t& b : send_a) b = static_cast<uint8_t>(rng() | 1);
        for (uint8_t& b : send_b) b = static_cast<uint8_t>(rng() | 1);
    }
};

std::unique_ptr<TransferEngine> engine_or_skip() {
    auto e = make_transfer_engine("ucx");
    if (!e.ok()) return nullptr;
    return std::move(*e);
}

// Polls the receiver on its own thread (its engine belongs to that thread while it runs) until `room` is terminal.
RoomState poll_until_terminal(KvReceiver* rx, uint64_t room, milliseconds limit) {
    const auto end = Clock::now() + limit;
    while (Clock::now() < end) {
        rx->poll(Clock::now());
        const Room* r = rx->rooms().find(room);
        if (r != nullptr && is_terminal(r->state)) return r->state;
        std::this_thread::yield();
    }
    return rx->rooms().find(room)->state;
}

TEST(KvTransfer, PagesLandWhereTheDestinationSaysAndTheAuxCarriesTheFirstToken) {
    auto rx_engine = engine_or_skip(), tx_engine = engine_or_skip();
    if (!rx_engine || !tx_engine)
        GTEST_SKIP() << "no transfer engine in this build: " << make_transfer_engine("ucx").status().to_string();
    Ends ends;
    auto rx = KvReceiver::create(rx_engine.get(), ends.recv_layout(), RoomTimeouts{});
    ASSERT_TRUE(rx.ok()) << rx.status().to_string();
    const std::vector<int32_t> src = {3, 4, 5, 9, 20}, dst = {10, 11, 12, 0, 7};
    auto dest = (*rx)->expect(42, dst, -1, 5 * 64 - 10, Clock::now());
    ASSERT_TRUE(dest.ok()) << dest.status().to_string();
    EXPECT_EQ((*rx)->rooms().find(42)->state, RoomState::kWaitingForInput);
    // Over the wire, the destination is bytes.
    auto wire = KvDestination::decode(dest->encode());
    ASSERT_TRUE(wire.ok());

    RoomState final_state = RoomState::kBootstrapping;
    std::thread poller([&] { final_state = poll_until_terminal(rx->get(), 42, milliseconds(20000)); });
    KvSender tx(tx_engine.get(), ends.send_layout());
    const Status s = tx.send(*wire, src, -1, 4242, Clock::now() + milliseconds(20000));
    poller.join();
    ASSERT_TRUE(s.ok()) << s.to_string();
    ASSERT_EQ(final_state, RoomState::kSuccess);
    EXPECT_EQ((*rx)->rooms().find(42)->first_token, 4242);
    EXPECT_EQ(tx.n_puts(), 3 + 5) << "buffer a: pages 3-5 -> 10-12 in one put; b is strided at the receiver";

    for (int64_t p = 0; p < Ends::kRecvPages; ++p) {
        const auto it = std::find(dst.begin(), dst.end(), p);
        for (size_t k = 0; k < 4096; ++k) {
            const uint8_t want =
                it == dst.end() ? 0 : ends.send_a[static_cast<size_t>(src[it - dst.begin()]) * 4096 + k];
            ASSERT_EQ(ends.recv_a[static_cast<size_t>(p) * 4096 + k], want) << "a page " << p << " byte " << k;
        }
        for (size_t k = 0; k < 1024; ++k) {
            const uint8_t want =
                it == dst.end() || k >= 1000 ? 0 : ends.send_b[static_cast<size_t>(src[it - dst.begin()]) * 1000 + k];
            ASSERT_EQ(ends.recv_b[static_cast<size_t>(p) * 1024 + k], want) << "b page " << p << " byte " << k;
        }
    }
    EXPECT_EQ((*rx)->n_dropped(), 0);
    EXPECT_TRUE((*rx)->rooms().erase(42).ok());
}

TEST(KvTransfer, StrayRecordsChangeNothingAndAStalledSenderFailsTheRoom) {
    auto rx_engine = engine_or_skip(), tx_engine = engine_or_skip();
    if (!rx_engine || !tx_engine) GTEST_SKIP() << "no transfer engine in this build";
    Ends ends;
    auto rx = KvReceiver::create(rx_engine.get(), ends.recv_layout(),
                                 RoomTimeouts{.bootstrap = milliseconds(1000), .waiting = milliseconds(10000)});
    ASSERT_TRUE(rx.ok());
    const TimePoint t0 = Clock::now();
    auto dest = (*rx)->expect(7, {1, 2}, -1, 100, t0);
    ASSERT_TRUE(dest.ok());
    const uint64_t fp = ends.recv_layout().fingerprint();
    std::vector<std::vector<uint8_t>> stray;
    stray.push_back(std::vector<uint8_t>(kMessageBytes, 0xab));  // bad magic
    stray.push_back(
        AuxRecord{.room = 8, .n_tokens = 100, .n_pages = 2, .layout_fingerprint = fp}.encode());  // foreign room
    stray.push_back(
        AuxRecord{.room = 7, .n_tokens = 100, .n_pages = 3, .layout_fingerprint = fp}.encode());  // page count
    stray.push_back(AuxRecord{.room = 7, .n_tokens = 90, .n_pages = 2, .layout_fingerprint = fp}.encode());  // tokens
    stray.push_back(
        AuxRecord{.room = 7, .n_tokens = 100, .n_pages = 2, .layout_fingerprint = fp + 1}.encode());  // layout
    std::atomic<bool> sent{false};
    std::thread poller([&] {
        while (!sent.load()) {
            (*rx)->poll(Clock::now());
            std::this_thread::yield();
        }
        const auto end = Clock::now() + milliseconds(500);
        while (Clock::now() < end) (*rx)->poll(Clock::now());
    });
    auto peer = tx_engine->connect(dest->engine_address);
    ASSERT_TRUE(peer.ok()) << peer.status().to_string();
    for (const auto& m : stray) {
        const Status s = tx_engine->send_message(*peer, m, Clock::now() + milliseconds(10000));
        ASSERT_TRUE(s.ok()) << s.to_string();
    }
    sent = true;
    poller.join();
    EXPECT_EQ((*rx)->n_dropped(), 5);
    EXPECT_EQ((*rx)->rooms().find(7)->state, RoomState::kWaitingForInput) << "nothing a stray record says counts";
    EXPECT_EQ(ends.recv_a, std::vector<uint8_t>(ends.recv_a.size(), 0));
    // The prefill end never sends: the room fails at the waiting deadline, naming the state.
    const auto done = (*rx)->poll(t0 + milliseconds(10001));
    EXPECT_EQ(done, std::vector<uint64_t>{7});
    EXPECT_EQ((*rx)->rooms().find(7)->state, RoomState::kFailed);
    EXPECT_EQ((*rx)->rooms().find(7)->failure, "deadline passed in WaitingForInput");
    EXPECT_EQ((*rx)->expect(7, {1}, -1, 10, t0).status().code(), StatusCode::kInvalidArgument)
        << "room ids are not reused";
}

// Messages that reach the receiver before it posts a receive (a burst of rooms finishing while the decode end is
// busy) all count, each with its bytes: none is taken for an empty one. UCX 1.13 completes such a receive at once
// without its length, which once dropped aux records and failed rooms at the waiting deadline.
TEST(KvTransfer, ABurstOfMessagesSentBeforeTheReceiverPollsAllArrive) {
    auto rx_engine = engine_or_skip(), tx_engine = engine_or_skip();
    if (!rx_engine || !tx_engine) GTEST_SKIP() << "no transfer engine in this build";
    auto peer = tx_engine->connect(rx_engine->address());
    ASSERT_TRUE(peer.ok()) << peer.status().to_string();
    // The connection is set up while the receiver polls (one message); then the burst goes out while it does not.
    {
        std::atomic<bool> done{false};
        std::vector<std::vector<uint8_t>> first;
        std::thread poller([&] {
            for (const auto end = Clock::now() + milliseconds(10000); first.empty() && Clock::now() < end;) {
                first = rx_engine->poll_messages();
            }
            while (!done.load()) std::this_thread::yield();
        });
        const Status s = tx_engine->send_message(*peer, std::vector<uint8_t>(kMessageBytes, 0x5a),
                                                 Clock::now() + milliseconds(10000));
        done = true;
        poller.join();
        ASSERT_TRUE(s.ok()) << s.to_string();
        ASSERT_EQ(first.size(), 1u);
    }
    constexpr int kBurst = 40;
    for (int i = 0; i < kBurst; ++i) {
        std::vector<uint8_t> m(kMessageBytes, static_cast<uint8_t>(i));
        m[0] = 0xa5;
        const Status s = tx_engine->send_message(*peer, m, Clock::now() + milliseconds(2000));
        ASSERT_TRUE(s.ok()) << "message " << i << ": " << s.to_string();
    }
    std::vector<std::vector<uint8_t>> got;
    for (const auto end = Clock::now() + milliseconds(10000); got.size() < kBurst && Clock::now() < end;) {
        for (auto& m : rx_engine->poll_messages()) got.push_back(std::move(m));
    }
    EXPECT_EQ(rx_engine->n_malformed(), 0);
    ASSERT_EQ(got.size(), static_cast<size_t>(kBurst));
    std::vector<int> seen;
    for (const auto& m : got) {
        ASSERT_EQ(m.size(), kMessageBytes);
        EXPECT_EQ(m[0], 0xa5);
        EXPECT_TRUE(std::all_of(m.begin() + 1, m.end(), [&](uint8_t b) { return b == m[1]; }));
        seen.push_back(m[1]);
    }
    std::sort(seen.begin(), seen.end());
    for (int i = 0; i < kBurst; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], i);
    EXPECT_TRUE(rx_engine->poll_messages().empty());
}

TEST(KvTransfer, MismatchedLayoutsAndBadPagesAreRefused) {
    auto rx_engine = engine_or_skip(), tx_engine = engine_or_skip();
    if (!rx_engine || !tx_engine) GTEST_SKIP() << "no transfer engine in this build";
    Ends ends;
    auto rx = KvReceiver::create(rx_engine.get(), ends.recv_layout(), RoomTimeouts{});
    ASSERT_TRUE(rx.ok());
    EXPECT_EQ((*rx)->expect(1, {16}, -1, 10, Clock::now()).status().code(), StatusCode::kOutOfRange);
    EXPECT_EQ((*rx)->expect(1, {}, -1, 10, Clock::now()).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ((*rx)->expect(1, {0}, -1, 65, Clock::now()).status().code(), StatusCode::kInvalidArgument);
    auto dest = (*rx)->expect(2, {0, 1}, -1, 100, Clock::now());
    ASSERT_TRUE(dest.ok());
    KvLayout other = ends.send_layout();
    other.buffers[1].page_bytes = 999;
    other.buffers[1].page_stride = 999;
    KvSender bad(tx_engine.get(), other);
    const Status s = bad.send(*dest, std::vector<int32_t>{0, 1}, -1, 1, Clock::now() + milliseconds(1000));
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("KV layout mismatch"), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find("4096, 999 bytes per page"), std::string::npos) << s.to_string();
    // A stage's partial layout with a buffer the decode end does not have is refused naming it, before any write.
    KvLayout stray = ends.send_layout_b();
    stray.buffers[0].key = kv_key(5, 0);
    const Status p = KvSender(tx_engine.get(), stray)
                         .put_pages(*dest, std::vector<int32_t>{0, 1}, -1, Clock::now() + milliseconds(1000));
    EXPECT_EQ(p.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(p.message().find("layer 5 kind 0 (1000 bytes per page) has no counterpart"), std::string::npos)
        << p.to_string();
    KvSender tx(tx_engine.get(), ends.send_layout());
    EXPECT_EQ(tx.send(*dest, std::vector<int32_t>{0}, -1, 1, Clock::now() + milliseconds(1000)).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(tx.send(*dest, std::vector<int32_t>{0, 32}, -1, 1, Clock::now() + milliseconds(1000)).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(tx.n_puts(), 0) << "nothing is written before the pages are checked";
    EXPECT_EQ((*rx)->rooms().find(2)->state, RoomState::kWaitingForInput);
    EXPECT_FALSE(make_transfer_engine("carrier-pigeon").ok());
}

TEST(KvRecords, LayoutShapesAndStageReportsRoundTrip) {
    std::vector<uint8_t> a(64), b(64);
    const KvLayout layout{{{kv_key(2, 0), a.data(), 64, 64, 1}, {kv_key(7, 3), b.data(), 32, 32, 2, true}}};
    auto shape = KvLayout::decode_shape(layout.encode_shape());
    ASSERT_TRUE(shape.ok()) << shape.status().to_string();
    ASSERT_EQ(shape->buffers.size(), 2u);
    EXPECT_EQ(shape->buffers[1].key, kv_key(7, 3));
    EXPECT_TRUE(shape->buffers[1].per_slot);
    EXPECT_EQ(shape->buffers[0].base, nullptr);
    EXPECT_EQ(shape->fingerprint(), layout.fingerprint()) << "a shape fingerprints like its layout";
    const KvLayout reversed{{layout.buffers[1], layout.buffers[0]}};
    EXPECT_EQ(reversed.fingerprint(), layout.fingerprint()) << "the order of the list does not matter";
    KvLayout moved = layout;
    moved.buffers[0].key = kv_key(3, 0);
    EXPECT_NE(moved.fingerprint(), layout.fingerprint()) << "another layer is another layout";
    const std::vector<uint8_t> sb = layout.encode_shape();
    for (size_t n = 0; n < sb.size(); ++n) EXPECT_FALSE(KvLayout::decode_shape(std::span(sb).first(n)).ok()) << n;

    const StageReport r{.room = 77,
                        .stage = 3,
                        .code = StatusCode::kDeadlineExceeded,
                        .message = "a very long failure message that does not fit in the record"};
    const std::vector<uint8_t> rb = r.encode();
    ASSERT_EQ(rb.size(), kMessageBytes);
    auto back = StageReport::decode(rb);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->room, 77u);
    EXPECT_EQ(back->stage, 3u);
    EXPECT_EQ(back->code, StatusCode::kDeadlineExceeded);
    EXPECT_EQ(back->message, r.message.substr(0, StageReport::kTextBytes));
    for (size_t i = 0; i < rb.size() * 8; ++i) {
        std::vector<uint8_t> c = rb;
        c[i / 8] ^= static_cast<uint8_t>(1u << (i % 8));
        EXPECT_FALSE(StageReport::decode(c).ok()) << "bit " << i;
    }
    EXPECT_FALSE(StageReport::decode(AuxRecord{.room = 77}.encode()).ok()) << "an aux record is no report";
}

// Pipeline stages: each sender holds one buffer (layer) of the receiver's two; each writes its pages, and the aux
// record with the whole deployment's fingerprint completes the room. The stage that holds layer 1 works through a
// StageKvSender, which reports to "stage 0"'s engine.
TEST(KvTransfer, TwoPipelineStagesEachSendTheirLayersAndTheAuxCompletesTheRoom) {
    auto rx_engine = engine_or_skip(), tx_engine = engine_or_skip();
    if (!rx_engine || !tx_engine) GTEST_SKIP() << "no transfer engine in this build";
    Ends ends;
    auto rx = KvReceiver::create(rx_engine.get(), ends.recv_layout(), RoomTimeouts{});
    ASSERT_TRUE(rx.ok());
    // Four pages reserved (the decode's room), 100 prompt tokens: only the first two are the destination's.
    auto dest = (*rx)->expect(9, {4, 5, 6, 7}, -1, 100, Clock::now());
    ASSERT_TRUE(dest.ok()) << dest.status().to_string();
    EXPECT_EQ(dest->pages, (std::vector<int32_t>{4, 5}));
    const std::vector<int32_t> src = {30, 2, 17};  // the prefill request's pages (one more for its first token)

    auto stage1 = StageKvSender::create("ucx", ends.send_layout_b(), 1, {tx_engine->address()});
    ASSERT_TRUE(stage1.ok()) << stage1.status().to_string();
    std::atomic<bool> stop{false};
    std::thread poller([&] {
        while (!stop.load()) {
            (*rx)->poll(Clock::now());
            std::this_thread::yield();
        }
    });
    (*stage1)->submit({.request_id = 5,
                       .room = 9,
                       .destination = dest->encode(),
                       .pages = src,
                       .slot = -1,
                       .timeout = milliseconds(20000)});
    (*stage1)->submit({.request_id = 6,
                       .room = 10,
                       .destination = {1, 2, 3},
                       .pages = src,
                       .slot = -1,
                       .timeout = milliseconds(20000)});
    KvSender stage0(tx_engine.get(), ends.send_layout_a());
    ASSERT_TRUE(stage0.put_pages(*dest, src, -1, Clock::now() + milliseconds(20000)).ok());
    std::vector<StageReport> reports;
    for (const auto end = Clock::now() + milliseconds(20000); reports.size() < 2 && Clock::now() < end;) {
        for (const auto& m : tx_engine->poll_messages()) {
            auto r = StageReport::decode(m);
            ASSERT_TRUE(r.ok()) << r.status().to_string();
            reports.push_back(*r);
        }
    }
    ASSERT_EQ(reports.size(), 2u);
    std::sort(reports.begin(), reports.end(), [](const auto& x, const auto& y) { return x.room < y.room; });
    EXPECT_EQ(reports[0].code, StatusCode::kOk) << reports[0].message;
    EXPECT_EQ(reports[0].stage, 1u);
    EXPECT_EQ(reports[1].room, 10u);
    EXPECT_EQ(reports[1].code, StatusCode::kInvalidArgument) << "a malformed destination is reported, not sent";
    const int64_t ids[] = {5, 6};
    (*stage1)->wait_idle(ids);
    EXPECT_EQ((*stage1)->n_sent(), 1);
    EXPECT_EQ((*stage1)->n_failed(), 1);
    stop = true;  // every write was flushed: the receiver's engine is this thread's again
    poller.join();
    (*rx)->poll(Clock::now());
    EXPECT_EQ((*rx)->rooms().find(9)->state, RoomState::kWaitingForInput) << "pages alone do not end the room";
    // The aux record of one stage's own layout is not the deployment's: dropped. The whole layout's completes it.
    std::thread sender([&] {
        ASSERT_TRUE(
            stage0.send_aux(*dest, 4242, ends.send_layout_a().fingerprint(), Clock::now() + milliseconds(5000)).ok());
        ASSERT_TRUE(
            stage0.send_aux(*dest, 4242, ends.send_layout().fingerprint(), Clock::now() + milliseconds(5000)).ok());
    });
    const RoomState final_state = poll_until_terminal(rx->get(), 9, milliseconds(20000));
    sender.join();
    ASSERT_EQ(final_state, RoomState::kSuccess);
    EXPECT_EQ((*rx)->rooms().find(9)->first_token, 4242);
    EXPECT_EQ((*rx)->n_dropped(), 1);
    for (int64_t p = 0; p < Ends::kRecvPages; ++p) {
        const int64_t i = p == 4 ? 0 : p == 5 ? 1 : -1;  // destination page p holds source page src[i]
        for (size_t k = 0; k < 4096; ++k) {
            const uint8_t want = i < 0 ? 0 : ends.send_a[static_cast<size_t>(src[static_cast<size_t>(i)]) * 4096 + k];
            ASSERT_EQ(ends.recv_a[static_cast<size_t>(p) * 4096 + k], want) << "a page " << p << " byte " << k;
        }
        for (size_t k = 0; k < 1024; ++k) {
            const uint8_t want =
                i < 0 || k >= 1000 ? 0 : ends.send_b[static_cast<size_t>(src[static_cast<size_t>(i)]) * 1000 + k];
            ASSERT_EQ(ends.recv_b[static_cast<size_t>(p) * 1024 + k], want) << "b page " << p << " byte " << k;
        }
    }
}

}  // namespace
}  // namespace penstock::disagg
