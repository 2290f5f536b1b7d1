// ChatTemplate: segmenting (with trim_blocks / lstrip_blocks / '-' whitespace control), a recursive-descent parser
// for the tag and expression subset, and a tree-walking renderer. Errors are thrown as TemplateError inside this
// file only and returned as Status at the two public entry points.
#include "server/chat_template.h"

#include <cctype>
#include <map>
#include <stdexcept>

namespace penstock::server {
namespace {

struct TemplateError : std::runtime_error {
    bool unsupported;
    TemplateError(const std::string& m, bool u) : std::runtime_error(m), unsupported(u) {}
};
[[noreturn]] void bad(const std::string& m) { throw TemplateError(m, false); }
[[noreturn]] void unsupported(const std::string& m) { throw TemplateError(m, true); }

struct Value {
    enum Kind { kUndef, kNone, kBool, kInt, kStr, kList, kMap } kind = kUndef;
    bool b = false;
    int64_t i = 0;
    std::string s = {};
    std::shared_ptr<std::vector<Value>> list = {};
    std::shared_ptr<std::map<std::string, Value>> map = {};
};
Value str(std::string s) { return Value{.kind = Value::kStr, .s = std::move(s)}; }
Value boolean(bool b) { return Value{.kind = Value::kBool, .b = b}; }
bool truthy(const Value& v) {
    switch (v.kind) {
        case Value::kUndef:
        case Value::kNone:
            return false;
        case Value::kBool:
            return v.b;
        case Value::kInt:
            return v.i != 0;
        case Value::kStr:
            return !v.s.empty();
        case Value::kList:
            return !v.list->empty();
        case Value::kMap:
            return !v.map->empty();
    }
    return false;
}
std::string to_text(const Value& v) {
    switch (v.kind) {
        case Value::kUndef:
            return "";
        case Value::kNone:
            return "None";
        case Value::kBool:
            return v.b ? "True" : "False";
        case Value::kInt:
            return std::to_string(v.i);
        case Value::kStr:
            return v.s;
        case Value::kList:
        case Value::kMap:
            bad("cannot print a list or mapping");
    }
    return "";
}
bool equal(const Value& a, const Value& b) {
    if ((a.kind == Value::kUndef || a.kind == Value::kNone) && (b.kind == Value::kUndef || b.kind == Value::kNone)) {
        return true;
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
        case Value::kBool:
            return a.b == b.b;
        case Value::kInt:
            return a.i == b.i;
        case Value::kStr:
            return a.s == b.s;
        default:
            return false;
    }
}

// ---- expressions ----

struct Expr {
    enum Kind { kLit, kName, kAttr, kIndex, kBin, kNot, kTest, kFilter, kRaise } kind = kLit;
    Value lit;
    std::string name;  // name, attribute, operator, test or filter
    bool negate = false;
    std::vector<std::unique_ptr<Expr>> kids;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Tok {
    enum Kind { kName, kStr, kInt, kOp, kEnd } kind = kEnd;
    std::string text;
};

std::vector<Tok> lex(std::string_view src) {
    std::vector<Tok> out;
    size_t i = 0;
    while (i < src.size()) {
        const char c = src[i];
        if (std::isspace(static_cast<unsigned char>(c))) {
            ++i;
        } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
            size_t j = i;
            while (j < src.size() && (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_')) ++j;
            out.push_back({Tok::kName, std::string(src.substr(i, j - i))});
            i = j;
        } else if (std::isdigit(static_cast<unsigned char>(c))) {
            size_t j = i;
            while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
            if (j - i > 15) bad("integer literal too long");
            out.push_back({Tok::kInt, std::string(src.substr(i, j - i))});
            i = j;
        } else if (c == '\'' || c == '"') {
            std::string s;
            size_t j = i + 1;
            for (; j < src.size() && src[j] != c; ++j) {
                if (src[j] == '\\' && j + 1 < src.size()) {
                    const char e = src[++j];
                    s.push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e);
                } else {
                    s.push_back(src[j]);
                }
            }
            if (j >= src.size()) bad("unterminated string literal");
            out.push_back({Tok::kStr, std::move(s)});
            i = j + 1;
        } else {
            const std::string_view two = src.substr(i, 2);
            if (two == "==" || two == "!=") {
                out.push_back({Tok::kOp, std::string(two)});
                i += 2;
            } else if (std::string_view("+~()[].,|=").find(c) != std::string_view::npos) {
                out.push_back({Tok::kOp, std::string(1, c)});
                ++i;
            } else {
                unsupported(std::string("operator '") + c + "'");
            }
        }
    }
    out.push_back({Tok::kEnd, ""});
    return out;
}

class ExprParser final {
public:
    explicit ExprParser(std::vector<Tok> toks) : t_(std::move(toks)) {}
    ExprPtr parse_all() {
        ExprPtr e = parse_or();
        if (peek().kind != Tok::kEnd) unsupported("unexpected '" + peek().text + "' in expression");
        return e;
    }
    const Tok& peek() const { return t_[pos_]; }
    bool accept(const char* text) {
        if ((peek().kind == Tok::kOp || peek().kind == Tok::kName) && peek().text == text) {
            ++pos_;
            return true;
        }
        return false;
    }
    void expect(const char* text) {
        if (!accept(text)) bad(std::string("expected '") + text + "'");
    }
    std::string name() {
        if (peek().kind != Tok::kName) bad("expected a name");
        return t_[pos_++].text;
    }
    ExprPtr parse_or() {
        ExprPtr l = parse_and();
        while (accept("or")) l = bin("or", std::move(l), parse_and());
        return l;
    }

private:
    static ExprPtr bin(std::string op, ExprPtr a, ExprPtr b) {
        auto e = std::make_unique<Expr>();
        e->kind = Expr::kBin;
        e->name = std::move(op);
        e->kids.push_back(std::move(a));
        e->kids.push_back(std::move(b));
        return e;
    }
    ExprPtr parse_and() {
        ExprPtr l = parse_not();
        while (accept("and")) l = bin("and", std::move(l), parse_not());
        return l;
    }
    ExprPtr parse_not() {
        if (accept("not")) {
            auto e = std::make_unique<Expr>();
            e->kind = Expr::kNot;
            e->kids.push_back(parse_not());
            return e;
        }
        return parse_cmp();
    }
    ExprPtr parse_cmp() {
        ExprPtr l = parse_add();
        while (true) {
            if (accept("==")) {
                l = bin("==", std::move(l), parse_add());
            } else if (accept("!=")) {
                l = bin("!=", std::move(l), parse_add());
            } else if (accept("in")) {
                l = bin("in", std::move(l), parse_add());
            } else if (peek().text == "not" && t_[pos_ + 1].text == "in") {
                pos_ += 2;
                auto n = std::make_unique<Expr>();
                n->kind = Expr::kNot;
                n->kids.push_back(bin("in", std::move(l), parse_add()));
                l = std::move(n);
            } else if (accept("is")) {
                auto e = std::make_unique<Expr>();
                e->kind = Expr::kTest;
                e->negate = accept("not");
                e->name = name();
                if (e->name != "defined" && e->name != "none" && e->name != "string") unsupported("test " + e->name);
                e->kids.push_back(std::move(l));
                l = std::move(e);
            } else {
                return l;
            }
        }
    }
    ExprPtr parse_add() {
        ExprPtr l = parse_postfix();
        while (true) {
            if (accept("+")) {
                l = bin("+", std::move(l), parse_postfix());
            } else if (accept("~")) {
                l = bin("~", std::move(l), parse_postfix());
            } else {
                return l;
            }
        }
    }
    ExprPtr parse_postfix() {
        ExprPtr e = parse_primary();
        while (true) {
            if (accept(".")) {
                auto a = std::make_unique<Expr>();
                a->kind = Expr::kAttr;
                a->name = name();
                a->kids.push_back(std::move(e));
                e = std::move(a);
            } else if (accept("[")) {
                auto a = std::make_unique<Expr>();
                a->kind = Expr::kIndex;
                a->kids.push_back(std::move(e));
                a->kids.push_back(parse_or());
                expect("]");
                e = std::move(a);
            } else if (accept("|")) {
                auto f = std::make_unique<Expr>();
                f->kind = Expr::kFilter;
                f->name = name();
                if (f->name != "trim") unsupported("filter " + f->name);
                f->kids.push_back(std::move(e));
                e = std::move(f);
            } else {
                return e;
            }
        }
    }
    ExprPtr parse_primary() {
        auto e = std::make_unique<Expr>();
        const Tok tok = t_[pos_++];
        if (tok.kind == Tok::kStr) {
            e->lit = str(tok.text);
        } else if (tok.kind == Tok::kInt) {
            e->lit = Value{.kind = Value::kInt, .i = std::stoll(tok.text)};
        } else if (tok.kind == Tok::kOp && tok.text == "(") {
            e = parse_or();
            expect(")");
        } else if (tok.kind == Tok::kName) {
            if (tok.text == "true" || tok.text == "True" || tok.text == "false" || tok.text == "False") {
                e->lit = boolean(tok.text == "true" || tok.text == "True");
            } else if (tok.text == "none" || tok.text == "None") {
                e->lit = Value{.kind = Value::kNone};
            } else if (tok.text == "raise_exception") {
                expect("(");
                e->kind = Expr::kRaise;
                e->kids.push_back(parse_or());
                expect(")");
            } else {
                e->kind = Expr::kName;
                e->name = tok.text;
                if (peek().text == "(") unsupported("call of " + tok.text);
            }
        } else {
            unsupported("unexpected '" + tok.text + "'");
        }
        return e;
    }

    std::vector<Tok> t_;
    size_t pos_ = 0;
};

ExprPtr parse_expr(std::string_view src) { return ExprParser(lex(src)).parse_all(); }

// ---- template segments ----

struct Seg {
    enum Kind { kText, kOut, kTag } kind = kText;
    std::string body;
};

std::vector<Seg> segment(std::string_view src) {
    std::vector<Seg> segs;
    size_t i = 0;
    bool strip_next = false;  // '-' before the closing delimiter, or trim_blocks after a tag
    bool trim_newline = false;
    while (i < src.size()) {
        const size_t open = src.find('{', i);
        size_t at = open;
        while (at != std::string_view::npos && at + 1 < src.size() &&
               std::string_view("{%#").find(src[at + 1]) == std::string_view::npos) {
            at = src.find('{', at + 1);
        }
        if (at != std::string_view::npos && at + 1 >= src.size()) at = std::string_view::npos;
        std::string text(src.substr(i, at == std::string_view::npos ? std::string_view::npos : at - i));
        if (strip_next) {
            text.erase(0, text.find_first_not_of(" \t\r\n") == std::string::npos ? text.size()
                                                                                 : text.find_first_not_of(" \t\r\n"));
        } else if (trim_newline && !text.empty() && text[0] == '\n') {
            text.erase(0, 1);
        }
        strip_next = trim_newline = false;
        if (at == std::string_view::npos) {
            segs.push_back({Seg::kText, std::move(text)});
            break;
        }
        const char kind = src[at + 1];
        const bool strip_before = at + 2 < src.size() && src[at + 2] == '-';
        if (strip_before) {
            text.erase(text.find_last_not_of(" \t\r\n") == std::string::npos ? 0
                                                                             : text.find_last_not_of(" \t\r\n") + 1);
        } else if (kind == '%') {  // lstrip_blocks: spaces/tabs between a line start and a block tag
            const size_t nl = text.find_last_of('\n');
            const size_t from = nl == std::string::npos ? 0 : nl + 1;
            if (text.find_first_not_of(" \t", from) == std::string::npos && (nl != std::string::npos || segs.empty())) {
                text.erase(from);
            }
        }
        segs.push_back({Seg::kText, std::move(text)});
        const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
        size_t j = at + 2;
        char quote = 0;
        for (; j + 1 < src.size(); ++j) {
            if (quote != 0) {
                if (src[j] == quote) quote = 0;
            } else if (kind != '#' && (src[j] == '\'' || src[j] == '"')) {
                quote = src[j];
            } else if (src.compare(j, 2, close) == 0) {
                break;
            }
        }
        if (j + 1 >= src.size()) bad("unterminated " + std::string(1, '{') + kind);
        size_t body_begin = at + 2 + (strip_before ? 1 : 0);
        size_t body_end = j;
        if (body_end > body_begin && src[body_end - 1] == '-') {
            --body_end;
            strip_next = true;
        }
        if (kind != '#') {
            segs.push_back(
                {kind == '{' ? Seg::kOut : Seg::kTag, std::string(src.substr(body_begin, body_end - body_begin))});
        }
        trim_newline = kind != '{';
        i = j + 2;
    }
    return segs;
}

}  // namespace

struct ChatTemplate::Node {
    enum Kind { kBlock, kText, kOut, kIf, kFor, kSet } kind = kBlock;
    std::string text;                         // kText; kFor/kSet: the variable
    std::vector<ExprPtr> exprs;               // kOut: 1; kIf: conditions; kFor: iterable; kSet: value
    std::vector<std::unique_ptr<Node>> kids;  // kBlock: children; kIf: branch blocks (+ else); kFor: body
};

namespace {

using Node = ChatTemplate::Node;

std::string first_word(const std::string& s, std::string* rest) {
    size_t b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return "";
    size_t e = b;
    while (e < s.size() && (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
    *rest = s.substr(e);
    return s.substr(b, e - b);
}

// Parses segments [pos, end-tag) into `block`; returns the end tag's word ("" at end of input).
std::string parse_block(const std::vector<Seg>& segs, size_t* pos, Node* block, std::string* end_rest) {
    while (*pos < segs.size()) {
        const Seg& s = segs[(*pos)++];
        if (s.kind == Seg::kText) {
            if (s.body.empty()) continue;
            auto n = std::make_unique<Node>();
            n->kind = Node::kText;
            n->text = s.body;
            block->kids.push_back(std::move(n));
            continue;
        }
        if (s.kind == Seg::kOut) {
            auto n = std::make_unique<Node>();
            n->kind = Node::kOut;
            n->exprs.push_back(parse_expr(s.body));
            block->kids.push_back(std::move(n));
            continue;
        }
        std::string rest;
        const std::string word = first_word(s.body, &rest);
        if (word == "endif" || word == "endfor" || word == "elif" || word == "else") {
            *end_rest = rest;
            return word;
        }
        auto n = std::make_unique<Node>();
        if (word == "if") {
            n->kind = Node::kIf;
            std::string cond = rest;
            while (true) {
                n->exprs.push_back(parse_expr(cond));
                auto body = std::make_unique<Node>();
                std::string r;
                const std::string end = parse_block(segs, pos, body.get(), &r);
                n->kids.push_back(std::move(body));
                if (end == "elif") {
                    cond = r;
                    continue;
                }
                if (end == "else") {
                    auto other = std::make_unique<Node>();
                    if (parse_block(segs, pos, other.get(), &r) != "endif") bad("else without endif");
                    n->kids.push_back(std::move(other));
                    break;
                }
                if (end != "endif") bad("if without endif");
                break;
            }
        } else if (word == "for") {
            n->kind = Node::kFor;
            ExprParser p(lex(rest));
            n->text = p.name();
            p.expect("in");
            n->exprs.push_back(p.parse_or());
            if (p.peek().kind != Tok::kEnd) unsupported("for ... " + p.peek().text);
            auto body = std::make_unique<Node>();
            std::string r;
            if (parse_block(segs, pos, body.get(), &r) != "endfor") bad("for without endfor");
            n->kids.push_back(std::move(body));
        } else if (word == "set") {
            n->kind = Node::kSet;
            ExprParser p(lex(rest));
            n->text = p.name();
            p.expect("=");
            n->exprs.push_back(p.parse_or());
            if (p.peek().kind != Tok::kEnd) unsupported("set ... " + p.peek().text);
        } else {
            unsupported("tag '" + word + "'");
        }
        block->kids.push_back(std::move(n));
    }
    return "";
}

class Renderer final {
public:
    explicit Renderer(std::map<std::string, Value> globals) { scopes_.push_back(std::move(globals)); }

    void run(const Node& n, std::string* out) {
        switch (n.kind) {
            case Node::kBlock:
                for (const auto& k : n.kids) run(*k, out);
                break;
            case Node::kText:
                *out += n.text;
                break;
            case Node::kOut:
                *out += to_text(eval(*n.exprs[0]));
                break;
            case Node::kIf:
                for (size_t i = 0; i < n.kids.size(); ++i) {
                    if (i >= n.exprs.size() || truthy(eval(*n.exprs[i]))) {
                        run(*n.kids[i], out);
                        break;
                    }
                }
                break;
            case Node::kFor: {
                const Value seq = eval(*n.exprs[0]);
                if (seq.kind == Value::kUndef || seq.kind == Value::kNone) break;
                if (seq.kind != Value::kList) bad("for over a non-list");
                const auto len = static_cast<int64_t>(seq.list->size());
                for (int64_t i = 0; i < len; ++i) {
                    auto loop = std::make_shared<std::map<std::string, Value>>();
                    (*loop)["index0"] = Value{.kind = Value::kInt, .i = i};
                    (*loop)["index"] = Value{.kind = Value::kInt, .i = i + 1};
                    (*loop)["first"] = boolean(i == 0);
                    (*loop)["last"] = boolean(i + 1 == len);
                    (*loop)["length"] = Value{.kind = Value::kInt, .i = len};
                    scopes_.push_back({{n.text, (*seq.list)[static_cast<size_t>(i)]},
                                       {"loop", Value{.kind = Value::kMap, .map = loop}}});
                    run(*n.kids[0], out);
                    scopes_.pop_back();
                }
                break;
            }
            case Node::kSet:
                scopes_.back()[n.text] = eval(*n.exprs[0]);
                break;
        }
    }

private:
    Value lookup(const std::string& name) const {
        for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
            auto f = it->find(name);
            if (f != it->end()) return f->second;
        }
        return {};
    }
    Value eval(const Expr& e) {
        switch (e.kind) {
            case Expr::kLit:
                return e.lit;
            case Expr::kName:
                return lookup(e.name);
            case Expr::kAttr:
            case Expr::kIndex: {
                const Value base = eval(*e.kids[0]);
                if (e.kind == Expr::kIndex) {
                    const Value key = eval(*e.kids[1]);
                    if (base.kind == Value::kList && key.kind == Value::kInt) {
                        const int64_t n = static_cast<int64_t>(base.list->size());
                        const int64_t i = key.i < 0 ? key.i + n : key.i;
                        return i >= 0 && i < n ? (*base.list)[static_cast<size_t>(i)] : Value{};
                    }
                    if (key.kind != Value::kStr) return {};
                    return base.kind == Value::kMap && base.map->count(key.s) != 0 ? base.map->at(key.s) : Value{};
                }
                return base.kind == Value::kMap && base.map->count(e.name) != 0 ? base.map->at(e.name) : Value{};
            }
            case Expr::kBin: {
                if (e.name == "and") return boolean(truthy(eval(*e.kids[0])) && truthy(eval(*e.kids[1])));
                if (e.name == "or") return boolean(truthy(eval(*e.kids[0])) || truthy(eval(*e.kids[1])));
                const Value a = eval(*e.kids[0]), b = eval(*e.kids[1]);
                if (e.name == "==") return boolean(equal(a, b));
                if (e.name == "!=") return boolean(!equal(a, b));
                if (e.name == "~") return str(to_text(a) + to_text(b));
                if (e.name == "in") {
                    if (b.kind == Value::kStr && a.kind == Value::kStr)
                        return boolean(b.s.find(a.s) != std::string::npos);
                    if (b.kind == Value::kMap && a.kind == Value::kStr) return boolean(b.map->count(a.s) != 0);
                    if (b.kind == Value::kList) {
                        for (const Value& x : *b.list) {
                            if (equal(a, x)) return boolean(true);
                        }
                    }
                    return boolean(false);
                }
                if (a.kind == Value::kInt && b.kind == Value::kInt) return Value{.kind = Value::kInt, .i = a.i + b.i};
                if (a.kind == Value::kStr && b.kind == Value::kStr) return str(a.s + b.s);
                bad("+ on incompatible values");
            }
            case Expr::kNot:
                return boolean(!truthy(eval(*e.kids[0])));
            case Expr::kTest: {
                const Value v = eval(*e.kids[0]);
                bool r = e.name == "defined" ? v.kind != Value::kUndef
                         : e.name == "none"  ? v.kind == Value::kNone
                                             : v.kind == Value::kStr;
                return boolean(r != e.negate);
            }
            case Expr::kFilter: {
                const std::string s = to_text(eval(*e.kids[0]));
                const size_t b = s.find_first_not_of(" \t\r\n");
                return str(b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1));
            }
            case Expr::kRaise:
                bad("the chat template raised: " + to_text(eval(*e.kids[0])));
        }
        return {};
    }

    std::vector<std::map<std::string, Value>> scopes_;
};

}  // namespace

ChatTemplate::ChatTemplate() = default;
ChatTemplate::~ChatTemplate() = default;

Result<std::shared_ptr<const ChatTemplate>> ChatTemplate::parse(std::string_view source) {
    try {
        auto t = std::shared_ptr<ChatTemplate>(new ChatTemplate());
        t->root_ = std::make_unique<Node>();
        const std::vector<Seg> segs = segment(source);
        size_t pos = 0;
        std::string rest;
        const std::string end = parse_block(segs, &pos, t->root_.get(), &rest);
        if (!end.empty()) bad("'" + end + "' without its opening tag");
        return std::shared_ptr<const ChatTemplate>(std::move(t));
    } catch (const TemplateError& e) {
        return e.unsupported ? unimplemented(std::string("chat template: ") + e.what())
                             : invalid_argument(std::string("chat template: ") + e.what());
    } catch (const std::exception& e) {
        return invalid_argument(std::string("chat template: ") + e.what());
    }
}

Result<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages, const std::string& bos,
                                         const std::string& eos) const {
    auto list = std::make_shared<std::vector<Value>>();
    for (const ChatMessage& m : messages) {
        auto map = std::make_shared<std::map<std::string, Value>>();
        (*map)["role"] = str(m.role);
        (*map)["content"] = str(m.content);
        list->push_back(Value{.kind = Value::kMap, .map = map});
    }
    Renderer r({{"messages", Value{.kind = Value::kList, .list = list}},
                {"bos_token", str(bos)},
                {"eos_token", str(eos)},
                {"add_generation_prompt", boolean(true)}});
    std::string out;
    try {
        r.run(*root_, &out);
    } catch (const TemplateError& e) {
        return invalid_argument(e.what());
    }
    return out;
}

}  // namespace penstock::server
