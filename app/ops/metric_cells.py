"""Counters and histograms kept as plain floats, exposed as prometheus_client's own types.

prometheus_client's ``Counter.inc`` and ``Histogram.observe`` take a lock per value (a histogram
two: its sum and its bucket) and cost 5–9 Python calls each; the gateway's per-request metrics
(the request counter and latency, the token counters and histograms, TTFT) paid ~40 of them per
proxied request. Here a series is a list of floats, written in place by ``app/ops/metrics.py``:
a counter ``[value]``, a histogram ``[count per bucket..., sum]`` (not cumulative: one
``bisect_left`` finds the bucket). A family is a registry collector yielding the same
``Metric`` (name, type, labels, samples, ``_created``) the library's own wrapper would.

Threads: the thread that serves requests (the event loop's, ``Writers.claim``) writes its own
cells without a lock (each ``+=`` runs on that thread only, so none is lost). Every other
thread (a sync agent's ``forward`` driving a model from a worker thread, a test client's portal
before the claim) writes a second set of cells under ``Writers.lock``. A scrape adds the two.
"""

from __future__ import annotations

import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client import metrics as _library
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

Labels = tuple[str, ...]
Cells = list[float]
OWNER, OTHERS = 0, 1  # the two cell sets of every series (``Family.shards``)


class Writers:
    """Who writes which cells: ``owner`` (a thread id, bound once) without a lock; others
    under ``lock``."""

    def __init__(self) -> None:
        self.owner: int | None = None
        self.lock = threading.Lock()

    def claim(self) -> None:
        """Make the calling thread the lock-free writer, unless one is bound already."""
        with self.lock:
            if self.owner is None:
                self.owner = threading.get_ident()


def bounds(buckets: Sequence[float]) -> tuple[float, ...]:
    """A histogram's upper bounds as prometheus_client keeps them (floats, ``+Inf`` last)."""
    out = [float(b) for b in buckets]
    if out != sorted(out):
        raise ValueError("Buckets not in sorted order")
    if not out or out[-1] != math.inf:
        out.append(math.inf)
    return tuple(out)


class Family(ABC):
    """One metric's series by label values: two cell sets each (see the module's docstring)."""

    kind = ""

    def __init__(
        self,
        writers: Writers,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry,
        width: int = 1,
    ) -> None:
        self.writers = writers
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.width = width
        # First use of each label set: the exposition's order and its ``_created`` sample.
        self.created: dict[Labels, float] = {}
        self.shards: tuple[dict[Labels, Cells], dict[Labels, Cells]] = ({}, {})
        registry.register(self)

    def cells(self, shard: int, labels: Labels) -> Cells:
        """``shard``'s cells for ``labels``, made at first use (by that shard's writer)."""
        cells = self.shards[shard].get(labels)
        if cells is None:
            if len(labels) != len(self.labelnames):
                raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {labels}")
            self.created.setdefault(labels, time.time())  # atomic: one value for both shards
            cells = self.shards[shard][labels] = [0.0] * self.width
        return cells

    def value(self, *labels: str) -> list[float]:
        """The series' cells summed over both writers (zeros if never written)."""
        total = [0.0] * self.width
        with self.writers.lock:
            others = self.shards[OTHERS].get(labels)
            for cells in (self.shards[OWNER].get(labels), others):
                if cells is not None:
                    total = [a + b for a, b in zip(total, cells, strict=True)]
        return total

    def describe(self) -> Iterable[Metric]:
        return [Metric(self.name, self.documentation, self.kind)]

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self.name, self.documentation, self.kind)
        created = _library._use_created  # prometheus_client's switch (PROMETHEUS_DISABLE_...)
        for labels, at in self.created.copy().items():
            series = dict(zip(self.labelnames, labels, strict=True))
            self.samples(metric, series, self.value(*labels))
            if created:
                metric.add_sample(self.name + "_created", dict(series), at)
        return [metric]

    @abstractmethod
    def samples(self, metric: Metric, labels: dict[str, str], cells: Cells) -> None:
        """Add one series' samples to ``metric`` (each kind its own)."""


class CounterFamily(Family):
    """A counter: cells ``[value]``; exposed as ``<name>_total`` and ``<name>_created``."""

    kind = "counter"

    def samples(self, metric: Metric, labels: dict[str, str], cells: Cells) -> None:
        metric.add_sample(self.name + "_total", labels, cells[0])


class HistogramFamily(Family):
    """A histogram: cells ``[observations per bucket (not cumulative)..., sum]``; a value
    ``x`` belongs to bucket ``bisect_left(bounds, x)`` (the first bound ``>= x``)."""

    kind = "histogram"

    def __init__(
        self,
        writers: Writers,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry,
        buckets: Sequence[float],
    ) -> None:
        self.bounds = bounds(buckets)
        self.le = [floatToGoString(b) for b in self.bounds]  # type: ignore[no-untyped-call]
        super().__init__(
            writers, name, documentation, labelnames, registry, width=len(self.bounds) + 1
        )

    def samples(self, metric: Metric, labels: dict[str, str], cells: Cells) -> None:
        acc = 0.0
        for le, count in zip(self.le, cells, strict=False):
            acc += count
            metric.add_sample(self.name + "_bucket", {**labels, "le": le}, acc)
        metric.add_sample(self.name + "_count", labels, acc)
        if self.bounds[0] >= 0:
            metric.add_sample(self.name + "_sum", labels, cells[-1])
