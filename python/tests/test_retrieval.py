"""Retrievers through the Python package (API level 3): LLM.embed and LLM.rerank against
transformers' fixtures (tests/data/retrieval: ids in; vectors and scores within 1e-4 of
reference.json), texts through a tokenizer written for a fixture, and the refusals."""
import json
import math

import pytest

import lfm
from conftest import DATA, FIXTURE

RETRIEVAL = DATA / "retrieval"
KINDS = ["lfm25_embedding_tiny_f32", "lfm25_colbert_tiny_f32", "lfm2_colbert_tiny_f32"]
TOL = 1e-4


def reference(name):
    return json.loads((RETRIEVAL / name / "reference.json").read_text())


def unit(v):
    n = math.sqrt(sum(x * x for x in v))
    return [x / max(n, 1e-12) for x in v]


def max_diff(a, b):
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b))




@pytest.mark.parametrize("name", KINDS)
def test_vectors_and_rerank_match_the_reference(name, tmp_path):
    ref = reference(name)
    colbert = ref["kind"] == "colbert"
    # Inputs are ids; the tokenizer is there for PyLate's skiplist (a lookup of its words).
    with lfm.LLM(str(tokenized(tmp_path, name))) as llm:
        assert not llm.can_generate
        assert llm.retriever == ("colbert" if colbert else "dense")
        assert llm.embedding_dim == (16 if colbert else 64)
        for role in (None, "query", "document"):
            texts = [t for t in ref["texts"] if t["role"] == role]
            if not texts:
                continue
            got = llm.embed([t["ids"] for t in texts], input_type=role)
            assert len(got) == len(texts)
            for t, v in zip(texts, got):
                if colbert:  # PyLate's encode: the rows it keeps (vector_mask 1), in order
                    want = [row for row, keep in zip(t["vectors"], t["vector_mask"]) if keep]
                    assert len(v) == len(want), t["name"]
                    assert max(max_diff(a, b) for a, b in zip(v, want)) < TOL, t["name"]
                else:
                    assert max_diff(unit(v), t["embedding"]) < TOL, t["name"]
                # Alone, the same numbers.
                assert llm.embed(t["ids"], input_type=role) == [v], t["name"]
        if not colbert:
            for mode in ("mean", "last"):
                got = llm.embed([t["ids"] for t in ref["texts"]], pooling=mode)
                for t, v in zip(ref["texts"], got):
                    assert max_diff(v, t[mode]) < TOL, (mode, t["name"])
        ids = {t["name"]: t["ids"] for t in ref["texts"]}
        s = ref["scores"]
        docs = [ids[d] for d in s["documents"]]
        for qi, q in enumerate(s["queries"]):
            ranked = llm.rerank(ids[q], docs)
            assert sorted(i for i, _ in ranked) == list(range(len(docs)))
            assert [sc for _, sc in ranked] == sorted((sc for _, sc in ranked), reverse=True)
            for i, score in ranked:
                assert abs(score - s["values"][qi][i]) < TOL, (q, s["documents"][i])
            assert llm.rerank(ids[q], docs, top_n=2) == ranked[:2]


def write_tokenizer(folder, tokens):
    """A tokenizer.json for a fixture copy: punctuation character c is id ord(c), the special
    tokens and PyLate's markers at their ids (tests/data/retrieval/README.md)."""
    special = {0: "<|pad|>", 1: "<|startoftext|>", 7: "<|im_end|>"}
    if "query_prefix" in tokens:
        special[tokens["query_prefix"]] = "[Q] "
        special[tokens["document_prefix"]] = "[D] "
    vocab, added = {}, []
    for i in range(tokens["vocab_size"]):
        if i in special:
            vocab[special[i]] = i
            added.append({"id": i, "content": special[i], "special": True})
        elif 33 <= i < 127 and not chr(i).isalnum():
            vocab[chr(i)] = i
        else:
            vocab[f"t{i}"] = i
    tok = {"added_tokens": added, "normalizer": None,
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex": "\\p{L}+|\\s+"}, "behavior": "Isolated", "invert": False},
               {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
           "post_processor": {"type": "TemplateProcessing",
                              "single": [{"SpecialToken": {"id": "<|startoftext|>", "type_id": 0}},
                                         {"Sequence": {"id": "A", "type_id": 0}}]},
           "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": vocab, "merges": []}}
    (folder / "tokenizer.json").write_text(json.dumps(tok))


def tokenized(tmp_path, name):
    """The fixture's files linked beside a tokenizer.json written for it."""
    for f in (RETRIEVAL / name).iterdir():
        (tmp_path / f.name).symlink_to(f)
    write_tokenizer(tmp_path, reference(name)["tokens"])
    return tmp_path


def test_texts_take_the_markers_and_score_as_their_ids(tmp_path):
    with lfm.LLM(str(tokenized(tmp_path, "lfm25_colbert_tiny_f32"))) as llm:
        # "!?" as a document is [BOS, [D], "!", "?"]; its punctuation rows are left out.
        by_text = llm.embed(["!?"], input_type="document")[0]
        by_ids = llm.embed([[1, 251, 33, 63]], input_type="document")[0]
        assert by_text == by_ids and len(by_text) == 2
        ranked = llm.rerank("?", ["!?", "?", "!!"], top_n=3)
        ids_ranked = llm.rerank([1, 250, 63] + [7] * 9, [[1, 251, 33, 63], [1, 251, 63], [1, 251, 33, 33]])
        assert ranked == ids_ranked
        with pytest.raises(ValueError, match=r"documents\[1\]"):
            llm.rerank("?", ["!", "\ud800"])  # a lone surrogate is no UTF-8


def test_generation_on_a_retriever_and_embedding_a_generative_model():
    with lfm.LLM(str(RETRIEVAL / "lfm25_embedding_tiny_f32")) as retriever:
        with pytest.raises(lfm.LfmError, match="language-model head") as e:
            retriever.generate([[1, 2, 3]])
        assert e.value.status == 3  # LFM_ERR_UNSUPPORTED
        with pytest.raises(lfm.LfmError, match="language-model head"):
            retriever.stats()
    with lfm.LLM(str(FIXTURE), ctx_size=256, parallel=1) as gen:
        assert gen.can_generate and gen.retriever is None
        with pytest.raises(lfm.LfmError, match="ask for a pooling"):
            gen.embed([1, 23, 54])
        v = gen.embed([1, 23, 54], pooling="mean")[0]
        assert len(v) == gen.embedding_dim and all(isinstance(x, float) for x in v)
        rows = gen.embed([1, 23, 54], pooling="none")[0]
        assert len(rows) == 3 and all(len(r) == gen.embedding_dim for r in rows)
        with pytest.raises(lfm.LfmError, match="no retriever"):
            gen.rerank([1, 2], [[1, 3]])
        assert len(gen.generate([[1, 2, 3]], lfm.SamplingParams(max_tokens=2))[0].outputs[0].token_ids) == 2


def test_bad_inputs_are_refused():
    with lfm.LLM(str(RETRIEVAL / "lfm25_colbert_tiny_f32")) as llm:
        with pytest.raises(lfm.LfmError, match="no inputs"):
            llm.embed([])
        with pytest.raises(lfm.LfmError, match="tokenizer"):
            llm.embed(["no tokenizer here"])
        with pytest.raises(lfm.LfmError, match="outside the vocabulary"):
            llm.embed([[1, 256]])
        with pytest.raises(lfm.LfmError, match="past the model's limit of 20"):
            llm.embed([[100] * 21], input_type="document")
        with pytest.raises(ValueError, match="token id"):
            llm.embed([[1, 2**32 + 5]])  # ctypes would make it 5
        with pytest.raises(ValueError, match="mixes"):
            llm.embed([[1, 2], "text"])
        with pytest.raises(ValueError, match="input_type"):
            llm.embed([[1, 2]], input_type="passage")
        with pytest.raises(ValueError, match="pooling"):
            llm.embed([[1, 2]], pooling="max")
        with pytest.raises(lfm.LfmError, match="keeps one vector per token"):
            llm.embed([[1, 2]], pooling="cls")
        with pytest.raises(lfm.LfmError, match="past the limit of 4096"):
            llm.rerank([1, 250, 100], [[1, 251, 100]] * 10000)
        with pytest.raises(ValueError, match="top_n"):
            llm.rerank([1, 250, 100], [[1, 251, 100]], top_n=-1)
