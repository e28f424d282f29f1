// A parsed Jinja template and its renderer. Rendering follows jinja2's
// ImmutableSandboxedEnvironment as Hugging Face configures it for chat templates.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace lfm::jinja {

// Bounds that keep hostile templates from exhausting memory, stack or time. Exceeding one is a
// TemplateError naming the limit.
struct RenderLimits {
  size_t max_output_bytes = size_t(64) << 20;
  int max_call_depth = 100;        // nested macro / caller invocations
  int max_eval_depth = 1500;       // nested statement + expression evaluation frames
  uint64_t max_steps = 20'000'000;  // statements executed + loop iterations
  // Bytes of strings built in total (every intermediate; output included): bounds the work a
  // render does when single steps build large strings. Real templates build well under 1 MB.
  uint64_t max_built_bytes = uint64_t(1) << 30;
  // Bytes of strings, lists and dicts held at once (see WorkMeter): bounds a render's memory.
  uint64_t max_live_bytes = uint64_t(128) << 20;
};

using VarList = std::vector<std::pair<std::string, Value>>;

class Template {
 public:
  // Parses and checks the source (unknown filters/tests are reported here, as jinja2 does at
  // compile time). Throws TemplateError.
  explicit Template(const std::string& source);

  // vars: render arguments (shadow globals); globals: environment globals such as
  // raise_exception. jinja2's own globals (range, dict, namespace) are always present.
  std::string render(const VarList& vars, const VarList& globals = {}, const RenderLimits& limits = {}) const;

 private:
  std::shared_ptr<const NodeList> ast_;
};

}  // namespace lfm::jinja
