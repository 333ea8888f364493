"""Static analyses of generated code that feature extractors and builders share.

Control-flow graphs and natural loops (``cfg``), x86 assembly (``asm_cpu``, ``asm_loops``), PTX
and ptxas reports (``ptx``), the map from code loops to the loops of lowered TIR
(``loop_map``), execution ports of CPU cores (``ports``), Tuna's list scheduler
(``list_schedule``) and the CUDA feature row (``cuda_row``). Pure analyses of text and TIR:
this package imports no other part of tensortune, so ``measure`` (whose CUDA builder computes
a row while it compiles) and ``features`` can both use it.
"""
