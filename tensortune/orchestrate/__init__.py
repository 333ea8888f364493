"""Many tuning jobs on shared cores and devices: the load-aware scheduler (seed 002). Named
``orchestrate``, not ``schedule``: a schedule is TVM's loop transformation everywhere else.

``devices`` (what builds and what times), ``scheduler`` (the policies over jobs' stages),
``jobs`` (jobs files and the jobs they describe), ``ray_backend`` (the same stages on a Ray
cluster), ``experiment`` (grids of runs, one CSV row each).
"""
from .devices import DeviceSpec, Layout, Resources, parse_devices
from .jobs import JobSpec, JobsFileError, evaluate_model, load_jobs, make_job
from .scheduler import POLICIES, Event, Job, Report, StageScheduler

__all__ = ["DeviceSpec", "Layout", "Resources", "parse_devices", "JobSpec", "JobsFileError",
           "evaluate_model", "load_jobs", "make_job", "POLICIES", "Event", "Job", "Report",
           "StageScheduler"]
