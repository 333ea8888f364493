"""The noise floor of a dataset: how well one timing session of a config predicts its other
sessions, i.e. what a perfect cost model would score against measurements this noisy."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import Dataset, pool_results, record_sessions


@dataclass(frozen=True)
class SessionNoise:
    """How reproducible one task's timings are, from the configs timed in every session."""

    name: str
    sessions: int  # timing sessions every scored config has
    configs: int  # successful configs timed that often
    spearman: float | None  # each session against the pooled others, mean over sessions
    top10: float | None  # the top-10 ratio of that session's ranking, the same way


def session_noise(dataset: Dataset) -> list[SessionNoise]:
    """Per task, how well one timing session predicts the pooled others (None with a single
    session, or under 3 / 20 configs): the top-10 ratio is what a perfect cost model scores
    when it is judged against measurements this noisy."""
    from ..cost_model.metrics import spearman, topk_ratio

    if dataset.path is None:
        raise ValueError("session_noise needs a dataset loaded from a file")
    sessions = record_sessions(dataset.path)
    out = []
    for data in dataset:
        rows = [[rec.to_result() for rec in sessions[(data.task.key, i.config)]]
                for i, r in zip(data.inputs, data.results) if r.ok]
        n = min((sum(x.ok for x in rs) for rs in rows), default=0)
        rows = [[x for x in rs if x.ok][:n] for rs in rows]
        if n < 2 or len(rows) < 3:
            out.append(SessionNoise(data.name, n, len(rows), None, None))
            continue
        rho, top = [], []
        for s in range(n):
            one = np.array([rs[s].cost for rs in rows])
            rest = np.array([pool_results(rs[:s] + rs[s + 1:]).cost for rs in rows])
            rho.append(spearman(one, rest))
            if len(rows) >= 20:
                top.append(topk_ratio(-one, rest, 10))
        out.append(SessionNoise(data.name, n, len(rows), float(np.mean(rho)),
                                float(np.mean(top)) if top else None))
    return out


__all__ = ["SessionNoise", "session_noise"]
