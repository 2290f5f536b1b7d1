// penstock bench: datasets, workers, progress, statistics, JSONL/summary output.
#include "bench/bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "bench/client.h"

namespace penstock::bench {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

void add_bench_options(CLI::App* cmd, BenchArgs* a) {
    cmd->add_option("--base-url", a->base_url, "server URL, e.g. http://127.0.0.1:30000");
    cmd->add_option("--dataset", a->dataset, "random-ids (token ids) or random (text)")
        ->check(CLI::IsMember({"random", "random-ids"}));
    cmd->add_option("--input-len,--random-input-len", a->input_len, "prompt length (tokens; words for random)");
    cmd->add_option("--output-len,--random-output-len", a->output_len, "max_new_tokens (ignore_eos)");
    cmd->add_option("--range-ratio,--random-range-ratio", a->range_ratio, "lengths uniform in [len*ratio, len]");
    cmd->add_option("--num-prompts", a->num_prompts, "requests");
    cmd->add_option("--max-concurrency", a->max_concurrency, "requests in flight at most");
    cmd->add_option("--request-rate", a->request_rate, "Poisson arrival rate in requests/s (0: all at once)");
    cmd->add_option("--seed", a->seed, "dataset and arrival seed");
    cmd->add_option("--output-file", a->output_file, "per-request JSONL");
    cmd->add_option("--summary-file", a->summary_file, "summary JSON");
    cmd->add_option("--timeout-s", a->timeout_s, "per-request timeout");
    cmd->add_option("--vocab-size", a->vocab_size, "token id range for random-ids (0: from /get_server_info)");
    cmd->add_flag("--quiet", a->quiet, "no progress line");
}

Percentiles percentiles(std::vector<double> v) {
    Percentiles p;
    if (v.empty()) return p;
    std::sort(v.begin(), v.end());
    const auto at = [&](double q) {
        const double pos = q * static_cast<double>(v.size() - 1);
        const auto lo = static_cast<size_t>(std::floor(pos));
        const size_t hi = std::min(lo + 1, v.size() - 1);
        return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
    };
    double sum = 0;
    for (double x : v) sum += x;
    p.mean = sum / static_cast<double>(v.size());
    p.p50 = at(0.50);
    p.p95 = at(0.95);
    p.p99 = at(0.99);
    p.max = v.back();
    return p;
}

namespace {

constexpr const char* kWords[] = {"the",    "river",  "stone",  "light",  "green",  "quick",  "water",  "model",
                                  "token",  "cache",  "prefix", "north",  "paper",  "seven",  "cloud",  "engine",
                                  "bridge", "signal", "garden", "window", "orange", "silver", "market", "planet"};

struct Prompt {
    json body;
    int64_t input_len = 0;
    int64_t output_len = 0;
};

std::vector<Prompt> make_dataset(const BenchArgs& a, int64_t vocab) {
    std::mt19937_64 rng(a.seed);
    const auto len_in = [&](int64_t full) {
        const int64_t lo = std::max<int64_t>(static_cast<int64_t>(static_cast<double>(full) * a.range_ratio), 1);
        return std::uniform_int_distribution<int64_t>(std::min(lo, full), full)(rng);
    };
    std::vector<Prompt> out;
    for (int64_t i = 0; i < a.num_prompts; ++i) {
        Prompt p;
        p.input_len = len_in(a.input_len);
        p.output_len = len_in(a.output_len);
        json body = {
            {"stream", true},
            {"sampling_params", {{"max_new_tokens", p.output_len}, {"ignore_eos", true}, {"temperature", 0.0}}}};
        if (a.dataset == "random-ids") {
            std::vector<int32_t> ids(static_cast<size_t>(p.input_len));
            std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
            for (int32_t& t : ids) t = tok(rng);
            body["input_ids"] = ids;
        } else {
            std::string text;
            std::uniform_int_distribution<size_t> w(0, std::size(kWords) - 1);
            for (int64_t k = 0; k < p.input_len; ++k) {
                if (k > 0) text.push_back(' ');
                text.append(kWords[w(rng)]);
            }
            body["text"] = text;
        }
        p.body = std::move(body);
        out.push_back(std::move(p));
    }
    return out;
}

json stats_ms(const std::vector<double>& seconds) {
    std::vector<double> ms;
    for (double s : seconds) ms.push_back(s * 1e3);
    const Percentiles p = percentiles(ms);
    return {{"mean", p.mean}, {"p50", p.p50}, {"p95", p.p95}, {"p99", p.p99}, {"max", p.max}};
}

}  // namespace

int run_bench(const BenchArgs& a) {
    Endpoint ep;
    std::string error;
    if (!parse_base_url(a.base_url, &ep, &error)) {
        std::fprintf(stderr, "penstock bench: error: %s\n", error.c_str());
        return 2;
    }
    if (a.num_prompts < 1 || a.max_concurrency < 1 || a.input_len < 1 || a.output_len < 1 || a.range_ratio < 0 ||
        a.range_ratio > 1 || a.request_rate < 0) {
        std::fprintf(stderr,
                     "penstock bench: error: lengths, counts and concurrency must be >= 1, range ratio in "
                     "[0, 1], request rate >= 0\n");
        return 2;
    }
    int64_t vocab = a.vocab_size;
    if (vocab <= 0) {
        int status = 0;
        const json info = json::parse(http_get(ep, "/get_server_info", 10, &status), nullptr, false);
        if (status != 200 || !info.is_object()) {
            std::fprintf(stderr, "penstock bench: error: GET %s/get_server_info failed (status %d)\n",
                         a.base_url.c_str(), status);
            return 2;
        }
        vocab = info.value("vocab_size", int64_t{0});
        if (vocab <= 0) vocab = 512;
    }
    const std::vector<Prompt> prompts = make_dataset(a, vocab);
    std::vector<double> arrival(prompts.size(), 0.0);
    if (a.request_rate > 0) {
        std::mt19937_64 rng(a.seed ^ 0x5eedULL);
        std::exponential_distribution<double> gap(a.request_rate);
        double t = 0;
        for (double& x : arrival) {
            x = t;
            t += gap(rng);
        }
    }
    std::vector<StreamTiming> results(prompts.size());
    std::vector<double> starts(prompts.size(), 0.0);
    std::atomic<int64_t> next{0}, n_done{0}, n_failed{0};
    const Clock::time_point t0 = Clock::now();
    std::vector<std::thread> workers;
    const int64_t n_workers = std::min<int64_t>(a.max_concurrency, a.num_prompts);
    for (int64_t w = 0; w < n_workers; ++w) {
        workers.emplace_back([&] {
            for (int64_t i = next++; i < a.num_prompts; i = next++) {
                const auto idx = static_cast<size_t>(i);
                std::this_thread::sleep_until(
                    t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrival[idx])));
                starts[idx] = std::chrono::duration<double>(Clock::now() - t0).count();
                results[idx] = stream_generate(ep, "/generate", prompts[idx].body.dump(), a.timeout_s);
                if (!results[idx].ok) ++n_failed;
                ++n_done;
            }
        });
    }
    std::atomic<bool> finished{false};
    std::thread progress([&] {
        while (!finished) {
            if (!a.quiet) {
                std::fprintf(stderr, "\r[bench] %lld/%lld done, %lld failed, %.1f s", static_cast<long long>(n_done),
                             static_cast<long long>(a.num_prompts), static_cast<long long>(n_failed.load()),
                             std::chrono::duration<double>(Clock::now() - t0).count());
            }
            for (int k = 0; k < 5 && !finished; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        if (!a.quiet)
            std::fprintf(stderr, "\r[bench] %lld/%lld done, %lld failed\n", static_cast<long long>(n_done),
                         static_cast<long long>(a.num_prompts), static_cast<long long>(n_failed.load()));
    });
    for (std::thread& t : workers) t.join();
    const double duration = std::chrono::duration<double>(Clock::now() - t0).count();
    finished = true;
    progress.join();

    std::vector<double> ttft, e2e, itl, tpot;
    int64_t in_tokens = 0, out_tokens = 0, completed = 0;
    std::ofstream jsonl;
    if (!a.output_file.empty()) jsonl.open(a.output_file);
    for (size_t i = 0; i < results.size(); ++i) {
        const StreamTiming& r = results[i];
        if (r.ok) {
            ++completed;
            in_tokens += r.prompt_tokens;
            out_tokens += r.output_tokens;
            ttft.push_back(r.ttft_s);
            e2e.push_back(r.e2e_s);
            itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
            if (r.output_tokens > 1) tpot.push_back((r.e2e_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1));
        }
        if (jsonl.is_open()) {
            jsonl << json{{"index", i},
                          {"ok", r.ok},
                          {"error", r.error},
                          {"http_status", r.http_status},
                          {"start_s", starts[i]},
                          {"prompt_tokens", r.prompt_tokens},
                          {"requested_input_len", prompts[i].input_len},
                          {"output_tokens", r.output_tokens},
                          {"finish_reason", r.finish_reason},
                          {"ttft_s", r.ttft_s},
                          {"e2e_s", r.e2e_s},
                          {"itl_s", r.itl_s}}
                         .dump()
                  << "\n";
        }
    }
    const int64_t failed = a.num_prompts - completed;
    const json summary = {{"base_url", a.base_url},
                          {"dataset", a.dataset},
                          {"input_len", a.input_len},
                          {"output_len", a.output_len},
                          {"range_ratio", a.range_ratio},
                          {"num_prompts", a.num_prompts},
                          {"max_concurrency", a.max_concurrency},
                          {"request_rate", a.request_rate},
                          {"seed", a.seed},
                          {"completed", completed},
                          {"failed", failed},
                          {"all_ok", failed == 0},
                          {"duration_s", duration},
                          {"total_input_tokens", in_tokens},
                          {"total_output_tokens", out_tokens},
                          {"input_throughput_tok_s", static_cast<double>(in_tokens) / duration},
                          {"output_throughput_tok_s", static_cast<double>(out_tokens) / duration},
                          {"request_throughput_req_s", static_cast<double>(completed) / duration},
                          {"ttft_ms", stats_ms(ttft)},
                          {"tpot_ms", stats_ms(tpot)},
                          {"itl_ms", stats_ms(itl)},
                          {"e2e_latency_ms", stats_ms(e2e)}};
    if (!a.summary_file.empty()) std::ofstream(a.summary_file) << summary.dump(2) << "\n";
    const auto row = [&](const char* name, const json& s) {
        std::printf("%-22s mean %9.2f  p50 %9.2f  p95 %9.2f  p99 %9.2f  max %9.2f\n", name, s["mean"].get<double>(),
                    s["p50"].get<double>(), s["p95"].get<double>(), s["p99"].get<double>(), s["max"].get<double>());
    };
    std::printf("============ penstock bench ============\n");
    std::printf("dataset %s, input %lld, output %lld, range ratio %.2f, concurrency %lld, rate %s\n", a.dataset.c_str(),
                static_cast<long long>(a.input_len), static_cast<long long>(a.output_len), a.range_ratio,
                static_cast<long long>(a.max_concurrency),
                a.request_rate > 0 ? std::to_string(a.request_rate).c_str() : "inf");
    std::printf("completed %lld / %lld, failed %lld, duration %.2f s\n", static_cast<long long>(completed),
                static_cast<long long>(a.num_prompts), static_cast<long long>(failed), duration);
    std::printf("input tokens %lld (%.1f tok/s), output tokens %lld (%.1f tok/s), %.2f req/s\n",
                static_cast<long long>(in_tokens), summary["input_throughput_tok_s"].get<double>(),
                static_cast<long long>(out_tokens), summary["output_throughput_tok_s"].get<double>(),
                summary["request_throughput_req_s"].get<double>());
    row("TTFT (ms)", summary["ttft_ms"]);
    row("TPOT (ms)", summary["tpot_ms"]);
    row("ITL (ms)", summary["itl_ms"]);
    row("E2E latency (ms)", summary["e2e_latency_ms"]);
    for (const StreamTiming& r : results) {
        if (!r.ok) {
            std::printf("first error: %s\n", r.error.c_str());
            break;
        }
    }
    if (failed == 0) {
        std::printf("OK: %lld/%lld requests completed with no error\n", static_cast<long long>(completed),
                    static_cast<long long>(a.num_prompts));
        return 0;
    }
    std::printf("FAILED: %lld of %lld requests failed\n", static_cast<long long>(failed),
                static_cast<long long>(a.num_prompts));
    return 1;
}

}  // namespace penstock::bench
