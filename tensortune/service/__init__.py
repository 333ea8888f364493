"""Autotuning as a service (seed 002, section 4.3): users submit ONNX models with a latency
target (SLA) over HTTP and get back tuned modules.

* ``upload``: what is accepted (ONNX, checked as data, never executed);
* ``store``: jobs, events and the records index in SQLite (WAL);
* ``index``: each task's best record, by exact target, then by the target's kind and ISA;
* ``job``: one job as scheduler stages (look up, tune toward the SLA, build, time, pack);
* ``engine``: ``TuningService``, the jobs on one ``StageScheduler``, resumed after a restart;
* ``limits``, ``app``: the HTTP API (FastAPI) and its dashboard; ``client``: its client.
"""
