"""The family matrix of `accelkit quant`: tiny models of the families users bring, built from
transformers config classes (no download), trained for seconds on generated text or images so
their activations grow outlier channels, and saved as today's transformers saves them
(`save_pretrained`: config.json, model.safetensors, tokenizer.json + tokenizer_config.json).

Families: GPT-2 (Conv1D), a Qwen2 decoder (Llama family: RMSNorm, grouped-query attention,
SwiGLU, tied embeddings), BERT, T5, a ViT vision tower, and a PaliGemma (SigLIP vision + Gemma
decoder, trained on generated images each with a text after it). `build(name, folder)` makes one; `channel_ratio` is the
max / median of a model's per-channel input absmax (the outliers DuQuant is for).
"""

from __future__ import annotations

import random

import torch

from accelkit.quant.evaluation.corpus import calibration_sentences, eval_pairs, generated_images

HIDDEN = 64
VOCAB = 384
IMAGE = 32
STEPS = 100
FAMILIES = ("gpt2", "qwen2", "bert", "t5", "vit", "paligemma")
SPECIALS = ["<pad>", "<unk>", "<s>", "</s>", "[MASK]"]


def training_texts(n: int = 256, seed: int = 3) -> list[str]:
    """Generated text to train on: the shipped sentences' vocabulary, other combinations."""
    pairs = eval_pairs(300, seed=seed)
    texts = [t for pair in pairs for t in pair] + calibration_sentences(256, seed=seed)
    random.Random(seed).shuffle(texts)
    return texts[:n]


def tokenizer():
    """A byte-level BPE tokenizer trained on the generated text (VOCAB entries), as a
    transformers fast tokenizer (saved as tokenizer.json + tokenizer_config.json)."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(training_texts(600) + calibration_sentences(), trainer)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
        eos_token="</s>", mask_token="[MASK]",
    )  # fmt: skip


def _config(name: str, vocab: int):
    import transformers

    small = dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=HIDDEN)
    if name == "gpt2":
        return transformers.GPT2Config(
            vocab_size=vocab, n_embd=HIDDEN, n_layer=2, n_head=4, n_positions=64,
            bos_token_id=2, eos_token_id=3, pad_token_id=0,
        )  # fmt: skip
    if name == "qwen2":
        return transformers.Qwen2Config(
            vocab_size=vocab, intermediate_size=2 * HIDDEN, num_key_value_heads=2,
            max_position_embeddings=64, tie_word_embeddings=True, pad_token_id=0, **small,
        )  # fmt: skip
    if name == "bert":
        return transformers.BertConfig(
            vocab_size=vocab, intermediate_size=2 * HIDDEN, max_position_embeddings=64,
            pad_token_id=0, **small,
        )  # fmt: skip
    if name == "t5":
        return transformers.T5Config(
            vocab_size=vocab, d_model=HIDDEN, d_kv=16, d_ff=2 * HIDDEN, num_layers=2,
            num_heads=4, pad_token_id=0, eos_token_id=3, decoder_start_token_id=0,
        )  # fmt: skip
    if name == "vit":
        return transformers.ViTConfig(
            image_size=IMAGE, patch_size=8, num_labels=4, intermediate_size=2 * HIDDEN, **small
        )
    if name == "paligemma":
        vision = transformers.SiglipVisionConfig(  # no pooling head, as PaliGemma's checkpoints
            image_size=IMAGE, patch_size=8, intermediate_size=2 * HIDDEN, vision_use_head=False,
            **small,
        )  # fmt: skip
        text = transformers.GemmaConfig(
            vocab_size=vocab + 16, intermediate_size=2 * HIDDEN, num_key_value_heads=1,
            head_dim=16, **small,
        )  # fmt: skip
        return transformers.PaliGemmaConfig(
            vision_config=vision.to_dict(), text_config=text.to_dict(), image_token_index=vocab,
            projection_dim=HIDDEN,
        )  # fmt: skip
    raise ValueError(name)


def _model(name: str, config):
    import transformers

    cls = {
        "gpt2": transformers.GPT2LMHeadModel,
        "qwen2": transformers.Qwen2ForCausalLM,
        "bert": transformers.BertForMaskedLM,
        "t5": transformers.T5ForConditionalGeneration,
        "vit": transformers.ViTForImageClassification,
        "paligemma": transformers.PaliGemmaForConditionalGeneration,
    }[name]
    return cls(config)


def image_labels(images) -> torch.Tensor:
    """A label a ViT can learn from a generated image: which quarter of the brightness range
    its upper half falls in."""
    top = torch.as_tensor(images[:, : IMAGE // 2]).float().mean(dim=(1, 2, 3))
    return torch.bucketize(top, torch.tensor([70.0, 110.0, 150.0]))


def _loss(name, model, tok, texts, step):
    images = generated_images(16, IMAGE, seed=1000 + step)
    pixels = (torch.as_tensor(images).permute(0, 3, 1, 2).float() / 255 - 0.5) / 0.5
    if name == "vit":
        return model(pixel_values=pixels, labels=image_labels(images)).loss
    batch = tok(texts, padding=True, truncation=True, max_length=32, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    if name == "paligemma":  # the text after the image's placeholder tokens, as its processor
        image = torch.full((len(ids), (IMAGE // 8) ** 2), model.config.image_token_id)
        labels = ids.masked_fill(mask == 0, -100)
        return model(
            input_ids=torch.cat([image, ids], dim=1),
            attention_mask=torch.cat([torch.ones_like(image), mask], dim=1),
            pixel_values=pixels,
            labels=torch.cat([torch.full_like(image, -100), labels], dim=1),
        ).loss
    if name == "bert":  # masked LM: 15 % of the real tokens masked
        labels = ids.masked_fill(mask == 0, -100)
        pick = (torch.rand(ids.shape) < 0.15) & mask.bool()
        return model(input_ids=ids.masked_fill(pick, tok.mask_token_id), attention_mask=mask,
                     labels=labels.masked_fill(~pick, -100)).loss  # fmt: skip
    if name == "t5":  # the text again, from its first half
        half = ids.shape[1] // 2
        labels = ids.masked_fill(mask == 0, -100)
        return model(input_ids=ids[:, :half], attention_mask=mask[:, :half], labels=labels).loss
    return model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss


def build(name: str, folder, steps: int = STEPS, seed: int = 0) -> dict:
    """Build family `name` from its config, train it `steps` AdamW steps of 16 texts or images
    (or image + text pairs) and save it to `folder` with its tokenizer; returns the final loss. One
    thread: on a shared CPU, more only wait on each other (10 steps: 0.6 s against 15 s)."""
    torch.manual_seed(seed)
    tok = tokenizer()
    model = _model(name, _config(name, len(tok)))
    texts = training_texts()
    loss = None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if steps:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
            model.train()
            for step in range(steps):
                chunk = [texts[(step * 16 + i) % len(texts)] for i in range(16)]
                loss = _loss(name, model, tok, chunk, step)
                opt.zero_grad()
                loss.backward()
                opt.step()
            model.eval()
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(folder)
    if name != "vit":
        tok.save_pretrained(folder)
    return {"family": name, "steps": steps, "loss": None if loss is None else float(loss.detach())}


@torch.no_grad()
def channel_ratio(folder) -> float:
    """The largest over a saved model's quantizable layers of max / median of the layer's per-
    input-channel absmax on the calibration data: ≫ 1 where activations have outlier channels."""
    from accelkit.quant.config import QuantConfig
    from accelkit.quant.evaluation.fidelity import calibration_data
    from accelkit.quant.method.calibrate import collect_inputs
    from accelkit.quant.method.convert import select_layers
    from accelkit.quant.models import load_model

    model, tok, _ = load_model(str(folder))
    layers = {name: model.get_submodule(name) for name in select_layers(model, QuantConfig())}
    found = collect_inputs(model, layers, calibration_data(model, tok, None, None))
    ratios = [float(e.absmax.max() / e.absmax.median().clamp(min=1e-12)) for e in found.values()]
    return max(ratios)
