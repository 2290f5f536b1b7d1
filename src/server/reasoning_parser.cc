#include "server/reasoning_parser.h"

#include <algorithm>
#include <utility>

#include "core/text.h"

namespace penstock::server {

Result<ReasoningFormat> reasoning_format_from_name(std::string_view name) {
    if (name == "none" || name.empty()) return ReasoningFormat{};
    if (name == "deepseek-r1" || name == "qwen3-thinking") {
        return ReasoningFormat{.start = "<think>", .end = "</think>", .forced = true, .implicit = ""};
    }
    if (name == "deepseek-v3" || name == "qwen3" || name == "glm45") {
        return ReasoningFormat{.start = "<think>", .end = "</think>", .forced = false, .implicit = ""};
    }
    if (name == "kimi") return ReasoningFormat{.start = "◁think▷", .end = "◁/think▷", .forced = false, .implicit = ""};
    if (name == "kimi_k2") {
        return ReasoningFormat{
            .start = "<think>", .end = "</think>", .forced = false, .implicit = "<|tool_calls_section_begin|>"};
    }
    return invalid_argument("unknown reasoning parser '" + std::string(name) +
                            "' (known: deepseek-r1, deepseek-v3, qwen3, qwen3-thinking, glm45, kimi, kimi_k2, none)");
}

ReasoningParse parse_reasoning(const ReasoningFormat& f, std::string_view text) {
    ReasoningStream s(f);
    ReasoningParse out = s.feed(text);
    ReasoningParse end = s.finish();
    out.reasoning += end.reasoning;
    out.content += end.content;
    return out;
}

ReasoningParse ReasoningStream::feed(std::string_view delta) {
    pending_.append(delta);
    return step(/*last=*/false);
}

ReasoningParse ReasoningStream::finish() { return step(/*last=*/true); }

ReasoningParse ReasoningStream::step(bool last) {
    ReasoningParse out;
    if (!f_.on()) {
        out.content = std::exchange(pending_, {});
        return out;
    }
    while (true) {
        switch (state_) {
            case State::kStart: {
                // Leading whitespace, then the start tag, a prefix of it (wait), or anything else (decided).
                size_t w = 0;
                while (w < pending_.size() && is_ascii_space(pending_[w])) ++w;
                const std::string_view rest = std::string_view(pending_).substr(w);
                if (rest.starts_with(f_.start)) {
                    pending_.erase(0, w + f_.start.size());
                    state_ = State::kReasoning;
                    break;
                }
                if (!last && f_.start.starts_with(rest)) return out;
                state_ = f_.forced ? State::kReasoning : State::kContent;
                break;
            }
            case State::kReasoning: {
                const size_t at_end = pending_.find(f_.end);
                const size_t at_implicit = f_.implicit.empty() ? std::string::npos : pending_.find(f_.implicit);
                if (at_end != std::string::npos && (at_implicit == std::string::npos || at_end <= at_implicit)) {
                    out.reasoning.append(pending_, 0, at_end);
                    pending_.erase(0, at_end + f_.end.size());
                    state_ = State::kContentStart;
                    break;
                }
                if (at_implicit != std::string::npos) {  // the tool-call section ends the reasoning and stays content
                    out.reasoning.append(pending_, 0, at_implicit);
                    pending_.erase(0, at_implicit);
                    state_ = State::kContent;
                    break;
                }
                const std::string_view tags[] = {f_.end, f_.implicit};  // an empty implicit never matches
                const size_t keep = last ? 0 : held_prefix_tail(pending_, tags);
                out.reasoning.append(pending_, 0, pending_.size() - keep);
                pending_.erase(0, pending_.size() - keep);
                return out;
            }
            case State::kContentStart: {
                size_t w = 0;
                while (w < pending_.size() && is_ascii_space(pending_[w])) ++w;
                pending_.erase(0, w);
                if (pending_.empty()) return out;
                state_ = State::kContent;
                break;
            }
            case State::kContent:
                out.content.append(pending_);
                pending_.clear();
                return out;
        }
    }
}

}  // namespace penstock::server
