"""Small Hugging Face CLIPModel and SiglipModel folders with random weights, saved the way
transformers' save_pretrained writes a downloaded one (config.json, model.safetensors,
tokenizer.json, tokenizer_config.json, preprocessor_config.json): nothing is downloaded. The
tokenizers are trained here on a few sentences with the `tokenizers` library: a byte-level BPE
with CLIP's start and end tokens, and a Unigram with SigLIP's `</s>`."""

from __future__ import annotations

from pathlib import Path

SENTENCES = [
    "a photo of a cat",
    "a red bicycle at night",
    "coffee cup on a table",
    "an astronaut on the moon",
    "a rocket launch",
    "green grass and a brick wall",
    "text on a page",
    "coins and a clock",
]
SIZE = 64  # the vision tower's image size
CLIP_CONTEXT = 24
SIGLIP_CONTEXT = 16


def clip_tokenizer():
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tokenizer = Tokenizer(models.BPE(unk_token="<|endoftext|>"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|startoftext|>", "<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(SENTENCES, trainer)
    bos, eos = tokenizer.token_to_id("<|startoftext|>"), tokenizer.token_to_id("<|endoftext|>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A <|endoftext|>",
        special_tokens=[("<|startoftext|>", bos), ("<|endoftext|>", eos)],
    )
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def siglip_tokenizer():
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=120, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>"
    )
    tokenizer.train_from_iterator(SENTENCES, trainer)
    eos = tokenizer.token_to_id("</s>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", eos)]
    )
    tokenizer.decoder = decoders.Metaspace()
    return tokenizer


def _towers(vocab: int, context: int, **text) -> dict:
    tower = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2}
    return {
        "text_config": {
            **tower,
            "num_attention_heads": 2,
            "vocab_size": vocab,
            "max_position_embeddings": context,
            **text,
        },
        "vision_config": {**tower, "num_attention_heads": 2, "image_size": SIZE, "patch_size": 16},
    }


def build(kind: str, folder: Path, seed: int = 0):
    """The model (eval mode) after saving it, its tokenizer and its processor into `folder`."""
    import torch
    from transformers import PreTrainedTokenizerFast

    torch.manual_seed(seed)
    if kind == "clip":
        from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPModel, CLIPTokenizer

        backend = clip_tokenizer()
        end = backend.token_to_id("<|endoftext|>")
        config = CLIPConfig(
            **_towers(
                backend.get_vocab_size(),
                CLIP_CONTEXT,
                eos_token_id=end,
                pad_token_id=end,
                bos_token_id=backend.token_to_id("<|startoftext|>"),
            ),
            projection_dim=24,
        )
        model = CLIPModel(config).eval()
        processor = CLIPImageProcessorPil(
            size={"shortest_edge": SIZE}, crop_size={"height": SIZE, "width": SIZE}
        )
        # CLIP's own tokenizer class, as a downloaded folder names it: transformers rebuilds
        # CLIP's pipeline over the vocabulary and merges (what the importer must follow)
        tokenizer = CLIPTokenizer(
            tokenizer_object=backend,
            bos_token="<|startoftext|>",
            eos_token="<|endoftext|>",
            pad_token="<|endoftext|>",
            unk_token="<|endoftext|>",
            model_max_length=CLIP_CONTEXT,
        )
    else:
        from transformers import SiglipConfig, SiglipImageProcessorPil, SiglipModel

        backend = siglip_tokenizer()
        end = backend.token_to_id("</s>")
        config = SiglipConfig(
            **_towers(backend.get_vocab_size(), SIGLIP_CONTEXT, eos_token_id=end, pad_token_id=end)
        )
        model = SiglipModel(config).eval()
        processor = SiglipImageProcessorPil(size={"height": SIZE, "width": SIZE})
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=backend,
            eos_token="</s>",
            pad_token="</s>",
            unk_token="<unk>",
            model_max_length=SIGLIP_CONTEXT,
            # as SigLIP was trained (and transformers 4's SiglipTokenizer): no attention mask,
            # the pooled last position reads the padding
            model_input_names=["input_ids"],
        )
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model
