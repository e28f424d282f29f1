"""lfm: LFM2 inference from Python, over the C API of liblfm (ctypes; no compiler needed).

    import lfm
    llm = lfm.LLM("path/to/LFM2-1.2B")
    out = llm.generate(["The capital of France is"], lfm.SamplingParams(max_tokens=16))
    print(out[0].outputs[0].text)

liblfm.so is found through LFM_LIBRARY, else the checkout's build/liblfm.so, else the system's.
"""
from .llm import (LLM, AudioEvent, CompletionOutput, LfmError, RequestOutput, SamplingParams, Stream, TokenEvent)

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Stream", "TokenEvent", "AudioEvent",
           "LfmError"]
__version__ = "0.1.0"
