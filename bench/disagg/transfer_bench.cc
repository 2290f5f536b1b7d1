// penstock_disagg_bench: one room's KV through the disaggregation transfer (disagg/kv_transfer.h over UCX), timed
// against memcpy of the same pages in the same run (PERF.md: a same-run baseline). Two engines in one process (the
// receiver polled on its own thread, as a decode server's engine thread does), host memory, a DeepSeek-V3-like layout
// by default: 61 layer buffers of 64 tokens x 576 bf16 latent values (73,728 bytes) per page.
//
//   penstock_disagg_bench [--layers 61] [--page-bytes 73728] [--pages 256] [--pool-pages 320] [--reps 5]
//
// Prints one JSON line per destination pattern: "contiguous" (the decode pages in one run: one put per buffer) and
// "scattered" (a random permutation of the decode pool: one put per page and buffer).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "disagg/kv_transfer.h"

using namespace penstock;
using namespace penstock::disagg;
using Ms = std::chrono::duration<double, std::milli>;

namespace {

int64_t arg(int argc, char** argv, const char* name, int64_t def) {
    for (int i = 1; i + 1 < argc; ++i) {
        if (std::string(argv[i]) == name) return std::stoll(argv[i + 1]);
    }
    return def;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    const int64_t layers = arg(argc, argv, "--layers", 61), page_bytes = arg(argc, argv, "--page-bytes", 73728);
    const int64_t pages = arg(argc, argv, "--pages", 256), pool = arg(argc, argv, "--pool-pages", 320);
    const int64_t reps = arg(argc, argv, "--reps", 5);
    if (layers < 1 || page_bytes < 1 || pages < 1 || pool < pages || reps < 1) {
        std::fprintf(stderr, "penstock_disagg_bench: bad arguments\n");
        return 2;
    }
    auto rx_engine = make_transfer_engine("ucx"), tx_engine = make_transfer_engine("ucx");
    if (!rx_engine.ok() || !tx_engine.ok()) {
        std::fprintf(stderr, "%s\n", rx_engine.status().to_string().c_str());
        return 1;
    }
    const size_t bytes_per_buffer = static_cast<size_t>(pool * page_bytes);
    std::vector<std::vector<uint8_t>> src(static_cast<size_t>(layers)), dst(static_cast<size_t>(layers));
    KvLayout src_layout, dst_layout;
    std::mt19937_64 rng(7);
    for (int64_t l = 0; l < layers; ++l) {
        src[static_cast<size_t>(l)].resize(bytes_per_buffer);
        dst[static_cast<size_t>(l)].assign(bytes_per_buffer, 0);
        for (size_t i = 0; i < bytes_per_buffer; i += 64) src[static_cast<size_t>(l)][i] = static_cast<uint8_t>(rng());
        src_layout.buffers.push_back({kv_key(l, 0), src[static_cast<size_t>(l)].data(),
                                      static_cast<uint64_t>(page_bytes), static_cast<uint64_t>(page_bytes), pool});
        dst_layout.buffers.push_back({kv_key(l, 0), dst[static_cast<size_t>(l)].data(),
                                      static_cast<uint64_t>(page_bytes), static_cast<uint64_t>(page_bytes), pool});
    }
    RoomTimeouts timeouts;
    auto rx = KvReceiver::create(rx_engine->get(), dst_layout, timeouts);
    if (!rx.ok()) {
        std::fprintf(stderr, "%s\n", rx.status().to_string().c_str());
        return 1;
    }
    KvSender tx(tx_engine->get(), src_layout);
    std::vector<int32_t> src_pages(static_cast<size_t>(pages));
    for (int64_t i = 0; i < pages; ++i) src_pages[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    const double total_bytes =
        static_cast<double>(layers) * static_cast<double>(pages) * static_cast<double>(page_bytes);
    uint64_t room = 1;
    for (const bool scattered : {false, true}) {
        std::vector<double> send_ms, copy_ms;
        int64_t puts = 0;
        for (int64_t rep = 0; rep < reps + 1; ++rep) {  // the first rep warms up (registration caches, page faults)
            std::vector<int32_t> pool_ids(static_cast<size_t>(pool));
            for (int64_t i = 0; i < pool; ++i) pool_ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
            if (scattered) std::shuffle(pool_ids.begin(), pool_ids.end(), rng);
            std::vector<int32_t> dst_pages(pool_ids.begin(), pool_ids.begin() + pages);
            auto dest = (*rx)->expect(room, dst_pages, -1, pages * 64, Clock::now());
            if (!dest.ok()) return 1;
            bool done = false;
            std::thread poller([&] {
                const auto end = Clock::now() + std::chrono::seconds(60);
                while (!done && Clock::now() < end) {
                    for (uint64_t r : (*rx)->poll(Clock::now())) done = done || r == room;
                }
            });
            const int64_t puts0 = tx.n_puts();
            const auto t0 = Clock::now();
            const Status st = tx.send(*dest, src_pages, -1, 1, Clock::now() + std::chrono::seconds(60));
            poller.join();
            const double ms = Ms(Clock::now() - t0).count();
            if (!st.ok() || (*rx)->rooms().find(room)->state != RoomState::kSuccess) {
                std::fprintf(stderr, "transfer failed: %s\n", st.to_string().c_str());
                return 1;
            }
            static_cast<void>((*rx)->rooms().erase(room));
            ++room;
            // The same-run baseline: memcpy of the same pages to the same destination pages.
            const auto c0 = Clock::now();
            for (int64_t l = 0; l < layers; ++l) {
                for (int64_t i = 0; i < pages; ++i) {
                    std::memcpy(dst[static_cast<size_t>(l)].data() +
                                    static_cast<size_t>(dst_pages[static_cast<size_t>(i)]) * page_bytes,
                                src[static_cast<size_t>(l)].data() + static_cast<size_t>(i) * page_bytes,
                                static_cast<size_t>(page_bytes));
                }
            }
            const double cms = Ms(Clock::now() - c0).count();
            if (rep == 0) continue;
            send_ms.push_back(ms);
            copy_ms.push_back(cms);
            puts = tx.n_puts() - puts0;
        }
        const double s = median(send_ms), c = median(copy_ms);
        std::printf(
            "{\"pattern\": \"%s\", \"layers\": %lld, \"pages\": %lld, \"page_bytes\": %lld, \"bytes\": %.0f, "
            "\"puts\": %lld, \"reps\": %lld, \"transfer_ms\": %.3f, \"transfer_gbps\": %.2f, \"memcpy_ms\": %.3f, "
            "\"memcpy_gbps\": %.2f, \"transfer_over_memcpy\": %.2f}\n",
            scattered ? "scattered" : "contiguous", static_cast<long long>(layers), static_cast<long long>(pages),
            static_cast<long long>(page_bytes), total_bytes, static_cast<long long>(puts), static_cast<long long>(reps),
            s, total_bytes / (s * 1e-3) / 1e9, c, total_bytes / (c * 1e-3) / 1e9, s / c);
        std::fflush(stdout);
    }
    return 0;
}
