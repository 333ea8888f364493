"""What the template tests share: configs of a task built and checked against its reference."""
import numpy as np

from tensortune.space import InvalidConfigError, apply_config


def matching_configs(task, space, configs, rtol=1e-4, atol=1e-5) -> list:
    """The configs of ``configs`` that ``task``'s template applies, each built and its output
    checked against the unscheduled function's (numpy's) reference; those the template refuses
    with ``InvalidConfigError`` are left out."""
    import tvm

    inputs = task.workload.random_inputs(0)
    reference = task.workload.reference(*inputs)
    dev = tvm.cpu()
    applied = []
    for config in configs:
        try:
            sch = apply_config(task, config, space)
        except InvalidConfigError:
            continue
        lib = tvm.compile(sch.mod, target=tvm.target.Target(task.target))
        out = tvm.runtime.tensor(np.zeros(reference.shape, "float32"), dev)
        lib["main"](*[tvm.runtime.tensor(a, dev) for a in inputs], out)
        np.testing.assert_allclose(out.numpy(), reference, rtol=rtol, atol=atol,
                                   err_msg=f"{task.workload.name} {dict(config)}")
        applied.append(config)
    return applied
