"""API level 2 through the Python package: the ctypes layouts against include/lfm/lfm.h, structured
output, speculative decoding, images (LFM2-VL), the parsed chat reply, logit bias, top logprobs."""
import base64
import ctypes
import json
import re
from pathlib import Path

import pytest

import lfm
from lfm import _capi

from conftest import DATA, FIXTURE, VL_MODEL

ROOT = Path(__file__).resolve().parents[2]
IMAGE = DATA / "hf_vl" / "images" / "rgb_37x53.png"

C_TYPES = {"size_t": ctypes.c_size_t, "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64,
           "uint64_t": ctypes.c_uint64, "float": ctypes.c_float, "double": ctypes.c_double}
STRUCTS = {"lfm_model_options": _capi.ModelOptions, "lfm_model_info": _capi.ModelInfo,
           "lfm_engine_options": _capi.EngineOptions, "lfm_engine_stats": _capi.EngineStats,
           "lfm_sampling_params": _capi.SamplingParamsC, "lfm_prompt": _capi.Prompt, "lfm_event": _capi.Event,
           "lfm_embed_request": _capi.EmbedRequest, "lfm_embedding": _capi.Embedding,
           "lfm_rerank_request": _capi.RerankRequest}


def header_fields(name):
    """(field, ctypes type or "pointer") in declaration order, read from lfm.h."""
    text = (ROOT / "include" / "lfm" / "lfm.h").read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (name, name), text, re.S).group(1)
    out = []
    for decl in body.split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        first, *rest = decl.split(",")
        type_str, name = re.match(r"(.*?)([A-Za-z_]\w*)$", first).groups()
        base = type_str.replace("*", " ").replace("const", " ").split()[-1]
        for n, stars in [(name, type_str.count("*"))] + [(r.strip(" *"), type_str.count("*") + r.count("*"))
                                                          for r in rest]:
            out.append((n, "pointer" if stars else C_TYPES[base]))
    return out


@pytest.mark.parametrize("name", sorted(STRUCTS))
def test_ctypes_layouts_match_the_header(name):
    cls = STRUCTS[name]
    fields = header_fields(name)
    assert [f for f, _ in fields] == [f for f, _ in cls._fields_]
    for (f, want), (_, got) in zip(fields, cls._fields_):
        if want == "pointer":
            assert ctypes.sizeof(got) == ctypes.sizeof(ctypes.c_void_p) and got not in C_TYPES.values(), f
        else:
            assert got is want, f


def test_init_functions_agree_on_sizes_and_defaults():
    lib = lfm.llm._library()
    for cls, init in ((_capi.SamplingParamsC, lib.lfm_sampling_params_init), (_capi.Prompt, lib.lfm_prompt_init),
                      (_capi.EngineOptions, lib.lfm_engine_options_init),
                      (_capi.ModelOptions, lib.lfm_model_options_init),
                      (_capi.EmbedRequest, lib.lfm_embed_request_init),
                      (_capi.RerankRequest, lib.lfm_rerank_request_init)):
        buf = (ctypes.c_char * 1024)()
        assert init(ctypes.cast(buf, ctypes.POINTER(cls))) == _capi.OK
        c = cls.from_buffer(buf)
        assert c.struct_size == ctypes.sizeof(cls), cls.__name__
    sp = _capi.SamplingParamsC()
    lib.lfm_sampling_params_init(ctypes.byref(sp))
    assert (sp.top_p, sp.max_tokens, sp.max_drafts, sp.drafter, sp.top_logprobs) == (1.0, -1, 8, 0, 0)
    eo = _capi.EngineOptions()
    lib.lfm_engine_options_init(ctypes.byref(eo))
    assert (eo.ctx_size, eo.batch_tokens, eo.draft_tokens, eo.draft_model) == (4096, 512, 8, None)


def test_structured_output_and_refusals(text_llm):
    msgs = [{"role": "user", "content": "A person?"}]
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}},
              "required": ["name"], "additionalProperties": False}
    o = text_llm.chat(msgs, lfm.SamplingParams(max_tokens=64, json_schema=schema))[0].outputs[0]
    assert o.finish_reason == "stop"
    assert list(json.loads(o.text)) == ["name"]
    o = text_llm.chat(msgs, lfm.SamplingParams(max_tokens=8, grammar='root ::= "yes" | "no"'))[0].outputs[0]
    assert o.text in ("yes", "no")
    with pytest.raises(lfm.LfmError, match="json_schema"):
        text_llm.chat(msgs, lfm.SamplingParams(json_schema='{"type": '))
    with pytest.raises(lfm.LfmError, match="at most one"):
        text_llm.chat(msgs, lfm.SamplingParams(grammar='root ::= "a"', regex="a"))


def test_chat_reply_is_parsed(text_llm):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    grammar = ('root ::= "<think>Hmm.</think>" "Sure. " <|tool_call_start|> "[get_weather(city=\\"Rome\\")]" '
               '<|tool_call_end|>')
    out = text_llm.chat([{"role": "user", "content": "Weather in Rome?"}],
                        lfm.SamplingParams(max_tokens=64, grammar=grammar), tools=tools)[0].outputs[0]
    msg = out.message
    assert msg["reasoning_content"] == "Hmm." and msg["content"] == "Sure. "
    call = msg["tool_calls"][0]["function"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Rome"}
    assert text_llm.generate("Hi", lfm.SamplingParams(max_tokens=2))[0].outputs[0].message is None


def test_speculative_decoding_keeps_greedy_tokens():
    run = json.loads((FIXTURE / "reference.json").read_text())["greedy"]["runs"][0]
    with lfm.LLM(str(FIXTURE), ctx_size=256, parallel=2, draft_model=str(FIXTURE)) as llm:
        for drafter in ("ngram", "model"):
            params = lfm.SamplingParams(max_tokens=len(run["new_tokens"]), ignore_eos=True, drafter=drafter)
            out = llm.generate([run["prompt"]], params)[0]
            assert out.outputs[0].token_ids == run["new_tokens"], drafter
            assert out.usage["drafted_tokens"] >= out.usage["accepted_tokens"]
        assert out.usage["accepted_tokens"] > 0  # the model drafting for itself
        with pytest.raises(ValueError, match="drafter"):
            llm.generate([[1, 2]], lfm.SamplingParams(drafter="eagle"))
    with lfm.LLM(str(FIXTURE), ctx_size=64) as plain, pytest.raises(lfm.LfmError, match="draft model"):
        plain.generate([[1, 2]], lfm.SamplingParams(drafter="model"))


def test_logit_bias_and_top_logprobs():
    with lfm.LLM(str(FIXTURE), ctx_size=64) as llm:
        o = llm.generate([[1, 2, 3]], lfm.SamplingParams(max_tokens=4, ignore_eos=True, logprobs=2))[0].outputs[0]
        assert len(o.top_logprobs) == 4 and all(len(t) == 2 for t in o.top_logprobs)
        assert [max(t, key=t.get) for t in o.top_logprobs] == o.token_ids
        o = llm.generate([[1, 2, 3]], lfm.SamplingParams(max_tokens=3, ignore_eos=True, logit_bias={9: 100}))[0]
        assert o.outputs[0].token_ids == [9, 9, 9]


def test_images_by_path_bytes_and_data_uri():
    case = next(c for c in json.loads((VL_MODEL / "reference.json").read_text())["cases"] if c["name"] == "one_image")
    with lfm.LLM(str(VL_MODEL), ctx_size=256, parallel=2) as llm:
        assert llm.has_vision and llm.image_token == 396
        params = lfm.SamplingParams(max_tokens=len(case["greedy_ids"]), ignore_eos=True)
        text = case["template_text"][len("<|startoftext|>"):]  # the tokenizer adds BOS
        outs = llm.generate([{"prompt": text, "multi_modal_data": {"image": str(IMAGE)}},
                             {"prompt": text, "multi_modal_data": {"image": IMAGE.read_bytes()}}], params)
        for out in outs:
            assert out.outputs[0].token_ids == case["greedy_ids"]
        uri = "data:image/png;base64," + base64.b64encode(IMAGE.read_bytes()).decode()
        msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": uri}},
                                             {"type": "text", "text": "Describe this."}]}]
        assert llm.chat(msgs, params)[0].outputs[0].token_ids == case["greedy_ids"]
        bare = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe this."}]}]
        assert llm.chat(bare, params, images=[IMAGE])[0].outputs[0].token_ids == case["greedy_ids"]
        with pytest.raises(lfm.LfmError, match="cat.png"):
            llm.generate({"prompt": text, "multi_modal_data": {"image": "/nonexistent/cat.png"}}, params)
    with lfm.LLM(str(FIXTURE), ctx_size=64) as text_only, pytest.raises(lfm.LfmError, match="vision tower"):
        text_only.generate({"prompt_token_ids": [1, 396], "multi_modal_data": {"image": str(IMAGE)}})
