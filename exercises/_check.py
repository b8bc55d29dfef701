"""What the checks share: call a student's function, and fail with a sentence about the mistake."""
import inspect

import torch


class Mistake(AssertionError):
    """A check failed; the message says what is wrong in the student's terms."""


def expect(ok, message):
    __tracebackhide__ = True  # pytest shows the student's line, not this one
    if not ok:
        raise Mistake(message)


def call(fn, *args, global_seed=0, **kwargs):
    """fn(*args, **kwargs), saying so plainly if the stub is still empty, or if it changed one of
    its tensor arguments in place (the caller still needs them: the MLM head reads h, the data
    loader reuses input_ids). PyTorch's global random state is seeded with `global_seed` for the
    call and restored after it: a function that ignores its `generator` gets the same verdict on
    every run (the checks vary global_seed to find it), and the caller's random state is untouched."""
    __tracebackhide__ = True
    try:
        named = inspect.signature(fn).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):  # a signature that differs from the stub's: let the call say why
        named = {}
    before = {k: v.detach().clone() for k, v in named.items() if isinstance(v, torch.Tensor)}
    try:
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(global_seed)
            out = fn(*args, **kwargs)
    except NotImplementedError:
        raise Mistake(f"{fn.__module__}.{fn.__name__} is not written yet (it raises NotImplementedError): "
                      f"fill it in, following its page") from None
    except RuntimeError as err:
        if "in-place operation" not in str(err):
            raise
        raise Mistake(f"{fn.__name__} changed one of its inputs in place (an in-place operation such as `h -= e`, "
                      f"`x[...] = ...` or `.add_()` on a tensor that requires grad; PyTorch refused it): the caller "
                      f"still needs its inputs, so build new tensors (g = h - e)") from None
    for name, old in before.items():
        expect(torch.equal(named[name].detach(), old),
               f"{fn.__name__} changed its argument `{name}` in place (an in-place operation such as `-=`, "
               f"`[...] =` or `.add_()`): the caller still uses it, so build new tensors "
               f"(x.clone() first, torch.where, or g = h - e rather than h -= e)")
    return out
