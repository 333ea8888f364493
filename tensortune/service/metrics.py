"""``/metrics``: the service's state in Prometheus' text format, read at each scrape."""
from __future__ import annotations

from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily

STATES = ("queued", "running", "done", "failed", "cancelled")


class ServiceCollector:
    """Jobs by state, trials measured (total and per second over the last minute), each
    device's busy fraction and whether it is in service, the stages waiting by kind."""

    def __init__(self, service):
        self.service = service

    def collect(self):
        svc = self.service
        jobs = GaugeMetricFamily("tensortune_jobs", "jobs by state", labels=["state"])
        counts = svc.health()["jobs"]
        for state in STATES:
            jobs.add_metric([state], counts.get(state, 0))
        yield jobs
        trials = CounterMetricFamily("tensortune_trials", "candidates measured since the "
                                     "server started")
        trials.add_metric([], svc.trials_total)
        yield trials
        rate = GaugeMetricFamily("tensortune_trials_per_second", "candidates measured per "
                                 "second over the last minute")
        rate.add_metric([], svc.trials_per_second())
        yield rate
        cluster = svc.cluster()
        busy = GaugeMetricFamily("tensortune_device_busy_fraction", "share of the time since "
                                 "the scheduler started that the device was timing",
                                 labels=["device"])
        up = GaugeMetricFamily("tensortune_device_up", "1 while the device is in service, 0 "
                               "once it was taken out", labels=["device"])
        for d in cluster["devices"]:
            busy.add_metric([d["name"]], d["busy_fraction"])
            up.add_metric([d["name"]], 0 if d["down"] else 1)
        yield busy
        yield up
        cpu = GaugeMetricFamily("tensortune_cpu_busy_fraction", "share of the build cores' "
                                "time spent building and searching")
        cpu.add_metric([], cluster["cpu"]["busy_fraction"])
        yield cpu
        queue = GaugeMetricFamily("tensortune_queue_stages", "stages of running jobs waiting "
                                  "for a resource, by kind", labels=["kind"])
        for kind, n in sorted(cluster["queue"].items()):
            queue.add_metric([kind], n)
        yield queue


def registry_for(service) -> CollectorRegistry:
    """A registry of this service's metrics alone (not the process-wide default)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(service))
    return registry
