// Tree-walking renderer for parsed Jinja templates. Scoping follows jinja2: `for` iterations,
// macro/caller bodies ({% generation %} included), {% with %} and captured blocks get a child
// scope; `if` does not. Assignments go to the innermost scope; lookups walk outwards.
#include "chat/jinja_eval.h"

#include <atomic>

#include <functional>

#include "chat/jinja_builtins.h"
#include "chat/jinja_lexer.h"

namespace lfm::jinja {
namespace {

// Scopes, bindings, closures and loop objects can outlive their step (a macro defined in a loop
// keeps that iteration's scope until the render ends), so each is charged to the work meter when
// created, like a value: what a render retains is bounded by what it was charged.
constexpr uint64_t kBindingBytes = sizeof(std::pair<std::string, Value>);
constexpr uint64_t kClosureBytes = 256;  // callable, std::function and captures of a macro

struct Scope {
  VarList vars;
  std::shared_ptr<Scope> parent;

  const Value* find_local(const std::string& n) const {
    charge_work(vars.size());  // lookups scan the scope
    for (const auto& [k, v] : vars)
      if (k == n) return &v;
    return nullptr;
  }
  void set(const std::string& n, Value v) {
    charge_work(vars.size());
    for (auto& [k, old] : vars)
      if (k == n) {
        old = std::move(v);
        return;
      }
    charge_work(kBindingBytes + n.size());
    vars.emplace_back(n, std::move(v));
  }
};
using ScopePtr = std::shared_ptr<Scope>;

ScopePtr child(const ScopePtr& parent) {
  charge_work(sizeof(Scope) + kBoxBytes);
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

enum class Flow { Normal, Break, Continue };

// jinja2's LoopContext: one object per loop whose position advances each iteration.
class LoopObject : public ObjectData {
 public:
  explicit LoopObject(std::shared_ptr<const ValueList> items) : items_(std::move(items)) {}
  size_t index = 0;

  std::string type_name() const override { return "LoopContext"; }
  Value get_attr(const std::string& name) override {
    const auto n = static_cast<int64_t>(items_->size());
    const auto i = static_cast<int64_t>(index);
    if (name == "index0") return Value::integer(i);
    if (name == "index") return Value::integer(i + 1);
    if (name == "revindex") return Value::integer(n - i);
    if (name == "revindex0") return Value::integer(n - i - 1);
    if (name == "first") return Value::boolean(i == 0);
    if (name == "last") return Value::boolean(i + 1 == n);
    if (name == "length") return Value::integer(n);
    if (name == "depth") return Value::integer(1);
    if (name == "depth0") return Value::integer(0);
    if (name == "previtem") return i > 0 ? (*items_)[index - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem") return i + 1 < n ? (*items_)[index + 1] : Value::undefined("there is no next item");
    if (name == "cycle") {
      const size_t at = index;
      return make_callable("cycle", "method", [at](const CallArgs& a) {
        if (a.pos.empty()) template_fail("no items for cycling given");
        return a.pos[at % a.pos.size()];
      });
    }
    if (name == "changed") {
      return make_callable("changed", "method", [this](const CallArgs& a) {
        Value now = Value::list(a.pos);
        if (has_last_ && py_equal(now, last_changed_)) return Value::boolean(false);
        has_last_ = true;
        last_changed_ = std::move(now);
        return Value::boolean(true);
      });
    }
    return Value::undefined();
  }
  void clear() { last_changed_ = Value(); }

 private:
  std::shared_ptr<const ValueList> items_;
  bool has_last_ = false;
  Value last_changed_;
};

// Does `name` occur as a variable reference anywhere below these nodes?
bool references(const NodeList& nodes, const std::string& name);
bool references(const Node* n, const std::string& name) {
  if (!n) return false;
  if (n->kind == NodeKind::Name && n->name == name) return true;
  if (references(n->kids, name) || references(n->args, name) || references(n->kw, name) ||
      references(n->body, name) || references(n->else_body, name))
    return true;
  for (const auto& b : n->bodies)
    if (references(b, name)) return true;
  for (const auto& p : n->params)
    if (references(p.def.get(), name)) return true;
  return false;
}
bool references(const NodeList& nodes, const std::string& name) {
  for (const auto& n : nodes)
    if (references(n.get(), name)) return true;
  return false;
}

class Evaluator {
 public:
  Evaluator(const VarList& vars, const VarList& globals, const RenderLimits& lim) : lim_(lim) {
    auto builtins = std::make_shared<Scope>();
    install_builtins(*builtins);
    auto glob = child(builtins);
    for (const auto& [k, v] : globals) glob->set(k, v);
    auto ctx = child(glob);
    for (const auto& [k, v] : vars) ctx->set(k, v);
    root_ = child(ctx);
  }

  // Values may form reference cycles (a macro stored in the scope it closes over, a namespace
  // holding itself); clearing what we created breaks them so nothing leaks.
  ~Evaluator() {
    for (auto& s : closures_) s->vars.clear();
    for (auto& n : namespaces_) n->attrs.clear();
    for (auto& l : loops_) l->clear();
    if (root_) root_->vars.clear();
  }

  std::string run(const NodeList& body) {
    std::string out;
    exec(body, root_, out);
    return out;
  }

 private:
  struct Guard {
    Guard(int& counter, int limit, const char* what) : c_(counter) {
      if (++c_ > limit) template_fail("jinja: ", what, " too deep (limit ", limit, ")");
    }
    ~Guard() { --c_; }
    int& c_;
  };

  void step() {
    if (++steps_ > lim_.max_steps) template_fail("jinja: template exceeded ", lim_.max_steps, " steps");
  }

  void append(std::string& out, const std::string& s) {
    if (out.size() + s.size() > lim_.max_output_bytes)
      template_fail("jinja: output exceeds ", lim_.max_output_bytes, " bytes");
    check_string_bytes(out.size() + s.size(), "output");
    charge_work(s.size());  // output is built like any string
    out += s;
  }

  void install_builtins(Scope& s) {
    s.set("range", make_callable("range", "function", [](const CallArgs& a) {
      a.check("range", 3, {});
      if (a.pos.empty()) template_fail("range expected at least 1 argument, got 0");
      int64_t start = 0, stop, stp = 1;
      if (a.pos.size() == 1) {
        stop = to_index(a.pos[0], "range() argument");
      } else {
        start = to_index(a.pos[0], "range() argument");
        stop = to_index(a.pos[1], "range() argument");
        if (a.pos.size() == 3) stp = to_index(a.pos[2], "range() argument");
      }
      if (stp == 0) template_fail("range() arg 3 must not be zero");
      // jinja2.sandbox.safe_range refuses more than MAX_RANGE items (checked before building).
      const __int128 span = stp > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
      const __int128 len = span <= 0 ? 0 : (span + (stp > 0 ? stp : -static_cast<__int128>(stp)) - 1) / (stp > 0 ? stp : -static_cast<__int128>(stp));
      if (len > 100000) template_fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      check_list_items(static_cast<uint64_t>(len), "range()");
      ValueList out;
      out.reserve(static_cast<size_t>(len));
      for (int64_t i = 0; i < static_cast<int64_t>(len); ++i) out.push_back(Value::integer(start + i * stp));
      return Value::view(std::move(out), Value::Range);
    }));
    s.set("dict", make_callable("dict", "function", [](const CallArgs& a) {
      if (a.pos.size() > 1) template_fail("dict expected at most 1 argument, got ", a.pos.size());
      std::vector<std::pair<Value, Value>> entries;
      if (!a.pos.empty()) {
        const Value& src = a.pos[0];
        if (src.is_dict() && a.kw.empty()) {
          // Its keys are unique already: copied as they are, not re-inserted one by one
          // (DictData::set is linear, so that would be quadratic in a long input dict).
          auto d = std::make_shared<DictData>();
          check_work(sat_mul_add(src.dict_data().entries.size(), 2 * kValueBytes, kBoxBytes));
          d->entries = src.dict_data().entries;
          return Value::dict(std::move(d));
        }
        if (src.is_dict()) {
          entries = src.dict_data().entries;
        } else {
          for (const auto& item : iterate(src)) {
            const ValueList kv = iterate(item);
            if (kv.size() != 2) template_fail("dictionary update sequence element has length ", kv.size(), "; 2 is required");
            entries.emplace_back(kv[0], kv[1]);
          }
        }
      }
      for (const auto& [k, v] : a.kw) entries.emplace_back(Value::string(k), v);
      return make_dict(std::move(entries));
    }));
    s.set("namespace", make_callable("namespace", "function", [this](const CallArgs& a) {
      auto ns = std::make_shared<NamespaceData>();
      if (a.pos.size() > 1) template_fail("namespace expected at most 1 positional argument");
      charge_work(kBoxBytes + sizeof(NamespaceData));
      if (!a.pos.empty()) {
        if (!a.pos[0].is_dict()) template_fail("unsupported: namespace() from a ", a.pos[0].type_name());
        // A dict's string keys are unique: appended directly (NamespaceData::set is linear).
        for (const auto& [k, v] : a.pos[0].dict_data().entries) {
          if (!k.is_string()) template_fail("keywords must be strings");
          charge_work(kBindingBytes + k.str().size());
          ns->attrs.emplace_back(k.str(), v);
        }
      }
      for (const auto& [k, v] : a.kw) ns->set(k, v);
      namespaces_.push_back(ns);
      return Value::ns(ns);
    }));
    for (const char* name : {"cycler", "joiner", "lipsum"}) {
      const std::string n = name;
      s.set(n, make_callable(n, "function", [n](const CallArgs&) -> Value {
        template_fail("unsupported: the global '", n, "()'");
      }));
    }
  }

  Value lookup(const std::string& name, const ScopePtr& sc) const {
    for (const Scope* s = sc.get(); s; s = s->parent.get())
      if (const Value* v = s->find_local(name)) return *v;
    return Value::undefined("'" + name + "' is undefined");
  }

  void assign(const Target& t, Value v, const ScopePtr& sc) {
    if (!t.attr.empty()) {
      const Value ns = lookup(t.names[0], sc);
      if (ns.kind() != Kind::Namespace) template_fail("Cannot assign attribute on non-namespace object");
      ns.ns_data()->set(t.attr, std::move(v));
      return;
    }
    if (!t.tuple) {
      sc->set(t.names[0], std::move(v));
      return;
    }
    const ValueList items = iterate(v);
    if (items.size() != t.names.size())
      template_fail(items.size() > t.names.size() ? "too many values to unpack (expected " : "not enough values to unpack (expected ",
                    t.names.size(), ", got ", items.size(), ")");
    for (size_t i = 0; i < items.size(); ++i) sc->set(t.names[i], items[i]);
  }

  CallArgs eval_args(const Node& n, const ScopePtr& sc) {
    CallArgs a;
    for (const auto& e : n.args) a.pos.push_back(eval(*e, sc));
    for (size_t i = 0; i < n.kw.size(); ++i) {
      for (const auto& [k, v] : a.kw)
        if (k == n.kw_names[i]) template_fail("keyword argument repeated: ", k);
      a.kw.emplace_back(n.kw_names[i], eval(*n.kw[i], sc));
    }
    return a;
  }

  Value apply_filter(const Node& f, Value input, const ScopePtr& sc) {
    return call_filter(f.name, input, eval_args(f, sc));
  }

  // A macro (or a {% call %} block's caller) closing over the scope it was defined in.
  Value make_macro(const Node& n, const std::string& name, const ScopePtr& defining) {
    charge_work(kClosureBytes + name.size());
    closures_.push_back(defining);
    const Node* np = &n;
    const bool uses_caller = references(n.body, "caller"), uses_varargs = references(n.body, "varargs"),
               uses_kwargs = references(n.body, "kwargs");
    return make_callable(name, "macro", [=, this](const CallArgs& a) {
      Guard g(call_depth_, lim_.max_call_depth, "macro call nesting");
      auto sc = child(defining);
      const auto& params = np->params;
      if (a.pos.size() > params.size() && !uses_varargs)
        template_fail("macro '", name, "' takes not more than ", params.size(), " argument(s)");
      std::vector<bool> given(params.size(), false);
      for (size_t i = 0; i < params.size() && i < a.pos.size(); ++i) {
        sc->set(params[i].name, a.pos[i]);
        given[i] = true;
      }
      auto extra_kw = std::make_shared<DictData>();
      for (const auto& [k, v] : a.kw) {
        bool matched = false;
        for (size_t i = 0; i < params.size(); ++i) {
          if (params[i].name != k) continue;
          if (given[i]) template_fail("macro '", name, "' got multiple values for argument '", k, "'");
          sc->set(k, v);
          given[i] = matched = true;
        }
        if (matched) continue;
        if (k == "caller" && uses_caller) sc->set("caller", v);
        else if (uses_kwargs) extra_kw->set(Value::string(k), v);
        else template_fail("macro '", name, "' takes no keyword argument '", k, "'");
      }
      for (size_t i = 0; i < params.size(); ++i) {
        if (given[i]) continue;
        sc->set(params[i].name, params[i].def ? eval(*params[i].def, sc)
                                              : Value::undefined("parameter '" + params[i].name + "' was not provided"));
      }
      if (uses_varargs) {
        ValueList extra;
        for (size_t i = params.size(); i < a.pos.size(); ++i) extra.push_back(a.pos[i]);
        sc->set("varargs", Value::list(std::move(extra), true));
      }
      if (uses_kwargs) sc->set("kwargs", Value::dict(extra_kw));
      std::string buf;
      exec(np->body, sc, buf);
      return Value::string(std::move(buf));
    });
  }

  Flow exec(const NodeList& body, const ScopePtr& sc, std::string& out) {
    for (const auto& n : body) {
      const Flow f = exec_node(*n, sc, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec_node(const Node& n, const ScopePtr& sc, std::string& out) {
    Guard g(eval_depth_, lim_.max_eval_depth, "template evaluation");
    step();
    switch (n.kind) {
      case NodeKind::Data: append(out, n.name); return Flow::Normal;
      case NodeKind::Output: append(out, to_str(eval(*n.kids[0], sc))); return Flow::Normal;
      case NodeKind::If:
        for (size_t i = 0; i < n.kids.size(); ++i)
          if (truthy(eval(*n.kids[i], sc))) return exec(n.bodies[i], sc, out);
        return exec(n.else_body, sc, out);
      case NodeKind::For: exec_for(n, sc, out); return Flow::Normal;
      case NodeKind::Set: assign(n.target, eval(*n.kids[0], sc), sc); return Flow::Normal;
      case NodeKind::SetBlock: {
        std::string buf;
        exec(n.body, child(sc), buf);
        Value v = Value::string(std::move(buf));
        for (const auto& f : n.kids) v = apply_filter(*f, v, sc);
        assign(n.target, std::move(v), sc);
        return Flow::Normal;
      }
      case NodeKind::Macro: sc->set(n.name, make_macro(n, n.name, sc)); return Flow::Normal;
      case NodeKind::CallBlock: {
        const Node& call = *n.kids[0];
        Value callee = eval(*call.kids[0], sc);
        CallArgs a = eval_args(call, sc);
        a.kw.emplace_back("caller", make_macro(n, "caller", sc));
        append(out, to_str(call_value(callee, a)));
        return Flow::Normal;
      }
      case NodeKind::FilterBlock: {
        std::string buf;
        exec(n.body, child(sc), buf);
        Value v = Value::string(std::move(buf));
        for (const auto& f : n.kids) v = apply_filter(*f, v, sc);
        append(out, to_str(v));
        return Flow::Normal;
      }
      case NodeKind::With: {
        auto inner = child(sc);
        for (const auto& p : n.params) inner->set(p.name, eval(*p.def, sc));
        return exec(n.body, inner, out);
      }
      case NodeKind::Generation: {
        // transformers renders the body as a caller() of its extension: a separate scope.
        Guard cg(call_depth_, lim_.max_call_depth, "macro call nesting");
        std::string buf;
        exec(n.body, child(sc), buf);
        append(out, buf);
        return Flow::Normal;
      }
      case NodeKind::Break: return Flow::Break;
      case NodeKind::Continue: return Flow::Continue;
      default: template_fail("jinja: line ", n.line, ": expression used as a statement");
    }
  }

  void exec_for(const Node& n, const ScopePtr& sc, std::string& out) {
    ValueList items = iterate(eval(*n.kids[0], sc));
    if (n.kids[1]) {  // {% for x in xs if cond %}: filtered before loop.length is known
      ValueList kept;
      charge_work(sat_mul_add(items.size(), kValueBytes));  // a second list of up to as many items
      for (auto& it : items) {
        auto tmp = child(sc);
        assign(n.target, it, tmp);
        step();
        if (truthy(eval(*n.kids[1], tmp))) kept.push_back(std::move(it));
      }
      items = std::move(kept);
    }
    auto shared = std::make_shared<const ValueList>(std::move(items));
    charge_work(sizeof(LoopObject) + 2 * kBoxBytes);  // kept until the render ends (loops_)
    auto loop = std::make_shared<LoopObject>(shared);
    loops_.push_back(loop);
    for (size_t i = 0; i < shared->size(); ++i) {
      step();
      loop->index = i;
      auto it_sc = child(sc);
      assign(n.target, (*shared)[i], it_sc);
      it_sc->set("loop", Value::object(loop));
      if (exec(n.body, it_sc, out) == Flow::Break) break;
    }
    if (shared->empty()) exec(n.else_body, child(sc), out);
  }

  bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return py_equal(a, b);
    if (op == "!=") return !py_equal(a, b);
    if (op == "in") return contains(b, a);
    if (op == "not in") return !contains(b, a);
    const int c = py_compare(a, b, op.c_str());
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
  }

  Value eval(const Node& n, const ScopePtr& sc) {
    Guard g(eval_depth_, lim_.max_eval_depth, "template evaluation");
    switch (n.kind) {
      case NodeKind::Literal: return n.value;
      case NodeKind::Name: return lookup(n.name, sc);
      case NodeKind::ListLit:
      case NodeKind::TupleLit: {
        ValueList items;
        for (const auto& k : n.kids) items.push_back(eval(*k, sc));
        return Value::list(std::move(items), n.kind == NodeKind::TupleLit);
      }
      case NodeKind::DictLit: {
        std::vector<std::pair<Value, Value>> entries;
        for (size_t i = 0; i + 1 < n.kids.size(); i += 2) entries.emplace_back(eval(*n.kids[i], sc), eval(*n.kids[i + 1], sc));
        return make_dict(std::move(entries));
      }
      case NodeKind::GetAttr: return get_attr(eval(*n.kids[0], sc), n.name);
      case NodeKind::GetItem: {
        Value obj = eval(*n.kids[0], sc);
        return get_item(obj, eval(*n.kids[1], sc));
      }
      case NodeKind::Slice: {
        Value obj = eval(*n.kids[0], sc);
        Value parts[3];
        for (int i = 0; i < 3; ++i)
          if (n.kids[i + 1]) parts[i] = eval(*n.kids[i + 1], sc);
        return slice_value(obj, parts[0], parts[1], parts[2]);
      }
      case NodeKind::Call: {
        Value callee = eval(*n.kids[0], sc);
        return call_value(callee, eval_args(n, sc));
      }
      case NodeKind::Filter: return apply_filter(n, eval(*n.kids[0], sc), sc);
      case NodeKind::Test: {
        Value v = eval(*n.kids[0], sc);
        return Value::boolean(call_test(n.name, v, eval_args(n, sc)) != n.flag);
      }
      case NodeKind::Unary:
        if (n.name == "not") return Value::boolean(!truthy(eval(*n.kids[0], sc)));
        return unary_op(n.name, eval(*n.kids[0], sc));
      case NodeKind::Binary: {
        Value l = eval(*n.kids[0], sc);
        if (n.name == "and") return truthy(l) ? eval(*n.kids[1], sc) : l;
        if (n.name == "or") return truthy(l) ? l : eval(*n.kids[1], sc);
        return binary_op(n.name, l, eval(*n.kids[1], sc));
      }
      case NodeKind::Compare: {
        Value left = eval(*n.kids[0], sc);
        for (size_t i = 0; i < n.ops.size(); ++i) {
          Value right = eval(*n.kids[i + 1], sc);
          if (!compare(n.ops[i], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case NodeKind::CondExpr:
        if (truthy(eval(*n.kids[0], sc))) return eval(*n.kids[1], sc);
        if (n.kids[2]) return eval(*n.kids[2], sc);
        return Value::undefined(cat("the inline if-expression on line ", n.line,
                                    " evaluated to false and no else section was defined."));
      default: template_fail("jinja: line ", n.line, ": statement used as an expression");
    }
  }

  RenderLimits lim_;
  ScopePtr root_;
  std::vector<ScopePtr> closures_;
  std::vector<std::shared_ptr<NamespaceData>> namespaces_;
  std::vector<std::shared_ptr<LoopObject>> loops_;
  int call_depth_ = 0, eval_depth_ = 0;
  uint64_t steps_ = 0;
};

// jinja2 rejects unknown filters and tests when compiling, except in "soft" frames (the test
// and branches of an {% if %}, inline if-expressions), where the error waits until the filter
// is actually reached. Blocks with their own frame (for, macro, call, set/filter blocks) are hard.
void check_names(const NodeList& nodes, bool soft);
void check_names(const Node* n, bool soft) {
  if (!n) return;
  if (!soft) {
    if (n->kind == NodeKind::Filter && !has_filter(n->name)) call_filter(n->name, Value(), CallArgs());
    if (n->kind == NodeKind::Test && !has_test(n->name))
      template_fail("jinja: line ", n->line, ": No test named '", n->name, "'.");
  }
  switch (n->kind) {
    case NodeKind::If:
    case NodeKind::CondExpr:
      check_names(n->kids, true);
      for (const auto& b : n->bodies) check_names(b, true);
      check_names(n->else_body, true);
      return;
    case NodeKind::For:
      check_names(n->kids[0].get(), soft);
      check_names(n->kids[1].get(), false);
      check_names(n->body, false);
      check_names(n->else_body, false);
      return;
    case NodeKind::Macro:
    case NodeKind::CallBlock:
    case NodeKind::SetBlock:
    case NodeKind::FilterBlock:
    case NodeKind::With:
    case NodeKind::Generation:
      check_names(n->kids, n->kind == NodeKind::CallBlock ? soft : false);
      check_names(n->body, false);
      for (const auto& p : n->params) check_names(p.def.get(), n->kind == NodeKind::With ? soft : false);
      return;
    default:
      for (const NodeList* l : {&n->kids, &n->args, &n->kw, &n->body, &n->else_body}) check_names(*l, soft);
      for (const auto& b : n->bodies) check_names(b, soft);
      for (const auto& p : n->params) check_names(p.def.get(), soft);
  }
}
void check_names(const NodeList& nodes, bool soft) {
  for (const auto& n : nodes) check_names(n.get(), soft);
}

}  // namespace

Template::Template(const std::string& source) {
  auto ast = std::make_shared<NodeList>(parse_template(source));
  check_names(*ast, false);
  ast_ = std::move(ast);
}

std::string Template::render(const VarList& vars, const VarList& globals, const RenderLimits& limits) const {
  // The meters are per thread; restored afterwards so renders never share a budget. Each render
  // has its own epoch, so values of another render (or from before) give nothing back to it.
  struct MeterScope {
    WorkMeter saved = t_work_meter;
    explicit MeterScope(const RenderLimits& l) {
      static std::atomic<uint64_t> renders{0};
      t_work_meter = {l.max_built_bytes, l.max_built_bytes, 0, l.max_live_bytes, ++renders};
    }
    ~MeterScope() { t_work_meter = saved; }
  } meter(limits);
  Evaluator ev(vars, globals, limits);
  return ev.run(*ast_);
}

}  // namespace lfm::jinja
