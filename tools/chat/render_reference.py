#!/usr/bin/python3
"""Reference chat-template renderer: Python jinja2 configured exactly like Hugging Face
transformers' chat templates (transformers/utils/chat_template_utils.py), used as the oracle
for lfm's own Jinja interpreter. transformers itself is not required.

Single render (prints the prompt to stdout exactly, exit 1 with the message on template errors):
  render_reference.py --template T.jinja --messages conv.json [--tools tools.json]
                      [--no-generation-prompt] [--var name=JSON ...] [--date YYYY-MM-DD]
                      [--bos S] [--eos S] [--pad S]
Batch (used by the C++ tests):
  render_reference.py --batch cases.json
  cases.json: [{"template": str, "messages": [...], "tools": [...]|null,
                "add_generation_prompt": bool, "vars": {...}, "date": "YYYY-MM-DD"|null,
                "bos_token": str|null, "eos_token": str|null, "pad_token": str|null}, ...]
  stdout: JSON list of {"ok": true, "text": str} or {"ok": false, "error": str}.
"""
import argparse
import datetime
import json
import sys

try:
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.stderr.write("render_reference.py: python3-jinja2 is missing; run scripts/setup.sh\n")
    sys.exit(3)


class AssistantTracker(jinja2.ext.Extension):
    """transformers' {% generation %} tag: renders its body through a caller (own scope)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


def make_env(date):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        if date is not None:
            return datetime.datetime.strptime(date, "%Y-%m-%d").strftime(format)
        return datetime.datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(case):
    tools = case.get("tools")
    if tools is not None:
        # transformers.apply_chat_template: tools must be JSON-schema dicts (or Python functions).
        for tool in tools:
            if not isinstance(tool, dict):
                raise ValueError("Tools should either be a JSON schema, or a callable function with type hints "
                                 "and a docstring suitable for auto-conversion to a schema.")
    env = make_env(case.get("date"))
    template = env.from_string(case["template"])
    kwargs = {}
    for key in ("bos_token", "eos_token", "pad_token"):
        if case.get(key) is not None:
            kwargs[key] = case[key]
    kwargs.update(case.get("vars") or {})
    return template.render(
        messages=case["messages"],
        tools=tools,
        documents=None,
        add_generation_prompt=case.get("add_generation_prompt", True),
        **kwargs,
    )


def run_batch(path):
    with open(path, encoding="utf-8") as f:
        cases = json.load(f)
    results = []
    for case in cases:
        try:
            results.append({"ok": True, "text": render(case)})
        except Exception as e:  # any template error counts as "raises"
            results.append({"ok": False, "error": "%s: %s" % (type(e).__name__, e)})
    sys.stdout.write(json.dumps(results, ensure_ascii=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch")
    ap.add_argument("--template")
    ap.add_argument("--messages")
    ap.add_argument("--tools")
    ap.add_argument("--no-generation-prompt", action="store_true")
    ap.add_argument("--var", action="append", default=[])
    ap.add_argument("--date")
    ap.add_argument("--bos", default="<|startoftext|>")
    ap.add_argument("--eos", default="<|im_end|>")
    ap.add_argument("--pad", default="<|pad|>")
    args = ap.parse_args()
    if args.batch:
        run_batch(args.batch)
        return
    if not args.template or not args.messages:
        ap.error("--template and --messages are required without --batch")
    with open(args.template, encoding="utf-8") as f:
        source = f.read()
    with open(args.messages, encoding="utf-8") as f:
        messages = json.load(f)
    tools = None
    if args.tools:
        with open(args.tools, encoding="utf-8") as f:
            tools = json.load(f)
    variables = {}
    for v in args.var:
        name, _, value = v.partition("=")
        variables[name] = json.loads(value)
    case = {"template": source, "messages": messages, "tools": tools,
            "add_generation_prompt": not args.no_generation_prompt, "vars": variables, "date": args.date,
            "bos_token": args.bos, "eos_token": args.eos, "pad_token": args.pad}
    try:
        sys.stdout.write(render(case))
    except Exception as e:
        sys.stderr.write("%s: %s\n" % (type(e).__name__, e))
        sys.exit(1)


if __name__ == "__main__":
    main()
