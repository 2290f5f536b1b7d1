// UTF-8 helpers; see utf8.h.
#include "engine/utf8.h"

namespace penstock::engine::utf8 {

namespace {

bool in(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }

// Number of leading bytes of the sequence at s[pos] that form a valid prefix of some well-formed sequence (>= 1),
// and whether the sequence is complete. Follows Table 3-7 of the Unicode standard.
size_t scan(std::string_view s, size_t pos, bool* complete) {
    const auto b0 = static_cast<uint8_t>(s[pos]);
    *complete = false;
    size_t need = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // range of the second byte
    if (b0 < 0x80) {
        *complete = true;
        return 1;
    } else if (in(b0, 0xC2, 0xDF)) {
        need = 1;
    } else if (b0 == 0xE0) {
        need = 2, lo = 0xA0;
    } else if (in(b0, 0xE1, 0xEC) || in(b0, 0xEE, 0xEF)) {
        need = 2;
    } else if (b0 == 0xED) {
        need = 2, hi = 0x9F;
    } else if (b0 == 0xF0) {
        need = 3, lo = 0x90;
    } else if (in(b0, 0xF1, 0xF3)) {
        need = 3;
    } else if (b0 == 0xF4) {
        need = 3, hi = 0x8F;
    } else {
        return 1;  // 0x80..0xC1, 0xF5..0xFF: never valid
    }
    size_t i = 1;
    for (; i <= need; ++i) {
        if (pos + i >= s.size()) return i;
        const auto b = static_cast<uint8_t>(s[pos + i]);
        if (i == 1 ? !in(b, lo, hi) : !in(b, 0x80, 0xBF)) return i;
    }
    *complete = true;
    return i;
}

}  // namespace

size_t valid_sequence_length(std::string_view s, size_t pos) {
    bool complete = false;
    const size_t n = scan(s, pos, &complete);
    return complete ? n : 0;
}

std::optional<size_t> first_invalid(std::string_view s) {
    for (size_t pos = 0; pos < s.size();) {
        const size_t n = valid_sequence_length(s, pos);
        if (n == 0) return pos;
        pos += n;
    }
    return std::nullopt;
}

std::string lossy(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t pos = 0; pos < s.size();) {
        bool complete = false;
        const size_t n = scan(s, pos, &complete);
        if (complete) {
            out.append(s.substr(pos, n));
        } else {
            out.append(kReplacement);
        }
        pos += n;
    }
    return out;
}

size_t decode(std::string_view s, size_t pos, char32_t* cp) {
    const auto b0 = static_cast<uint8_t>(s[pos]);
    auto cont = [&](size_t i) { return static_cast<char32_t>(static_cast<uint8_t>(s[pos + i]) & 0x3F); };
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    if (b0 < 0xE0) {
        *cp = (static_cast<char32_t>(b0 & 0x1F) << 6) | cont(1);
        return 2;
    }
    if (b0 < 0xF0) {
        *cp = (static_cast<char32_t>(b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2);
        return 3;
    }
    *cp = (static_cast<char32_t>(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
    return 4;
}

void append(std::string* out, char32_t cp) {
    if (cp < 0x80) {
        out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

bool is_white_space(char32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

namespace {

// Printable bytes stand for themselves; the other 68 map to U+0100 + n in byte order (GPT-2 bytes_to_unicode).
char32_t stand_in(int b) {
    auto printable = [](int x) { return (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE); };
    if (printable(b)) return static_cast<char32_t>(b);
    int n = 0;
    for (int x = 0; x < b; ++x) n += printable(x) ? 0 : 1;
    return static_cast<char32_t>(0x100 + n);
}

struct ByteTables {
    std::array<std::string, 256> to_unicode;
    std::array<int16_t, 0x144> to_byte;  // stand-ins are < U+0144
    ByteTables() {
        to_byte.fill(-1);
        for (int b = 0; b < 256; ++b) {
            const char32_t cp = stand_in(b);
            append(&to_unicode[b], cp);
            to_byte[cp] = static_cast<int16_t>(b);
        }
    }
};

const ByteTables& byte_tables() {
    static const ByteTables kTables;  // immutable after construction
    return kTables;
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() { return byte_tables().to_unicode; }

int unicode_to_byte(char32_t cp) { return cp < 0x144 ? byte_tables().to_byte[cp] : -1; }

}  // namespace penstock::engine::utf8
