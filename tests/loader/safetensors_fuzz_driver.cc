// Standalone, deterministic fuzz driver for LLVMFuzzerTestOneInput (used when not building with -fsanitize=fuzzer):
// seeded mutations (bytes, lengths, header-length field, JSON digits and strings, splices) of a corpus of valid
// files generated here plus the files in --corpus. Stops after --iterations inputs or --max-seconds. On a crash the
// current input is written to ./safetensors_fuzz_crash.bin; the run is reproducible from the printed seed.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using Bytes = std::vector<uint8_t>;

const Bytes* g_current = nullptr;  // the input under test, for the crash handler (driver-only state)

void on_crash(int sig) {
    if (g_current != nullptr) {
        const int fd = ::open("safetensors_fuzz_crash.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            const ssize_t w = ::write(fd, g_current->data(), g_current->size());
            (void)w;
            ::close(fd);
        }
        const char msg[] = "safetensors_fuzz: crash; input written to safetensors_fuzz_crash.bin\n";
        const ssize_t w = ::write(2, msg, sizeof(msg) - 1);
        (void)w;
    }
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}

struct Options {
    std::string corpus;
    int64_t iterations = 5000;
    uint64_t seed = 1;
    double max_seconds = 20.0;
};

// Valid files covering every dtype, scalars, empty tensors, metadata, and several tensors per file.
std::vector<Bytes> generated_corpus() {
    std::vector<Bytes> out;
    std::vector<uint8_t> pool(1024);  // >= the largest tensor below (35 x i64)
    for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<uint8_t>(i * 37 + 11);
    const penstock::DType dtypes[] = {penstock::DType::kF32,    penstock::DType::kBF16, penstock::DType::kF16,
                                      penstock::DType::kF8E4M3, penstock::DType::kE8M0, penstock::DType::kFP4E2M1,
                                      penstock::DType::kI8,     penstock::DType::kU8,   penstock::DType::kI32,
                                      penstock::DType::kI64,    penstock::DType::kBool};
    const std::vector<penstock::Shape> shapes = {{}, {0}, {3}, {2, 3}, {1, 2, 3}, {4, 0, 2}, {5, 7}};
    size_t k = 0;
    for (penstock::DType dt : dtypes) {
        penstock::loader::NamedViews views;
        for (size_t j = 0; j < 3; ++j) {
            const penstock::Shape& s = shapes[(k++) % shapes.size()];
            views.emplace_back("model.layers." + std::to_string(j) + ".w",
                               penstock::TensorView::contiguous(pool.data(), dt, s));
        }
        auto bytes = penstock::loader::serialize_safetensors(views, {{"format", "pt"}});
        if (bytes.ok()) out.push_back(std::move(bytes).value());
    }
    auto empty = penstock::loader::serialize_safetensors({});
    if (empty.ok()) out.push_back(std::move(empty).value());
    return out;
}

std::vector<Bytes> read_corpus_dir(const std::string& dir) {
    std::vector<Bytes> out;
    if (dir.empty()) return out;
    std::vector<std::filesystem::path> files;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        if (e.is_regular_file()) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());  // deterministic order
    for (const auto& p : files) {
        std::ifstream in(p, std::ios::binary);
        out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return out;
}

class Mutator final {
public:
    explicit Mutator(uint64_t seed) : rng_(seed) {}

    uint64_t below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

    void mutate(Bytes& b, const std::vector<Bytes>& corpus) {
        const int n = 1 + static_cast<int>(below(4));
        for (int i = 0; i < n; ++i) mutate_once(b, corpus);
    }

private:
    // The header's byte range [8, 8 + len) clamped to the buffer.
    std::pair<size_t, size_t> header_range(const Bytes& b) const {
        if (b.size() < 8) return {0, 0};
        uint64_t len = 0;
        for (int i = 7; i >= 0; --i) len = (len << 8) | b[static_cast<size_t>(i)];
        return {8, static_cast<size_t>(std::min<uint64_t>(b.size(), 8 + std::min<uint64_t>(len, b.size())))};
    }

    void set_header_len(Bytes& b, uint64_t len) {
        if (b.size() < 8) b.resize(8);
        for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(len >> (8 * i));
    }

    void mutate_digits(Bytes& b) {
        const auto [lo, hi] = header_range(b);
        std::vector<size_t> digits;
        for (size_t i = lo; i < hi; ++i) {
            if (b[i] >= '0' && b[i] <= '9') digits.push_back(i);
        }
        if (digits.empty()) return;
        const size_t at = digits[below(digits.size())];
        static const char* kInserts[] = {
            "9", "0", "-", "99999999999999999999", "18446744073709551615", "1099511627776", ".5", "e9"};
        const uint64_t op = below(3);
        if (op == 0) {
            b[at] = static_cast<uint8_t>('0' + below(10));
        } else {
            const char* s = kInserts[below(std::size(kInserts))];
            b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), s, s + std::strlen(s));
            if (op == 2) set_header_len(b, static_cast<uint64_t>(hi - lo) + std::strlen(s));  // keep it consistent
        }
    }

    void mutate_string(Bytes& b) {
        const auto [lo, hi] = header_range(b);
        std::vector<size_t> quotes;
        for (size_t i = lo; i < hi; ++i) {
            if (b[i] == '"') quotes.push_back(i);
        }
        if (quotes.size() < 2) return;
        const size_t q = below(quotes.size() / 2) * 2;
        const size_t s = quotes[q] + 1, e = quotes[q + 1];
        static const char* kWords[] = {"F32", "BF16",         "F8_E4M3", "F4",    "E8M0",         "I64", "BOOL",
                                       "F64", "__metadata__", "dtype",   "shape", "data_offsets", ""};
        const char* w = kWords[below(std::size(kWords))];
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(s), b.begin() + static_cast<std::ptrdiff_t>(e));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(s), w, w + std::strlen(w));
        const int64_t delta = static_cast<int64_t>(std::strlen(w)) - static_cast<int64_t>(e - s);
        set_header_len(b, static_cast<uint64_t>(static_cast<int64_t>(hi - lo) + delta));
    }

    void mutate_once(Bytes& b, const std::vector<Bytes>& corpus) {
        static const uint8_t kInteresting[] = {0, 0xff, 0x7f, 0x80, '"', '{', '}', '[', ']', ',', ':', '-', '9', ' '};
        switch (below(10)) {
            case 0:
                if (!b.empty()) b[below(b.size())] ^= static_cast<uint8_t>(1u << below(8));
                break;
            case 1:
                if (!b.empty()) b[below(b.size())] = kInteresting[below(std::size(kInteresting))];
                break;
            case 2: {
                const size_t at = below(b.size() + 1);
                const size_t n = 1 + below(8);
                for (size_t i = 0; i < n; ++i) b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), uint8_t(rng_()));
                break;
            }
            case 3:
                if (!b.empty()) {
                    const size_t at = below(b.size());
                    const size_t n = 1 + below(std::min<size_t>(16, b.size() - at));
                    b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
                            b.begin() + static_cast<std::ptrdiff_t>(at + n));
                }
                break;
            case 4:
                b.resize(below(b.size() + 1));
                break;
            case 5:
                mutate_digits(b);
                break;
            case 6: {
                const auto [lo, hi] = header_range(b);
                const uint64_t choices[] = {hi - lo + below(3),
                                            hi - lo - std::min<uint64_t>(hi - lo, below(3)),
                                            0,
                                            b.size(),
                                            b.size() - std::min<size_t>(b.size(), 8),
                                            uint64_t{1} << 63,
                                            100'000'001,
                                            rng_()};
                set_header_len(b, choices[below(std::size(choices))]);
                break;
            }
            case 7:
                mutate_string(b);
                break;
            case 8:
                if (!corpus.empty()) {  // splice the tail of another input
                    const Bytes& o = corpus[below(corpus.size())];
                    const size_t from = below(o.size() + 1);
                    b.resize(below(b.size() + 1));
                    b.insert(b.end(), o.begin() + static_cast<std::ptrdiff_t>(from), o.end());
                }
                break;
            default:
                if (!b.empty()) {  // duplicate a range
                    const size_t at = below(b.size());
                    const size_t n = 1 + below(std::min<size_t>(32, b.size() - at));
                    const Bytes chunk(b.begin() + static_cast<std::ptrdiff_t>(at),
                                      b.begin() + static_cast<std::ptrdiff_t>(at + n));
                    b.insert(b.begin() + static_cast<std::ptrdiff_t>(below(b.size() + 1)), chunk.begin(), chunk.end());
                }
                break;
        }
    }

    std::mt19937_64 rng_;
};

bool parse_args(int argc, char** argv, Options* o) {
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--corpus") {
            o->corpus = v;
        } else if (k == "--iterations") {
            o->iterations = std::stoll(v);
        } else if (k == "--seed") {
            o->seed = std::stoull(v);
        } else if (k == "--max-seconds") {
            o->max_seconds = std::stod(v);
        } else {
            return false;
        }
    }
    return argc % 2 == 1;
}

}  // namespace

int main(int argc, char** argv) {
    Options opt;
    if (!parse_args(argc, argv, &opt)) {
        std::fprintf(stderr, "usage: %s [--corpus DIR] [--iterations N] [--seed S] [--max-seconds T]\n", argv[0]);
        return 2;
    }
    std::signal(SIGSEGV, on_crash);
    std::signal(SIGABRT, on_crash);
    std::signal(SIGBUS, on_crash);

    std::vector<Bytes> corpus = generated_corpus();
    const std::vector<Bytes> files = read_corpus_dir(opt.corpus);
    corpus.insert(corpus.end(), files.begin(), files.end());
    const size_t n_seed = corpus.size();
    int64_t n_valid_seed = 0;
    for (const Bytes& b : corpus) {
        g_current = &b;
        LLVMFuzzerTestOneInput(b.data(), b.size());
        n_valid_seed += penstock::loader::SafetensorsFile::open_buffer("seed", b).ok();
    }

    Mutator m(opt.seed);
    const auto start = std::chrono::steady_clock::now();
    int64_t done = 0, n_ok = 0;
    for (; done < opt.iterations; ++done) {
        if (done % 64 == 0) {
            const std::chrono::duration<double> t = std::chrono::steady_clock::now() - start;
            if (t.count() > opt.max_seconds) break;
        }
        Bytes mutant = corpus[m.below(corpus.size())];
        m.mutate(mutant, corpus);
        const Bytes input(mutant.begin(), mutant.end());  // exact-size heap block: ASan catches any over-read
        g_current = &input;
        LLVMFuzzerTestOneInput(input.data(), input.size());
        if (penstock::loader::SafetensorsFile::open_buffer("mutant", input).ok()) {
            ++n_ok;
            if (corpus.size() < 512) corpus.push_back(input);  // valid mutants seed deeper mutations
        }
    }
    g_current = nullptr;
    const std::chrono::duration<double> t = std::chrono::steady_clock::now() - start;
    std::printf(
        "safetensors_fuzz: seed %llu, %zu seed inputs (%lld valid), %lld mutants in %.2f s, %lld parsed OK, "
        "%lld rejected with a Status, no crash\n",
        static_cast<unsigned long long>(opt.seed), n_seed, static_cast<long long>(n_valid_seed),
        static_cast<long long>(done), t.count(), static_cast<long long>(n_ok), static_cast<long long>(done - n_ok));
    // The smoke test is meaningful only if seeds parsed and the mutants exercised both outcomes.
    return (n_valid_seed > 0 && n_ok > 0 && done - n_ok > 0) ? 0 : 1;
}
