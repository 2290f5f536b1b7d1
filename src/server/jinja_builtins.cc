// The chat-template interpreter's builtins: jinja2's filters and tests, Python's str/dict/list methods, and the
// globals transformers provides (range, namespace, dict, raise_exception, strftime_now). Behaviour follows
// jinja2 3.1 and CPython (e.g. sort/unique are case-insensitive by default, round returns a float).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "server/jinja_interp.h"

namespace penstock::server::jinja {
namespace {

Value arg(const CallArgs& a, size_t i, std::string_view name, Value dflt) {
    const Value* v = a.get(i, name);
    return v != nullptr ? *v : std::move(dflt);
}
const std::string& need_str(const Value& v, const char* what) {
    if (!v.is_str()) fail(std::string(what) + " expects a string, got " + type_name(v));
    return v.s;
}
Value bound(std::string name, std::function<Value(Interp&, const CallArgs&)> fn) {
    auto f = std::make_shared<Func>();
    f->name = std::move(name);
    f->fn = std::move(fn);
    return Value::function(std::move(f));
}

bool py_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
    auto in_set = [&](char c) { return chars.is_str() ? chars.s.find(c) != std::string::npos : py_space(c); };
    size_t b = 0, e = s.size();
    if (left) {
        while (b < e && in_set(s[b])) ++b;
    }
    if (right) {
        while (e > b && in_set(s[e - 1])) --e;
    }
    return s.substr(b, e - b);
}

List split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
    List out;
    if (sep.kind == Kind::kNone || sep.is_undefined()) {
        std::vector<std::pair<size_t, size_t>> words;
        size_t k = 0;
        while (k < s.size()) {
            while (k < s.size() && py_space(s[k])) ++k;
            if (k >= s.size()) break;
            size_t e = k;
            while (e < s.size() && !py_space(s[e])) ++e;
            words.emplace_back(k, e);
            k = e;
        }
        // Python keeps the whitespace around the unsplit remainder (' a b '.split(None, 1) == ['a', 'b ']).
        if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit) {
            if (from_right) {
                const size_t first = words.size() - static_cast<size_t>(maxsplit) - 1;
                out.push_back(Value::str(s.substr(0, words[first].second)));
                for (size_t w = first + 1; w < words.size(); ++w) {
                    out.push_back(Value::str(s.substr(words[w].first, words[w].second - words[w].first)));
                }
                return out;
            }
            for (int64_t w = 0; w < maxsplit; ++w) {
                out.push_back(Value::str(s.substr(words[w].first, words[w].second - words[w].first)));
            }
            out.push_back(Value::str(s.substr(words[maxsplit].first)));
            return out;
        }
        for (const auto& [b, e] : words) out.push_back(Value::str(s.substr(b, e - b)));
        return out;
    }
    const std::string& d = need_str(sep, "split");
    if (d.empty()) fail("empty separator");
    std::vector<std::string> parts;
    if (!from_right) {
        size_t k = 0;
        for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
            const size_t f = s.find(d, k);
            if (f == std::string::npos) break;
            parts.push_back(s.substr(k, f - k));
            k = f + d.size();
        }
        parts.push_back(s.substr(k));
    } else {
        size_t e = s.size();
        for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
            if (e < d.size()) break;
            const size_t f = s.rfind(d, e - d.size());
            if (f == std::string::npos) break;
            parts.insert(parts.begin(), s.substr(f + d.size(), e - f - d.size()));
            e = f;
        }
        parts.insert(parts.begin(), s.substr(0, e));
    }
    for (auto& p : parts) out.push_back(Value::str(std::move(p)));
    return out;
}

std::string map_chars(const std::string& s, int (*fn)(int)) {
    std::string out = s;
    for (char& c : out) {
        if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(fn(static_cast<unsigned char>(c)));
    }
    return out;
}
std::string lower(const std::string& s) {
    return map_chars(s, [](int c) { return std::tolower(c); });
}
std::string upper(const std::string& s) {
    return map_chars(s, [](int c) { return std::toupper(c); });
}
std::string capitalize(const std::string& s) { return s.empty() ? s : upper(s.substr(0, 1)) + lower(s.substr(1)); }
// Python str.title(): a cased letter after an uncased character starts a word.
std::string py_title(const std::string& s) {
    std::string out;
    bool prev_cased = false;
    for (char c : s) {
        const bool alpha = std::isalpha(static_cast<unsigned char>(c)) != 0;
        out += alpha ? static_cast<char>(prev_cased ? std::tolower(c) : std::toupper(c)) : c;
        prev_cased = alpha;
    }
    return out;
}
// jinja2's title filter: words start after whitespace, '-', '(', '{', '[' or '<'.
std::string jinja_title(const std::string& s) {
    std::string out;
    bool start = true;
    for (char c : s) {
        const bool sep = py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        out += sep ? c : static_cast<char>(start ? std::toupper(c) : std::tolower(c));
        start = sep;
    }
    return out;
}
bool has_cased(const std::string& s, bool want_lower) {
    bool any = false;
    for (char c : s) {
        if (std::isupper(static_cast<unsigned char>(c))) {
            if (want_lower) return false;
            any = true;
        } else if (std::islower(static_cast<unsigned char>(c))) {
            if (!want_lower) return false;
            any = true;
        }
    }
    return any;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
    std::string out;
    size_t k = 0;
    int64_t n = 0;
    if (from.empty()) {
        for (size_t c = 0; c <= s.size() && (count < 0 || n < count); ++c, ++n) {
            out += to;
            if (c < s.size()) out += s[c];
            k = c + 1;
        }
        return k <= s.size() ? out + s.substr(std::min(k, s.size())) : out;
    }
    while (count < 0 || n < count) {
        const size_t f = s.find(from, k);
        if (f == std::string::npos) break;
        out += s.substr(k, f - k) + to;
        k = f + from.size();
        ++n;
    }
    return out + s.substr(k);
}

bool starts_or_ends(const std::string& s, const Value& what, bool start) {
    auto one = [&](const Value& p) {
        const std::string& x = need_str(p, start ? "startswith" : "endswith");
        return x.size() <= s.size() &&
               (start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0);
    };
    if (what.kind == Kind::kList) {
        for (const Value& p : *what.list) {
            if (one(p)) return true;
        }
        return false;
    }
    return one(what);
}

int64_t to_int64(const Value& v) {
    if (v.kind == Kind::kInt) return v.i;
    if (v.kind == Kind::kBool) return v.b;
    fail("expected an integer, got " + type_name(v));
}

// Attribute path "a.b" on an item, as jinja2's make_attrgetter (dots, integer parts index).
Value attr_path(Interp& in, const Value& item, const std::string& path) {
    Value v = item;
    size_t k = 0;
    while (true) {
        const size_t dot = path.find('.', k);
        const std::string part = path.substr(k, dot == std::string::npos ? std::string::npos : dot - k);
        const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
        v = digits ? in.get_item(v, Value::integer(std::stoll(part))) : in.get_item(v, Value::str(part));
        if (dot == std::string::npos) return v;
        k = dot + 1;
    }
}

// Sort key for sort/unique/min/max/dictsort: case-insensitive strings unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
    return v.is_str() && !case_sensitive ? Value::str(lower(v.s)) : v;
}

std::string html_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&#34;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

Value tojson(const Value& v, const CallArgs& a) {
    JsonOptions o;
    const Value indent = arg(a, 0, "indent", Value::none());
    if (indent.kind == Kind::kInt) {
        o.pretty = true;
        o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent.i)), ' ');
        o.item_sep = ",";
    } else if (indent.is_str()) {
        o.pretty = true;
        o.indent = indent.s;
        o.item_sep = ",";
    }
    const Value seps = arg(a, 2, "separators", Value::none());
    if (seps.kind == Kind::kList && seps.list->size() == 2) {
        o.item_sep = need_str((*seps.list)[0], "separators");
        o.key_sep = need_str((*seps.list)[1], "separators");
    }
    o.ensure_ascii = truthy(arg(a, 1, "ensure_ascii", Value::boolean(false)));
    o.sort_keys = truthy(arg(a, 3, "sort_keys", Value::boolean(false)));
    return Value::str(to_json(v, o));
}

std::string indent_filter(const std::string& s0, const Value& width, bool first, bool blank) {
    const std::string pad =
        width.is_str() ? width.s : std::string(static_cast<size_t>(std::max<int64_t>(0, to_int64(width))), ' ');
    const std::string s = s0 + "\n";
    std::vector<std::string> lines;
    size_t k = 0;
    while (k < s.size()) {
        size_t e = s.find_first_of("\r\n", k);
        if (e == std::string::npos) {
            lines.push_back(s.substr(k));
            break;
        }
        lines.push_back(s.substr(k, e - k));
        k = e + ((s[e] == '\r' && e + 1 < s.size() && s[e + 1] == '\n') ? 2 : 1);
    }
    std::string rv;
    if (blank) {
        for (size_t i = 0; i < lines.size(); ++i) rv += (i > 0 ? "\n" + pad : "") + lines[i];
    } else {
        rv = lines.empty() ? "" : lines[0];
        for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : pad + lines[i]);
    }
    return first ? pad + rv : rv;
}

}  // namespace

Value Interp::method(const Value& obj, const std::string& name) {
    const Value self = obj;
    if (obj.is_str()) {
        const std::string& s = obj.s;
        if (name == "strip" || name == "lstrip" || name == "rstrip") {
            return bound(name, [s, name](Interp&, const CallArgs& a) {
                return Value::str(strip(s, arg(a, 0, "chars", Value::none()), name != "rstrip", name != "lstrip"));
            });
        }
        if (name == "split" || name == "rsplit") {
            return bound(name, [s, name](Interp&, const CallArgs& a) {
                return Value::make_list(split(s, arg(a, 0, "sep", Value::none()),
                                              to_int64(arg(a, 1, "maxsplit", Value::integer(-1))), name == "rsplit"));
            });
        }
        if (name == "startswith" || name == "endswith") {
            return bound(name, [s, name](Interp&, const CallArgs& a) {
                if (a.pos.empty()) fail(name + " takes one argument");
                if (a.pos.size() == 1) return Value::boolean(starts_or_ends(s, a.pos[0], name == "startswith"));
                // s[start:end] in code points, Python's slice bounds.
                const std::vector<char32_t> cps = decode_utf8(s);
                const auto n = static_cast<int64_t>(cps.size());
                auto bound_at = [n](const Value& v, int64_t dflt) {
                    if (v.kind == Kind::kNone) return dflt;
                    const int64_t k = to_int64(v);
                    return std::clamp(k < 0 ? k + n : k, int64_t{0}, n);
                };
                if (a.pos[1].kind != Kind::kNone && to_int64(a.pos[1]) > n) return Value::boolean(false);
                const int64_t b = bound_at(a.pos[1], 0);
                const int64_t e = a.pos.size() > 2 ? bound_at(a.pos[2], n) : n;
                const std::vector<char32_t> sub(cps.begin() + b, cps.begin() + std::max(b, e));
                return Value::boolean(starts_or_ends(encode_utf8(sub), a.pos[0], name == "startswith"));
            });
        }
        if (name == "lower" || name == "upper" || name == "title" || name == "capitalize" || name == "islower" ||
            name == "isupper") {
            return bound(name, [s, name](Interp&, const CallArgs&) {
                if (name == "islower" || name == "isupper") return Value::boolean(has_cased(s, name == "islower"));
                return Value::str(name == "lower"   ? lower(s)
                                  : name == "upper" ? upper(s)
                                  : name == "title" ? py_title(s)
                                                    : capitalize(s));
            });
        }
        if (name == "replace") {
            return bound(name, [s](Interp&, const CallArgs& a) {
                return Value::str(replace_all(s, need_str(arg(a, 0, "old", Value::none()), "replace"),
                                              need_str(arg(a, 1, "new", Value::none()), "replace"),
                                              to_int64(arg(a, 2, "count", Value::integer(-1)))));
            });
        }
        if (name == "find" || name == "rfind" || name == "count") {
            return bound(name, [s, name](Interp&, const CallArgs& a) {
                const std::string& x = need_str(arg(a, 0, "sub", Value::none()), name.c_str());
                if (name == "count") {
                    if (x.empty()) return Value::integer(length(Value::str(s)) + 1);
                    int64_t n = 0;
                    for (size_t k = s.find(x); k != std::string::npos; k = s.find(x, k + x.size())) ++n;
                    return Value::integer(n);
                }
                const size_t f = name == "find" ? s.find(x) : s.rfind(x);
                return Value::integer(f == std::string::npos ? -1 : length(Value::str(s.substr(0, f))));
            });
        }
        if (name == "join") {
            return bound(name, [s](Interp&, const CallArgs& a) {
                std::string out;
                const List items = iterate(arg(a, 0, "iterable", Value::make_list({})));
                for (size_t k = 0; k < items.size(); ++k) out += (k > 0 ? s : "") + need_str(items[k], "join");
                return Value::str(out);
            });
        }
        return Value::undefined("");
    }
    if (obj.kind == Kind::kDict) {
        if (name == "items" || name == "keys" || name == "values") {
            return bound(name, [self, name](Interp&, const CallArgs&) {
                List out;
                for (const auto& [k, v] : self.dict->items) {
                    out.push_back(name == "items"  ? Value::make_list({Value::str(k), v}, true)
                                  : name == "keys" ? Value::str(k)
                                                   : v);
                }
                return Value::make_list(std::move(out));
            });
        }
        if (name == "get") {
            return bound(name, [self](Interp&, const CallArgs& a) {
                const Value key = arg(a, 0, "key", Value::none());
                const Value* v = key.is_str() ? self.dict->find(key.s) : nullptr;
                return v != nullptr ? *v : arg(a, 1, "default", Value::none());
            });
        }
    }
    if (obj.kind == Kind::kList) {
        if (name == "index" || name == "count") {
            return bound(name, [self, name](Interp&, const CallArgs& a) {
                const Value x = arg(a, 0, "value", Value::none());
                int64_t n = 0;
                for (size_t k = 0; k < self.list->size(); ++k) {
                    if (!equals((*self.list)[k], x)) continue;
                    if (name == "index") return Value::integer(static_cast<int64_t>(k));
                    ++n;
                }
                if (name == "index") fail(repr(x) + " is not in list");
                return Value::integer(n);
            });
        }
        if (name == "append" || name == "extend" || name == "pop" || name == "insert" || name == "remove" ||
            name == "clear") {
            // transformers renders in jinja2's ImmutableSandboxedEnvironment, which refuses mutating list methods.
            return bound(name, [self, name](Interp&, const CallArgs&) -> Value {
                fail("access to attribute '" + name + "' of '" + (self.b ? "tuple" : "list") + "' object is unsafe.");
            });
        }
    }
    return Value::undefined("");
}

Value Interp::filter(const std::string& name, const Value& v, const CallArgs& a) {
    auto str_of = [](const Value& x) { return to_str(x); };
    if (name == "default" || name == "d") {
        const bool boolean = truthy(arg(a, 1, "boolean", Value::boolean(false)));
        if (v.is_undefined() || (boolean && !truthy(v))) return arg(a, 0, "default_value", Value::str(""));
        return v;
    }
    if (name == "safe" || name == "string") return name == "safe" && !v.is_undefined() ? v : Value::str(str_of(v));
    if (v.is_undefined() && name != "length" && name != "count" && name != "list" && name != "join" &&
        name != "items" && name != "trim" && name != "lower" && name != "upper" && name != "e" && name != "escape" &&
        name != "wordcount") {
        fail(v.s.empty() ? "undefined value" : v.s);
    }
    if (name == "trim") return Value::str(strip(str_of(v), arg(a, 0, "chars", Value::none()), true, true));
    if (name == "length" || name == "count") return Value::integer(length(v));
    if (name == "tojson") return tojson(v, a);
    if (name == "lower") return Value::str(lower(str_of(v)));
    if (name == "upper") return Value::str(upper(str_of(v)));
    if (name == "title") return Value::str(jinja_title(str_of(v)));
    if (name == "capitalize") return Value::str(capitalize(str_of(v)));
    if (name == "e" || name == "escape") return Value::str(html_escape(str_of(v)));
    if (name == "wordcount") {
        int64_t n = 0;
        bool in_word = false;
        for (char c : str_of(v)) {
            const bool w =
                std::isalnum(static_cast<unsigned char>(c)) || c == '_' || static_cast<unsigned char>(c) >= 0x80;
            n += w && !in_word;
            in_word = w;
        }
        return Value::integer(n);
    }
    if (name == "int") {
        if (v.kind == Kind::kInt || v.kind == Kind::kBool) return Value::integer(to_int64(v));
        if (v.kind == Kind::kFloat) return Value::integer(static_cast<int64_t>(v.f));
        if (v.is_str()) {
            const std::string t = strip(v.s, Value::none(), true, true);
            char* end = nullptr;
            errno = 0;
            const long long x = std::strtoll(t.c_str(), &end, 10);
            if (!t.empty() && *end == '\0' && errno == 0) return Value::integer(x);
            const double d = std::strtod(t.c_str(), &end);
            if (!t.empty() && *end == '\0' && std::isfinite(d)) return Value::integer(static_cast<int64_t>(d));
        }
        return arg(a, 0, "default", Value::integer(0));
    }
    if (name == "float") {
        if (v.is_number()) return Value::real(as_double(v));
        if (v.is_str()) {
            const std::string t = strip(v.s, Value::none(), true, true);
            char* end = nullptr;
            const double d = std::strtod(t.c_str(), &end);
            if (!t.empty() && *end == '\0') return Value::real(d);
        }
        return arg(a, 0, "default", Value::real(0));
    }
    if (name == "abs") {
        if (v.kind == Kind::kFloat) return Value::real(std::fabs(v.f));
        return Value::integer(std::llabs(to_int64(v)));
    }
    if (name == "round") {
        const int64_t prec = to_int64(arg(a, 0, "precision", Value::integer(0)));
        const std::string method = to_str(arg(a, 1, "method", Value::str("common")));
        if (method == "common" && (v.kind == Kind::kInt || v.kind == Kind::kBool)) {
            // Python's round(int, n) stays an int; n < 0 rounds to a multiple of 10^-n, half to even.
            const int64_t x = to_int64(v);
            if (prec >= 0) return Value::integer(x);
            if (prec < -18) return Value::integer(0);
            int64_t unit = 1;
            for (int64_t k = 0; k < -prec; ++k) unit *= 10;
            int64_t q = x / unit;
            if (x % unit != 0 && x < 0) --q;  // floor division
            const int64_t r = x - q * unit;
            if (2 * r > unit || (2 * r == unit && q % 2 != 0)) ++q;
            return Value::integer(q * unit);
        }
        if (method == "common" && v.kind == Kind::kFloat && prec >= 0 && prec <= 17 && std::isfinite(v.f)) {
            // Python rounds the exact binary value half-to-even (round(2.55, 1) == 2.5); so does printf.
            char buf[400];
            std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(prec), v.f);
            return Value::real(std::strtod(buf, nullptr));
        }
        const double scale = std::pow(10.0, static_cast<double>(prec));
        const double x = as_double(v) * scale;
        const double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);
        return Value::real(r / scale);
    }
    if (name == "first" || name == "last") {
        const List items = iterate(v);
        if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
        return name == "first" ? items.front() : items.back();
    }
    if (name == "list") return Value::make_list(iterate(v));
    if (name == "items") {
        if (v.is_undefined()) return Value::make_list({});
        if (v.kind != Kind::kDict) fail("items filter expects a mapping, got " + type_name(v));
        List out;
        for (const auto& [k, x] : v.dict->items) out.push_back(Value::make_list({Value::str(k), x}, true));
        return Value::make_list(std::move(out));
    }
    if (name == "reverse") {
        if (v.is_str()) {
            std::vector<char32_t> cps = decode_utf8(v.s);
            std::reverse(cps.begin(), cps.end());
            return Value::str(encode_utf8(cps));
        }
        List items = iterate(v);
        std::reverse(items.begin(), items.end());
        return Value::make_list(std::move(items));
    }
    if (name == "join") {
        const std::string sep = to_str(arg(a, 0, "d", Value::str("")));
        const Value attr = arg(a, 1, "attribute", Value::none());
        std::string out;
        const List items = iterate(v);
        for (size_t k = 0; k < items.size(); ++k) {
            out += (k > 0 ? sep : "") +
                   str_of(attr.kind == Kind::kNone ? items[k] : attr_path(*this, items[k], to_str(attr)));
        }
        return Value::str(out);
    }
    if (name == "replace") {
        return Value::str(replace_all(str_of(v), str_of(arg(a, 0, "old", Value::str(""))),
                                      str_of(arg(a, 1, "new", Value::str(""))),
                                      to_int64(arg(a, 2, "count", Value::integer(-1)))));
    }
    if (name == "indent") {
        return Value::str(indent_filter(str_of(v), arg(a, 0, "width", Value::integer(4)),
                                        truthy(arg(a, 1, "first", Value::boolean(false))),
                                        truthy(arg(a, 2, "blank", Value::boolean(false)))));
    }
    if (name == "map") {
        List out;
        const Value* attr = a.get(SIZE_MAX, "attribute");
        for (const Value& item : iterate(v)) {
            if (attr != nullptr) {
                Value x = attr_path(*this, item, to_str(*attr));
                if (x.is_undefined()) {
                    if (const Value* d = a.get(SIZE_MAX, "default")) x = *d;
                }
                out.push_back(x);
            } else {
                if (a.pos.empty()) fail("map requires a filter name or attribute=");
                CallArgs rest{.pos = {a.pos.begin() + 1, a.pos.end()}, .kw = a.kw};
                out.push_back(filter(to_str(a.pos[0]), item, rest));
            }
        }
        return Value::make_list(std::move(out));
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
        const bool by_attr = name.ends_with("attr");
        const bool want = name.starts_with("select");
        const size_t t0 = by_attr ? 1 : 0;
        List out;
        for (const Value& item : iterate(v)) {
            const Value x = by_attr ? attr_path(*this, item, to_str(arg(a, 0, "attribute", Value::str("")))) : item;
            bool ok;
            if (a.pos.size() <= t0) {
                ok = truthy(x);
            } else {
                const std::string tname = to_str(a.pos[t0]);
                CallArgs rest{.pos = {a.pos.begin() + static_cast<std::ptrdiff_t>(t0) + 1, a.pos.end()}, .kw = {}};
                ok = tname == "defined"     ? !x.is_undefined()
                     : tname == "undefined" ? x.is_undefined()
                                            : test(tname, x, rest);
            }
            if (ok == want) out.push_back(item);
        }
        return Value::make_list(std::move(out));
    }
    if (name == "unique" || name == "sort" || name == "min" || name == "max" || name == "dictsort") {
        const bool cs = truthy(arg(a, name == "sort" ? 1 : 0, "case_sensitive", Value::boolean(false)));
        const Value attr = arg(a, name == "sort" ? 2 : 1, "attribute", Value::none());
        List items;
        if (name == "dictsort") {
            if (v.kind != Kind::kDict) fail("dictsort expects a mapping");
            for (const auto& [k, x] : v.dict->items) items.push_back(Value::make_list({Value::str(k), x}, true));
        } else {
            items = iterate(v);
        }
        const bool by_value = name == "dictsort" && to_str(arg(a, 1, "by", Value::str("key"))) == "value";
        auto key = [&](const Value& item) {
            if (name == "dictsort") return sort_key((*item.list)[by_value ? 1 : 0], cs);
            return sort_key(attr.kind == Kind::kNone ? item : attr_path(*this, item, to_str(attr)), cs);
        };
        if (name == "unique") {
            List out, seen;
            for (const Value& item : items) {
                const Value k = key(item);
                if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
                    seen.push_back(k);
                    out.push_back(item);
                }
            }
            return Value::make_list(std::move(out));
        }
        if (name == "min" || name == "max") {
            if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
            Value best = items[0];
            for (const Value& item : items) {
                if (name == "min" ? less(key(item), key(best)) : less(key(best), key(item))) best = item;
            }
            return best;
        }
        const bool rev = truthy(arg(a, name == "sort" ? 0 : 2, "reverse", Value::boolean(false)));
        std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
            return rev ? less(key(y), key(x)) : less(key(x), key(y));
        });
        return Value::make_list(std::move(items));
    }
    if (name == "sum") {
        const Value attr = arg(a, 0, "attribute", Value::none());
        Value total = arg(a, 1, "start", Value::integer(0));
        for (const Value& item : iterate(v)) {
            const Value x = attr.kind == Kind::kNone ? item : attr_path(*this, item, to_str(attr));
            total = total.kind == Kind::kFloat || x.kind == Kind::kFloat
                        ? Value::real(as_double(total) + as_double(x))
                        : Value::integer(to_int64(total) + to_int64(x));
        }
        return total;
    }
    fail("no filter named '" + name + "'");
}

bool Interp::test(const std::string& name, const Value& v, const CallArgs& a) {
    auto other = [&]() -> const Value& {
        if (a.pos.empty()) fail("test '" + name + "' needs an argument");
        return a.pos[0];
    };
    if (name == "none") return v.kind == Kind::kNone;
    if (name == "string") return v.is_str();
    if (name == "number") return v.is_number();
    if (name == "integer") return v.kind == Kind::kInt;
    if (name == "float") return v.kind == Kind::kFloat;
    if (name == "boolean") return v.kind == Kind::kBool;
    if (name == "true") return v.kind == Kind::kBool && v.b;
    if (name == "false") return v.kind == Kind::kBool && !v.b;
    if (name == "mapping") return v.kind == Kind::kDict;
    if (name == "iterable") return v.kind == Kind::kList || v.kind == Kind::kDict || v.is_str() || v.is_undefined();
    if (name == "sequence") return v.kind == Kind::kList || v.kind == Kind::kDict || v.is_str() || v.is_undefined();
    if (name == "callable") return v.kind == Kind::kFunc;
    if (name == "eq" || name == "equalto" || name == "==") return equals(v, other());
    if (name == "ne" || name == "!=") return !equals(v, other());
    if (name == "lt" || name == "lessthan" || name == "<") return less(v, other());
    if (name == "gt" || name == "greaterthan" || name == ">") return less(other(), v);
    if (name == "le" || name == "<=") return less(v, other()) || equals(v, other());
    if (name == "ge" || name == ">=") return less(other(), v) || equals(v, other());
    if (name == "in") {
        const Value& c = other();
        if (c.is_str()) return v.is_str() && c.s.find(v.s) != std::string::npos;
        if (c.kind == Kind::kDict) return v.is_str() && c.dict->find(v.s) != nullptr;
        for (const Value& x : iterate(c)) {
            if (equals(x, v)) return true;
        }
        return false;
    }
    if (name == "odd" || name == "even") {
        const int64_t x = to_int64(v);
        return (((x % 2) + 2) % 2 == 1) == (name == "odd");
    }
    if (name == "divisibleby") {
        const int64_t d = to_int64(other());
        if (d == 0) fail("integer division or modulo by zero");
        return to_int64(v) % d == 0;
    }
    if (name == "lower" || name == "upper") return has_cased(to_str(v), name == "lower");
    if (name == "sameas") {
        const Value& o = other();
        if (v.kind != o.kind) return false;
        if (v.kind == Kind::kList) return v.list == o.list;
        if (v.kind == Kind::kDict || v.kind == Kind::kNamespace) return v.dict == o.dict;
        return equals(v, o);
    }
    fail("no test named '" + name + "'");
}

void add_builtin_globals(Dict* g) {
    g->set("range", bound("range", [](Interp&, const CallArgs& a) {
               int64_t start = 0, stop = 0, step = 1;
               if (a.pos.size() == 1) {
                   stop = to_int64(a.pos[0]);
               } else if (a.pos.size() >= 2) {
                   start = to_int64(a.pos[0]);
                   stop = to_int64(a.pos[1]);
                   if (a.pos.size() > 2) step = to_int64(a.pos[2]);
               } else {
                   fail("range expected at least 1 argument");
               }
               if (step == 0) fail("range() arg 3 must not be zero");
               List out;
               for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
                   if (static_cast<int64_t>(out.size()) >= kMaxRangeLength)
                       fail("range too big, maximum size for range is " + std::to_string(kMaxRangeLength));
                   out.push_back(Value::integer(k));
               }
               return Value::make_list(std::move(out));
           }));
    auto make_mapping = [](bool ns) {
        return [ns](Interp&, const CallArgs& a) {
            Value d = ns ? Value::make_namespace() : Value::make_dict();
            if (!a.pos.empty()) {
                if (a.pos[0].kind != Kind::kDict) fail("expected a mapping as the positional argument");
                d.dict->items = a.pos[0].dict->items;
            }
            for (const auto& [k, v] : a.kw) d.dict->set(k, v);
            return d;
        };
    };
    g->set("namespace", bound("namespace", make_mapping(true)));
    g->set("dict", bound("dict", make_mapping(false)));
    g->set("raise_exception", bound("raise_exception", [](Interp&, const CallArgs& a) -> Value {
               throw Error(a.pos.empty() ? std::string("raise_exception") : to_str(a.pos[0]), -1);
           }));
    g->set("strftime_now", bound("strftime_now", [](Interp&, const CallArgs& a) {
               const std::time_t now = std::time(nullptr);
               std::tm tm{};
               localtime_r(&now, &tm);
               char buf[256];
               const size_t n = std::strftime(buf, sizeof(buf), a.pos.empty() ? "" : to_str(a.pos[0]).c_str(), &tm);
               return Value::str(std::string(buf, n));
           }));
}

}  // namespace penstock::server::jinja
