// Lexer and recursive-descent parser for the chat-template interpreter. The lexer applies jinja2's whitespace rules
// (trim_blocks, lstrip_blocks, '-' / '+' on every tag kind, comments, raw blocks) while splitting the source into
// text and tag tokens; the parser follows jinja2's grammar and operator precedence (parser.py's parse_* chain).
#include <cctype>
#include <cstdlib>

#include "server/jinja_ast.h"

namespace penstock::server::jinja {
namespace {

constexpr int kMaxNesting = 200;  // expression / block nesting; deeper templates are refused, not stack-overflowed

[[noreturn]] void fail_at(int line, const std::string& msg) {
    throw Error("template line " + std::to_string(line) + ": " + msg, line);
}

enum class Tok { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
    Tok type;
    std::string text;
    int line;
    Value value;  // kString / kInt / kFloat
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
public:
    explicit Lexer(std::string_view source) {
        // jinja2 normalises newlines and drops one trailing newline (keep_trailing_newline=False).
        for (size_t k = 0; k < source.size(); ++k) {
            if (source[k] == '\r') {
                src_ += '\n';
                if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
            } else {
                src_ += source[k];
            }
        }
        if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    }

    std::vector<Token> run() {
        bool line_starting = true;
        while (pos_ < src_.size()) {
            size_t start = src_.find('{', pos_);
            while (start != std::string::npos && start + 1 < src_.size() && src_[start + 1] != '{' &&
                   src_[start + 1] != '%' && src_[start + 1] != '#') {
                start = src_.find('{', start + 1);
            }
            if (start == std::string::npos || start + 1 >= src_.size()) {
                emit_text(src_.substr(pos_));
                pos_ = src_.size();
                break;
            }
            std::string text = src_.substr(pos_, start - pos_);
            const char kind = src_[start + 1];
            char sign =
                start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+') ? src_[start + 2] : 0;
            if (sign == '-') {
                size_t e = text.size();
                while (e > 0 && is_space(text[e - 1])) --e;
                text.resize(e);
            } else if (sign != '+' && kind != '{') {
                const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
                if (l_pos > 0 || line_starting) {
                    bool ws = l_pos < text.size();
                    for (size_t k = l_pos; k < text.size(); ++k) ws = ws && is_space(text[k]);
                    if (ws) text.resize(l_pos);
                }
            }
            emit_text(text);
            line_ = line_at(start);
            pos_ = start + 2 + (sign != 0 ? 1 : 0);
            if (kind == '#') {
                const size_t e = src_.find("#}", pos_);
                if (e == std::string::npos) fail_at(line_, "unclosed comment");
                const char end_sign = e > pos_ && (src_[e - 1] == '-' || src_[e - 1] == '+') ? src_[e - 1] : 0;
                pos_ = e + 2;
                line_starting = finish_tag(end_sign, /*block=*/true);
                continue;
            }
            if (kind == '%' && try_raw()) {
                line_starting = last_consumed_newline_;
                continue;
            }
            tokens_.push_back({kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, "", line_, {}});
            const char end_sign = lex_tag(kind == '{' ? '}' : '%');
            tokens_.push_back({kind == '{' ? Tok::kVarEnd : Tok::kBlockEnd, "", line_at(pos_), {}});
            line_starting = finish_tag(end_sign, /*block=*/kind == '%');
        }
        tokens_.push_back({Tok::kEof, "", line_at(src_.size()), {}});
        return std::move(tokens_);
    }

private:
    int line_at(size_t p) {
        while (line_pos_ < p && line_pos_ < src_.size()) {
            if (src_[line_pos_] == '\n') ++line_count_;
            ++line_pos_;
        }
        return line_count_;
    }
    void emit_text(std::string text) {
        if (!text.empty()) tokens_.push_back({Tok::kText, std::move(text), line_at(pos_), {}});
    }
    // After a tag's end marker: '-' eats all whitespace, a plain block/comment end one newline (trim_blocks).
    bool finish_tag(char end_sign, bool block) {
        bool newline = false;
        if (end_sign == '-') {
            while (pos_ < src_.size() && is_space(src_[pos_])) newline = src_[pos_++] == '\n';
        } else if (end_sign != '+' && block && pos_ < src_.size() && src_[pos_] == '\n') {
            ++pos_;
            newline = true;
        }
        return newline;
    }

    // {% raw %}...{% endraw %}: the body is text as is.
    bool try_raw() {
        size_t p = pos_;
        while (p < src_.size() && is_space(src_[p])) ++p;
        if (src_.compare(p, 3, "raw") != 0) return false;
        p += 3;
        while (p < src_.size() && is_space(src_[p])) ++p;
        char sign = 0;
        if (p < src_.size() && src_[p] == '-') sign = src_[p++];
        if (src_.compare(p, 2, "%}") != 0) return false;
        pos_ = p + 2;
        if (sign == '-') {
            while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
        }
        for (size_t s = src_.find("{%", pos_); s != std::string::npos; s = src_.find("{%", s + 2)) {
            size_t q = s + 2;
            const char bsign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q++] : 0;
            while (q < src_.size() && is_space(src_[q])) ++q;
            if (src_.compare(q, 6, "endraw") != 0) continue;
            q += 6;
            while (q < src_.size() && is_space(src_[q])) ++q;
            const char esign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q++] : 0;
            if (src_.compare(q, 2, "%}") != 0) continue;
            std::string body = src_.substr(pos_, s - pos_);
            if (bsign == '-') {
                while (!body.empty() && is_space(body.back())) body.pop_back();
            } else if (bsign != '+') {
                const size_t l_pos = body.rfind('\n') == std::string::npos ? 0 : body.rfind('\n') + 1;
                bool ws = l_pos < body.size() && l_pos > 0;
                for (size_t k = l_pos; k < body.size(); ++k) ws = ws && is_space(body[k]);
                if (ws) body.resize(l_pos);
            }
            emit_text(body);
            pos_ = q + 2;
            last_consumed_newline_ = finish_tag(esign, /*block=*/true);
            return true;
        }
        fail_at(line_, "missing endraw");
    }

    // Expression tokens up to the tag's end marker; returns the end marker's sign.
    char lex_tag(char end) {
        std::string stack;
        while (true) {
            while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
            if (pos_ >= src_.size()) fail_at(line_, "unclosed tag");
            const int line = line_at(pos_);
            if (stack.empty()) {
                for (char sign : {'-', '+', '\0'}) {
                    if (sign == '+' && end == '}') continue;  // jinja2: `+` only ends blocks (`+%}`), not `}}`
                    const std::string marker = (sign != 0 ? std::string(1, sign) : "") + end + "}";
                    if (src_.compare(pos_, marker.size(), marker) == 0) {
                        pos_ += marker.size();
                        return sign;
                    }
                }
            }
            const char c = src_[pos_];
            if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
                size_t e = pos_;
                while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
                tokens_.push_back({Tok::kName, src_.substr(pos_, e - pos_), line, {}});
                pos_ = e;
            } else if (std::isdigit(static_cast<unsigned char>(c))) {
                lex_number(line);
            } else if (c == '\'' || c == '"') {
                lex_string(line);
            } else {
                static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                                   "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                                   "]",  "{",  "}",  ",",  ".",  ":",  "|"};
                std::string op;
                for (const char* o : kOps) {
                    if (src_.compare(pos_, std::char_traits<char>::length(o), o) == 0) {
                        op = o;
                        break;
                    }
                }
                if (op.empty()) fail_at(line, std::string("unexpected character '") + c + "'");
                if (op == "(" || op == "[" || op == "{") {
                    if (stack.size() > kMaxNesting) fail_at(line, "brackets nested too deeply");
                    stack += op[0];
                } else if (op == ")" || op == "]" || op == "}") {
                    const char open = op == ")" ? '(' : op == "]" ? '[' : '{';
                    if (stack.empty() || stack.back() != open) fail_at(line, "unexpected '" + op + "'");
                    stack.pop_back();
                }
                tokens_.push_back({Tok::kOp, op, line, {}});
                pos_ += op.size();
            }
        }
    }

    void lex_number(int line) {
        size_t e = pos_;
        auto digits = [&] {
            while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        };
        digits();
        bool is_float = false;
        if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
            is_float = true;
            ++e;
            digits();
        }
        if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
            size_t x = e + 1;
            if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
            if (x < src_.size() && std::isdigit(static_cast<unsigned char>(src_[x]))) {
                is_float = true;
                e = x;
                digits();
            }
        }
        std::string text;
        for (size_t k = pos_; k < e; ++k) {
            if (src_[k] != '_') text += src_[k];
        }
        pos_ = e;
        if (is_float) {
            tokens_.push_back({Tok::kFloat, text, line, Value::real(std::strtod(text.c_str(), nullptr))});
        } else {
            errno = 0;
            const long long v = std::strtoll(text.c_str(), nullptr, 10);
            if (errno != 0) fail_at(line, "integer literal out of range");
            tokens_.push_back({Tok::kInt, text, line, Value::integer(v)});
        }
    }

    void lex_string(int line) {
        const char q = src_[pos_++];
        std::string out;
        while (true) {
            if (pos_ >= src_.size()) fail_at(line, "unterminated string");
            const char c = src_[pos_++];
            if (c == q) break;
            if (c != '\\') {
                out += c;
                continue;
            }
            if (pos_ >= src_.size()) fail_at(line, "unterminated string");
            const char e = src_[pos_++];
            auto hex = [&](int n) {
                if (pos_ + static_cast<size_t>(n) > src_.size()) fail_at(line, "truncated escape");
                const std::string h = src_.substr(pos_, static_cast<size_t>(n));
                for (char d : h) {
                    if (!std::isxdigit(static_cast<unsigned char>(d))) fail_at(line, "bad escape");
                }
                pos_ += static_cast<size_t>(n);
                append_utf8(&out, static_cast<char32_t>(std::strtoul(h.c_str(), nullptr, 16)));
            };
            switch (e) {
                case 'n':
                    out += '\n';
                    break;
                case 't':
                    out += '\t';
                    break;
                case 'r':
                    out += '\r';
                    break;
                case 'b':
                    out += '\b';
                    break;
                case 'f':
                    out += '\f';
                    break;
                case 'v':
                    out += '\v';
                    break;
                case 'a':
                    out += '\a';
                    break;
                case '0':
                    out += '\0';
                    break;
                case '\\':
                    out += '\\';
                    break;
                case '\'':
                    out += '\'';
                    break;
                case '"':
                    out += '"';
                    break;
                case '\n':
                    break;
                case 'x':
                    hex(2);
                    break;
                case 'u':
                    hex(4);
                    break;
                case 'U':
                    hex(8);
                    break;
                default:
                    out += '\\';
                    out += e;
            }
        }
        tokens_.push_back({Tok::kString, "", line, Value::str(std::move(out))});
    }

    std::string src_;
    size_t pos_ = 0;
    int line_ = 1;
    size_t line_pos_ = 0;
    int line_count_ = 1;
    bool last_consumed_newline_ = false;
    std::vector<Token> tokens_;
};

class Parser {
public:
    explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

    std::unique_ptr<Program> run() {
        auto prog = std::make_unique<Program>();
        std::string stop;
        prog->body = parse_body({}, &stop);
        return prog;
    }

private:
    const Token& cur() const { return toks_[pos_]; }
    const Token& next() { return toks_[pos_++]; }
    bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
    bool is_name(const char* n) const { return cur().type == Tok::kName && cur().text == n; }
    bool accept_op(const char* op) {
        if (!is_op(op)) return false;
        ++pos_;
        return true;
    }
    bool accept_name(const char* n) {
        if (!is_name(n)) return false;
        ++pos_;
        return true;
    }
    void expect_op(const char* op) {
        if (!accept_op(op)) fail_at(cur().line, std::string("expected '") + op + "', got " + describe(cur()));
    }
    std::string expect_name() {
        if (cur().type != Tok::kName) fail_at(cur().line, "expected a name, got " + describe(cur()));
        return next().text;
    }
    void expect_block_end() {
        if (cur().type != Tok::kBlockEnd) fail_at(cur().line, "expected end of statement, got " + describe(cur()));
        ++pos_;
    }
    static std::string describe(const Token& t) {
        switch (t.type) {
            case Tok::kName:
            case Tok::kOp:
                return "'" + t.text + "'";
            case Tok::kString:
                return "a string";
            case Tok::kInt:
            case Tok::kFloat:
                return "a number";
            case Tok::kVarEnd:
            case Tok::kBlockEnd:
                return "end of tag";
            case Tok::kEof:
                return "end of template";
            default:
                return "text";
        }
    }
    struct Depth {
        explicit Depth(Parser* p) : p_(p) {
            if (++p_->depth_ > kMaxNesting) fail_at(p_->cur().line, "template nested too deeply");
        }
        ~Depth() { --p_->depth_; }
        Parser* p_;
    };

    // Statements until one of `stops` ({% name ...), which is left unconsumed after its name; *stop says which.
    Body parse_body(const std::vector<std::string>& stops, std::string* stop) {
        Depth d(this);
        Body body;
        while (true) {
            const Token& t = cur();
            if (t.type == Tok::kEof) {
                if (!stops.empty()) fail_at(t.line, "unexpected end of template, expected '" + stops.front() + "'");
                return body;
            }
            if (t.type == Tok::kText) {
                auto n = std::make_unique<Node>();
                n->type = Node::Type::kText;
                n->line = t.line;
                n->text = t.text;
                body.push_back(std::move(n));
                ++pos_;
            } else if (t.type == Tok::kVarBegin) {
                ++pos_;
                auto n = std::make_unique<Node>();
                n->type = Node::Type::kOutput;
                n->line = t.line;
                n->expr = parse_tuple();
                if (cur().type != Tok::kVarEnd) fail_at(cur().line, "expected '}}', got " + describe(cur()));
                ++pos_;
                body.push_back(std::move(n));
            } else if (t.type == Tok::kBlockBegin) {
                ++pos_;
                const Token& kw = cur();
                if (kw.type != Tok::kName) fail_at(kw.line, "expected a statement name, got " + describe(kw));
                for (const std::string& s : stops) {
                    if (kw.text == s) {
                        ++pos_;
                        *stop = s;
                        return body;
                    }
                }
                body.push_back(parse_statement());
            } else {
                fail_at(t.line, "unexpected " + describe(t));
            }
        }
    }

    NodePtr parse_statement() {
        const Token& kw = next();
        auto n = std::make_unique<Node>();
        n->line = kw.line;
        std::string stop;
        if (kw.text == "if") {
            n->type = Node::Type::kIf;
            n->conds.push_back(parse_tuple());
            expect_block_end();
            while (true) {
                n->bodies.push_back(parse_body({"elif", "else", "endif"}, &stop));
                if (stop == "elif") {
                    n->conds.push_back(parse_tuple());
                    expect_block_end();
                } else if (stop == "else") {
                    expect_block_end();
                    n->bodies.push_back(parse_body({"endif"}, &stop));
                    break;
                } else {
                    break;
                }
            }
            expect_block_end();
        } else if (kw.text == "for") {
            n->type = Node::Type::kFor;
            parse_targets(n.get());
            if (!accept_name("in")) fail_at(cur().line, "expected 'in' in for loop");
            n->expr = parse_tuple(/*with_condexpr=*/false);
            if (accept_name("if")) n->cond = parse_expression();
            if (accept_name("recursive")) fail_at(kw.line, "recursive for loops are not supported");
            expect_block_end();
            ++loop_depth_;
            n->bodies.push_back(parse_body({"else", "endfor"}, &stop));
            --loop_depth_;
            if (stop == "else") {
                expect_block_end();
                n->bodies.push_back(parse_body({"endfor"}, &stop));
            }
            expect_block_end();
        } else if (kw.text == "set") {
            parse_targets(n.get());
            if (!n->unpack && n->targets.size() == 1 && accept_op(".")) n->text = expect_name();
            if (accept_op("=")) {
                n->type = Node::Type::kSet;
                n->expr = parse_tuple();
                expect_block_end();
            } else {
                if (n->unpack || !n->text.empty()) fail_at(kw.line, "a block set takes one name");
                if (is_op("|")) fail_at(kw.line, "filters on block set are not supported");
                n->type = Node::Type::kSetBlock;
                expect_block_end();
                n->bodies.push_back(parse_body({"endset"}, &stop));
                expect_block_end();
            }
        } else if (kw.text == "macro") {
            n->type = Node::Type::kMacro;
            n->name = expect_name();
            expect_op("(");
            while (!accept_op(")")) {
                if (!n->targets.empty()) expect_op(",");
                if (accept_op(")")) break;
                n->targets.push_back(expect_name());
                n->defaults.push_back(accept_op("=") ? parse_expression() : nullptr);
            }
            expect_block_end();
            n->bodies.push_back(parse_body({"endmacro"}, &stop));
            if (cur().type == Tok::kName && cur().text == n->name) ++pos_;
            expect_block_end();
        } else if (kw.text == "break" || kw.text == "continue") {
            if (loop_depth_ == 0) fail_at(kw.line, "'" + kw.text + "' outside a loop");
            n->type = kw.text == "break" ? Node::Type::kBreak : Node::Type::kContinue;
            expect_block_end();
        } else if (kw.text == "generation") {
            n->type = Node::Type::kScope;
            expect_block_end();
            n->bodies.push_back(parse_body({"endgeneration"}, &stop));
            expect_block_end();
        } else {
            fail_at(kw.line, "unknown or unsupported statement '" + kw.text + "'");
        }
        return n;
    }

    void parse_targets(Node* n) {
        n->targets.push_back(expect_name());
        while (accept_op(",")) {
            n->unpack = true;
            if (cur().type != Tok::kName) break;
            n->targets.push_back(expect_name());
        }
    }

    ExprPtr make(Expr::Op op, int line) {
        auto e = std::make_unique<Expr>();
        e->op = op;
        e->line = line;
        return e;
    }

    // expr (',' expr)* -> a tuple when there is a comma.
    ExprPtr parse_tuple(bool with_condexpr = true) {
        const int line = cur().line;
        ExprPtr first = with_condexpr ? parse_expression() : parse_or();
        if (!is_op(",")) return first;
        auto t = make(Expr::Op::kTuple, line);
        t->args.push_back(std::move(first));
        while (accept_op(",")) {
            if (cur().type == Tok::kBlockEnd || cur().type == Tok::kVarEnd || is_op(")") || is_name("in")) break;
            t->args.push_back(with_condexpr ? parse_expression() : parse_or());
        }
        return t;
    }

    ExprPtr parse_expression() {
        Depth d(this);
        ExprPtr e = parse_or();
        while (is_name("if")) {
            const int line = next().line;
            auto c = make(Expr::Op::kCond, line);
            c->args.push_back(std::move(e));
            c->args.push_back(parse_or());
            c->args.push_back(accept_name("else") ? parse_expression() : nullptr);
            e = std::move(c);
        }
        return e;
    }
    ExprPtr binary(Expr::Op op, ExprPtr l, ExprPtr r, const std::string& name, int line) {
        auto b = make(op, line);
        b->name = name;
        b->args.push_back(std::move(l));
        b->args.push_back(std::move(r));
        return b;
    }
    ExprPtr parse_or() {
        ExprPtr e = parse_and();
        while (is_name("or")) {
            const int line = next().line;
            e = binary(Expr::Op::kOr, std::move(e), parse_and(), "or", line);
        }
        return e;
    }
    ExprPtr parse_and() {
        ExprPtr e = parse_not();
        while (is_name("and")) {
            const int line = next().line;
            e = binary(Expr::Op::kAnd, std::move(e), parse_not(), "and", line);
        }
        return e;
    }
    ExprPtr parse_not() {
        if (is_name("not")) {
            Depth d(this);
            auto u = make(Expr::Op::kUnary, next().line);
            u->name = "not";
            u->args.push_back(parse_not());
            return u;
        }
        return parse_compare();
    }
    ExprPtr parse_compare() {
        const int line = cur().line;
        ExprPtr first = parse_math1();
        ExprPtr c;
        while (true) {
            std::string op;
            if (cur().type == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                           cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
                op = next().text;
            } else if (accept_name("in")) {
                op = "in";
            } else if (is_name("not") && toks_[pos_ + 1].type == Tok::kName && toks_[pos_ + 1].text == "in") {
                pos_ += 2;
                op = "notin";
            } else {
                break;
            }
            if (c == nullptr) {
                c = make(Expr::Op::kCompare, line);
                c->args.push_back(std::move(first));
            }
            c->ops.push_back(op);
            c->args.push_back(parse_math1());
        }
        return c != nullptr ? std::move(c) : std::move(first);
    }
    ExprPtr parse_math1() {
        ExprPtr e = parse_concat();
        while (is_op("+") || is_op("-")) {
            const Token& t = next();
            e = binary(Expr::Op::kBinary, std::move(e), parse_concat(), t.text, t.line);
        }
        return e;
    }
    ExprPtr parse_concat() {
        ExprPtr e = parse_math2();
        while (is_op("~")) {
            const Token& t = next();
            e = binary(Expr::Op::kBinary, std::move(e), parse_math2(), "~", t.line);
        }
        return e;
    }
    ExprPtr parse_math2() {
        ExprPtr e = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const Token& t = next();
            e = binary(Expr::Op::kBinary, std::move(e), parse_pow(), t.text, t.line);
        }
        return e;
    }
    ExprPtr parse_pow() {
        ExprPtr e = parse_unary();
        while (is_op("**")) {
            const Token& t = next();
            e = binary(Expr::Op::kBinary, std::move(e), parse_unary(), "**", t.line);
        }
        return e;
    }
    ExprPtr parse_unary(bool with_filter = true) {
        Depth d(this);
        ExprPtr e;
        if (is_op("-") || is_op("+")) {
            const Token& t = next();
            e = make(Expr::Op::kUnary, t.line);
            e->name = t.text;
            e->args.push_back(parse_unary(false));
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        if (with_filter) e = parse_filter_expr(std::move(e));
        return e;
    }

    ExprPtr parse_primary() {
        const Token& t = cur();
        switch (t.type) {
            case Tok::kName: {
                ++pos_;
                if (t.text == "true" || t.text == "True") return literal(Value::boolean(true), t.line);
                if (t.text == "false" || t.text == "False") return literal(Value::boolean(false), t.line);
                if (t.text == "none" || t.text == "None") return literal(Value::none(), t.line);
                auto n = make(Expr::Op::kName, t.line);
                n->name = t.text;
                return n;
            }
            case Tok::kString: {
                std::string s;
                const int line = t.line;
                while (cur().type == Tok::kString) s += next().value.s;
                return literal(Value::str(std::move(s)), line);
            }
            case Tok::kInt:
            case Tok::kFloat:
                ++pos_;
                return literal(t.value, t.line);
            case Tok::kOp:
                if (t.text == "(") {
                    ++pos_;
                    if (accept_op(")")) return make(Expr::Op::kTuple, t.line);
                    ExprPtr e = parse_tuple();
                    if (e->op == Expr::Op::kTuple) {
                        expect_op(")");
                        return e;
                    }
                    expect_op(")");
                    return e;
                }
                if (t.text == "[") {
                    ++pos_;
                    auto l = make(Expr::Op::kList, t.line);
                    while (!accept_op("]")) {
                        if (!l->args.empty()) expect_op(",");
                        if (accept_op("]")) break;
                        l->args.push_back(parse_expression());
                    }
                    return l;
                }
                if (t.text == "{") {
                    ++pos_;
                    auto d = make(Expr::Op::kDict, t.line);
                    while (!accept_op("}")) {
                        if (!d->args.empty()) expect_op(",");
                        if (accept_op("}")) break;
                        d->args.push_back(parse_expression());
                        expect_op(":");
                        d->args.push_back(parse_expression());
                    }
                    return d;
                }
                break;
            default:
                break;
        }
        fail_at(t.line, "unexpected " + describe(t));
    }
    ExprPtr literal(Value v, int line) {
        auto e = make(Expr::Op::kLiteral, line);
        e->literal = std::move(v);
        return e;
    }

    ExprPtr parse_postfix(ExprPtr e) {
        while (true) {
            if (is_op(".")) {
                const int line = next().line;
                if (cur().type == Tok::kInt) {
                    auto it = make(Expr::Op::kItem, line);
                    it->args.push_back(std::move(e));
                    it->args.push_back(literal(next().value, line));
                    e = std::move(it);
                    continue;
                }
                auto a = make(Expr::Op::kAttr, line);
                a->name = expect_name();
                a->args.push_back(std::move(e));
                e = std::move(a);
            } else if (is_op("[")) {
                e = parse_subscript(std::move(e));
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }
    ExprPtr parse_subscript(ExprPtr e) {
        const int line = next().line;
        ExprPtr parts[3];
        int n_colons = 0;
        while (!is_op("]")) {
            if (accept_op(":")) {
                if (++n_colons > 2) fail_at(line, "bad slice");
                continue;
            }
            if (parts[n_colons] != nullptr) fail_at(line, "expected ':' or ']'");
            parts[n_colons] = parse_expression();
        }
        expect_op("]");
        if (n_colons == 0) {
            if (parts[0] == nullptr) fail_at(line, "empty subscript");
            auto it = make(Expr::Op::kItem, line);
            it->args.push_back(std::move(e));
            it->args.push_back(std::move(parts[0]));
            return it;
        }
        auto s = make(Expr::Op::kSlice, line);
        s->args.push_back(std::move(e));
        for (auto& p : parts) s->args.push_back(std::move(p));
        return s;
    }
    void parse_call_args(Expr* c) {
        expect_op("(");
        bool first = true;
        while (!accept_op(")")) {
            if (!first) expect_op(",");
            first = false;
            if (accept_op(")")) break;
            if (cur().type == Tok::kName && toks_[pos_ + 1].type == Tok::kOp && toks_[pos_ + 1].text == "=") {
                std::string key = next().text;
                ++pos_;
                c->kwargs.emplace_back(std::move(key), parse_expression());
            } else {
                if (!c->kwargs.empty()) fail_at(cur().line, "positional argument after keyword argument");
                c->args.push_back(parse_expression());
            }
        }
    }
    ExprPtr parse_call(ExprPtr e) {
        auto c = make(Expr::Op::kCall, cur().line);
        c->args.push_back(std::move(e));
        parse_call_args(c.get());
        return c;
    }
    ExprPtr parse_filter_expr(ExprPtr e) {
        while (true) {
            if (is_op("|")) {
                const int line = next().line;
                auto f = make(Expr::Op::kFilter, line);
                f->name = expect_name();
                while (accept_op(".")) f->name += "." + expect_name();
                f->args.push_back(std::move(e));
                if (is_op("(")) parse_call_args(f.get());
                e = std::move(f);
            } else if (is_name("is")) {
                const int line = next().line;
                auto t = make(Expr::Op::kTest, line);
                t->negated = accept_name("not");
                t->name = expect_name();
                t->args.push_back(std::move(e));
                if (is_op("(")) {
                    parse_call_args(t.get());
                } else if ((cur().type == Tok::kName || cur().type == Tok::kString || cur().type == Tok::kInt ||
                            cur().type == Tok::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
                           !is_name("else") && !is_name("or") && !is_name("and")) {
                    if (is_name("is")) fail_at(cur().line, "you cannot chain multiple tests with 'is'");
                    t->args.push_back(parse_postfix(parse_primary()));
                }
                e = std::move(t);
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    std::vector<Token> toks_;
    size_t pos_ = 0;
    int depth_ = 0;
    int loop_depth_ = 0;  // enclosing for loops (break / continue outside one is a syntax error)
};

}  // namespace

std::unique_ptr<Program> parse_program(std::string_view source) { return Parser(Lexer(source).run()).run(); }

}  // namespace penstock::server::jinja
