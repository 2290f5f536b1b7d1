// NFC / NFD; see unicode_nfc.h. The algorithm of UAX #15: full canonical decomposition (Hangul algorithmically),
// stable sort of each run of non-starters by combining class, then composition of each character with the last
// starter unless blocked.
#include "engine/unicode_nfc.h"

#include <algorithm>
#include <vector>

#include "engine/utf8.h"

namespace penstock::engine::unicode {

namespace {

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

void decompose(char32_t cp, std::vector<char32_t>* out) {
    if (cp >= kSBase && cp < kSBase + kSCount) {
        const char32_t s = cp - kSBase;
        out->push_back(kLBase + s / kNCount);
        out->push_back(kVBase + (s % kNCount) / kTCount);
        if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
        return;
    }
    const Decomposition* end = kDecomposition + kDecompositionSize;
    const Decomposition* d =
        std::lower_bound(kDecomposition, end, cp, [](const Decomposition& e, char32_t c) { return e.cp < c; });
    if (d == end || d->cp != cp) {
        out->push_back(cp);
        return;
    }
    decompose(d->first, out);
    if (d->second != 0) decompose(d->second, out);
}

// The composite of (a, b), or 0.
char32_t compose(char32_t a, char32_t b) {
    if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
        return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
    }
    if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) {
        return a + (b - kTBase);
    }
    const Composition* end = kComposition + kCompositionSize;
    const Composition* c = std::lower_bound(kComposition, end, std::make_pair(a, b), [](const Composition& e, auto k) {
        return e.first != k.first ? e.first < k.first : e.second < k.second;
    });
    return (c != end && c->first == a && c->second == b) ? c->composite : 0;
}

bool all_ascii(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::vector<char32_t> decomposed(std::string_view text) {
    std::vector<char32_t> cps;
    cps.reserve(text.size());
    for (size_t pos = 0; pos < text.size();) {
        char32_t cp = 0;
        pos += utf8::decode(text, pos, &cp);
        decompose(cp, &cps);
    }
    // Canonical ordering: stable-sort each maximal run of non-starters by combining class.
    for (size_t i = 0; i < cps.size();) {
        if (combining_class(cps[i]) == 0) {
            ++i;
            continue;
        }
        size_t j = i;
        while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
        std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j),
                         [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
        i = j;
    }
    return cps;
}

std::string encode(const std::vector<char32_t>& cps) {
    std::string out;
    out.reserve(cps.size());
    for (char32_t cp : cps) utf8::append(&out, cp);
    return out;
}

}  // namespace

uint8_t combining_class(char32_t cp) {
    if (cp < 0x300) return 0;
    const CombiningClassRange* end = kCombiningClass + kCombiningClassSize;
    const CombiningClassRange* r =
        std::lower_bound(kCombiningClass, end, cp, [](const CombiningClassRange& e, char32_t c) { return e.last < c; });
    return (r != end && r->first <= cp) ? r->ccc : 0;
}

std::string nfd(std::string_view text) {
    if (all_ascii(text)) return std::string(text);
    return encode(decomposed(text));
}

std::string nfc(std::string_view text) {
    if (all_ascii(text)) return std::string(text);
    const std::vector<char32_t> cps = decomposed(text);
    std::vector<char32_t> out;
    out.reserve(cps.size());
    size_t starter = SIZE_MAX;  // index in `out` of the last starter
    uint8_t last_ccc = 0;       // combining class of the last character appended after it
    for (char32_t cp : cps) {
        const uint8_t ccc = combining_class(cp);
        if (starter != SIZE_MAX) {
            const bool adjacent = out.size() - 1 == starter;
            const bool blocked = !adjacent && (last_ccc == 0 || last_ccc >= ccc);
            if (!blocked) {
                if (const char32_t c = compose(out[starter], cp)) {
                    out[starter] = c;
                    continue;
                }
            }
        }
        if (ccc == 0) starter = out.size();
        out.push_back(cp);
        last_ccc = ccc;
    }
    return encode(out);
}

}  // namespace penstock::engine::unicode
