"""Hostile arguments to the Python package (issue 55): strings holding NUL and integers outside
their C types are refused in Python (ValueError naming the field), not cut at the NUL or wrapped by
ctypes into another, valid-looking request."""
import pytest

import lfm
from conftest import FIXTURE


@pytest.fixture(scope="module")
def llm():
    with lfm.LLM(str(FIXTURE), ctx_size=256, parallel=2) as m:
        yield m


@pytest.mark.parametrize("params, field", [
    (dict(max_tokens=2**64 + 16), "max_tokens"),  # ctypes would make it 16
    (dict(max_tokens=2**63), "max_tokens"),
    (dict(max_tokens=-2**64 + 4), "max_tokens"),
    (dict(top_k=2**32 + 1), "top_k"),  # ctypes would make it 1
    (dict(logit_bias={2**32 + 5: 1.0}), "logit_bias"),  # ctypes would make it id 5
    (dict(logit_bias={-2**32 + 5: 1.0}), "logit_bias"),
    (dict(seed=2**64), "seed"),  # ctypes would make it 0
    (dict(max_drafts=2**32 + 2), "max_drafts"),
    (dict(logprobs=2**64 + 1), "logprobs"),
    (dict(max_tokens=True), "max_tokens"),
    (dict(top_k=1.5), "top_k"),
])
def test_integers_outside_their_c_type_are_refused(llm, params, field):
    with pytest.raises(ValueError, match=field):
        llm.generate([[1, 2, 3]], lfm.SamplingParams(ignore_eos=True, **params))


def test_in_range_integers_still_work(llm):
    out = llm.generate([[1, 2, 3]], lfm.SamplingParams(max_tokens=5, ignore_eos=True, seed=2**64 - 1, top_k=3,
                                                        temperature=1.0, logit_bias={7: 1.0}))[0]
    assert len(out.outputs[0].token_ids) == 5


def test_prompt_ids_outside_int32_are_refused(llm):
    with pytest.raises(ValueError, match="prompt"):
        llm.generate([[1, 2**32 + 2]])  # ctypes would make it [1, 2]
    with pytest.raises(ValueError, match="prompt"):
        llm.generate([{"prompt_token_ids": [-2**32 + 1]}])


def test_strings_holding_nul_are_refused(text_llm, tmp_path):
    with pytest.raises(ValueError, match="prompt"):
        text_llm.generate("Hello\0 and the rest is dropped")
    with pytest.raises(ValueError, match="stop"):
        text_llm.generate("Hello", lfm.SamplingParams(stop=["a\0b"]))
    with pytest.raises(ValueError, match="grammar"):
        text_llm.generate("Hello", lfm.SamplingParams(grammar='root ::= "a"\0 | "b"'))
    with pytest.raises(ValueError, match="regex"):
        text_llm.generate("Hello", lfm.SamplingParams(regex="a\0b"))
    with pytest.raises(ValueError, match="json_schema"):
        text_llm.generate("Hello", lfm.SamplingParams(json_schema='{"type": "string"}\0{'))
    with pytest.raises(ValueError, match="image"):
        text_llm.generate({"prompt": "<image> What is it?",
                           "multi_modal_data": {"image": str(tmp_path / "a.png") + "\0.jpg"}})
    with pytest.raises(ValueError, match="text"):
        text_llm.tokenize("a\0b")
    with pytest.raises(ValueError, match="model"):
        lfm.LLM(str(FIXTURE) + "\0/elsewhere")
    # NUL inside chat messages is JSON-escaped, so it reaches the template whole.
    out = text_llm.chat([{"role": "user", "content": "Hi\0there"}], lfm.SamplingParams(max_tokens=2))[0]
    assert out.outputs[0].finish_reason in ("length", "stop")
