"""A pass as accelerate sees the loaders it wraps: where the loader ends, how much of the last
step is padding, and how its first batches are skipped.

accelerate ends a gradient accumulation at the end of a loader and drops the padding of the
last global step in ``gather_for_metrics``, but it learns both only from loaders that
register with its ``GradientState``, which its own wrappers do through the public
``DataLoaderStateMixin``. ``Accelerator.prepare`` returns this loader unwrapped, so each
pass registers itself the same way while an ``Accelerator`` exists. accelerate is never
imported here: a process that has not imported it gets no link.

accelerate's ``skip_first_batches`` (also ``Accelerator.skip_first_batches``) rebuilds a
torch ``DataLoader`` around the loader's ``batch_sampler``: per-sample reads, and the
skipped pass would not end the loader's epoch. :func:`route_skip_first_batches` makes it
hand a fast-path loader to the loader's own ``skip_first_batches`` instead; it is called
whenever a loader is built or starts a pass in a process that has imported accelerate,
and every other loader still goes to accelerate's function.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import weakref
from typing import Any

from .sharding import ShardPlan

__all__ = ["accelerate_link", "end", "last_batch", "route_skip_first_batches"]

# Where accelerate's function is looked up when called: the module that defines it, the
# one whose Accelerator.skip_first_batches calls it, and the package's own name for it.
_SKIP_HOMES = ("accelerate.data_loader", "accelerate.accelerator", "accelerate")


def accelerate_link(plan: ShardPlan, owner: object) -> Any | None:
    """Register the pass over ``plan`` with accelerate's gradient state, for as long as
    ``owner`` (the pass's iterator) lives or until :meth:`end` is called; ``None`` when no
    ``Accelerator`` exists in this process.

    The link has ``end_of_dataloader`` (set by :func:`last_batch`) and ``remainder``: the
    real samples of the last global step when it is padded by wrapping around, which is
    what ``gather_for_metrics`` keeps of the gathered last step.
    """
    state = sys.modules.get("accelerate.state")
    loader_module = sys.modules.get("accelerate.data_loader")
    if state is None or loader_module is None or not state.is_initialized():
        return None

    link = _link_class(loader_module.DataLoaderStateMixin)()
    link.gradient_state = state.GradientState()
    link._drop_last = True  # the remainder is set below, from the plan
    link.begin()
    link.remainder = _padded_tail(plan)
    weakref.finalize(owner, _end_ref, weakref.ref(link))
    return link


@functools.cache
def _link_class(mixin: type) -> type:
    """A pass's link: accelerate's state mixin, registered like its own loaders."""
    return type("PassLink", (mixin,), {"__doc__": "One pass of a ticktensor DataLoader."})


def last_batch(link: Any) -> None:
    """The pass handed out its last batch: accelerate may end an accumulation now."""
    link.end_of_dataloader = True


def end(link: Any) -> None:
    """The pass ended (or was broken off): leave accelerate's gradient state."""
    with contextlib.suppress(AttributeError):  # accelerate's state was reset meanwhile
        link.end()


def _end_ref(ref: weakref.ref[Any]) -> None:
    link = ref()
    if link is not None:
        end(link)


def _padded_tail(plan: ShardPlan) -> int:
    """Real samples in the last global step, as accelerate counts them for a loader that
    does not drop its last batch (0 when that step is full; -1, accelerate's "unknown",
    with ``drop_last``). Padding (whole steps, or the order wrapped to a multiple of the
    world size) comes after the real samples in the gathered step, so keeping
    ``remainder`` of it keeps exactly the real ones."""
    if plan.drop_last or plan.num_steps == 0:
        return -1
    size = plan.global_batch_size
    last_first = plan.start_sample + (plan.num_steps - 1) * size
    return (plan.order.shape[0] - plan.padded - last_first) % size


def route_skip_first_batches() -> None:
    """Make accelerate's ``skip_first_batches`` call ``loader._skip_first_batches(k)`` for
    loaders that have one (a fast-path ticktensor loader), once accelerate is imported."""
    home = sys.modules.get("accelerate.data_loader")
    original = getattr(home, "skip_first_batches", None)
    if original is None or getattr(original, "_ticktensor_route", False):
        return

    @functools.wraps(original)
    def skip_first_batches(dataloader: Any, num_batches: int = 0) -> Any:
        own = getattr(dataloader, "_skip_first_batches", None)
        skipped = None if own is None else own(num_batches)
        return original(dataloader, num_batches) if skipped is None else skipped

    skip_first_batches._ticktensor_route = True  # type: ignore[attr-defined]
    for name in _SKIP_HOMES:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "skip_first_batches", None) is original:
            module.skip_first_batches = skip_first_batches  # type: ignore[attr-defined]
