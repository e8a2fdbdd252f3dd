"""Models shared by the benchmarks: built locally with random weights (nothing downloaded)."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn


class DeepMLP(nn.Module):
    """A 12-block transformer-style MLP (pre-norm, GELU, residual)."""

    def __init__(self, width: int = 256, blocks: int = 12) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
            for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return x


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        weights = torch.softmax(q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5, dim=-1)
        x = x + self.proj((weights @ v).transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class Transformer(nn.Module):
    """A 12-block pre-norm transformer encoder (attention + GELU MLP), written out."""

    def __init__(self, dim: int = 256, heads: int = 4, depth: int = 12) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(Block(dim, heads) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.blocks(x))


class Bottleneck(nn.Module):
    def __init__(self, cin: int, mid: int, stride: int) -> None:
        super().__init__()
        cout = mid * 4
        self.body = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
            nn.Conv2d(mid, mid, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
            nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.down(x))


class ResNet50(nn.Module):
    """ResNet-50's architecture (3-4-6-3 bottlenecks), written out since torchvision does not import here."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                   nn.MaxPool2d(3, 2, 1)]
        cin = 64
        for mid, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(count):
                layers.append(Bottleneck(cin, mid, stride if i == 0 else 1))
                cin = mid * 4
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class ConvBlock(nn.Module):
    """Conv-BN-ReLU-Conv-BN with a residual: two batch norms for the optimize stage to fold."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.body(x))


class ConvNet(nn.Module):
    """A 16-block residual CNN with batch norms (33 of them), width 64."""

    def __init__(self, width: int = 64, blocks: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.blocks = nn.Sequential(*(ConvBlock(width) for _ in range(blocks)))
        self.fc = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))


def _llama(layers: int = 4) -> tuple[nn.Module, tuple]:
    """A LLaMA causal LM (transformers, random weights, local config), 64 tokens."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=688, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, use_cache=False)
    model = LlamaForCausalLM(config).eval()
    return model, (torch.randint(0, 1000, (1, 64)),)


def hiera_config() -> object:
    """transformers' Hiera image classifier, scaled down (embedding 32, one block per stage but two in the third)."""
    from transformers import HieraConfig

    return HieraConfig(embed_dim=32, depths=[1, 1, 2, 1], num_heads=[1, 2, 4, 8], num_labels=10)


def _hiera() -> tuple[nn.Module, tuple]:
    from transformers import HieraForImageClassification

    return HieraForImageClassification(hiera_config()).eval(), (torch.randn(1, 3, 224, 224),)


def _bert() -> tuple[nn.Module, tuple]:
    from transformers import BertConfig, BertModel

    config = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                        vocab_size=1000)
    model = BertModel(config).eval()
    ids = torch.randint(0, 1000, (2, 64))
    return model, (ids, torch.ones_like(ids))


def _gpt2() -> tuple[nn.Module, tuple]:
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(n_embd=256, n_layer=4, n_head=4, vocab_size=1000, n_positions=128, use_cache=False)
    model = GPT2Model(config).eval()
    return model, (torch.randint(0, 1000, (2, 64)),)


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple]]] = {
    "mlp12": lambda: (DeepMLP().eval(), (torch.randn(8, 256),)),
    "transformer12": lambda: (Transformer().eval(), (torch.randn(1, 128, 256),)),
    "resnet50": lambda: (ResNet50().eval(), (torch.randn(1, 3, 224, 224),)),
    "cnn16": lambda: (ConvNet().eval(), (torch.randn(1, 3, 64, 64),)),
    "cnn64": lambda: (ConvNet(blocks=64).eval(), (torch.randn(1, 3, 64, 64),)),
    "transformer8": lambda: (Transformer(depth=8).eval(), (torch.randn(1, 128, 256),)),
    "llama4": _llama,
    "hiera": _hiera,
    "bert-small": _bert,
    "gpt2-small": _gpt2,
}
