"""The quant tests measure kernel speeds into a cache of their own, never the user's; and the small
models and texts several quant test modules evaluate (a tiny BERT and a tiny Llama built from
configs, with MiniLM's tokenizer)."""

import pytest
import torch

from tests.support.quant_eval import TEXTS, with_tokenizer


@pytest.fixture(autouse=True, scope="session")
def _kernel_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:  # children (python -m accelkit) inherit it
        patch.setenv("ACCELKIT_CACHE_DIR", str(tmp_path_factory.mktemp("accelkit-cache")))
        yield


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-bert")
    config = transformers.BertConfig(
        vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=64,
    )  # fmt: skip
    transformers.BertModel(config).save_pretrained(folder, safe_serialization=True)
    return with_tokenizer(folder)


@pytest.fixture(scope="module")
def causal_dir(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1)
    folder = tmp_path_factory.mktemp("tiny-llama")
    config = transformers.LlamaConfig(
        vocab_size=30522, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    return with_tokenizer(folder)


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("texts")
    (folder / "calib.txt").write_text("\n".join(TEXTS[:6]) + "\n\n")
    (folder / "eval.txt").write_text("\n".join(TEXTS[2:]))
    return folder
