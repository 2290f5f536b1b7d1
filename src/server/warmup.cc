// Start-up warm-up (warmup.h).
#include "server/warmup.h"

#include <charconv>
#include <chrono>
#include <cstdio>
#include <deque>
#include <memory>

namespace penstock::server {

Result<std::vector<int64_t>> parse_warmup_lengths(const std::string& text) {
    std::vector<int64_t> out;
    if (text.empty()) return out;
    size_t at = 0;
    while (at <= text.size()) {
        const size_t comma = std::min(text.find(',', at), text.size());
        const std::string_view item(text.data() + at, comma - at);
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
        if (item.empty() || ec != std::errc() || end != item.data() + item.size() || v < 1) {
            return invalid_argument("--warmup-lengths: '" + std::string(item) +
                                    "' is not a positive token count (a comma-separated list like 512,2048)");
        }
        out.push_back(v);
        at = comma + 1;
    }
    return out;
}

Result<WarmupResult> run_warmup(engine::Engine& engine, const WarmupOptions& options, int64_t vocab) {
    using Clock = std::chrono::steady_clock;
    WarmupResult result;
    result.seconds.assign(options.lengths.size(), 0.0);
    if (options.lengths.empty()) return result;
    if (options.concurrency < 1) return invalid_argument("--warmup-concurrency must be >= 1");
    const auto t0 = Clock::now();
    const auto deadline =
        t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.timeout_s));
    struct Running {
        size_t index;
        std::shared_ptr<engine::RequestHandle> handle;
    };
    std::deque<Running> running;
    size_t next = 0;
    uint64_t state = 0x9e3779b97f4a7c15ull;  // splitmix64 stream: the same prompts every start
    const auto next_id = [&] {
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return static_cast<int32_t>((z ^ (z >> 31)) % static_cast<uint64_t>(vocab));
    };
    // Aborts what is still running and waits (at most 10 s: past the deadline the engine may be the thing that hangs)
    // for the engine to confirm, so that the failed start leaves no request behind.
    const auto abort_all = [&] {
        for (const Running& r : running) engine.abort(r.handle->id(), engine::AbortReason::kShutdown);
        const auto until = Clock::now() + std::chrono::seconds(10);
        for (const Running& r : running) {
            for (bool done = false; !done && Clock::now() < until;) {
                for (const engine::RequestOutput& ev : r.handle->wait(std::chrono::milliseconds(50))) {
                    done = done || ev.finished;
                }
            }
        }
    };
    while (next < options.lengths.size() || !running.empty()) {
        while (next < options.lengths.size() && static_cast<int64_t>(running.size()) < options.concurrency) {
            engine::GenerateRequest r;
            r.prompt.resize(static_cast<size_t>(options.lengths[next]));
            for (int32_t& id : r.prompt) id = next_id();
            r.params.max_new_tokens = 1;
            r.params.sampling.temperature = 0;
            r.params.ignore_eos = true;
            r.rid = "warmup-" + std::to_string(next);
            Result<std::shared_ptr<engine::RequestHandle>> h = engine.submit(r);
            if (!h.ok()) {
                abort_all();
                return h.status().with_context("warm-up request of " + std::to_string(options.lengths[next]) +
                                               " tokens (--warmup-lengths)");
            }
            running.push_back({next, *h});
            ++next;
        }
        Running& oldest = running.front();
        bool finished = false;
        for (const engine::RequestOutput& ev : oldest.handle->wait(std::chrono::milliseconds(20))) {
            if (!ev.finished) continue;
            finished = true;
            result.seconds[oldest.index] = ev.e2e_s;
            if (!ev.error.ok()) {
                const int64_t len = options.lengths[oldest.index];
                running.pop_front();
                abort_all();
                return ev.error.with_context("warm-up request of " + std::to_string(len) + " tokens");
            }
        }
        if (finished) {
            running.pop_front();
        } else if (Clock::now() > deadline) {
            abort_all();
            char limit[32];
            std::snprintf(limit, sizeof(limit), "%g", options.timeout_s);
            return Status(StatusCode::kDeadlineExceeded,
                          std::string("the warm-up did not finish within --warmup-timeout-s ") + limit + " s (" +
                              std::to_string(next - running.size()) + " of " + std::to_string(options.lengths.size()) +
                              " done)");
        }
    }
    result.total_s = std::chrono::duration<double>(Clock::now() - t0).count();
    return result;
}

}  // namespace penstock::server
