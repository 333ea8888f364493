"""What benchmarks compare tensortune against, each measured in this process on this host.

* ``roofline``: ``fma_peak_gflops``, the FP32 FMA peak of the host's widest vector FMA.
* ``operators``: PyTorch eager (``torch_time``) and MetaSchedule (``metaschedule_tune``,
  ``metaschedule_builder``) on one operator, and ``time_tvm_module`` to time any TVM kernel.
* ``models``: whole-model engines (ONNX Runtime, OpenVINO, PyTorch eager, ``torch.compile``)
  and ``time_interleaved``; imported on use, since they need the ``bench`` extra.
"""
from .operators import metaschedule_builder, metaschedule_tune, time_tvm_module, torch_time
from .roofline import fma_peak_gflops

__all__ = ["fma_peak_gflops", "torch_time", "metaschedule_tune", "metaschedule_builder",
           "time_tvm_module"]
