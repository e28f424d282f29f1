#!/usr/bin/env python3
"""Validates JSON texts against a JSON Schema with the python `jsonschema` package: an oracle
independent of lfm's grammar, for the structured-output tests.

Usage:
  validate.py SCHEMA_FILE INSTANCE_FILE...   each INSTANCE_FILE holds one JSON text
  validate.py SCHEMA_FILE --texts TEXTS_FILE TEXTS_FILE holds a JSON array of strings, each
                                             one JSON text (e.g. many generated outputs)
  validate.py --pairs PAIRS_FILE             PAIRS_FILE holds a JSON array of {"schema": S,
                                             "texts": [..]}: many schemas in one call, each
                                             line also carrying "pair": its index
  validate.py --suite SUITE_FILE...          each SUITE_FILE is {"schema": S, "valid": [..],
                                             "invalid": [..]} (tests/data/grammar/schemas/):
                                             checks that every valid instance validates and
                                             every invalid one does not

SCHEMA_FILE is either a schema or a suite file (its "schema" is used). Instance mode prints one
JSON line per text, in order: {"index": i, "source": file or TEXTS_FILE, "valid": bool,
"error": message or null}; a text that is not JSON is invalid ("not JSON: ..."). Suite mode
prints one line per instance whose verdict is wrong, then a summary line.
Exit status: 0 all valid (suite: all verdicts right), 1 some not, 2 usage or schema errors.

The dialect is the schema's $schema (default 2020-12); formats are checked (date, time,
date-time, email, uuid, ...), with date-time/time checked here when rfc3339-validator is absent.
"""
import json
import re
import sys

import jsonschema
from jsonschema import validators

_TIME = re.compile(r"^([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([zZ]|[+-]([01]\d|2[0-3]):[0-5]\d)$")


def _format_checker(cls):
    checker = cls.FORMAT_CHECKER
    import datetime

    def is_time(s):
        return not isinstance(s, str) or bool(_TIME.match(s))

    def is_date_time(s):
        if not isinstance(s, str):
            return True
        parts = re.split(r"[Tt]", s, maxsplit=1)
        if len(parts) != 2 or not _TIME.match(parts[1]) or not re.match(r"^\d{4}-\d\d-\d\d$", parts[0]):
            return False
        try:
            datetime.date.fromisoformat(parts[0])
        except ValueError:
            return False
        return True

    if "time" not in checker.checkers:
        checker.checks("time")(is_time)
    if "date-time" not in checker.checkers:
        checker.checks("date-time")(is_date_time)
    return checker


def make_validator(schema):
    cls = validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema, format_checker=_format_checker(cls))


def verdict(validator, text):
    try:
        instance = json.loads(text)
    except ValueError as e:
        return False, "not JSON: %s" % e
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        return False, "/%s: %s" % ("/".join(str(p) for p in e.path), e.message)
    return True, None


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def suite(paths):
    wrong = total = 0
    for path in paths:
        case = load(path)
        try:
            v = make_validator(case["schema"])
        except jsonschema.SchemaError as e:
            print(json.dumps({"file": path, "error": "bad schema: %s" % e.message}))
            wrong += 1
            continue
        for expect, key in ((True, "valid"), (False, "invalid")):
            for i, inst in enumerate(case.get(key, [])):
                total += 1
                ok, err = verdict(v, json.dumps(inst))
                if ok != expect:
                    wrong += 1
                    print(json.dumps({"file": path, "list": key, "index": i, "instance": inst, "error": err}))
    print(json.dumps({"checked": total, "wrong": wrong}))
    return 0 if wrong == 0 else 1


def pairs(path):
    all_ok = True
    for p, pair in enumerate(load(path)):
        try:
            v = make_validator(pair["schema"])
        except jsonschema.SchemaError as e:
            print(json.dumps({"pair": p, "valid": False, "error": "bad schema: %s" % e.message}))
            all_ok = False
            continue
        for i, text in enumerate(pair["texts"]):
            ok, err = verdict(v, text)
            all_ok = all_ok and ok
            print(json.dumps({"pair": p, "index": i, "source": path, "valid": ok, "error": err}))
    return 0 if all_ok else 1


def main(argv):
    if len(argv) >= 2 and argv[0] == "--suite":
        return suite(argv[1:])
    if len(argv) == 2 and argv[0] == "--pairs":
        return pairs(argv[1])
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    schema = load(argv[0])
    if isinstance(schema, dict) and "schema" in schema and ("valid" in schema or "invalid" in schema):
        schema = schema["schema"]
    try:
        v = make_validator(schema)
    except jsonschema.SchemaError as e:
        print("validate.py: bad schema: %s" % e.message, file=sys.stderr)
        return 2
    if argv[1] == "--texts":
        if len(argv) != 3:
            print(__doc__, file=sys.stderr)
            return 2
        texts = [(argv[2], t) for t in load(argv[2])]
    else:
        texts = []
        for path in argv[1:]:
            with open(path, encoding="utf-8") as f:
                texts.append((path, f.read()))
    all_ok = True
    for i, (source, text) in enumerate(texts):
        ok, err = verdict(v, text)
        all_ok = all_ok and ok
        print(json.dumps({"index": i, "source": source, "valid": ok, "error": err}))
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
