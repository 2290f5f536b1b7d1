// Normalizer; see normalizer.h.
#include "engine/normalizer.h"

#include "engine/unicode_nfc.h"

namespace penstock::engine {

Result<Normalizer> Normalizer::from_json(const nlohmann::json& v, const JsonPath& path) {
    Normalizer n;
    if (!v.is_null()) PENSTOCK_RETURN_IF_ERROR(parse(v, path, 0, &n.steps_));
    return n;
}

Status Normalizer::parse(const nlohmann::json& v, const JsonPath& path, int depth, std::vector<Kind>* steps) {
    if (depth > 8) return path.error("normalizer Sequence nested deeper than 8");
    std::string type;
    PENSTOCK_RETURN_IF_ERROR(json_string(v, "type", path, /*required=*/true, &type));
    if (type == "Sequence") {
        PENSTOCK_ASSIGN_OR_RETURN(const nlohmann::json* list, json_field(v, "normalizers", path, /*required=*/true));
        if (!list->is_array()) return path.key("normalizers").type_error("an array", *list);
        for (size_t i = 0; i < list->size(); ++i) {
            PENSTOCK_RETURN_IF_ERROR(parse((*list)[i], path.key("normalizers").index(i), depth + 1, steps));
        }
        return ok_status();
    }
    if (type == "NFC") {
        steps->push_back(Kind::kNfc);
    } else if (type == "NFD") {
        steps->push_back(Kind::kNfd);
    } else {
        return unimplemented(path.source + ": field '" + path.key("type").field + "': normalizer '" + type +
                             "' is not supported (supported: NFC, NFD, Sequence)");
    }
    return ok_status();
}

std::string Normalizer::apply(std::string_view text) const {
    std::string s(text);
    for (Kind k : steps_) {
        switch (k) {
            case Kind::kNfc:
                s = unicode::nfc(s);
                break;
            case Kind::kNfd:
                s = unicode::nfd(s);
                break;
        }
    }
    return s;
}

}  // namespace penstock::engine
