"""What to tune: operator descriptions with a stable key, a TE definition, FLOPs and a reference."""
from .base import Workload, WorkloadError
from .ops import OPS, BatchMatmul, Conv2d, Dense, Matmul, workload_from_dict
from .primfunc import PrimFuncWorkload
from .task import (Task, UntimeableTarget, check_timeable, default_target, device_reason,
                   missing_host_features, parse_target, target_key, untimeable_reason,
                   vector_lanes)

__all__ = ["Workload", "WorkloadError", "OPS", "Matmul", "Dense", "BatchMatmul", "Conv2d",
           "PrimFuncWorkload", "workload_from_dict", "Task", "default_target",
           "device_reason", "missing_host_features", "parse_target", "target_key", "vector_lanes",
           "UntimeableTarget", "check_timeable", "untimeable_reason"]
