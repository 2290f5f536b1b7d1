// Pre-tokenization; see pre_tokenizer.h. Split semantics follow `tokenizers` normalizer.rs NormalizedString::split
// and pattern.rs (a match list covering the text, then the behavior folds it into pieces).
#include "engine/pre_tokenizer.h"

#include <utility>

#include "engine/utf8.h"

namespace penstock::engine {

namespace {

using nlohmann::json;

constexpr int kMaxDepth = 8;  // nested Sequence limit (malformed files must not recurse without bound)
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Result<SplitBehavior> parse_behavior(const std::string& s, const JsonPath& path) {
    if (s == "Removed") return SplitBehavior::kRemoved;
    if (s == "Isolated") return SplitBehavior::kIsolated;
    if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
    if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
    if (s == "Contiguous") return SplitBehavior::kContiguous;
    return path.error("unknown split behavior '" + s + "'");
}

struct Span {
    size_t begin, end;
    bool flag;  // is a match (before folding) / is removed (after)
};

std::vector<Span> fold(std::vector<Span> m, SplitBehavior behavior) {
    std::vector<Span> acc;
    bool previous = false;
    switch (behavior) {
        case SplitBehavior::kIsolated:
            for (Span& s : m) s.flag = false;
            return m;
        case SplitBehavior::kRemoved:
            return m;
        case SplitBehavior::kContiguous:
            for (const Span& s : m) {
                if (s.flag == previous && !acc.empty()) {
                    acc.back().end = s.end;
                } else {
                    acc.push_back({s.begin, s.end, false});
                }
                previous = s.flag;
            }
            return acc;
        case SplitBehavior::kMergedWithPrevious:
            for (const Span& s : m) {
                if (s.flag && !previous && !acc.empty()) {
                    acc.back().end = s.end;
                } else {
                    acc.push_back({s.begin, s.end, false});
                }
                previous = s.flag;
            }
            return acc;
        case SplitBehavior::kMergedWithNext:
            for (auto it = m.rbegin(); it != m.rend(); ++it) {
                if (it->flag && !previous && !acc.empty()) {
                    acc.back().begin = it->begin;
                } else {
                    acc.push_back({it->begin, it->end, false});
                }
                previous = it->flag;
            }
            return {acc.rbegin(), acc.rend()};
    }
    return acc;
}

}  // namespace

Result<PreTokenizer> PreTokenizer::from_json(const json& v, const JsonPath& path) {
    PreTokenizer pt;
    if (!v.is_null()) PENSTOCK_RETURN_IF_ERROR(parse(v, path, 0, &pt.steps_));
    return pt;
}

PreTokenizer PreTokenizer::matches_only(std::shared_ptr<const Regex> regex) {
    PreTokenizer pt;
    pt.steps_.push_back(Step{.kind = Step::Kind::kSplit,
                             .regex = std::move(regex),
                             .behavior = SplitBehavior::kRemoved,
                             .invert = true,
                             .add_prefix_space = false});
    return pt;
}

Status PreTokenizer::parse(const json& v, const JsonPath& path, int depth, std::vector<Step>* steps) {
    if (depth > kMaxDepth) return path.error("pre-tokenizer Sequence nested deeper than 8");
    std::string type;
    PENSTOCK_RETURN_IF_ERROR(json_string(v, "type", path, /*required=*/true, &type));
    if (type == "Sequence") {
        PENSTOCK_ASSIGN_OR_RETURN(const json* list, json_field(v, "pretokenizers", path, /*required=*/true));
        if (!list->is_array()) return path.key("pretokenizers").type_error("an array", *list);
        for (size_t i = 0; i < list->size(); ++i) {
            PENSTOCK_RETURN_IF_ERROR(parse((*list)[i], path.key("pretokenizers").index(i), depth + 1, steps));
        }
        return ok_status();
    }
    Step step;
    if (type == "ByteLevel") {
        step.kind = Step::Kind::kByteLevel;
        bool use_regex = true;
        PENSTOCK_RETURN_IF_ERROR(json_bool(v, "add_prefix_space", path, &step.add_prefix_space));
        PENSTOCK_RETURN_IF_ERROR(json_bool(v, "use_regex", path, &use_regex));
        if (use_regex) {
            auto re = Regex::compile(kGpt2Pattern);
            if (!re.ok()) return re.status().with_context(path.source + ": field '" + path.field + "'");
            step.regex = *re;
        }
    } else if (type == "Split") {
        std::string behavior;
        PENSTOCK_RETURN_IF_ERROR(json_string(v, "behavior", path, /*required=*/true, &behavior));
        PENSTOCK_ASSIGN_OR_RETURN(step.behavior, parse_behavior(behavior, path.key("behavior")));
        PENSTOCK_RETURN_IF_ERROR(json_bool(v, "invert", path, &step.invert));
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
        return unimplemented(path.source + ": field '" + path.key("type").field + "': pre-tokenizer type '" + type +
                             "' is not supported (supported: ByteLevel, Split, Sequence)");
    }
    steps->push_back(std::move(step));
    return ok_status();
}

Status PreTokenizer::split(const Step& step, const std::string& text, std::vector<std::string>* out) {
    std::vector<std::pair<size_t, size_t>> found;
    PENSTOCK_RETURN_IF_ERROR(step.regex->find_all(text, &found));
    std::vector<Span> m;  // the text covered by (non-)matches, as `tokenizers` Pattern::find_matches
    size_t prev = 0;
    for (const auto& [b, e] : found) {
        if (prev != b) m.push_back({prev, b, false});
        m.push_back({b, e, true});
        prev = e;
    }
    if (prev != text.size()) m.push_back({prev, text.size(), false});
    if (step.invert) {
        for (Span& s : m) s.flag = !s.flag;
    }
    for (const Span& s : fold(std::move(m), step.behavior)) {
        if (!s.flag && s.end > s.begin) out->push_back(text.substr(s.begin, s.end - s.begin));
    }
    return ok_status();
}

Status PreTokenizer::apply(std::string text, std::vector<std::string>* words) const {
    std::vector<std::string> pieces, next;
    if (!text.empty()) pieces.push_back(std::move(text));
    for (const Step& step : steps_) {
        next.clear();
        for (std::string& piece : pieces) {
            if (step.kind == Step::Kind::kByteLevel && step.add_prefix_space && piece.front() != ' ') {
                piece.insert(piece.begin(), ' ');
            }
            if (step.regex) {
                PENSTOCK_RETURN_IF_ERROR(split(step, piece, &next));
            } else {
                next.push_back(std::move(piece));
            }
        }
        if (step.kind == Step::Kind::kByteLevel) {
            const auto& table = utf8::byte_to_unicode();
            for (std::string& piece : next) {
                std::string mapped;
                mapped.reserve(piece.size() * 2);
                for (unsigned char b : piece) mapped += table[b];
                piece = std::move(mapped);
            }
        }
        pieces.swap(next);
    }
    for (std::string& p : pieces) {
        if (!p.empty()) words->push_back(std::move(p));
    }
    return ok_status();
}

}  // namespace penstock::engine
