"""What the checks share: call a student's function, and fail with a sentence about the mistake."""


class Mistake(AssertionError):
    """A check failed; the message says what is wrong in the student's terms."""


def expect(ok, message):
    __tracebackhide__ = True  # pytest shows the student's line, not this one
    if not ok:
        raise Mistake(message)


def call(fn, *args, **kwargs):
    """fn(*args, **kwargs), saying so plainly if the stub is still empty."""
    __tracebackhide__ = True
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise Mistake(f"{fn.__module__}.{fn.__name__} is not written yet (it raises NotImplementedError): "
                      f"fill it in, following its page") from None
