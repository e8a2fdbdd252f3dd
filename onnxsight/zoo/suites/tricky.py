"""The tricky suite: small hand-written modules that stress the exporter.

Recurrent layers (also on packed variable-length batches), a VGG-style head
(adaptive pooling to 7x7 at any resolution), attention, ``torch.cond``, in-place ``index_put``, ``cumsum``
over masks, ``topk``/``sort``, ``einsum``, ``stft``, dict inputs and outputs and
Python scalar arguments: each one a pattern exporters are known to get wrong.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from onnxsight.zoo._spec import ModelSpec


class Recurrent(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        layer = nn.LSTM if kind == "lstm" else nn.GRU
        self.rnn = layer(8, 12, num_layers=2, batch_first=True, bidirectional=kind == "gru")

    def forward(self, x: torch.Tensor) -> tuple:
        return self.rnn(x)


class PackedSpeech(nn.Module):
    """Speech-style encoder: a conv front-end over the frames, a packed bidirectional LSTM over each
    utterance's valid frames (lengths unsorted), a per-frame classifier (CTC-style log-probabilities)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(20, 16, 3, padding=1)
        self.rnn = nn.LSTM(16, 12, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(24, 10)

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv(feats.transpose(1, 2))).transpose(1, 2)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=feats.shape[1])
        return F.log_softmax(self.head(out), dim=-1)


class VggHead(nn.Module):
    """VGG/AlexNet-style classifier: features, AdaptiveAvgPool2d((7, 7)), flatten, linear; any resolution."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.pool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(nn.Linear(8 * 49, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 2, batch_first=True)
        self.qkv = nn.Linear(16, 48)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        attended, _ = self.mha(x, x, x, need_weights=False)
        q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 3, 2, 8).permute(2, 0, 3, 1, 4)
        causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return attended, causal


class Cond(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(4, 4)
        self.down = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: self.up(t).relu(), lambda t: self.down(t) - 1.0, (x,))


class IndexPutInplace(nn.Module):
    def forward(self, x: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        out = x.clone()
        out[index] = values
        out.index_put_((index,), values * 2, accumulate=True)
        out[:, 0] += 1.0
        return out


class Cumsum(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.cumsum(mask, dim=1) * mask - 1  # position ids from an attention mask
        return torch.cumsum(x, dim=-1), positions


class TopkSort(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple:
        values, indices = torch.topk(x, 3, dim=-1)
        ordered, order = torch.sort(x, dim=0, descending=True, stable=True)
        return values, indices, ordered, order, torch.argsort(x, dim=-1)


class Einsum(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k)
        return scores, torch.einsum("bhqk,kd,d->bhq", scores, w, w.sum(0))


class Stft(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("window", torch.hann_window(16))

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        spec = torch.stft(audio, n_fft=16, hop_length=4, window=self.window, return_complex=True)
        return torch.view_as_real(spec).pow(2).sum(-1).sqrt()


class DictIO(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        mixed = self.proj(inputs["x"]) * inputs["gate"]
        return {"mixed": mixed, "total": mixed.sum(-1), "x_plus": inputs["x"] + 1}


class PythonScalars(nn.Module):
    def forward(self, x: torch.Tensor, alpha: float, repeat: int, flip: bool = False) -> torch.Tensor:
        y = x * alpha
        for _ in range(repeat):
            y = y + x
        return -y if flip else y


def _seeded(fn):  # noqa: ANN001, ANN202
    def build() -> tuple:
        torch.manual_seed(0)
        return fn()
    build.__name__ = getattr(fn, "__name__", "build")
    build.__wrapped__ = fn
    return build


def _lstm() -> tuple:
    return Recurrent("lstm"), (torch.randn(2, 5, 8),)


def _gru() -> tuple:
    return Recurrent("gru"), (torch.randn(2, 5, 8),)


def _packed_speech() -> tuple:
    return PackedSpeech(), (torch.randn(3, 9, 20), torch.tensor([5, 9, 7]))


def _vgg_head() -> tuple:
    return VggHead(), (torch.randn(2, 3, 63, 79),)  # +1 (the zoo's second size) changes the 7x7 pool's input


def _attention() -> tuple:
    return Attention(), (torch.randn(2, 6, 16),)


def _encoder() -> tuple:
    layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), (torch.randn(2, 6, 16),)


def _cond() -> tuple:
    return Cond(), (torch.randn(3, 4),)


def _index_put() -> tuple:
    return IndexPutInplace(), (torch.randn(6, 4), torch.tensor([0, 2, 5]), torch.randn(3, 4))


def _cumsum() -> tuple:
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0]])
    return Cumsum(), (torch.randn(2, 5), mask)


def _topk() -> tuple:
    return TopkSort(), (torch.randn(5, 7),)


def _einsum() -> tuple:
    return Einsum(), (torch.randn(2, 2, 4, 8), torch.randn(2, 2, 4, 8), torch.randn(4, 3))


def _stft() -> tuple:
    return Stft(), (torch.randn(2, 64),)


def _dict_io() -> tuple:
    return DictIO(), ({"x": torch.randn(2, 6), "gate": torch.rand(2, 6)},)


def _python_scalars() -> tuple:
    return PythonScalars(), (torch.randn(3, 3), 0.5, 2), {"flip": True}


BATCH = {0: "batch"}
SEQUENCE = {0: "batch", 1: "sequence"}


def suite() -> list[ModelSpec]:
    # ``dynamic``: what varies when deployed; the zoo exports with it and verifies at other sizes.
    # index_put: the indexed rows stay static (the example's indices must stay in range).
    # topk_sort: k=3 along the last axis needs at least 3 columns, so only the rows vary.
    return [
        ModelSpec("lstm", _seeded(_lstm), tags=("rnn",), dynamic={"x": SEQUENCE}),
        ModelSpec("gru_bidirectional", _seeded(_gru), tags=("rnn",), dynamic={"x": SEQUENCE}),
        ModelSpec("packed_speech_lstm", _seeded(_packed_speech), tags=("rnn", "audio", "packed"),
                  dynamic={"feats": {0: "batch", 1: "frames"}, "lengths": {0: "batch"}}),
        ModelSpec("vgg_head", _seeded(_vgg_head), tags=("vision", "adaptive-pool"),
                  dynamic={"x": {0: "batch", 2: "height", 3: "width"}}),
        ModelSpec("attention", _seeded(_attention), tags=("attention",), dynamic={"x": SEQUENCE}),
        ModelSpec("cond", _seeded(_cond), tags=("control-flow",), dynamic={"x": BATCH}),
        # the module hierarchy as ONNX functions (module_functions=True), verified inside the functions
        ModelSpec("encoder_functions", _seeded(_encoder), tags=("attention", "functions"),
                  dynamic={"src": SEQUENCE}, module_functions=True),
        ModelSpec("index_put_inplace", _seeded(_index_put), tags=("inplace",),
                  dynamic={"x": {1: "features"}, "values": {1: "features"}}),
        ModelSpec("cumsum", _seeded(_cumsum), tags=("scan",), dynamic={"x": SEQUENCE, "mask": SEQUENCE}),
        ModelSpec("topk_sort", _seeded(_topk), tags=("sorting",), dynamic={"x": BATCH}),
        ModelSpec("einsum", _seeded(_einsum), tags=("linalg",),
                  dynamic={"q": {0: "batch", 2: "sequence"}, "k": {0: "batch", 2: "sequence"},
                           "w": {0: "sequence"}}),
        ModelSpec("stft", _seeded(_stft), tags=("audio", "complex"), dynamic={"audio": {0: "batch", 1: "samples"}}),
        ModelSpec("dict_io", _seeded(_dict_io), tags=("io",), dynamic={"inputs": BATCH}),
        ModelSpec("python_scalars", _seeded(_python_scalars), tags=("io",), dynamic={"x": BATCH}),
    ]
