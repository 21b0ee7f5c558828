"""Whole Hugging Face ``transformers`` model classes as model-suite rows.

Each row is a model class as its users load it (``LlamaModel``, ``GPT2Model``, ...),
built from a config with the published model's dimensions, ``layers`` decoder or encoder
layers and random weights (the class's own initialisation, seeded; no downloads). The
row runs the model body: ``inputs_embeds`` in, ``last_hidden_state`` out (ViT: pixels in),
so that the suite's steps (a forward under ``no_grad``, or a forward and backward of a
scalar loss) apply unchanged; the embedding lookup and LM head are left out, as they
would only add one GEMM of the vocabulary's size to every row. Attention runs through
SDPA (``attn_implementation="sdpa"``), dropout is off, and the model is in eval mode, so
stock and ours compute the same function.

``transformers`` is optional: without it these rows are absent (``available``).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from typing import Any

import torch
from torch import nn


@dataclasses.dataclass(frozen=True)
class HFFamily:
    """A ``transformers`` model class at one published model's dimensions."""

    model: str  # the class, e.g. "LlamaModel"
    config: str  # its config class
    hidden: int
    settings: tuple[tuple[str, Any], ...]  # config arguments besides the hidden size
    prefill: tuple[int, int]
    small: tuple[int, int]
    layers: int = 2
    train: bool = True
    pixels: bool = False  # an image model: (batch, 3, 224, 224) pixels in; seq = its tokens
    pooler: bool = False  # the class builds a pooler unless told not to (its output is unused)
    #: Config arguments divided by ``scale`` with the hidden size (widths, not counts).
    widths: tuple[str, ...] = ("intermediate_size",)
    hidden_name: str = "hidden_size"


_DECODER = (("vocab_size", 1024), ("max_position_embeddings", 4096), ("use_cache", False))

FAMILIES: dict[str, HFFamily] = {
    # Llama 3.2 1B
    "hf-llama": HFFamily(
        "LlamaModel",
        "LlamaConfig",
        2048,
        (("intermediate_size", 8192), ("num_attention_heads", 32), ("num_key_value_heads", 8), *_DECODER),
        prefill=(2, 2048),
        small=(2, 128),
    ),
    # Mistral 7B (dense): wider than the others, so its GEMMs are the largest of the suite
    "hf-mistral": HFFamily(
        "MistralModel",
        "MistralConfig",
        4096,
        (("intermediate_size", 14336), ("num_attention_heads", 32), ("num_key_value_heads", 8), *_DECODER),
        prefill=(2, 2048),
        small=(2, 128),
    ),
    # Qwen2 1.5B: q/k/v biases
    "hf-qwen2": HFFamily(
        "Qwen2Model",
        "Qwen2Config",
        1536,
        (("intermediate_size", 8960), ("num_attention_heads", 12), ("num_key_value_heads", 2), *_DECODER),
        prefill=(2, 2048),
        small=(2, 128),
    ),
    # Phi-3 mini: fused qkv and gate_up projections
    "hf-phi3": HFFamily(
        "Phi3Model",
        "Phi3Config",
        3072,
        (
            ("intermediate_size", 8192),
            ("num_attention_heads", 32),
            ("num_key_value_heads", 32),
            ("resid_pdrop", 0.0),
            ("embd_pdrop", 0.0),
            ("attention_dropout", 0.0),
            ("pad_token_id", None),  # its default (32000) lies past the small vocabulary
            *_DECODER,
        ),
        prefill=(2, 2048),
        small=(2, 128),
    ),
    # GPT-2 medium: biases, GELU (tanh), fused qkv as a Conv1D
    "hf-gpt2": HFFamily(
        "GPT2Model",
        "GPT2Config",
        1024,
        (
            ("n_inner", 4096),
            ("n_head", 16),
            ("n_positions", 4096),
            ("vocab_size", 1024),
            ("resid_pdrop", 0.0),
            ("embd_pdrop", 0.0),
            ("attn_pdrop", 0.0),
            ("use_cache", False),
        ),
        prefill=(2, 2048),
        small=(2, 128),
        widths=("n_inner",),
        hidden_name="n_embd",
    ),
    # BERT base: post-norm encoder, GELU (erf)
    "hf-bert": HFFamily(
        "BertModel",
        "BertConfig",
        768,
        (
            ("intermediate_size", 3072),
            ("num_attention_heads", 12),
            ("vocab_size", 1024),
            ("hidden_dropout_prob", 0.0),
            ("attention_probs_dropout_prob", 0.0),
        ),
        prefill=(8, 512),
        small=(2, 128),
        train=False,
        pooler=True,
    ),
    # ViT base, 16x16 patches of 224x224 images: 197 tokens per image
    "hf-vit": HFFamily(
        "ViTModel",
        "ViTConfig",
        768,
        (
            ("intermediate_size", 3072),
            ("num_attention_heads", 12),
            ("hidden_dropout_prob", 0.0),
            ("attention_probs_dropout_prob", 0.0),
        ),
        prefill=(16, 197),
        small=(1, 197),
        train=False,
        pixels=True,
        pooler=True,
    ),
}
#: Layer-count argument of each config class (the others say ``num_hidden_layers``).
_LAYERS = {"GPT2Config": "n_layer"}
_IMAGE = 224


def available() -> bool:
    """Whether ``transformers`` can be imported here (without importing it)."""
    return importlib.util.find_spec("transformers") is not None


class HFBody(nn.Module):
    """A model class's body: activations (or pixels) in, its last hidden state out."""

    def __init__(self, model: nn.Module, pixels: bool) -> None:
        super().__init__()
        self.model = model
        self.pixels = pixels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pixels:
            return self.model(pixel_values=x).last_hidden_state
        return self.model(inputs_embeds=x).last_hidden_state


def build(f: HFFamily, scale: int = 1) -> HFBody:
    """The model with the class's own initialisation (seed it first), on the CPU in
    float32. ``scale`` divides the hidden size and the widths (a quick model for CPU
    tests; head counts stay, so heads get narrower)."""
    transformers = importlib.import_module("transformers")
    settings = dict(f.settings)
    for name in f.widths:
        settings[name] //= scale
    settings[f.hidden_name] = f.hidden // scale
    settings[_LAYERS.get(f.config, "num_hidden_layers")] = f.layers
    if f.pixels:
        settings.update(image_size=_IMAGE, patch_size=16)
    config = getattr(transformers, f.config)(**settings)
    config._attn_implementation = "sdpa"
    cls = getattr(transformers, f.model)
    model = cls(config, add_pooling_layer=False) if f.pooler else cls(config)
    if not f.pixels:
        # Activations come in as ``inputs_embeds``: the token table is never read, and
        # a parameter without a gradient has no place in a training step's outputs.
        model.set_input_embeddings(None)
    return HFBody(model.eval(), f.pixels)


def example_input(f: HFFamily, size: str, scale: int, device: str, dtype: torch.dtype) -> torch.Tensor:
    """A randn input of the row's size: (batch, seq, hidden) activations, or images."""
    batch, seq = getattr(f, size)
    if f.pixels:
        return torch.randn(batch, 3, _IMAGE, _IMAGE, device=device).to(dtype)
    return torch.randn(batch, seq, f.hidden // scale, device=device).to(dtype)
