"""Real exports: ``transformers`` model classes built from their configs (random weights, no
downloads) and exported by ``torch.onnx``, the graphs users bring from PyTorch.

Needs the ``corpus`` extra (``pip install 'ms-heron[corpus]'``: torch, transformers, onnxscript).
Each export is written as ``torch.onnx.export(..., dynamo=True)`` writes it today (opset 18+:
``Gelu``, ``LayerNormalization``, ``Where`` masks, ``Expand``/``Gather`` index arithmetic). Two
sizes per model: ``"test"`` (a layer or two, 32-64 wide: seconds to tune) and ``"bench"`` (the
published base configuration, as users deploy it).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Literal

import numpy as np

from .models import OnnxModel

Size = Literal["test", "bench"]


def _transformers():
    try:
        import torch  # pylint: disable=import-outside-toplevel
        import transformers  # pylint: disable=import-outside-toplevel
    except ImportError as err:
        raise ImportError(
            "exporting transformers models needs the corpus extra: pip install 'ms-heron[corpus]'"
        ) from err
    return torch, transformers


def _export(name: str, model, inputs: dict[str, np.ndarray]) -> OnnxModel:
    """``model`` (a torch module in eval mode) exported by ``torch.onnx`` on ``inputs``; the ONNX
    file's outputs are the model's tensors in order."""
    import onnx  # pylint: disable=import-outside-toplevel

    torch, _ = _transformers()
    args = tuple(torch.from_numpy(v) for v in inputs.values())
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        path = os.path.join(tmp, f"{name}.onnx")
        program = torch.onnx.export(
            model, args, dynamo=True, input_names=list(inputs), verbose=False
        )
        program.save(path)
        proto = onnx.load(path)
    return OnnxModel(name, proto, inputs)


#: A decoder's settings for one forward pass over a whole sequence (no key-value cache object in
#: the outputs, which torch.export cannot flatten) with special tokens inside the small vocabulary.
_NO_CACHE = {"use_cache": False, "bos_token_id": 0, "eos_token_id": 0}


def _vocab(size: Size) -> int:
    """The vocabulary: small, so that a test export's embedding table stays small (it is a
    gather)."""
    return 256 if size == "test" else 1000


def _ids(length: int, vocab: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, (1, length)).astype(np.int64)


def _pixels(channels: int, size: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, channels, size, size)).astype(np.float32)


def _built(config_class: str, model_class: str, **config):
    torch, transformers = _transformers()
    torch.manual_seed(0)
    return getattr(transformers, model_class)(getattr(transformers, config_class)(**config)).eval()


#: A text encoder's config keys for its layers, width, heads and feed-forward width.
_TEXT_KEYS = {
    "BertConfig": ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size"),
    "DistilBertConfig": ("n_layers", "dim", "n_heads", "hidden_dim"),
    "GPT2Config": ("n_layer", "n_embd", "n_head", "n_inner"),
}


def _text(
    name: str, size: Size, model_class: str, base: tuple[int, int, int, int], **config
) -> OnnxModel:
    """A transformer over token ids: 2 layers of 64 (2 heads, sequence 16) at test size, else
    ``base`` (layers, width, heads, sequence); the feed-forward 4x the width."""
    layers, hidden, heads, seq = (2, 64, 2, 16) if size == "test" else base
    config_class = model_class.replace("Model", "Config")
    dims = dict(zip(_TEXT_KEYS[config_class], (layers, hidden, heads, 4 * hidden)))
    model = _built(config_class, model_class, **dims, vocab_size=_vocab(size), **config)
    return _export(f"{name}_{size}", model, {"input_ids": _ids(seq, _vocab(size))})


def bert(size: Size = "test") -> OnnxModel:
    """BERT (``BertModel``): base is 12 layers, 768 wide, sequence 128."""
    return _text("bert", size, "BertModel", (12, 768, 12, 128))


def distilbert(size: Size = "test") -> OnnxModel:
    """DistilBERT (``DistilBertModel``): base is 6 layers, 768 wide, sequence 128."""
    return _text("distilbert", size, "DistilBertModel", (6, 768, 12, 128))


def gpt2(size: Size = "test") -> OnnxModel:
    """GPT-2 (``GPT2Model``, causal attention): small is 12 layers, 768 wide, sequence 128."""
    return _text("gpt2", size, "GPT2Model", (12, 768, 12, 128), **_NO_CACHE)


def llama(size: Size = "test") -> OnnxModel:
    """A LLaMA-style decoder stack (``LlamaModel``: RMSNorm, rotary embeddings, SwiGLU, grouped
    keys and values), prefill of one sequence: 4 layers of 512 at bench size."""
    layers, hidden, heads, seq = (2, 64, 4, 16) if size == "test" else (4, 512, 8, 128)
    model = _built(
        "LlamaConfig",
        "LlamaModel",
        **_NO_CACHE,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2,
        intermediate_size=int(2.75 * hidden),
        vocab_size=_vocab(size),
    )
    return _export(f"llama_{size}", model, {"input_ids": _ids(seq, _vocab(size))})


def vit(size: Size = "test") -> OnnxModel:
    """ViT (``ViTModel``): base is 12 layers, 768 wide, 224x224 in 16x16 patches."""
    layers, hidden, heads, image, patch = (
        (2, 64, 2, 32, 8) if size == "test" else (12, 768, 12, 224, 16)
    )
    model = _built(
        "ViTConfig",
        "ViTModel",
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        image_size=image,
        patch_size=patch,
    )
    return _export(f"vit_{size}", model, {"pixel_values": _pixels(3, image)})


def swin(size: Size = "test") -> OnnxModel:
    """Swin (``SwinModel``, windowed attention with shifts): tiny is 96 wide, depths 2-2-6-2,
    224x224."""
    depths, heads, embed, image, window = (
        ((1, 1), (2, 4), 32, 32, 4)
        if size == "test"
        else ((2, 2, 6, 2), (3, 6, 12, 24), 96, 224, 7)
    )
    model = _built(
        "SwinConfig",
        "SwinModel",
        depths=list(depths),
        num_heads=list(heads),
        embed_dim=embed,
        image_size=image,
        window_size=window,
    )
    return _export(f"swin_{size}", model, {"pixel_values": _pixels(3, image)})


def convnext(size: Size = "test") -> OnnxModel:
    """ConvNeXt (``ConvNextModel``: 7x7 depthwise convolutions, LayerNorm, GELU): tiny at
    224x224."""
    depths, widths, image = (
        ((1, 1), (16, 32), 32) if size == "test" else ((3, 3, 9, 3), (96, 192, 384, 768), 224)
    )
    model = _built(
        "ConvNextConfig",
        "ConvNextModel",
        depths=list(depths),
        hidden_sizes=list(widths),
        num_stages=len(depths),
    )
    return _export(f"convnext_{size}", model, {"pixel_values": _pixels(3, image)})


def resnet(size: Size = "test") -> OnnxModel:
    """ResNet (``ResNetModel``, transformers' port): ResNet-50 at 224x224."""
    depths, widths, image = (
        ((1, 1), (32, 64), 32) if size == "test" else ((3, 4, 6, 3), (256, 512, 1024, 2048), 224)
    )
    model = _built(
        "ResNetConfig",
        "ResNetModel",
        depths=list(depths),
        hidden_sizes=list(widths),
        embedding_size=min(64, widths[0]),
        layer_type="bottleneck",
    )
    return _export(f"resnet_{size}", model, {"pixel_values": _pixels(3, image)})


def mobilenet_v2(size: Size = "test") -> OnnxModel:
    """MobileNetV2 (``MobileNetV2Model``): width 1.0 at 224x224; 0.35 at 32x32 for tests."""
    multiplier, image = (0.35, 32) if size == "test" else (1.0, 224)
    model = _built(
        "MobileNetV2Config", "MobileNetV2Model", depth_multiplier=multiplier, image_size=image
    )
    return _export(f"mobilenetv2_{size}", model, {"pixel_values": _pixels(3, image)})


def efficientnet(size: Size = "test") -> OnnxModel:
    """EfficientNet (``EfficientNetModel``: squeeze-and-excitation, SiLU, depthwise): B0 at
    224x224."""
    width, depth, image = (0.25, 0.25, 32) if size == "test" else (1.0, 1.0, 224)
    model = _built(
        "EfficientNetConfig",
        "EfficientNetModel",
        width_coefficient=width,
        depth_coefficient=depth,
        image_size=image,
        hidden_dim=int(1280 * width),  # the head's width scales too (the config's default is B7's)
    )
    return _export(f"efficientnet_{size}", model, {"pixel_values": _pixels(3, image)})


def whisper_encoder(size: Size = "test") -> OnnxModel:
    """Whisper's audio encoder (``WhisperModel``'s encoder: two 1-D convolutions, then a
    transformer): base is 6 layers, 512 wide, 80 mel bins by 3000 frames (30 s)."""
    layers, hidden, heads, frames = (2, 64, 2, 64) if size == "test" else (6, 512, 8, 3000)
    model = _built(
        "WhisperConfig",
        "WhisperModel",
        d_model=hidden,
        encoder_layers=layers,
        decoder_layers=1,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=4 * hidden,
        decoder_ffn_dim=4 * hidden,
        max_source_positions=frames // 2,
        num_mel_bins=80,
    ).get_encoder()
    features = np.random.default_rng(0).standard_normal((1, 80, frames)).astype(np.float32)
    return _export(f"whisper_encoder_{size}", model, {"input_features": features})


#: The exports by name.
EXPORTS: dict[str, Callable[[Size], OnnxModel]] = {
    "bert": bert,
    "distilbert": distilbert,
    "gpt2": gpt2,
    "llama": llama,
    "vit": vit,
    "swin": swin,
    "convnext": convnext,
    "resnet": resnet,
    "mobilenetv2": mobilenet_v2,
    "efficientnet": efficientnet,
    "whisper-encoder": whisper_encoder,
}
