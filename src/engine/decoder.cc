// Decoding; see decoder.h. Each step's semantics follow the `tokenizers` decoder of the same name (decode_chain).
#include "engine/decoder.h"

#include <utility>

#include "engine/utf8.h"

namespace penstock::engine {

namespace {

using nlohmann::json;

constexpr int kMaxDepth = 8;

// <0xXX> -> the byte, else -1.
int byte_token(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; ++i) {
        const char c = t[static_cast<size_t>(i)];
        const int d = (c >= '0' && c <= '9')   ? c - '0'
                      : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                      : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                               : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

Status parse_size(const json& v, std::string_view key, const JsonPath& path, size_t* out) {
    PENSTOCK_ASSIGN_OR_RETURN(const json* f, json_field(v, key, path, /*required=*/false));
    if (f == nullptr) return ok_status();
    if (!f->is_number_unsigned() || f->get<uint64_t>() > 1'000'000) {
        return path.key(key).type_error("a small non-negative integer", *f);
    }
    *out = static_cast<size_t>(f->get<uint64_t>());
    return ok_status();
}

}  // namespace

Result<Decoder> Decoder::from_json(const json& v, const JsonPath& path) {
    Decoder d;
    if (v.is_null()) return d;
    d.present_ = true;
    PENSTOCK_RETURN_IF_ERROR(parse(v, path, 0, &d.steps_));
    return d;
}

Decoder Decoder::raw_bytes() {
    Decoder d;
    d.present_ = true;
    Step step;
    step.kind = Step::Kind::kRawBytes;
    d.steps_.push_back(std::move(step));
    return d;
}

Status Decoder::parse(const json& v, const JsonPath& path, int depth, std::vector<Step>* steps) {
    if (depth > kMaxDepth) return path.error("decoder Sequence nested deeper than 8");
    std::string type;
    PENSTOCK_RETURN_IF_ERROR(json_string(v, "type", path, /*required=*/true, &type));
    Step step;
    if (type == "Sequence") {
        PENSTOCK_ASSIGN_OR_RETURN(const json* list, json_field(v, "decoders", path, /*required=*/true));
        if (!list->is_array()) return path.key("decoders").type_error("an array", *list);
        for (size_t i = 0; i < list->size(); ++i) {
            PENSTOCK_RETURN_IF_ERROR(parse((*list)[i], path.key("decoders").index(i), depth + 1, steps));
        }
        return ok_status();
    } else if (type == "ByteLevel") {
        step.kind = Step::Kind::kByteLevel;
    } else if (type == "ByteFallback") {
        step.kind = Step::Kind::kByteFallback;
    } else if (type == "Fuse") {
        step.kind = Step::Kind::kFuse;
    } else if (type == "Strip") {
        step.kind = Step::Kind::kStrip;
        PENSTOCK_RETURN_IF_ERROR(json_string(v, "content", path, /*required=*/true, &step.content));
        if (step.content.empty() || utf8::valid_sequence_length(step.content, 0) != step.content.size()) {
            return path.key("content").error("expected a single character");
        }
        PENSTOCK_RETURN_IF_ERROR(parse_size(v, "start", path, &step.start));
        PENSTOCK_RETURN_IF_ERROR(parse_size(v, "stop", path, &step.stop));
    } else if (type == "Replace") {
        step.kind = Step::Kind::kReplace;
        PENSTOCK_RETURN_IF_ERROR(json_string(v, "content", path, /*required=*/true, &step.content));
        PENSTOCK_ASSIGN_OR_RETURN(const json* pattern, json_field(v, "pattern", path, /*required=*/true));
        const JsonPath pp = path.key("pattern");
        std::string regex, literal;
        PENSTOCK_RETURN_IF_ERROR(json_string(*pattern, "Regex", pp, /*required=*/false, &regex));
        PENSTOCK_RETURN_IF_ERROR(json_string(*pattern, "String", pp, /*required=*/false, &literal));
        const bool has_regex = pattern->contains("Regex"), has_string = pattern->contains("String");
        if (has_regex == has_string) return pp.error("expected exactly one of 'Regex' or 'String'");
        auto re = has_regex ? Regex::compile(regex) : Regex::literal(literal);
        if (!re.ok()) return re.status().with_context(pp.source + ": field '" + pp.field + "'");
        step.regex = *re;
    } else {
        return unimplemented(path.source + ": field '" + path.key("type").field + "': decoder type '" + type +
                             "' is not supported (supported: ByteLevel, ByteFallback, Fuse, Strip, Replace, Sequence)");
    }
    steps->push_back(std::move(step));
    return ok_status();
}

std::vector<std::string> Decoder::run(const Step& step, std::vector<std::string> tokens) {
    std::vector<std::string> out;
    switch (step.kind) {
        case Step::Kind::kByteLevel: {  // a token with a character outside the alphabet passes through as UTF-8
            std::string bytes;
            for (const std::string& t : tokens) {
                std::string mapped;
                bool all = true;
                for (size_t pos = 0; pos < t.size() && all;) {
                    char32_t cp = 0;
                    pos += utf8::decode(t, pos, &cp);
                    const int b = utf8::unicode_to_byte(cp);
                    if (b < 0) all = false;
                    mapped.push_back(static_cast<char>(b));
                }
                bytes += all ? mapped : t;
            }
            out.push_back(utf8::lossy(bytes));
            return out;
        }
        case Step::Kind::kByteFallback: {
            std::string pending;
            auto flush = [&] {
                if (pending.empty()) return;
                if (utf8::first_invalid(pending)) {
                    for (size_t i = 0; i < pending.size(); ++i) out.emplace_back(utf8::kReplacement);
                } else {
                    out.push_back(pending);
                }
                pending.clear();
            };
            for (std::string& t : tokens) {
                const int b = byte_token(t);
                if (b >= 0) {
                    pending.push_back(static_cast<char>(b));
                } else {
                    flush();
                    out.push_back(std::move(t));
                }
            }
            flush();
            return out;
        }
        case Step::Kind::kRawBytes: {
            std::string all;
            for (const std::string& t : tokens) all += t;
            out.push_back(utf8::lossy(all));
            return out;
        }
        case Step::Kind::kFuse: {
            std::string all;
            for (const std::string& t : tokens) all += t;
            out.push_back(std::move(all));
            return out;
        }
        case Step::Kind::kStrip:
            for (const std::string& t : tokens) {
                const std::string& c = step.content;
                size_t b = 0, e = t.size();
                for (size_t i = 0; i < step.start && t.compare(b, c.size(), c) == 0 && b < e; ++i) b += c.size();
                for (size_t i = 0; i < step.stop && e >= b + c.size() && t.compare(e - c.size(), c.size(), c) == 0;
                     ++i) {
                    e -= c.size();
                }
                out.push_back(t.substr(b, e - b));
            }
            return out;
        case Step::Kind::kReplace:
            for (const std::string& t : tokens) {
                std::vector<std::pair<size_t, size_t>> m;
                if (!step.regex->find_all(t, &m).ok()) {
                    out.push_back(t);
                    continue;
                }
                std::string r;
                size_t prev = 0;
                for (const auto& [b, e] : m) {
                    r.append(t, prev, b - prev);
                    r += step.content;
                    prev = e;
                }
                r.append(t, prev, std::string::npos);
                out.push_back(std::move(r));
            }
            return out;
    }
    return out;
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
    std::string joined;
    if (!present_) {
        for (size_t i = 0; i < tokens.size(); ++i) {
            if (i > 0) joined.push_back(' ');
            joined += tokens[i];
        }
        return utf8::lossy(joined);
    }
    for (const Step& step : steps_) tokens = run(step, std::move(tokens));
    for (const std::string& t : tokens) joined += t;
    return joined;
}

}  // namespace penstock::engine
