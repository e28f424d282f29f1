"""Paths and fixtures the Python package's tests share."""
from pathlib import Path

import pytest

import lfm

DATA = Path(__file__).resolve().parents[2] / "tests" / "data"
FIXTURE = DATA / "hf" / "lfm2_c_layertypes_untied_convbias_f32"  # no tokenizer: token ids in and out
VL_MODEL = DATA / "hf_vl" / "lfm2vl_a_tied_ln"  # a tokenizer, and LFM2-350M's template (tools) beside it
TEMPLATE = DATA / "assets" / "lfm2" / "LFM2-350M" / "chat_template.jinja"


@pytest.fixture(scope="module")
def text_llm(tmp_path_factory):
    """The VL fixture's text side with a tokenizer and LFM2-350M's chat template (tools)."""
    d = tmp_path_factory.mktemp("text_model")
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
              "preprocessor_config.json", "processor_config.json"):
        (d / f).symlink_to(VL_MODEL / f)
    (d / "chat_template.jinja").write_text(TEMPLATE.read_text())
    with lfm.LLM(str(d), ctx_size=1024, parallel=2) as m:
        yield m
