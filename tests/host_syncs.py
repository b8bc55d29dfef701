"""A counter of host syncs for the tests (test_taco.py, tests/test_fast.py): the operations that make a
GPU wait for the host, counted on any device, the CPU included, by where they come from."""
import collections
import os
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the repository's files
ENV = os.path.join(sys.prefix, "")  # an environment's files, even one in the repository (.venv/)
SYNCING = {"nonzero", "_local_scalar_dense", "is_nonzero", "masked_select", "masked_scatter", "unique_dim",
           "_unique", "_unique2", "unique_consecutive", "bincount", "equal"}  # the output's size or value is the host's
BOOL_INDEXED = {"index", "index_put", "index_put_", "_index_put_impl_"}  # a boolean index is a nonzero


class HostSyncs(TorchDispatchMode):
    """Counts the operations that make a GPU wait for the host (nonzero, item, boolean-mask indexing
    forward and backward, unique, ...): `counts` maps "file:function (op)", the innermost frame in the
    repository ("backward" for autograd's), to a number. CPU tensors count too (a CPU run stands in for
    a GPU one), except under the functions named in `host_side`, which run on the host by design
    (taco.py's masked_batch: the batch is masked on the CPU, then moved)."""

    def __init__(self, host_side=("masked_batch",)):
        super().__init__()
        self.counts, self.host_side = collections.Counter(), set(host_side)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs, name = kwargs or {}, func.overloadpacket.__name__
        to_host = (name == "_to_copy" and not args[0].is_cpu and str(kwargs.get("device")) == "cpu"
                   or name == "copy_" and args[0].is_cpu and not args[1].is_cpu)  # .tolist(), .cpu() of a GPU tensor
        bool_index = name in BOOL_INDEXED and any(isinstance(t, torch.Tensor) and t.dtype == torch.bool
                                                  for t in (args[1] if len(args) > 1 else ()))
        unsized = name == "repeat_interleave" and kwargs.get("output_size") is None
        if name in SYNCING or to_host or bool_index or unsized:
            on_gpu = any(isinstance(a, torch.Tensor) and not a.is_cpu for a in args)
            if label := where(name, () if on_gpu else self.host_side):
                self.counts[label] += 1
        return func(*args, **kwargs)


def where(name, host_side=()):
    """"file:function (op)" of the innermost frame in the repository outside this file; None under a
    function named in host_side."""
    frame, backward, label = sys._getframe(2), False, None
    while frame is not None:
        path = frame.f_code.co_filename
        backward |= f"torch{os.sep}autograd" in path
        if frame.f_code.co_name in host_side:
            return None
        if label is None and path.startswith(ROOT) and not path.startswith(ENV) and path != __file__:
            label = f"{os.path.relpath(path, ROOT)}:{frame.f_code.co_name} ({name}{', backward' * backward})"
        frame = frame.f_back
    return label or f"elsewhere ({name})"
