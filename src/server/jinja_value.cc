// Jinja values: constructors, Python str/repr/==/< semantics, json.dumps, and conversion from JSON.
#include "server/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace penstock::server::jinja {

void fail(const std::string& message) { throw Error(message, 0); }

Value Value::undefined(std::string why) {
    Value v;
    v.s = std::move(why);
    return v;
}
Value Value::none() {
    Value v;
    v.kind = Kind::kNone;
    return v;
}
Value Value::boolean(bool b) {
    Value v;
    v.kind = Kind::kBool;
    v.b = b;
    return v;
}
Value Value::integer(int64_t i) {
    Value v;
    v.kind = Kind::kInt;
    v.i = i;
    return v;
}
Value Value::real(double f) {
    Value v;
    v.kind = Kind::kFloat;
    v.f = f;
    return v;
}
Value Value::str(std::string s) {
    Value v;
    v.kind = Kind::kStr;
    v.s = std::move(s);
    return v;
}
Value Value::make_list(List items, bool tuple) {
    Value v;
    v.kind = Kind::kList;
    v.b = tuple;
    v.list = std::make_shared<List>(std::move(items));
    return v;
}
Value Value::make_dict() {
    Value v;
    v.kind = Kind::kDict;
    v.dict = std::make_shared<Dict>();
    return v;
}
Value Value::make_namespace() {
    Value v;
    v.kind = Kind::kNamespace;
    v.dict = std::make_shared<Dict>();
    return v;
}
Value Value::function(std::shared_ptr<const Func> fn) {
    Value v;
    v.kind = Kind::kFunc;
    v.func = std::move(fn);
    return v;
}

const Value* Dict::find(std::string_view key) const {
    for (const auto& [k, v] : items) {
        if (k == key) return &v;
    }
    return nullptr;
}
void Dict::set(const std::string& key, Value v) {
    for (auto& [k, old] : items) {
        if (k == key) {
            old = std::move(v);
            return;
        }
    }
    items.emplace_back(key, std::move(v));
}

const Value* CallArgs::get(size_t i, std::string_view name) const {
    if (i < pos.size()) return &pos[i];
    for (const auto& [k, v] : kw) {
        if (k == name) return &v;
    }
    return nullptr;
}

bool truthy(const Value& v) {
    switch (v.kind) {
        case Kind::kUndefined:
        case Kind::kNone:
            return false;
        case Kind::kBool:
            return v.b;
        case Kind::kInt:
            return v.i != 0;
        case Kind::kFloat:
            return v.f != 0;
        case Kind::kStr:
            return !v.s.empty();
        case Kind::kList:
            return !v.list->empty();
        case Kind::kDict:
            return !v.dict->items.empty();
        case Kind::kNamespace:
        case Kind::kFunc:
            return true;
    }
    return false;
}

std::string type_name(const Value& v) {
    switch (v.kind) {
        case Kind::kUndefined:
            return "Undefined";
        case Kind::kNone:
            return "NoneType object";
        case Kind::kBool:
            return "bool object";
        case Kind::kInt:
            return "int object";
        case Kind::kFloat:
            return "float object";
        case Kind::kStr:
            return "str object";
        case Kind::kList:
            return v.b ? "tuple object" : "list object";
        case Kind::kDict:
            return "dict object";
        case Kind::kNamespace:
            return "Namespace object";
        case Kind::kFunc:
            return "function object";
    }
    return "object";
}

std::string format_float(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    // Shortest round-trip digits, then Python's layout: fixed for 1e-4 <= |d| < 1e16, else d.ddde+XX.
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
    std::string sci(buf, r.ptr);
    const size_t e = sci.find('e');
    std::string mant = sci.substr(0, e);
    const int exp = std::stoi(sci.substr(e + 1));
    bool neg = false;
    if (!mant.empty() && mant[0] == '-') {
        neg = true;
        mant.erase(0, 1);
    }
    std::string digits;
    for (char c : mant) {
        if (c != '.') digits += c;
    }
    std::string out;
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
        } else if (static_cast<int>(digits.size()) <= exp + 1) {
            out = digits + std::string(static_cast<size_t>(exp + 1 - static_cast<int>(digits.size())), '0') + ".0";
        } else {
            out = digits.substr(0, static_cast<size_t>(exp + 1)) + "." + digits.substr(static_cast<size_t>(exp + 1));
        }
    } else {
        out = digits.substr(0, 1);
        if (digits.size() > 1) out += "." + digits.substr(1);
        char eb[16];
        std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
        out += eb;
    }
    return neg ? "-" + out : out;
}

namespace {

std::string repr_str(const std::string& s) {
    const bool quote_double = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
    const char q = quote_double ? '"' : '\'';
    std::string out(1, q);
    for (unsigned char c : s) {
        if (c == q || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7f) {
            char b[8];
            std::snprintf(b, sizeof(b), "\\x%02x", c);
            out += b;
        } else {
            out += static_cast<char>(c);
        }
    }
    out += q;
    return out;
}

}  // namespace

std::string repr(const Value& v) {
    switch (v.kind) {
        case Kind::kStr:
            return repr_str(v.s);
        case Kind::kList: {
            std::string out = v.b ? "(" : "[";
            for (size_t k = 0; k < v.list->size(); ++k) {
                if (k > 0) out += ", ";
                out += repr((*v.list)[k]);
            }
            if (v.b && v.list->size() == 1) out += ",";
            return out + (v.b ? ")" : "]");
        }
        case Kind::kDict: {
            std::string out = "{";
            for (size_t k = 0; k < v.dict->items.size(); ++k) {
                if (k > 0) out += ", ";
                out += repr_str(v.dict->items[k].first) + ": " + repr(v.dict->items[k].second);
            }
            return out + "}";
        }
        case Kind::kUndefined:
            return "Undefined";
        case Kind::kNamespace:
            return "<Namespace>";
        case Kind::kFunc:
            return "<function " + v.func->name + ">";
        default:
            return to_str(v);
    }
}

std::string to_str(const Value& v) {
    switch (v.kind) {
        case Kind::kUndefined:
            return "";
        case Kind::kNone:
            return "None";
        case Kind::kBool:
            return v.b ? "True" : "False";
        case Kind::kInt:
            return std::to_string(v.i);
        case Kind::kFloat:
            return format_float(v.f);
        case Kind::kStr:
            return v.s;
        default:
            return repr(v);
    }
}

double as_double(const Value& v) {
    switch (v.kind) {
        case Kind::kInt:
            return static_cast<double>(v.i);
        case Kind::kFloat:
            return v.f;
        case Kind::kBool:
            return v.b ? 1 : 0;
        default:
            fail("expected a number, got " + type_name(v));
    }
}

bool equals(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.kind == Kind::kFloat || b.kind == Kind::kFloat) return as_double(a) == as_double(b);
        return (a.kind == Kind::kBool ? a.b : a.i) == (b.kind == Kind::kBool ? b.b : b.i);
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
        case Kind::kUndefined:
        case Kind::kNone:
            return true;
        case Kind::kStr:
            return a.s == b.s;
        case Kind::kList:
            if (a.list->size() != b.list->size()) return false;
            for (size_t k = 0; k < a.list->size(); ++k) {
                if (!equals((*a.list)[k], (*b.list)[k])) return false;
            }
            return true;
        case Kind::kDict: {
            if (a.dict->items.size() != b.dict->items.size()) return false;
            for (const auto& [k, v] : a.dict->items) {
                const Value* o = b.dict->find(k);
                if (o == nullptr || !equals(v, *o)) return false;
            }
            return true;
        }
        case Kind::kNamespace:
            return a.dict == b.dict;
        case Kind::kFunc:
            return a.func == b.func;
        default:
            return false;
    }
}

bool less(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) return as_double(a) < as_double(b);
    if (a.is_str() && b.is_str()) return a.s < b.s;
    if (a.kind == Kind::kList && b.kind == Kind::kList) {
        const size_t n = std::min(a.list->size(), b.list->size());
        for (size_t k = 0; k < n; ++k) {
            if (!equals((*a.list)[k], (*b.list)[k])) return less((*a.list)[k], (*b.list)[k]);
        }
        return a.list->size() < b.list->size();
    }
    fail("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

std::vector<char32_t> decode_utf8(std::string_view s) {
    std::vector<char32_t> out;
    out.reserve(s.size());
    for (size_t k = 0; k < s.size();) {
        const auto c = static_cast<unsigned char>(s[k]);
        int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
        if (k + static_cast<size_t>(n) > s.size()) n = 1;
        char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
        for (int t = 1; t < n; ++t) cp = (cp << 6) | (static_cast<unsigned char>(s[k + t]) & 0x3f);
        out.push_back(cp);
        k += static_cast<size_t>(n);
    }
    return out;
}

void append_utf8(std::string* out, char32_t cp) {
    if (cp < 0x80) {
        *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        *out += static_cast<char>(0xc0 | (cp >> 6));
        *out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        *out += static_cast<char>(0xe0 | (cp >> 12));
        *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        *out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        *out += static_cast<char>(0xf0 | (cp >> 18));
        *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        *out += static_cast<char>(0x80 | (cp & 0x3f));
    }
}

std::string encode_utf8(const std::vector<char32_t>& cps) {
    std::string out;
    for (char32_t c : cps) append_utf8(&out, c);
    return out;
}

int64_t length(const Value& v) {
    switch (v.kind) {
        case Kind::kUndefined:
            return 0;
        case Kind::kStr: {
            int64_t n = 0;
            for (unsigned char c : v.s) n += (c & 0xc0) != 0x80;
            return n;
        }
        case Kind::kList:
            return static_cast<int64_t>(v.list->size());
        case Kind::kDict:
            return static_cast<int64_t>(v.dict->items.size());
        default:
            fail("object of type '" + type_name(v) + "' has no len()");
    }
}

List iterate(const Value& v) {
    switch (v.kind) {
        case Kind::kUndefined:
            return {};
        case Kind::kList:
            return *v.list;
        case Kind::kDict: {
            List keys;
            for (const auto& kv : v.dict->items) keys.push_back(Value::str(kv.first));
            return keys;
        }
        case Kind::kStr: {
            List chars;
            for (char32_t c : decode_utf8(v.s)) {
                std::string one;
                append_utf8(&one, c);
                chars.push_back(Value::str(std::move(one)));
            }
            return chars;
        }
        default:
            fail("'" + type_name(v) + "' is not iterable");
    }
}

namespace {

void json_str(std::string* out, const std::string& s, bool ensure_ascii) {
    *out += '"';
    auto esc = [&](char32_t c) {
        char b[16];
        std::snprintf(b, sizeof(b), "\\u%04x", static_cast<unsigned>(c));
        *out += b;
    };
    for (char32_t c : decode_utf8(s)) {
        switch (c) {
            case '"':
                *out += "\\\"";
                break;
            case '\\':
                *out += "\\\\";
                break;
            case '\n':
                *out += "\\n";
                break;
            case '\r':
                *out += "\\r";
                break;
            case '\t':
                *out += "\\t";
                break;
            case '\b':
                *out += "\\b";
                break;
            case '\f':
                *out += "\\f";
                break;
            default:
                if (c < 0x20) {
                    esc(c);
                } else if (ensure_ascii && c > 0x7e) {
                    if (c >= 0x10000) {
                        esc(0xd800 + ((c - 0x10000) >> 10));
                        esc(0xdc00 + ((c - 0x10000) & 0x3ff));
                    } else {
                        esc(c);
                    }
                } else {
                    append_utf8(out, c);
                }
        }
    }
    *out += '"';
}

void json_value(std::string* out, const Value& v, const JsonOptions& o, int depth) {
    if (depth > 256) fail("tojson: value nested too deeply");
    const std::string nl = o.pretty ? "\n" : "";
    auto pad = [&](int d) {
        std::string p;
        if (o.pretty) {
            for (int k = 0; k < d; ++k) p += o.indent;
        }
        return p;
    };
    switch (v.kind) {
        case Kind::kNone:
            *out += "null";
            return;
        case Kind::kBool:
            *out += v.b ? "true" : "false";
            return;
        case Kind::kInt:
            *out += std::to_string(v.i);
            return;
        case Kind::kFloat:
            *out += std::isnan(v.f)   ? "NaN"
                    : std::isinf(v.f) ? (v.f < 0 ? "-Infinity" : "Infinity")
                                      : format_float(v.f);
            return;
        case Kind::kStr:
            json_str(out, v.s, o.ensure_ascii);
            return;
        case Kind::kList: {
            if (v.list->empty()) {
                *out += "[]";
                return;
            }
            *out += "[" + nl;
            for (size_t k = 0; k < v.list->size(); ++k) {
                if (k > 0) *out += o.item_sep + nl;
                *out += pad(depth + 1);
                json_value(out, (*v.list)[k], o, depth + 1);
            }
            *out += nl + pad(depth) + "]";
            return;
        }
        case Kind::kDict: {
            if (v.dict->items.empty()) {
                *out += "{}";
                return;
            }
            std::vector<const std::pair<std::string, Value>*> items;
            for (const auto& kv : v.dict->items) items.push_back(&kv);
            if (o.sort_keys) {
                std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
            }
            *out += "{" + nl;
            for (size_t k = 0; k < items.size(); ++k) {
                if (k > 0) *out += o.item_sep + nl;
                *out += pad(depth + 1);
                json_str(out, items[k]->first, o.ensure_ascii);
                *out += o.key_sep;
                json_value(out, items[k]->second, o, depth + 1);
            }
            *out += nl + pad(depth) + "}";
            return;
        }
        default:
            fail("Object of type " + type_name(v) + " is not JSON serializable");
    }
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& o) {
    std::string out;
    json_value(&out, v, o, 0);
    return out;
}

Value from_json(const nlohmann::ordered_json& j) {
    switch (j.type()) {
        case nlohmann::ordered_json::value_t::null:
            return Value::none();
        case nlohmann::ordered_json::value_t::boolean:
            return Value::boolean(j.get<bool>());
        case nlohmann::ordered_json::value_t::number_integer:
            return Value::integer(j.get<int64_t>());
        case nlohmann::ordered_json::value_t::number_unsigned:
            return Value::integer(static_cast<int64_t>(j.get<uint64_t>()));
        case nlohmann::ordered_json::value_t::number_float:
            return Value::real(j.get<double>());
        case nlohmann::ordered_json::value_t::string:
            return Value::str(j.get<std::string>());
        case nlohmann::ordered_json::value_t::array: {
            List items;
            items.reserve(j.size());
            for (const auto& e : j) items.push_back(from_json(e));
            return Value::make_list(std::move(items));
        }
        case nlohmann::ordered_json::value_t::object: {
            Value d = Value::make_dict();
            for (const auto& [k, e] : j.items()) d.dict->items.emplace_back(k, from_json(e));
            return d;
        }
        default:
            return Value::none();
    }
}

}  // namespace penstock::server::jinja
