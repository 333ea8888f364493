"""What to tune: operator descriptions with a stable key, a TE definition, FLOPs and a reference."""
from .base import Workload, WorkloadError
from .ops import OPS, BatchMatmul, Conv2d, Dense, Matmul, workload_from_dict
from .primfunc import PrimFuncWorkload
from .task import (Task, default_target, missing_host_features, parse_target, target_key,
                   vector_lanes)

__all__ = ["Workload", "WorkloadError", "OPS", "Matmul", "Dense", "BatchMatmul", "Conv2d",
           "PrimFuncWorkload", "workload_from_dict", "Task", "default_target",
           "missing_host_features", "parse_target", "target_key", "vector_lanes"]
