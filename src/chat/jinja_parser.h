// The Jinja parser's class, shared by jinja_parser.cpp (statements) and jinja_parser_expr.cpp
// (expressions). Internal to the interpreter; use parse_template() from jinja_ast.h.
#pragma once

#include <algorithm>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace lfm::jinja::detail {

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

  // ---- statements (jinja_parser.cpp) ----
  // Parses until a block tag whose name is in `end`; leaves the stream on that name.
  NodeList subparse(const std::unordered_set<std::string>& end);
  // Consumes "{% endname %}" when the stream stands on "endname".
  void end_block(const char* endname);
  NodePtr parse_statement();
  NodePtr parse_for();
  NodePtr parse_if();
  NodePtr parse_set();
  void parse_params(std::vector<Param>& params);
  NodePtr parse_macro();
  NodePtr parse_call_block();
  NodePtr parse_filter_block();
  NodePtr parse_with();
  NodePtr parse_generation();
  Target parse_assign_target(bool with_namespace, const std::unordered_set<std::string>& extra_end);

  // ---- expressions (jinja_parser_expr.cpp) ----
  bool tuple_end(const std::unordered_set<std::string>& extra_end) const;
  NodePtr parse_tuple(bool simplified, bool with_condexpr, const std::unordered_set<std::string>& extra_end, bool explicit_parens);
  NodePtr parse_expression(bool with_condexpr);
  NodePtr parse_condexpr();
  NodePtr binary(const std::string& op, NodePtr l, NodePtr r);
  NodePtr parse_or();
  NodePtr parse_and();
  NodePtr parse_not();
  NodePtr parse_compare();
  NodePtr parse_math1();
  NodePtr parse_concat();
  NodePtr parse_math2();
  NodePtr parse_pow();
  NodePtr parse_unary(bool with_filter);
  NodePtr parse_primary();
  NodePtr parse_postfix(NodePtr n);
  NodePtr parse_subscript(NodePtr obj);
  void parse_call_args(Node& n);
  NodePtr parse_call(NodePtr callee);
  std::string dotted_name();
  NodePtr parse_filter(NodePtr input, bool start_inline);
  NodePtr parse_test(NodePtr input);
  NodePtr parse_filter_expr(NodePtr n);

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace lfm::jinja::detail
