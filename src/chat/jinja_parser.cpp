// Recursive-descent parser producing the AST of jinja_ast.h. The grammar and operator
// precedence follow jinja2.parser (e.g. filters bind tighter than unary minus's operand, `**`
// is left-associative, `is` tests bind tighter than `not`).
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <unordered_set>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace lfm::jinja {
namespace {

constexpr int kMaxNesting = 200;     // guards the C++ stack against hostile templates
constexpr int kMaxExprDepth = 400;  // left-deep chains (a + b + c ...) are built without recursion

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  NodeList parse_all() {
    NodeList body = subparse({});
    if (cur().type != Tok::Eof) fail_at("unexpected '", cur().value, "'");
    return body;
  }

 private:
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.fail_at("template nesting is too deep (limit ", kMaxNesting, ")");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }

  template <typename... A>
  [[noreturn]] void fail_at(A&&... a) const {
    template_fail("jinja: line ", cur().line, ": ", std::forward<A>(a)...);
  }

  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().value == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  std::string describe(const Token& t) const {
    if (t.type == Tok::Op || t.type == Tok::Name) return "'" + t.value + "'";
    return tok_name(t.type);
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail_at("expected '", op, "', got ", describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail_at("expected a name, got ", describe(cur()));
    std::string n = cur().value;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) fail_at("expected end of statement block, got ", describe(cur()));
    next();
  }
  NodePtr node(NodeKind k) const { return std::make_unique<Node>(k, cur().line); }

  // Records the height of an expression node; the evaluator (and the destructor) recurse over it.
  NodePtr seal(NodePtr n) const {
    int d = 0;
    for (const NodeList* list : {&n->kids, &n->args, &n->kw})
      for (const auto& k : *list)
        if (k) d = std::max(d, k->depth);
    n->depth = d + 1;
    if (n->depth > kMaxExprDepth) fail_at("expression is nested too deeply (limit ", kMaxExprDepth, ")");
    return n;
  }

  // ---- statements ----

  // Parses until a block tag whose name is in `end`; leaves the stream on that name.
  NodeList subparse(const std::unordered_set<std::string>& end) {
    NodeList body;
    while (cur().type != Tok::Eof) {
      if (cur().type == Tok::Data) {
        auto n = node(NodeKind::Data);
        n->name = cur().value;
        body.push_back(std::move(n));
        next();
      } else if (cur().type == Tok::VarBegin) {
        next();
        auto n = node(NodeKind::Output);
        n->kids.push_back(parse_tuple(false, true, {}, false));
        if (cur().type != Tok::VarEnd) fail_at("expected end of print statement, got ", describe(cur()));
        next();
        body.push_back(std::move(n));
      } else if (cur().type == Tok::BlockBegin) {
        next();
        if (cur().type == Tok::Name && end.count(cur().value)) return body;
        body.push_back(parse_statement());
      } else {
        fail_at("unexpected ", describe(cur()));
      }
    }
    if (!end.empty()) {
      std::string names;
      for (const auto& e : end) names += (names.empty() ? "'" : " or '") + e + "'";
      fail_at("unexpected end of template, expected ", names);
    }
    return body;
  }

  // Consumes "{% endname %}" when the stream stands on "endname".
  void end_block(const char* endname) {
    if (!skip_name(endname)) fail_at("expected '", endname, "'");
    expect_block_end();
  }

  NodePtr parse_statement() {
    DepthGuard g(*this);
    if (cur().type != Tok::Name) fail_at("tag name expected");
    const std::string tag = cur().value;
    if (tag == "for") return parse_for();
    if (tag == "if") return parse_if();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "call") return parse_call_block();
    if (tag == "filter") return parse_filter_block();
    if (tag == "with") return parse_with();
    if (tag == "generation") return parse_generation();
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail_at("'", tag, "' outside of a loop");
      auto n = node(tag == "break" ? NodeKind::Break : NodeKind::Continue);
      next();
      expect_block_end();
      return n;
    }
    static const std::unordered_set<std::string> unsupported = {"include", "import", "from", "extends", "block",
                                                                "autoescape", "do", "trans", "pluralize", "debug"};
    if (unsupported.count(tag)) fail_at("unsupported tag '", tag, "' (not available for chat templates)");
    fail_at("Encountered unknown tag '", tag, "'");
  }

  NodePtr parse_for() {
    auto n = node(NodeKind::For);
    next();
    n->target = parse_assign_target(false, {"in"});
    if (!skip_name("in")) fail_at("expected 'in' in for loop");
    n->kids.push_back(parse_tuple(false, false, {"recursive"}, false));
    n->kids.push_back(skip_name("if") ? parse_expression(true) : nullptr);
    if (is_name("recursive")) fail_at("unsupported: recursive for loops");
    expect_block_end();
    ++loop_depth_;
    n->body = subparse({"endfor", "else"});
    --loop_depth_;
    if (skip_name("else")) {
      expect_block_end();
      n->else_body = subparse({"endfor"});
    }
    end_block("endfor");
    return n;
  }

  NodePtr parse_if() {
    auto n = node(NodeKind::If);
    next();
    while (true) {
      n->kids.push_back(parse_tuple(false, false, {}, false));
      expect_block_end();
      n->bodies.push_back(subparse({"elif", "else", "endif"}));
      if (skip_name("elif")) continue;
      if (skip_name("else")) {
        expect_block_end();
        n->else_body = subparse({"endif"});
      }
      break;
    }
    end_block("endif");
    return n;
  }

  NodePtr parse_set() {
    next();
    Target target = parse_assign_target(true, {});
    if (skip_op("=")) {
      auto n = node(NodeKind::Set);
      n->target = std::move(target);
      n->kids.push_back(parse_tuple(false, true, {}, false));
      expect_block_end();
      return n;
    }
    auto n = node(NodeKind::SetBlock);
    n->target = std::move(target);
    while (is_op("|")) n->kids.push_back(parse_filter(nullptr, false));
    expect_block_end();
    n->body = subparse({"endset"});
    end_block("endset");
    return n;
  }

  void parse_params(std::vector<Param>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      Param p;
      p.name = expect_name();
      if (skip_op("=")) p.def = parse_expression(true);
      else if (!params.empty() && params.back().def) fail_at("non-default argument follows default argument");
      params.push_back(std::move(p));
    }
    next();
  }

  NodePtr parse_macro() {
    auto n = node(NodeKind::Macro);
    next();
    n->name = expect_name();
    parse_params(n->params);
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    n->body = subparse({"endmacro"});
    loop_depth_ = saved;
    end_block("endmacro");
    return n;
  }

  NodePtr parse_call_block() {
    auto n = node(NodeKind::CallBlock);
    next();
    if (is_op("(")) parse_params(n->params);
    NodePtr call = parse_expression(true);
    if (call->kind != NodeKind::Call) fail_at("expected call");
    n->kids.push_back(std::move(call));
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    n->body = subparse({"endcall"});
    loop_depth_ = saved;
    end_block("endcall");
    return n;
  }

  NodePtr parse_filter_block() {
    auto n = node(NodeKind::FilterBlock);
    next();
    n->kids.push_back(parse_filter(nullptr, true));
    while (is_op("|")) n->kids.push_back(parse_filter(nullptr, false));
    expect_block_end();
    n->body = subparse({"endfilter"});
    end_block("endfilter");
    return n;
  }

  NodePtr parse_with() {
    auto n = node(NodeKind::With);
    next();
    while (cur().type != Tok::BlockEnd) {
      if (!n->params.empty()) expect_op(",");
      Param p;
      p.name = expect_name();
      expect_op("=");
      p.def = parse_expression(true);
      n->params.push_back(std::move(p));
    }
    expect_block_end();
    n->body = subparse({"endwith"});
    end_block("endwith");
    return n;
  }

  NodePtr parse_generation() {
    auto n = node(NodeKind::Generation);
    next();
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;  // the body is compiled as a separate (caller) function in jinja2
    n->body = subparse({"endgeneration"});
    loop_depth_ = saved;
    end_block("endgeneration");
    return n;
  }

  Target parse_assign_target(bool with_namespace, const std::unordered_set<std::string>& extra_end) {
    Target t;
    if (with_namespace && cur().type == Tok::Name && peek().type == Tok::Op && peek().value == ".") {
      t.names.push_back(expect_name());
      next();
      t.attr = expect_name();
      return t;
    }
    bool paren = skip_op("(");
    while (true) {
      if (!t.names.empty()) {
        if (!skip_op(",")) break;
        t.tuple = true;
      }
      if (cur().type != Tok::Name || extra_end.count(cur().value)) break;
      const std::string n = expect_name();
      if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
        fail_at("can't assign to constant '", n, "'");
      t.names.push_back(n);
      if (!is_op(",")) break;
    }
    if (paren) {
      expect_op(")");
      t.tuple = true;
    }
    if (t.names.empty()) fail_at("can't assign to ", describe(cur()));
    return t;
  }

  // ---- expressions ----

  bool tuple_end(const std::unordered_set<std::string>& extra_end) const {
    if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || cur().type == Tok::Eof || is_op(")")) return true;
    return cur().type == Tok::Name && extra_end.count(cur().value);
  }

  NodePtr parse_tuple(bool simplified, bool with_condexpr, const std::unordered_set<std::string>& extra_end,
                      bool explicit_parens) {
    const int line = cur().line;
    NodeList items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (tuple_end(extra_end)) break;
      items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail_at("Expected an expression, got ", describe(cur()));
    }
    auto n = std::make_unique<Node>(NodeKind::TupleLit, line);
    n->kids = std::move(items);
    return n;
  }

  NodePtr parse_expression(bool with_condexpr) {
    DepthGuard g(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  NodePtr parse_condexpr() {
    NodePtr expr = parse_or();
    while (skip_name("if")) {
      auto n = node(NodeKind::CondExpr);
      NodePtr test = parse_or();
      NodePtr other = skip_name("else") ? parse_condexpr() : nullptr;
      n->kids.push_back(std::move(test));
      n->kids.push_back(std::move(expr));
      n->kids.push_back(std::move(other));
      expr = seal(std::move(n));
    }
    return expr;
  }

  NodePtr binary(const std::string& op, NodePtr l, NodePtr r) {
    auto n = node(NodeKind::Binary);
    n->name = op;
    n->kids.push_back(std::move(l));
    n->kids.push_back(std::move(r));
    return seal(std::move(n));
  }

  NodePtr parse_or() {
    NodePtr l = parse_and();
    while (skip_name("or")) l = binary("or", std::move(l), parse_and());
    return l;
  }
  NodePtr parse_and() {
    NodePtr l = parse_not();
    while (skip_name("and")) l = binary("and", std::move(l), parse_not());
    return l;
  }
  NodePtr parse_not() {
    if (is_name("not")) {
      DepthGuard g(*this);
      auto n = node(NodeKind::Unary);
      next();
      n->name = "not";
      n->kids.push_back(parse_not());
      return seal(std::move(n));
    }
    return parse_compare();
  }
  NodePtr parse_compare() {
    NodePtr first = parse_math1();
    NodePtr n;
    while (true) {
      std::string op;
      if (cur().type == Tok::Op && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                    cur().value == ">" || cur().value == "<=" || cur().value == ">=")) {
        op = cur().value;
        next();
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && peek().type == Tok::Name && peek().value == "in") {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!n) {
        n = node(NodeKind::Compare);
        n->kids.push_back(std::move(first));
      }
      n->ops.push_back(op);
      n->kids.push_back(parse_math1());
    }
    return n ? seal(std::move(n)) : std::move(first);
  }
  NodePtr parse_math1() {
    NodePtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = cur().value;
      next();
      l = binary(op, std::move(l), parse_concat());
    }
    return l;
  }
  NodePtr parse_concat() {
    NodePtr l = parse_math2();
    while (skip_op("~")) l = binary("~", std::move(l), parse_math2());
    return l;
  }
  NodePtr parse_math2() {
    NodePtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = cur().value;
      next();
      l = binary(op, std::move(l), parse_pow());
    }
    return l;
  }
  NodePtr parse_pow() {
    NodePtr l = parse_unary(true);
    while (skip_op("**")) l = binary("**", std::move(l), parse_unary(true));
    return l;
  }
  NodePtr parse_unary(bool with_filter) {
    DepthGuard g(*this);
    NodePtr n;
    if (is_op("-") || is_op("+")) {
      n = node(NodeKind::Unary);
      n->name = cur().value;
      next();
      n->kids.push_back(parse_unary(false));
      n = seal(std::move(n));
    } else {
      n = parse_primary();
    }
    n = parse_postfix(std::move(n));
    if (with_filter) n = parse_filter_expr(std::move(n));
    return n;
  }

  NodePtr parse_primary() {
    DepthGuard g(*this);
    const Token& t = cur();
    if (t.type == Tok::Name) {
      auto n = node(NodeKind::Literal);
      if (t.value == "true" || t.value == "True") n->value = Value::boolean(true);
      else if (t.value == "false" || t.value == "False") n->value = Value::boolean(false);
      else if (t.value == "none" || t.value == "None") n->value = Value::none();
      else {
        n->kind = NodeKind::Name;
        n->name = t.value;
      }
      next();
      return n;
    }
    if (t.type == Tok::String) {
      auto n = node(NodeKind::Literal);
      std::string s;
      while (cur().type == Tok::String) {
        s += cur().value;
        next();
      }
      n->value = Value::string(std::move(s));
      return n;
    }
    if (t.type == Tok::Int || t.type == Tok::Float) {
      auto n = node(NodeKind::Literal);
      if (t.type == Tok::Float) {
        n->value = Value::floating(std::strtod(t.value.c_str(), nullptr));
      } else {
        int base = 10;
        std::string digits = t.value;
        if (digits.size() > 1 && digits[0] == '0' && std::isalpha(static_cast<unsigned char>(digits[1]))) {
          base = digits[1] == 'x' ? 16 : digits[1] == 'o' ? 8 : 2;
          digits = digits.substr(2);
        }
        errno = 0;
        char* endp = nullptr;
        const long long v = std::strtoll(digits.c_str(), &endp, base);
        if (errno == ERANGE) fail_at("unsupported: integer literal ", t.value, " exceeds 64 bits");
        n->value = Value::integer(v);
      }
      next();
      return n;
    }
    if (skip_op("(")) {
      NodePtr n = parse_tuple(false, true, {}, true);
      expect_op(")");
      return n;
    }
    if (is_op("[")) {
      auto n = node(NodeKind::ListLit);
      next();
      while (!is_op("]")) {
        if (!n->kids.empty()) expect_op(",");
        if (is_op("]")) break;
        n->kids.push_back(parse_expression(true));
      }
      next();
      return n;
    }
    if (is_op("{")) {
      auto n = node(NodeKind::DictLit);
      next();
      while (!is_op("}")) {
        if (!n->kids.empty()) expect_op(",");
        if (is_op("}")) break;
        n->kids.push_back(parse_expression(true));
        expect_op(":");
        n->kids.push_back(parse_expression(true));
      }
      next();
      return n;
    }
    fail_at("unexpected ", describe(t));
  }

  NodePtr parse_postfix(NodePtr n) {
    while (true) {
      if (is_op(".")) {
        next();
        if (cur().type == Tok::Name) {
          auto a = node(NodeKind::GetAttr);
          a->name = cur().value;
          a->kids.push_back(std::move(n));
          n = seal(std::move(a));
          next();
        } else if (cur().type == Tok::Int) {
          auto a = node(NodeKind::GetItem);
          auto lit = node(NodeKind::Literal);
          lit->value = Value::integer(std::atoll(cur().value.c_str()));
          a->kids.push_back(std::move(n));
          a->kids.push_back(std::move(lit));
          n = seal(std::move(a));
          next();
        } else {
          fail_at("expected name or number after '.'");
        }
      } else if (is_op("[")) {
        n = parse_subscript(std::move(n));
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        return n;
      }
    }
  }

  NodePtr parse_subscript(NodePtr obj) {
    next();  // '['
    NodeList parts;
    bool slice = false;
    NodePtr slice_parts[3];
    // Only one subscript (or a single slice) is supported; tuple keys are not.
    if (is_op(":")) {
      slice = true;
    } else {
      parts.push_back(parse_expression(true));
      if (is_op(":")) {
        slice = true;
        slice_parts[0] = std::move(parts[0]);
      }
    }
    if (slice) {
      next();  // first ':'
      if (!is_op(":") && !is_op("]")) slice_parts[1] = parse_expression(true);
      if (skip_op(":") && !is_op("]")) slice_parts[2] = parse_expression(true);
      expect_op("]");
      auto n = node(NodeKind::Slice);
      n->kids.push_back(std::move(obj));
      for (auto& p : slice_parts) n->kids.push_back(std::move(p));
      return seal(std::move(n));
    }
    if (is_op(",")) fail_at("unsupported: tuple subscripts");
    expect_op("]");
    auto n = node(NodeKind::GetItem);
    n->kids.push_back(std::move(obj));
    n->kids.push_back(std::move(parts[0]));
    return seal(std::move(n));
  }

  void parse_call_args(Node& n) {
    expect_op("(");
    bool any = false;
    while (!is_op(")")) {
      if (any) expect_op(",");
      if (is_op(")")) break;
      any = true;
      if (is_op("*") || is_op("**")) fail_at("unsupported: *args / **kwargs in calls");
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().value == "=") {
        n.kw_names.push_back(cur().value);
        next();
        next();
        n.kw.push_back(parse_expression(true));
      } else {
        if (!n.kw.empty()) fail_at("positional argument follows keyword argument");
        n.args.push_back(parse_expression(true));
      }
    }
    next();
  }

  NodePtr parse_call(NodePtr callee) {
    auto n = node(NodeKind::Call);
    n->kids.push_back(std::move(callee));
    parse_call_args(*n);
    return seal(std::move(n));
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (is_op(".")) {
      next();
      name += "." + expect_name();
    }
    return name;
  }

  NodePtr parse_filter(NodePtr input, bool start_inline) {
    if (!start_inline) expect_op("|");
    auto n = node(NodeKind::Filter);
    n->name = dotted_name();
    n->kids.push_back(std::move(input));
    if (is_op("(")) parse_call_args(*n);
    return seal(std::move(n));
  }

  NodePtr parse_test(NodePtr input) {
    next();  // 'is'
    auto n = node(NodeKind::Test);
    n->flag = skip_name("not");
    n->name = dotted_name();
    n->kids.push_back(std::move(input));
    if (is_op("(")) {
      parse_call_args(*n);
    } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                cur().type == Tok::Float || is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail_at("You cannot chain multiple tests with is");
      n->args.push_back(parse_postfix(parse_primary()));
    }
    return seal(std::move(n));
  }

  NodePtr parse_filter_expr(NodePtr n) {
    while (true) {
      if (is_op("|")) n = parse_filter(std::move(n), false);
      else if (is_name("is")) n = parse_test(std::move(n));
      else if (is_op("(")) n = parse_call(std::move(n));
      else return n;
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

NodeList parse_template(const std::string& source) { return Parser(tokenize(source)).parse_all(); }

}  // namespace lfm::jinja
