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
START, END = "<|startoftext|>", "<|endoftext|>"
CLIP_SPLIT = (  # CLIP's own split (transformers' CLIPTokenizer)
    r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
)


def clip_tokenizer():
    """A byte-level BPE shaped as CLIP's own (the pipeline `CLIPTokenizer` rebuilds over the
    vocabulary and merges: CLIP's split, words ending in `</w>`), every byte a token alone and at
    a word's end, so no text reads as `<|endoftext|>` (CLIP's unknown token, and its end: the
    text tower pools at the first one, so texts with an unknown token early embed alike)."""
    import json

    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

    def shaped(model):
        tokenizer = Tokenizer(model)
        tokenizer.normalizer = normalizers.Sequence(
            [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()]
        )
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(CLIP_SPLIT), behavior="removed", invert=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False),
            ]
        )
        return tokenizer

    rule = {"unk_token": END, "continuing_subword_prefix": "", "end_of_word_suffix": "</w>"}
    trained = shaped(models.BPE(**rule))
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=[START, END],
        initial_alphabet=alphabet,
        end_of_word_suffix="</w>",
    )
    trained.train_from_iterator(SENTENCES, trainer)
    model = json.loads(trained.to_str())["model"]
    vocab = dict(model["vocab"])
    for token in sorted(alphabet) + [f"{c}</w>" for c in sorted(alphabet)]:
        vocab.setdefault(token, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tokenizer = shaped(models.BPE(vocab=vocab, merges=merges, **rule))
    tokenizer.add_special_tokens([START, END])
    from tokenizers import decoders, processors

    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{START} $A {END}", special_tokens=[(START, vocab[START]), (END, vocab[END])]
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


def build(
    kind: str,
    folder: Path,
    seed: int = 0,
    *,
    side: int = SIZE,
    mean: tuple[float, float, float] | None = None,
    std: tuple[float, float, float] | None = None,
    combined: bool = False,
):
    """The model (eval mode) after saving it, its tokenizer and its processor into `folder`: the
    image processor resizing to `side`, normalising with `mean`/`std` (the processor's defaults
    where None); `combined` saves them as one `CLIPProcessor`/`SiglipProcessor`, as transformers
    5 writes it (`processor_config.json` with the image processor nested, no
    preprocessor_config.json)."""
    import torch
    from transformers import PreTrainedTokenizerFast

    torch.manual_seed(seed)
    normalise = {k: list(v) for k, v in (("image_mean", mean), ("image_std", std)) if v}
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
            size={"shortest_edge": side}, crop_size={"height": side, "width": side}, **normalise
        )
        # CLIP's own tokenizer class, as a downloaded folder names it: transformers rebuilds
        # CLIP's pipeline over the vocabulary and merges (what the importer must follow)
        tokenizer = CLIPTokenizer(
            tokenizer_object=backend,
            bos_token=START,
            eos_token=END,
            pad_token=END,
            unk_token=END,
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
        processor = SiglipImageProcessorPil(size={"height": side, "width": side}, **normalise)
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
    if combined:
        import transformers

        both = getattr(transformers, "CLIPProcessor" if kind == "clip" else "SiglipProcessor")
        both(image_processor=processor, tokenizer=tokenizer).save_pretrained(folder)
        return model
    processor.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model
