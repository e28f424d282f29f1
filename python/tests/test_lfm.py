"""The Python package over liblfm (run by ctest as Python.Pytest, or: PYTHONPATH=python pytest-3 python/tests)."""
import json
import threading
import time

import pytest

import lfm
from conftest import FIXTURE


@pytest.fixture(scope="module")
def llm():
    with lfm.LLM(str(FIXTURE), ctx_size=512, parallel=4) as m:
        yield m


def reference():
    run = json.loads((FIXTURE / "reference.json").read_text())["greedy"]["runs"][0]
    return run["prompt"], run["new_tokens"]


def test_generate_greedy_matches_reference(llm):
    prompt, expected = reference()
    params = lfm.SamplingParams(max_tokens=len(expected), ignore_eos=True, logprobs=0)
    outs = llm.generate([{"prompt_token_ids": prompt}, prompt], params)
    assert len(outs) == 2
    for out in outs:
        o = out.outputs[0]
        assert o.token_ids == expected
        assert o.finish_reason == "length"
        assert len(o.logprobs) == len(expected) and all(lp <= 0 for lp in o.logprobs)
        assert out.prompt_token_ids == prompt
        assert out.usage["completion_tokens"] == len(expected)


def test_seeded_sampling_repeats(llm):
    params = lfm.SamplingParams(temperature=0.9, top_p=0.9, seed=3, max_tokens=10, ignore_eos=True)
    a, b = llm.generate([[1, 2, 3], [1, 2, 3]], params)
    assert a.outputs[0].token_ids == b.outputs[0].token_ids
    assert len(a.outputs[0].token_ids) == 10


def test_streaming_iterator(llm):
    prompt, expected = reference()
    stream = llm.stream(prompt, lfm.SamplingParams(max_tokens=8, ignore_eos=True))
    ids = [ev.token_id for ev in stream]
    assert ids == expected[:8]
    assert stream.output.finish_reason == "length" and stream.output.token_ids == ids


def test_cancel_from_another_thread(llm):
    stream = llm.stream([1, 23, 54], lfm.SamplingParams(max_tokens=None, ignore_eos=True))
    seen = []
    first = threading.Event()

    def read():
        for ev in stream:
            seen.append(ev.token_id)
            first.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert first.wait(60)
    threading.Thread(target=stream.cancel).start()
    reader.join(60)
    assert not reader.is_alive()
    assert stream.output.finish_reason == "cancelled"
    assert 0 < len(seen) < 500
    # The engine publishes its statistics after the step that ended the request: the DONE event
    # may come first.
    deadline = time.monotonic() + 30
    while llm.stats()["cancelled"] < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert llm.stats()["cancelled"] >= 1


def test_errors_are_exceptions(llm):
    with pytest.raises(lfm.LfmError) as e:
        lfm.LLM("/nonexistent/lfm/model")
    assert "/nonexistent/lfm/model" in str(e.value)
    with pytest.raises(lfm.LfmError):
        llm.generate([[1, 999999]])  # an id outside the vocabulary
    with pytest.raises(lfm.LfmError, match="tokenizer"):
        llm.generate("text needs a tokenizer")
    with pytest.raises(lfm.LfmError, match="tpu"):
        lfm.LLM(str(FIXTURE), device="tpu")
    closed = lfm.LLM(str(FIXTURE), ctx_size=64)
    closed.close()
    with pytest.raises(lfm.LfmError, match="closed"):
        closed.generate([[1, 2]])


def test_text_generate_tokenize_and_template(text_llm):
    ids = text_llm.tokenize("Hello world", add_special=False)
    assert text_llm.detokenize(ids) == "Hello world"
    out = text_llm.generate("The weather is", lfm.SamplingParams(max_tokens=6))[0]
    assert out.prompt == "The weather is"
    assert 0 < len(out.outputs[0].token_ids) <= 6
    assert isinstance(out.outputs[0].text, str)
    rendered = text_llm.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert rendered.endswith("<|im_start|>assistant\n")


def test_chat_with_tools(text_llm):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    assert "get_weather" in text_llm.apply_chat_template(messages, tools=tools)
    outs = text_llm.chat(messages, lfm.SamplingParams(max_tokens=8, temperature=0.7, seed=1), tools=tools)
    assert len(outs) == 1
    o = outs[0].outputs[0]
    assert o.finish_reason in ("stop", "length") and o.token_ids
