"""``GTunerModel``: a graph attention network over the task's computation graph and the config's
statistical features (GTuner, DAC'22), trained on tuning history and fine-tuned online.

The network, in PyTorch on the CPU:

1. WL-GCN layers over the task graph (``features.graph.task_graph``):
   ``h_v' = ReLU(W1 h_v + W2 sum_{u in N(v)} h_u)``, neighbours taken in both directions;
   mean pooling gives the graph embedding. All configs of a task share it, so it is computed
   once per task per forward pass.
2. Tokens: the graph embedding, and the statistical feature row of the config (``itervar`` by
   default; any task-independent extractor such as ``curve``) cut into ``tokens`` chunks, each
   projected to ``hidden`` with its own weights, plus a learned position per token.
3. Multi-head self-attention over those tokens (residual + layer norm), then an MLP on the
   flattened sequence predicting the config's normalized throughput.

The loss is MSE on the throughput label (``label``: ``relative``, ``(1 / cost) / best`` within
each task, or ``absolute``, TFLOP/s; failures 0) plus ``rank_weight`` times a pairwise logistic (RankNet) loss over pairs of the same task in
a minibatch, since the search only needs the order. ``pretrain`` trains on other tasks' records
(offline); ``fit`` trains a fresh model for ``epochs`` at ``lr`` or, once it has weights,
fine-tunes them for ``finetune_epochs`` at the lower ``finetune_lr`` (so a few new measurements
adjust the pretrained model rather than overwrite it): transfer learning is pretrain then fit.
Epochs are cut so that one training call makes at most ``sample_budget`` sample passes, which
keeps pretraining on a few thousand samples under a minute (on this project's dataset, held-out
top-10 ratios rose with the budget up to about 50 epochs of it). Training and inference use one
torch thread, so the other core stays free for measurements. PyTorch is the ``bench`` extra; without it the model
raises when first used.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..features import FeatureExtractor, make_extractor
from ..features.graph import NODE_DIM, task_graph
from ..measure.types import MeasureInput, MeasureResult
from .base import LABELS, CostModel, ModelSpec, scale_labels, task_flops, throughput_labels

FORMAT = "tensortune.gtuner"
_STD_FLOOR = 0.5  # log2 units: features nearly constant in the first data are not blown up later
_PREDICT_BATCH = 4096


class GTunerModel(CostModel):
    """Graph attention cost model; higher score = predicted faster (see the module docstring).

    Deterministic for a given ``seed`` and sequence of calls. Until it has been trained on at
    least ``min_good`` successful measurements, ``predict`` returns zeros (no opinion).
    """

    def __init__(self, extractor: FeatureExtractor | str = "itervar", *, hidden: int = 64,
                 gcn_layers: int = 2, heads: int = 4, tokens: int = 8, epochs: int = 60,
                 finetune_epochs: int = 15, batch_size: int = 256, lr: float = 2e-3,
                 finetune_lr: float = 5e-4, sample_budget: int = 200_000, rank_weight: float = 1.0,
                 min_good: int = 4, seed: int = 0, label: str = "relative"):
        if label not in LABELS:
            raise ValueError(f"unknown label {label!r}; choose one of {', '.join(LABELS)}")
        if hidden < 1 or heads < 1 or hidden % heads:
            raise ValueError(f"hidden ({hidden}) must be a positive multiple of heads ({heads})")
        for name, value in (("gcn_layers", gcn_layers), ("tokens", tokens), ("epochs", epochs),
                            ("finetune_epochs", finetune_epochs), ("batch_size", batch_size),
                            ("sample_budget", sample_budget)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        self.extractor = make_extractor(extractor) if isinstance(extractor, str) else extractor
        self.hidden, self.gcn_layers, self.heads, self.tokens = hidden, gcn_layers, heads, tokens
        self.epochs, self.finetune_epochs = epochs, finetune_epochs
        self.batch_size, self.lr, self.finetune_lr = batch_size, lr, finetune_lr
        self.sample_budget, self.rank_weight = sample_budget, rank_weight
        self.min_good, self.seed, self.label = min_good, seed, label
        self._net = None
        self._stat_dim: int | None = None
        self._norm: dict[str, np.ndarray] | None = None
        self._calls = 0  # training calls so far; seeds each call's shuffling

    @property
    def trained(self) -> bool:
        return self._net is not None

    # -- training ----------------------------------------------------------------------------------
    def pretrain(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult],
                 epochs: int | None = None) -> None:
        """Train on history (other tasks, earlier runs) for ``epochs`` (default ``self.epochs``),
        starting from the current weights if any; later ``fit`` calls fine-tune from here."""
        data = self._dataset(inputs, results)
        if data is None:
            raise ValueError(f"pretraining needs at least {self.min_good} successful measurements")
        self._train(data, epochs if epochs is not None else self.epochs, self.lr)

    def fit(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Train on these measurements: from scratch for ``epochs`` the first time, afterwards
        (or after ``pretrain``) fine-tune the current weights for ``finetune_epochs``. With fewer
        than ``min_good`` successes nothing changes."""
        data = self._dataset(inputs, results)
        if data is not None and self.trained:
            self._train(data, self.finetune_epochs, self.finetune_lr)
        elif data is not None:
            self._train(data, self.epochs, self.lr)

    def _dataset(self, inputs, results):
        if len(inputs) != len(results):
            raise ValueError(f"{len(inputs)} inputs but {len(results)} results")
        if not inputs:
            return None
        x = self._features(inputs)
        if self._stat_dim is not None and x.shape[1] != self._stat_dim:
            raise ValueError(f"{self.extractor.name} features are {x.shape[1]} wide here but the "
                             f"model was trained on {self._stat_dim}: use a task-independent "
                             "extractor (itervar, curve) to mix tasks")
        tasks, task_ids = _task_ids(inputs)
        y = np.zeros(len(inputs), dtype=np.float32)
        for t in range(len(tasks)):
            idx = np.flatnonzero(task_ids == t)
            y[idx] = throughput_labels([results[i] for i in idx], task_flops(tasks[t]),
                                       self.label)
        if int((y > 0).sum()) < self.min_good:
            return None
        return x, scale_labels(y), task_ids, [task_graph(t) for t in tasks]

    def _train(self, data, epochs: int, lr: float) -> None:
        x, y, task_ids, graphs = data
        with _one_thread() as torch:
            if self._net is None:
                self._initialize(x, graphs)
            net = self._net
            stats = torch.from_numpy(self._scale_stats(x))
            labels = torch.from_numpy(y)
            owners = torch.from_numpy(task_ids)
            tensors = [self._graph_tensors(g) for g in graphs]
            optimizer = torch.optim.Adam(net.parameters(), lr=lr)
            rng = np.random.default_rng([self.seed, self._calls])
            self._calls += 1
            net.train()
            # big sets need fewer passes; the cap keeps a few thousand samples to seconds
            for _ in range(max(1, min(epochs, self.sample_budget // len(y)))):
                order = rng.permutation(len(y))
                for start in range(0, len(y), self.batch_size):
                    idx = torch.from_numpy(order[start: start + self.batch_size])
                    batch_owners = owners[idx]
                    present, where = torch.unique(batch_owners, return_inverse=True)
                    embeddings = torch.stack([net.embed(*tensors[t]) for t in present.tolist()])
                    pred = net(stats[idx], embeddings[where])
                    loss = torch.nn.functional.mse_loss(pred, labels[idx])
                    if self.rank_weight:
                        loss = loss + self.rank_weight * _rank_loss(torch, pred, labels[idx],
                                                                     batch_owners)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            net.eval()

    def _initialize(self, x: np.ndarray, graphs) -> None:
        import torch

        nodes = np.concatenate([g.node_features for g in graphs])
        self._norm = {
            "stat_mean": x.mean(axis=0), "stat_std": np.maximum(x.std(axis=0), _STD_FLOOR),
            "node_mean": nodes.mean(axis=0), "node_std": np.maximum(nodes.std(axis=0), _STD_FLOOR),
        }
        self._norm = {k: v.astype(np.float32) for k, v in self._norm.items()}
        self._stat_dim = x.shape[1]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self._net = self._build(x.shape[1])

    def _build(self, stat_dim: int):
        return _network_class()(NODE_DIM, stat_dim, self.hidden, self.gcn_layers, self.heads,
                                self.tokens)

    # -- inference ----------------------------------------------------------------------------------
    def predict(self, inputs: Sequence[MeasureInput]) -> np.ndarray:
        """One score per input (predicted normalized throughput); zeros while the model has no
        opinion (untrained, or features of another width than it was trained on)."""
        if not inputs or self._net is None:
            return np.zeros(len(inputs))
        x = self._features(inputs)
        if x.shape[1] != self._stat_dim:
            return np.zeros(len(inputs))
        tasks, task_ids = _task_ids(inputs)
        out = np.zeros(len(inputs))
        with _one_thread() as torch, torch.no_grad():
            stats = torch.from_numpy(self._scale_stats(x))
            for t, task in enumerate(tasks):
                embedding = self._net.embed(*self._graph_tensors(task_graph(task)))
                idx = np.flatnonzero(task_ids == t)
                for start in range(0, len(idx), _PREDICT_BATCH):
                    part = torch.from_numpy(idx[start: start + _PREDICT_BATCH])
                    batch = stats[part]
                    out[part.numpy()] = self._net(
                        batch, embedding.expand(len(part), -1)).double().numpy()
        return out

    def _features(self, inputs) -> np.ndarray:
        return np.asarray(self.extractor.extract(inputs), dtype=np.float32)

    def _scale_stats(self, x: np.ndarray) -> np.ndarray:
        return ((x - self._norm["stat_mean"]) / self._norm["stat_std"]).astype(np.float32)

    def _graph_tensors(self, graph):
        import torch

        nodes = (graph.node_features - self._norm["node_mean"]) / self._norm["node_std"]
        return (torch.from_numpy(nodes.astype(np.float32)),
                torch.from_numpy(graph.adjacency()))

    # -- persistence --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Write settings, normalization and weights (not the training data) with ``torch.save``."""
        import torch

        doc = {
            "format": FORMAT, "version": 1, "extractor": self.extractor.name,
            "settings": {k: getattr(self, k) for k in _SETTINGS},
            "stat_dim": self._stat_dim, "calls": self._calls,
            "norm": ({k: torch.from_numpy(v) for k, v in self._norm.items()}
                     if self._norm is not None else None),
            "state": self._net.state_dict() if self._net is not None else None,
        }
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        torch.save(doc, tmp)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path, extractor: FeatureExtractor | None = None) -> "GTunerModel":
        """Read a model written by ``save``; the extractor is rebuilt by name unless given."""
        import torch

        try:
            doc = torch.load(path, weights_only=True)
        except Exception as err:  # torch raises several types for a file that is not its format
            raise ValueError(f"{path}: not a tensortune GTuner model ({err})") from err
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(f"{path}: not a tensortune GTuner model")
        model = cls(extractor or doc["extractor"], **doc["settings"])
        model._calls = doc["calls"]
        if doc["state"] is not None:
            model._stat_dim = doc["stat_dim"]
            model._norm = {k: v.numpy() for k, v in doc["norm"].items()}
            model._net = model._build(model._stat_dim)
            model._net.load_state_dict(doc["state"])
            model._net.eval()
        return model


_SETTINGS = ("hidden", "gcn_layers", "heads", "tokens", "epochs", "finetune_epochs", "batch_size",
             "lr", "finetune_lr", "sample_budget", "rank_weight", "min_good", "seed",
             "label")


SPEC = ModelSpec("gtuner", "graph attention network, GTuner's model", GTunerModel)


def _task_ids(inputs) -> tuple[list, np.ndarray]:
    """The distinct tasks in first-seen order, and each input's index into them."""
    index: dict = {}
    ids = np.array([index.setdefault(inp.task, len(index)) for inp in inputs], dtype=np.int64)
    return list(index), ids


def _rank_loss(torch, pred, labels, owners):
    """RankNet loss over the pairs of one task whose labels differ: softplus(-(s_hi - s_lo))."""
    better = (labels[:, None] - labels[None, :] > 1e-6) & (owners[:, None] == owners[None, :])
    if not bool(better.any()):
        return pred.sum() * 0.0
    margin = pred[:, None] - pred[None, :]
    return torch.nn.functional.softplus(-margin[better]).mean()


@contextlib.contextmanager
def _one_thread():
    """torch with one intra-op thread for the duration (the other core measures kernels)."""
    try:
        import torch
    except ImportError as err:
        raise ImportError("GTunerModel needs PyTorch: pip install 'tensortune[bench]'") from err
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield torch
    finally:
        torch.set_num_threads(before)


@functools.lru_cache(maxsize=1)
def _network_class():
    """The network's ``nn.Module`` class, defined on first use so torch stays optional."""
    import torch
    from torch import nn

    class GraphAttentionNet(nn.Module):
        def __init__(self, node_dim: int, stat_dim: int, hidden: int, layers: int, heads: int,
                     tokens: int):
            super().__init__()
            self.tokens = tokens
            self.chunk = -(-stat_dim // tokens)
            self.pad = tokens * self.chunk - stat_dim
            dims = [node_dim] + [hidden] * layers
            self.own = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))
            self.neighbours = nn.ModuleList(nn.Linear(a, b, bias=False)
                                            for a, b in zip(dims, dims[1:]))
            self.graph_token = nn.Linear(hidden, hidden)
            self.stat_weight = nn.Parameter(torch.randn(tokens, self.chunk, hidden)
                                            / math.sqrt(self.chunk))
            self.stat_bias = nn.Parameter(torch.zeros(tokens, hidden))
            self.position = nn.Parameter(0.02 * torch.randn(tokens + 1, hidden))
            self.attention = nn.MultiheadAttention(hidden, heads, batch_first=True)
            self.norm = nn.LayerNorm(hidden)
            self.head = nn.Sequential(
                nn.Linear((tokens + 1) * hidden, hidden), nn.ReLU(),
                nn.Linear(hidden, hidden // 2), nn.ReLU(), nn.Linear(hidden // 2, 1))

        def embed(self, nodes, adjacency):
            """Mean-pooled WL-GCN node states: the graph's embedding, shape (hidden,)."""
            h = nodes
            for own, neighbours in zip(self.own, self.neighbours):
                h = torch.relu(own(h) + neighbours(adjacency @ h))
            return h.mean(dim=0)

        def forward(self, stats, graph_embedding):
            n = stats.shape[0]
            if self.pad:
                stats = nn.functional.pad(stats, (0, self.pad))
            chunks = stats.view(n, self.tokens, self.chunk)
            tokens = torch.einsum("btc,tch->bth", chunks, self.stat_weight) + self.stat_bias
            seq = torch.cat([self.graph_token(graph_embedding).unsqueeze(1), tokens], dim=1)
            seq = seq + self.position
            attended, _ = self.attention(seq, seq, seq, need_weights=False)
            seq = self.norm(seq + attended)
            return self.head(seq.flatten(1)).squeeze(-1)

    return GraphAttentionNet
